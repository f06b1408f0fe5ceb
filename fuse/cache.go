package fuse

// The node-local read cache's hooks (docs/fuse.md, "Node-local cache"):
// an open file of the mount that has written nothing reads through its
// cache.Handle; a read-only open of a file complete in the cache is handed
// to the kernel (FUSE passthrough), which then reads the cache file
// itself. Any write through the mount drops the cached copy and stops the
// open file from using the cache.

import (
	"context"
	"errors"
	"io"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shoalfs/shoal/client/cache"
)

// fileCache is an open file's use of the cache. Its fields are guarded
// by openFile.cmu.
type fileCache struct {
	h  *cache.Handle // nil: reads go to the cluster
	pt passthrough
}

// ptHandle is the handle of a read-only open the kernel serves from a
// cache file (FUSE passthrough). The mount registers the backing file
// itself (passthrough.go) rather than through go-fuse's
// FilePassthroughFder, whose count of an inode's backing users is also
// lowered by the release of a handle that never used it.
type ptHandle struct {
	fileHandle
}

// openCache starts the open file's use of the cache, right after it was
// opened from the MDS.
func (m *Mounted) openCache(of *openFile) {
	if m.o.Cache == nil || of.f == nil {
		return
	}
	v, size, ok := of.f.ContentVersion()
	if !ok || size == 0 {
		return
	}
	of.cmu.Lock()
	of.cache.h = m.o.Cache.Open(of.ino, v, size)
	of.cmu.Unlock()
}

// closeCache ends the open file's use of the cache, as it closes.
func (m *Mounted) closeCache(of *openFile) {
	of.cmu.Lock()
	defer of.cmu.Unlock()
	if of.cache.h != nil {
		of.cache.h.Release()
		of.cache.h = nil
	}
	m.dropBacking(of) // its handles are released, so it has none
}

// invalidateCache drops the cached copy of ino: the file is written
// through this mount (a write, truncate, fallocate, clone into it, or an
// open for writing). of may be nil.
func (m *Mounted) invalidateCache(of *openFile, ino uint64) {
	if m.o.Cache == nil {
		return
	}
	if of != nil {
		of.cmu.Lock()
		h := of.cache.h
		of.cache.h = nil
		of.cmu.Unlock()
		if h != nil {
			h.Disable()
			h.Release()
			return
		}
	}
	m.o.Cache.Invalidate(ino)
}

// readCached serves a read of h: from the passthrough file when the kernel
// did not take it (no passthrough here), from the cache, or from the
// cluster.
func (m *Mounted) readCached(ctx context.Context, h *fileHandle, dest []byte, off int64) (int, error) {
	if h.pt != nil {
		n, err := h.pt.ReadAt(dest, off)
		if err == nil || errors.Is(err, io.EOF) {
			return n, err
		}
		m.log.Warn("read cache file; reading from the cluster", "ino", h.of.ino, "err", err)
	}
	h.of.cmu.Lock()
	ch := h.of.cache.h
	h.of.cmu.Unlock()
	if ch == nil {
		return h.of.f.ReadAt(ctx, dest, off)
	}
	return ch.ReadAt(ctx, dest, off, h.of.f.ReadAt)
}

// fillCached answers a read that is one whole block missing from the
// cache from the block's own buffer (cache.Handle.Fill); nil, nil when
// the read is not such a read.
func (m *Mounted) fillCached(ctx context.Context, h *fileHandle, n int, off int64) (gofuse.ReadResult, error) {
	if h.pt != nil {
		return nil, nil
	}
	h.of.cmu.Lock()
	ch := h.of.cache.h
	h.of.cmu.Unlock()
	if ch == nil {
		return nil, nil
	}
	blk, ok, err := ch.Fill(ctx, n, off, h.of.f.ReadAt)
	if !ok || err != nil {
		return nil, err
	}
	return blockResult{blk}, nil
}

// readRef answers a READ of a file the node cache does not hold from the
// client's row cache without a copy (client.File.ReadRef), or returns nil:
// read into the kernel's buffer instead.
func (m *Mounted) readRef(ctx context.Context, h *fileHandle, n int, off int64) gofuse.ReadResult {
	if h.pt != nil {
		return nil
	}
	h.of.cmu.Lock()
	ch := h.of.cache.h
	h.of.cmu.Unlock()
	if ch != nil {
		return nil
	}
	data, release, ok := h.of.f.ReadRef(ctx, off, n)
	if !ok {
		return nil
	}
	return refResult{data, release}
}

// refResult is a read's reply sent from a row of the client's row cache,
// released once the kernel has it.
type refResult struct {
	data    []byte
	release func()
}

func (r refResult) Bytes([]byte) ([]byte, gofuse.Status) { return r.data, gofuse.OK }
func (r refResult) Size() int                            { return len(r.data) }
func (r refResult) Done()                                { r.release() }

// Slices makes go-fuse write the reply from the slices and call Done only
// after: for a plain ReadResult, with splice off (as here), it calls
// Bytes and then Done before the write, which would give the buffer back
// while the reply still points into it.
func (r refResult) Slices() ([][]byte, gofuse.Status) { return [][]byte{r.data}, gofuse.OK }

// blockResult is a read's reply sent from a filled block's buffer.
type blockResult struct{ b *cache.Block }

func (r blockResult) Bytes([]byte) ([]byte, gofuse.Status) { return r.b.Data, gofuse.OK }
func (r blockResult) Size() int                            { return len(r.b.Data) }
func (r blockResult) Done()                                { r.b.Done() }
func (r blockResult) Slices() ([][]byte, gofuse.Status)    { return [][]byte{r.b.Data}, gofuse.OK } // as refResult's
