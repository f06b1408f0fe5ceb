package client

import (
	"context"
	"time"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Spare allocations take the MDS's AllocExtents round trip off the path
// of a repeated small write and fsync (a database's log, the 4 KiB write
// and fsync of `shoal bench`, an msync of a mapped page): once a file has
// been fsynced twice in a row after small uploads, each Fsync asks for the
// next upload's extent in the background as it returns, and the next
// upload takes it instead of calling the MDS. A spare is an ordinary
// pending allocation: one left unused when the file closes (at most one a
// file) is expired by the MDS's GC after its grace, as the allocation of
// a write that failed is.

const (
	// spareMaxLen bounds the uploads that use and ask for spares.
	spareMaxLen = 1 << 20
	// spareMaxAge is how old (from its request) a spare may be and still
	// serve: well within the MDS's GC grace (2 minutes by default, 1 s
	// in some tests), after which the allocation may be expired.
	spareMaxAge = 500 * time.Millisecond
	// spareAfter is how many fsyncs in a row, each after a small upload,
	// make a file ask for spares.
	spareAfter = 2
)

// spareAlloc is an allocation of one extent asked for ahead of its use.
type spareAlloc struct {
	done chan struct{} // closed when r or err is set
	at   time.Time     // when it was asked for
	r    *mdspb.AllocExtentsReply
	err  error
}

// prefetchAlloc asks the MDS in the background for one extent of n bytes
// for file ino. The goroutine ends when the call returns (ctx cancelled:
// at once); wait waits for it.
func (c *Client) prefetchAlloc(ctx context.Context, ino uint64, n int) *spareAlloc {
	sp := &spareAlloc{done: make(chan struct{}), at: time.Now()}
	go func() {
		defer close(sp.done)
		sp.r, sp.err = c.mds.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: ino, Count: 1, Length: uint64(n)})
	}()
	return sp
}

// take returns the spare's allocation, waiting for the MDS's answer if it
// is still in flight, or nil when it cannot serve: it failed, ctx ended,
// or it is too old. sp may be nil.
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
	if sp.err != nil || len(sp.r.GetExtents()) != 1 || time.Since(sp.at) > spareMaxAge {
		m.spares.WithLabelValues("unused").Inc()
		return nil
	}
	m.spares.WithLabelValues("used").Inc()
	return sp.r
}

// drop waits for the spare's call to return and counts it unused. sp may
// be nil.
func (sp *spareAlloc) drop(m *metrics) {
	if sp != nil {
		<-sp.done
		m.spares.WithLabelValues("unused").Inc()
	}
}

// fsyncedLocked counts an Fsync that uploaded n bytes (0: nothing to
// upload) and asks for a spare when the file writes and fsyncs small
// pieces. f.mu is held exclusively.
func (f *File) fsyncedLocked(n int64) {
	if n <= 0 || n > spareMaxLen {
		f.smallSyncs = 0
		return
	}
	f.smallSyncs++
	if f.smallSyncs >= spareAfter && f.spare == nil && !f.closed {
		f.spare = f.c.prefetchAlloc(f.ctx, f.ino, int(n))
	}
}

// takeSpareLocked hands the file's spare, if any, to an upload of n
// bytes. f.mu is held exclusively.
func (f *File) takeSpareLocked(n int64) *spareAlloc {
	if n > spareMaxLen {
		return nil
	}
	sp := f.spare
	f.spare = nil
	return sp
}
