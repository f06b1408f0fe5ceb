package client

import (
	"context"
	"sync"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Opening chunks ahead of the read-ahead (docs/data-path.md, "Opening
// chunks ahead"). A short-circuit read of a chunk needs its file opened
// by the OST first, and a cold open costs the OST a few small reads of
// the disk, each queued behind the large reads in flight: 2 ms on an idle
// disk, a median of 52 ms (up to 160) under four readers' read-ahead,
// during which every row of that chunk waits. So a sequential reader
// starts the opens of the extents past its read-ahead window before the
// rows get there.

// openAheadMaxExtents bounds the extents whose chunks are being opened
// ahead at once, across the client.
const openAheadMaxExtents = 16

// openAhead runs the opens ahead of the client's readers.
type openAhead struct {
	wg  sync.WaitGroup // the opens started; Client.Close waits
	sem chan struct{}  // a slot per extent being opened
}

func (a *openAhead) init() { a.sem = make(chan struct{}, openAheadMaxExtents) }

// openChunksAhead opens, in the background, the data chunks of ext that
// are on this host and not held yet. It reports false when openAheadMaxExtents
// extents are being opened already (nothing started: try again later).
func (c *Client) openChunksAhead(ctx context.Context, ext *mdspb.Extent) bool {
	select {
	case c.ahead.sem <- struct{}{}:
	default:
		return false
	}
	c.ahead.wg.Go(func() {
		defer func() { <-c.ahead.sem }()
		if c.closed.Load() {
			return
		}
		g, err := extentGeom(ext)
		if err != nil {
			return
		}
		var tok []byte
		var wg sync.WaitGroup
		for j, id := range ext.GetOsts() {
			if j >= g.Layout.K || id == 0 {
				break
			}
			_, daddr, err := c.chunkRoute(ctx, id, false)
			if err != nil || daddr == "" || !c.data.Local(daddr) {
				continue
			}
			if tok == nil {
				tok = c.ChunkCapability(ctx, ext.GetId(), capability.Read)
			}
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, c.opts.ChunkTimeout)
				defer cancel()
				c.data.OpenAhead(cctx, daddr, ext.GetId(), uint32(j), tok)
			})
		}
		wg.Wait()
	})
	return true
}

// openAheadLocked starts the opens of the chunks of the extents that
// overlap the file's bytes [from, to) and were not started before (the
// file remembers how far it got). f.mu must be held (shared is enough).
func (f *File) openAheadLocked(from, to int64) {
	from = max(from, f.openedTo.Load())
	if from >= to {
		return
	}
	for _, r := range f.ext.overlapping(uint64(from), uint64(to)) {
		if !f.c.openChunksAhead(f.ctx, r.GetExtent()) {
			return // busy: the next read tries again from here
		}
		end := int64(refEnd(r))
		for {
			cur := f.openedTo.Load()
			if cur >= end || f.openedTo.CompareAndSwap(cur, end) {
				break
			}
		}
	}
	if cur := f.openedTo.Load(); cur < to {
		f.openedTo.CompareAndSwap(cur, to) // no extent in the rest: a hole
	}
}
