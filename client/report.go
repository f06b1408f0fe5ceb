package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/lograte"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Reports of corrupt chunks (DESIGN.md, invariant 4: a read "reports the
// bad chunk for repair"). When the read path meets a chunk its OST says is
// damaged (errs.ErrCorrupt: a checksum mismatch, a bad checksum sidecar, a
// chunk file of another length than its sidecar covers; errs.ErrInvalid:
// a chunk file too short for the range read), it notes the chunk here and goes on reconstructing
// from parity; a goroutine sends the noted chunks to the MDS
// (ReportCorrupt), whose administration worker reads the chunk again and
// rebuilds it in place, without waiting for a scrub to find it.
//
// Noting never blocks a read: it takes a mutex, and starts the sending
// goroutine when none runs. A chunk is sent at most once per
// reportDedupWindow (every reader of a bad chunk meets it until it is
// rebuilt); a send that fails is dropped after a log line, since the OST's
// scrubber will find the chunk anyway. The goroutine belongs to the
// Client: closeConns stops it and waits for it.

const (
	reportDedupWindow = 10 * time.Minute
	reportTimeout     = 10 * time.Second
	reportBatch       = 256  // chunks per ReportCorrupt call
	reportMaxPending  = 4096 // chunks noted and not yet sent; more are dropped
	reportMaxSent     = 4096 // dedup entries kept; older ones go first
	reportReasonLen   = 512
)

// chunkKey names one chunk on one OST.
type chunkKey struct {
	extent uint64
	index  uint32
	ost    uint32
}

// reporter is the Client's queue of corrupt chunks to report, and the
// limits of the read path's log lines (readlog.go).
type reporter struct {
	wg   sync.WaitGroup  // the sending goroutine
	logs lograte.Limiter // degraded and failed reads, reports: by kind (readlog.go)

	mu struct {
		sync.Mutex
		ctx     context.Context // of the sending goroutine; set on first use
		cancel  context.CancelFunc
		closed  bool
		running bool // the sending goroutine runs
		pending []*mdspb.BadChunk
		noted   map[chunkKey]time.Time // pending or sent, when noted
	}
}

// noteChunkError is the read path's hook: called with the error of a
// chunk read, it queues the chunk for a report when the error says its
// bytes are damaged. It never blocks on I/O.
func (c *Client) noteChunkError(extent uint64, index uint32, ost uint32, err error) {
	if err == nil || c.opts.NoCorruptReports || !chunkDamaged(err) {
		return
	}
	r := &c.rep
	k := chunkKey{extent, index, ost}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed || c.closed.Load() {
		return
	}
	if t, ok := r.mu.noted[k]; ok && now.Sub(t) < reportDedupWindow {
		return
	}
	if len(r.mu.pending) >= reportMaxPending {
		return
	}
	if r.mu.noted == nil {
		r.mu.noted = make(map[chunkKey]time.Time)
	}
	if len(r.mu.noted) >= reportMaxSent {
		r.pruneLocked(now)
	}
	r.mu.noted[k] = now
	reason := "client read: " + err.Error()
	if len(reason) > reportReasonLen {
		reason = reason[:reportReasonLen]
	}
	r.mu.pending = append(r.mu.pending, &mdspb.BadChunk{
		Extent: extent, Index: index, Ost: ost, ReportedNs: now.UnixNano(), Reason: reason, FromClient: true,
	})
	if ok, n := r.logs.Allow("report"); ok {
		c.log.Warn("damaged chunk; reporting it to the MDS for repair", "extent", extent, "chunk", index, "ost", ost, "err", err, "suppressed", n)
	}
	if r.mu.running {
		return
	}
	if r.mu.ctx == nil {
		// The goroutine outlives the read that noted the chunk: its
		// context is the Client's own, cancelled by closeConns.
		r.mu.ctx, r.mu.cancel = context.WithCancel(context.Background())
	}
	r.mu.running = true
	r.wg.Add(1)
	go c.sendReports(r.mu.ctx)
}

// chunkDamaged reports whether the error of a chunk read says the chunk
// on its OST is damaged: corrupt (a checksum mismatch, a bad or missing
// checksum sidecar, a data file of another length than its sidecar
// covers) or short (the OST refuses a range inside the chunk's length,
// which the extent's layout gives: ErrInvalid, "range outside its
// bytes"). The MDS reads the chunk again before it rebuilds anything, so
// a wrong guess costs one read.
func chunkDamaged(err error) bool {
	return errors.Is(err, errs.ErrCorrupt) || errors.Is(err, errs.ErrInvalid)
}

// pruneLocked drops dedup entries older than the window, or all of
// them when none is (the MDS ignores a chunk already queued, so a lost
// entry costs one call at most). r.mu must be held.
func (r *reporter) pruneLocked(now time.Time) {
	for k, t := range r.mu.noted {
		if now.Sub(t) >= reportDedupWindow {
			delete(r.mu.noted, k)
		}
	}
	if len(r.mu.noted) >= reportMaxSent {
		clear(r.mu.noted)
	}
}

// sendReports sends pending reports until none is left.
func (c *Client) sendReports(ctx context.Context) {
	r := &c.rep
	defer r.wg.Done()
	for {
		r.mu.Lock()
		n := min(len(r.mu.pending), reportBatch)
		if n == 0 || ctx.Err() != nil {
			r.mu.running = false
			r.mu.Unlock()
			return
		}
		batch := r.mu.pending[:n:n]
		r.mu.pending = r.mu.pending[n:]
		r.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, reportTimeout)
		_, err := c.mds.ReportCorrupt(cctx, &mdspb.ReportCorruptRequest{Chunks: batch})
		cancel()
		if err != nil && ctx.Err() == nil {
			// The scrubber finds these chunks anyway; allow a later
			// read to report them again.
			c.log.Warn("report corrupt chunks to the MDS", "count", len(batch), "err", err)
			r.mu.Lock()
			for _, b := range batch {
				delete(r.mu.noted, chunkKey{b.Extent, b.Index, b.Ost})
			}
			r.mu.Unlock()
		}
	}
}

// stop stops the sending goroutine and waits for it; reports not
// yet sent are dropped.
func (r *reporter) stop() {
	r.mu.Lock()
	r.mu.closed = true
	if r.mu.cancel != nil {
		r.mu.cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
