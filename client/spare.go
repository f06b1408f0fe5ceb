package client

import (
	"context"
	"sync"
	"time"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Spare allocations take the MDS's AllocExtents round trip off the path
// of a repeated small write and fsync (a database's log, the 4 KiB write
// and fsync of `shoal bench`, an msync of a mapped page): once a file has
// been fsynced twice in a row after small uploads, it asks the MDS in the
// background for a batch of spareBatch extents, and the next uploads each
// take one instead of calling the MDS. The next batch is asked for while
// the current one still has spareLow left, so a writer that fsyncs as fast
// as it can never waits for an allocation. A spare is an ordinary pending
// allocation: those left unused when the file closes (at most two batches
// a file) are expired by the MDS's GC after its grace, as the allocation
// of a write that failed is.

const (
	// spareMaxLen bounds the uploads that use and ask for spares.
	spareMaxLen = 1 << 20
	// spareMinLen is the least length spares are asked for: the MDS's
	// default bound of mirrored extents (mds.DefaultMirrorBelow).
	spareMinLen = 64 << 10
	// spareMaxAge is how old (from its request) a spare may be and still
	// serve: well within the MDS's GC grace (2 minutes by default, 1 s
	// in some tests), after which the allocation may be expired.
	spareMaxAge = 500 * time.Millisecond
	// spareAfter is how many fsyncs in a row, each after a small upload,
	// make a file ask for spares.
	spareAfter = 2
	// spareBatch is how many extents one request for spares asks for.
	spareBatch = 8
	// spareLow is how many unclaimed spares make a file ask for the next
	// batch.
	spareLow = 2
)

// spareAlloc is a batch of extent allocations asked for ahead of their use.
// Uploads claim its extents one each (claimed, under the file's lock) and
// take them once the MDS has answered.
type spareAlloc struct {
	done chan struct{} // closed when r or err is set
	at   time.Time     // when it was asked for
	n    int64         // the length asked for: it serves uploads up to n
	r    *mdspb.AllocExtentsReply
	err  error

	claimed int // extents promised to uploads; guarded by the file's mu

	mu   sync.Mutex
	next int // extents taken (used or not)
}

// prefetchAlloc asks the MDS in the background for spareBatch extents of n
// bytes for file ino. The goroutine ends when the call returns (ctx
// cancelled: at once); drop waits for it.
func (c *Client) prefetchAlloc(ctx context.Context, ino uint64, n int64) *spareAlloc {
	sp := &spareAlloc{done: make(chan struct{}), at: time.Now(), n: spareLen(n)}
	go func() {
		defer close(sp.done)
		sp.r, sp.err = c.mds.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: ino, Count: spareBatch, Length: uint64(sp.n)})
	}()
	return sp
}

// spareLen is the length spares are asked for after an upload of n bytes:
// n rounded up to a power of two, at least spareMinLen. The MDS chooses an
// extent's coding by the length it is told (mds.PlacementOptions,
// MirrorBelow), so a spare serves only uploads up to its length.
func spareLen(n int64) int64 {
	l := int64(spareMinLen)
	for l < n {
		l *= 2
	}
	return l
}

// take returns an allocation of one extent of the batch, waiting for the
// MDS's answer if it is still in flight, or nil when it cannot serve: it
// failed, ctx ended, or it is too old. sp may be nil.
func (sp *spareAlloc) take(ctx context.Context, m *metrics) *mdspb.AllocExtentsReply {
	if sp == nil {
		return nil
	}
	select {
	case <-sp.done:
	case <-ctx.Done():
		m.spares.WithLabelValues("unused").Inc()
		return nil
	}
	sp.mu.Lock()
	i := sp.next
	sp.next++
	sp.mu.Unlock()
	if sp.err != nil || i >= len(sp.r.GetExtents()) || time.Since(sp.at) > spareMaxAge {
		m.spares.WithLabelValues("unused").Inc()
		return nil
	}
	m.spares.WithLabelValues("used").Inc()
	return &mdspb.AllocExtentsReply{Extents: sp.r.GetExtents()[i : i+1], MinChunks: sp.r.GetMinChunks()}
}

// drop waits for the batch's call to return and counts its extents not
// claimed by an upload as unused. sp may be nil.
func (sp *spareAlloc) drop(m *metrics) {
	if sp == nil {
		return
	}
	<-sp.done
	if n := len(sp.r.GetExtents()) - sp.claimed; n > 0 {
		m.spares.WithLabelValues("unused").Add(float64(n))
	}
}

// fsyncedLocked counts an Fsync that uploaded n bytes (0: nothing to
// upload) and asks for a batch of spares when the file writes and fsyncs
// small pieces and fewer than spareLow are left unclaimed. f.mu is held
// exclusively.
func (f *File) fsyncedLocked(n int64) {
	if n <= 0 || n > spareMaxLen {
		f.smallSyncs = 0
		return
	}
	f.smallSyncs++
	if f.smallSyncs < spareAfter || f.closed || len(f.spares) >= 2 {
		return
	}
	left := 0
	for _, sp := range f.spares {
		left += spareBatch - sp.claimed
	}
	if left <= spareLow {
		f.spares = append(f.spares, f.c.prefetchAlloc(f.ctx, f.ino, n))
	}
}

// takeSpareLocked claims a spare of the file's oldest batch, if any and
// long enough, for an upload of n bytes. f.mu is held exclusively.
func (f *File) takeSpareLocked(n int64) *spareAlloc {
	if len(f.spares) == 0 || n > f.spares[0].n {
		return nil
	}
	sp := f.spares[0]
	sp.claimed++
	if sp.claimed >= spareBatch {
		f.spares = f.spares[1:]
	}
	return sp
}

// dropSparesLocked gives up the file's unclaimed spares (the MDS's GC
// expires them). f.mu is held exclusively.
func (f *File) dropSparesLocked() {
	for _, sp := range f.spares {
		sp.drop(f.c.metrics)
	}
	f.spares = nil
}
