package client

import (
	"context"
	"sync"

	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// The row cache of an open File (file.go): decoded rows that sequential
// readers and read-ahead share.

// rowCache holds decoded rows of extents for sequential readers. Extents
// are immutable, so an entry never goes stale. Row buffers come from the
// client's pool and go back to it when no one holds them: an entry is
// referenced by the cache while cached, by its fetch while in flight and
// by each reader copying out of it.
type rowCache struct {
	mu struct {
		sync.Mutex
		m    map[rowKey]*rowEntry
		tick uint64
	}
	cap int
}

type rowKey struct {
	ext uint64
	row int64
}

type rowEntry struct {
	done chan struct{}
	data []byte // valid once done is closed, while refs > 0
	err  error
	used uint64
	refs int              // guarded by rowCache.mu; data goes back to pool at 0
	pool *datanet.BufPool // where data came from
}

func (rc *rowCache) init(capacity int) {
	rc.cap = capacity
	rc.mu.m = map[rowKey]*rowEntry{}
}

func (rc *rowCache) clear() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, e := range rc.mu.m {
		rc.unrefLocked(e)
	}
	rc.mu.m = map[rowKey]*rowEntry{}
}

// unrefLocked drops one reference to e, recycling its buffer at the last.
func (rc *rowCache) unrefLocked(e *rowEntry) {
	e.refs--
	if e.refs == 0 && e.data != nil {
		e.pool.Put(e.data)
		e.data = nil
	}
}

// start returns the entry for k, starting its fetch when absent. With
// reader set, the entry is returned with a reference for the caller.
func (rc *rowCache) start(ctx context.Context, c *Client, ext *mdspb.Extent, row int64, reader bool) *rowEntry {
	k := rowKey{ext.GetId(), row}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.mu.tick++
	if e, ok := rc.mu.m[k]; ok {
		e.used = rc.mu.tick
		if reader {
			e.refs++
		}
		return e
	}
	e := &rowEntry{done: make(chan struct{}), used: rc.mu.tick, refs: 2, pool: c.bufs} // the cache's and the fetch's
	if reader {
		e.refs++
	}
	rc.mu.m[k] = e
	rc.evictLocked()
	go func() {
		data, err := c.readRowPooled(ctx, ext, row)
		rc.mu.Lock()
		e.data, e.err = data, err
		if err != nil && rc.mu.m[k] == e {
			delete(rc.mu.m, k)
			rc.unrefLocked(e)
		}
		rc.unrefLocked(e)
		rc.mu.Unlock()
		close(e.done)
	}()
	return e
}

// evictLocked drops the least recently used finished rows beyond capacity.
func (rc *rowCache) evictLocked() {
	for len(rc.mu.m) > rc.cap {
		var victim rowKey
		var oldest uint64 = ^uint64(0)
		for k, e := range rc.mu.m {
			select {
			case <-e.done:
			default:
				continue // in flight
			}
			if e.used < oldest {
				oldest, victim = e.used, k
			}
		}
		if oldest == ^uint64(0) {
			return
		}
		rc.unrefLocked(rc.mu.m[victim])
		delete(rc.mu.m, victim)
	}
}

// get returns the data of a row, fetching it when it is not cached. The
// caller must call release when done with the data.
func (rc *rowCache) get(ctx context.Context, c *Client, ext *mdspb.Extent, row int64) (data []byte, release func(), err error) {
	e := rc.start(context.WithoutCancel(ctx), c, ext, row, true)
	release = func() {
		rc.mu.Lock()
		rc.unrefLocked(e)
		rc.mu.Unlock()
	}
	select {
	case <-e.done:
		if e.err != nil {
			release()
			return nil, nil, e.err
		}
		return e.data, release, nil
	case <-ctx.Done():
		release()
		return nil, nil, ctx.Err()
	}
}

func (rc *rowCache) prefetch(ctx context.Context, c *Client, ext *mdspb.Extent, row int64) {
	rc.start(ctx, c, ext, row, false)
}
