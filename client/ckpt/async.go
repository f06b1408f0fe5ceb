package ckpt

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

// Pending is an asynchronous save in flight.
type Pending struct {
	Job  string
	Step int64
	// Stall is how long SaveAsync held the caller: waiting for a slot
	// (back-pressure) plus copying the buffers.
	Stall time.Duration

	done chan struct{}
	res  *SaveResult
	err  error
}

// Done is closed when the save has committed or failed.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait waits for the save to finish (or ctx to end) and returns its
// outcome. It may be called any number of times.
func (p *Pending) Wait(ctx context.Context) (*SaveResult, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// SaveAsync starts a save and returns as soon as the caller may reuse its
// buffers: the tensors and blobs are copied into staging memory (reused
// from earlier saves), then flushed in the background as Save does. At
// most Options.AsyncInFlight flushes of one job run at once: a further
// call waits for one to finish first (back-pressure), which counts in its
// Pending.Stall. ctx bounds only that wait and the copy; the flush runs
// until it is done (Close waits for it). The outcome is in the Pending.
func (s *Store) SaveAsync(ctx context.Context, job string, step int64, shards []Shard, opts ...SaveOption) (*Pending, error) {
	t0 := time.Now()
	if err := checkSave(job, step, shards); err != nil {
		return nil, err
	}
	slot, err := s.asyncSlot(ctx, job)
	if err != nil {
		return nil, err
	}
	release := func() { <-slot }
	// Register the flush with Close under mu, so that a Close that began
	// while this call waited for its slot either waits for it or refuses it.
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		release()
		return nil, fmt.Errorf("ckpt: store closed: %w", errs.ErrInvalid)
	}
	s.wg.Add(1)
	s.mu.Unlock()
	var size int64
	for i := range shards {
		size += shardSize(&shards[i]) + int64(len(shards[i].Header))
	}
	arena := s.pool.get(size)
	staged := stage(shards, arena.buf)
	p := &Pending{Job: job, Step: step, done: make(chan struct{}), Stall: time.Since(t0)}
	go func() {
		defer s.wg.Done()
		defer release()
		defer s.pool.put(arena)
		p.res, p.err = s.Save(s.bg, job, step, staged, opts...)
		close(p.done)
	}()
	return p, nil
}

// asyncSlot takes one of the job's flush slots, waiting for one to free.
func (s *Store) asyncSlot(ctx context.Context, job string) (chan struct{}, error) {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("ckpt: store closed: %w", errs.ErrInvalid)
	}
	slot, ok := s.mu.async[job]
	if !ok {
		slot = make(chan struct{}, s.o.AsyncInFlight)
		s.mu.async[job] = slot
	}
	s.mu.Unlock()
	select {
	case slot <- struct{}{}:
		return slot, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// stage copies the shards' bytes into buf (which is large enough) and
// returns shards that point at the copies. Large copies run on a few
// goroutines: a single core copies at about half of memory bandwidth.
func stage(shards []Shard, buf []byte) []Shard {
	out := make([]Shard, len(shards))
	type job struct{ dst, src []byte }
	var jobs []job
	off := 0
	take := func(src []byte) []byte {
		if src == nil {
			return nil
		}
		dst := buf[off : off+len(src) : off+len(src)]
		off += len(src)
		jobs = append(jobs, job{dst, src})
		return dst
	}
	for i := range shards {
		sh := shards[i]
		sh.Blob = take(sh.Blob)
		sh.Header = take(sh.Header)
		if sh.Tensors != nil {
			ts := make([]Tensor, len(sh.Tensors))
			for j, t := range sh.Tensors {
				t.Data = take(t.Data)
				t.Shape = append([]int64(nil), t.Shape...)
				ts[j] = t
			}
			sh.Tensors = ts
		}
		if sh.Metadata != nil {
			md := make(map[string]string, len(sh.Metadata))
			for k, v := range sh.Metadata {
				md[k] = v
			}
			sh.Metadata = md
		}
		out[i] = sh
	}
	// Split the copies into pieces spread over 4 goroutines.
	const piece = 4 << 20
	work := make(chan job, 64)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				copy(j.dst, j.src)
			}
		}()
	}
	for _, j := range jobs {
		for k := 0; k < len(j.src); k += piece {
			e := min(k+piece, len(j.src))
			work <- job{j.dst[k:e], j.src[k:e]}
		}
	}
	close(work)
	wg.Wait()
	return out
}

// stagePool keeps the staging memory of finished asynchronous saves for
// the next ones: touching new memory costs several times a copy into
// memory already touched (MEASUREMENTS.md).
type stagePool struct {
	mu   sync.Mutex
	free []*arena // guarded by mu
}

type arena struct{ buf []byte }

// maxPooled is how many arenas the pool keeps.
const maxPooled = 4

// get returns an arena of at least n bytes: the smallest free one that
// fits, or a new one.
func (p *stagePool) get(n int64) *arena {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	for i, a := range p.free {
		if int64(cap(a.buf)) >= n && (best < 0 || cap(a.buf) < cap(p.free[best].buf)) {
			best = i
		}
	}
	if best >= 0 {
		a := p.free[best]
		p.free = append(p.free[:best], p.free[best+1:]...)
		a.buf = a.buf[:n]
		return a
	}
	return &arena{buf: make([]byte, n)}
}

// put returns an arena; the pool keeps the largest few.
func (p *stagePool) put(a *arena) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, a)
	if len(p.free) > maxPooled {
		small := 0
		for i, x := range p.free {
			if cap(x.buf) < cap(p.free[small].buf) {
				small = i
			}
		}
		p.free = append(p.free[:small], p.free[small+1:]...)
	}
}
