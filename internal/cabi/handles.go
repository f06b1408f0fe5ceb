// Package cabi holds what Shoal's C libraries (cmd/libshoal,
// cmd/libshoalgds) share, apart from their exported functions, which cgo
// keeps in their main packages: the table of the handles they give out.
// A C caller holds an int64 handle, never a Go pointer, which cgo forbids
// it to keep.
package cabi

import "sync"

// Handles maps handles (> 0, never reused) to values. The zero Handles is
// empty and ready; safe for concurrent use.
type Handles[T any] struct {
	mu struct {
		sync.Mutex
		last int64       // the last handle given
		m    map[int64]T // the open handles
	}
}

// Add stores v and returns its handle.
func (t *Handles[T]) Add(v T) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.m == nil {
		t.mu.m = map[int64]T{}
	}
	t.mu.last++
	t.mu.m[t.mu.last] = v
	return t.mu.last
}

// Get returns the value of handle h; false when h is not open.
func (t *Handles[T]) Get(h int64) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.mu.m[h]
	return v, ok
}

// Remove forgets handle h and returns its value; false when h was not
// open.
func (t *Handles[T]) Remove(h int64) (T, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.mu.m[h]
	delete(t.mu.m, h)
	return v, ok
}
