package lograte

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestAllow: the burst, then one line per Every carrying the count of
// lines left out; keys are limited apart.
func TestAllow(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &Limiter{Every: 10 * time.Second, Burst: 3, Now: func() time.Time { return now }}
	for i := range 3 {
		if ok, n := l.Allow("ost 1"); !ok || n != 0 {
			t.Fatalf("line %d of the burst: %v %d", i, ok, n)
		}
	}
	for range 840 {
		if ok, _ := l.Allow("ost 1"); ok {
			t.Fatal("past the burst, a line in the same instant was allowed")
		}
	}
	if ok, _ := l.Allow("ost 2"); !ok {
		t.Fatal("another key was limited with the first")
	}
	now = now.Add(10 * time.Second)
	if ok, n := l.Allow("ost 1"); !ok || n != 840 {
		t.Fatalf("after Every: %v, %d suppressed, want true, 840", ok, n)
	}
	if ok, _ := l.Allow("ost 1"); ok {
		t.Fatal("two lines within one Every after the burst")
	}
	now = now.Add(time.Hour) // refills to the burst, no more
	for i := range 4 {
		ok, n := l.Allow("ost 1")
		if want := i < 3; ok != want {
			t.Fatalf("after an hour, line %d: %v", i, ok)
		}
		if i == 0 && n != 1 {
			t.Fatalf("after an hour: %d suppressed, want 1", n)
		}
	}
}

// TestZeroAndKeys: a zero Limiter works with the defaults, concurrently,
// and remembers at most maxKeys keys.
func TestZeroAndKeys(t *testing.T) {
	var l Limiter
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2 * maxKeys {
				l.Allow(fmt.Sprint(g, i))
			}
		})
	}
	wg.Wait()
	if n := len(l.keys); n > maxKeys {
		t.Fatalf("%d keys kept, at most %d", n, maxKeys)
	}
	allowed := 0
	for range 100 {
		if ok, _ := l.Allow("k"); ok {
			allowed++
		}
	}
	if allowed != DefaultBurst {
		t.Fatalf("zero Limiter allowed %d lines at once, want %d", allowed, DefaultBurst)
	}
}
