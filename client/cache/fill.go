package cache

import (
	"context"
	"hash/crc32"
	"io"
	"sync/atomic"
	"unsafe"
)

// Fills. A block missing from the cache is read from the cluster into a
// pooled buffer, copied to the reader and checksummed; writing it to the
// data file is left to the cache's writers, off the reader's path. The
// block stays in flight (other readers of it wait) until it is written.
// When the writers are behind (writeQueue blocks queued), the reader
// writes the block itself.

// writeQueue bounds the blocks waiting for a writer (their buffers: 64
// MiB at the default block size).
const writeQueue = 64

// writers is the number of goroutines writing filled blocks. Whole blocks
// are written with O_DIRECT, each write waiting on the device, so several
// are kept in flight to fill the device's queue (docs/cache.md measured 2,
// 4 and 8).
const writers = 8

// blockWrite is a filled block on its way to the data file.
type blockWrite struct {
	e      *entry
	b      int64
	buf    *[]byte // pooled; the block's bytes are (*buf)[:n]
	n      int64
	sum    uint32
	ch     chan struct{} // the block's e.inflight channel
	queued bool          // holds a reference to e (queueWrite)
	// users of buf: the write, and a reader replying from it (Fill);
	// the last to finish returns it to the pool.
	users atomic.Int32
}

// release ends one use of w's buffer.
func (w *blockWrite) release(c *Cache) {
	if w.users.Add(-1) == 0 {
		c.putBuf(w.buf)
	}
}

// getBuf returns a pooled buffer of one block, aligned to 4 KiB.
func (c *Cache) getBuf() *[]byte {
	if bp, ok := c.bufs.Get().(*[]byte); ok {
		return bp
	}
	raw := make([]byte, c.o.BlockSize+4096)
	skip := int(-uintptr(unsafe.Pointer(&raw[0])) & 4095)
	b := raw[skip : skip+int(c.o.BlockSize)]
	return &b
}

func (c *Cache) putBuf(bp *[]byte) { c.bufs.Put(bp) }

// writer writes queued blocks until Close closes the queue.
func (c *Cache) writer() {
	defer c.wwg.Done()
	for w := range c.writes {
		c.writeBlock(w)
	}
}

// queueWrite hands w to a writer, with a reference to its entry; false
// when the writers are behind or the cache is closing.
func (c *Cache) queueWrite(w *blockWrite) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return false
	}
	w.queued = true
	select {
	case c.writes <- w:
		w.e.refs++
		return true
	default:
		w.queued = false
		return false
	}
}

// writeBlock writes w to its data file and marks the block present, or
// drops the entry when the disk fails; then ends the block's fill.
func (c *Cache) writeBlock(w *blockWrite) {
	e := w.e
	e.mu.Lock()
	f, err := e.dataFileLocked(c)
	if err == nil && w.n%4096 == 0 {
		// Whole blocks go around the page cache: no copy into it and no
		// dirty pages for the kernel to write back while readers wait.
		if df := e.directFileLocked(c); df != nil {
			f = df
		}
	}
	e.mu.Unlock()
	if err == nil {
		_, err = f.WriteAt((*w.buf)[:w.n], w.b*e.bs)
	}
	if err != nil {
		c.unreserve(e, w.n)
		c.fail(e, "io", "cache: write data file; reading without caching", err)
	} else {
		e.mu.Lock()
		e.present[w.b], e.crc[w.b], e.verified[w.b] = true, w.sum, true
		e.dirty = true
		e.mu.Unlock()
		c.met.fills.Inc()
		c.met.fillBytes.Add(float64(w.n))
	}
	w.release(c)
	e.endFill(w.b, w.ch)
	if w.queued {
		c.release(e)
	}
}

// endFill ends the fill of block b, whose in-flight channel is ch.
func (e *entry) endFill(b int64, ch chan struct{}) {
	e.mu.Lock()
	delete(e.inflight, b)
	e.mu.Unlock()
	close(ch)
}

// ReadAt reads len(p) file bytes at off: present blocks from the cache,
// the others from read, which fills them into the cache on the way. It
// returns what read would: io.EOF at the end of the file. A failing cache
// falls back to read.
func (h *Handle) ReadAt(ctx context.Context, p []byte, off int64, read ReadFunc) (int, error) {
	e := h.e
	if h.bypass() || off < 0 {
		h.c.met.misses.Inc()
		return read(ctx, p, off)
	}
	if off >= e.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), e.size-off))
	var buf *[]byte // for checking a block not yet checked
	defer func() {
		if buf != nil {
			h.c.putBuf(buf)
		}
	}()
	for done := 0; done < n; {
		pos := off + int64(done)
		b := pos / e.bs
		bstart := b * e.bs
		want := min(int64(n-done), bstart+e.blockLen(b)-pos)
		dst := p[done : done+int(want)]
		hit, err := h.serveBlock(ctx, b, pos, dst, &buf, read)
		if err != nil {
			return done, err
		}
		if hit {
			h.c.met.hits.Inc()
			h.c.met.hitBytes.Add(float64(want))
		} else {
			h.c.met.misses.Inc()
		}
		done += int(want)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// serveBlock copies file bytes [pos, pos+len(dst)) of block b into dst,
// from the cache when present, else filling the block from read. It
// reports whether the bytes came from the cache.
func (h *Handle) serveBlock(ctx context.Context, b, pos int64, dst []byte, buf **[]byte, read ReadFunc) (bool, error) {
	e := h.e
	bstart := b * e.bs
	for {
		if h.bypass() {
			return false, readFull(ctx, read, dst, pos)
		}
		e.mu.Lock()
		if ch, ok := e.inflight[b]; ok {
			e.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		if e.present[b] {
			checked := e.verified[b]
			f, err := e.dataFileLocked(h.c)
			checked = checked && e.verified[b] // opening may have found it changed
			e.mu.Unlock()
			if err != nil {
				h.c.fail(e, "io", "cache: open data file", err)
				continue // bypassed now
			}
			if checked {
				if _, err := f.ReadAt(dst, pos); err != nil {
					h.c.fail(e, "io", "cache: read data file", err)
					continue
				}
				return true, nil
			}
			if *buf == nil {
				*buf = h.c.getBuf()
			}
			blk, err := h.readBlock(b, **buf)
			if err != nil {
				continue // dropped: read from the cluster
			}
			copy(dst, blk[pos-bstart:])
			return true, nil
		}
		ch := make(chan struct{})
		e.inflight[b] = ch
		e.mu.Unlock()
		return false, h.fill(ctx, b, pos, dst, ch, read)
	}
}

// fill reads block b from the cluster, copies the part at pos into dst
// and has the block written to the data file with its checksum (by a
// writer, or here when they are behind); the fill ends (ch closes) once it
// is written. Only a read error of the cluster is returned; a cache that
// cannot take the block is bypassed.
func (h *Handle) fill(ctx context.Context, b, pos int64, dst []byte, ch chan struct{}, read ReadFunc) error {
	e := h.e
	n := e.blockLen(b)
	if !h.c.reserve(e, n) {
		e.endFill(b, ch)
		h.c.warn("full", "cache: full of files in use; reading without caching", "ino", e.ino)
		h.c.met.errors.WithLabelValues("full").Inc()
		return readFull(ctx, read, dst, pos)
	}
	bp := h.c.getBuf()
	blk := (*bp)[:n]
	bstart := b * e.bs
	if err := readFull(ctx, read, blk, bstart); err != nil {
		h.c.putBuf(bp)
		h.c.unreserve(e, n)
		e.endFill(b, ch)
		return err
	}
	copy(dst, blk[pos-bstart:])
	w := &blockWrite{e: e, b: b, buf: bp, n: n, sum: crc32.Checksum(blk, castagnoli), ch: ch}
	w.users.Store(1)
	if !h.c.queueWrite(w) {
		h.c.writeBlock(w)
	}
	return nil
}

// readFull reads exactly len(p) bytes at off: the caller has clipped the
// range to the file's size as of its open, so an early EOF means the file
// is shorter now, and the rest reads as zeros, as a hole would.
func readFull(ctx context.Context, read ReadFunc, p []byte, off int64) error {
	n, err := read(ctx, p, off)
	if err != nil && err != io.EOF {
		return err
	}
	clear(p[n:])
	return nil
}

// Block is the reply to a read that Fill answered from a block it filled:
// the bytes are the block's buffer, shared with the cache file's write.
// Done must be called once the bytes are no longer needed.
type Block struct {
	Data []byte
	c    *Cache
	w    *blockWrite
}

// Done ends the reader's use of the block's buffer.
func (b *Block) Done() { b.w.release(b.c) }

// Fill answers a read of n bytes at off that is exactly one block missing
// from the cache (the whole block, or the rest of the file): the block is
// read from the cluster into a buffer the reply is sent from and the
// cache file's write is made from, with no copy between them. ok is false
// when the read is not such a read (other blocks, a block present or
// being filled, a bypassed or full cache): ReadAt serves it then. An
// error is the cluster's.
func (h *Handle) Fill(ctx context.Context, n int, off int64, read ReadFunc) (blk *Block, ok bool, err error) {
	e := h.e
	if h.bypass() || off < 0 || off%e.bs != 0 || off >= e.size {
		return nil, false, nil
	}
	b := off / e.bs
	bl := e.blockLen(b)
	if int64(n) != bl && (int64(n) < bl || off+bl != e.size) {
		return nil, false, nil
	}
	e.mu.Lock()
	if _, busy := e.inflight[b]; busy || e.present[b] {
		e.mu.Unlock()
		return nil, false, nil
	}
	ch := make(chan struct{})
	e.inflight[b] = ch
	e.mu.Unlock()
	if !h.c.reserve(e, bl) {
		e.endFill(b, ch)
		return nil, false, nil
	}
	h.c.met.misses.Inc()
	bp := h.c.getBuf()
	data := (*bp)[:bl]
	if err := readFull(ctx, read, data, off); err != nil {
		h.c.putBuf(bp)
		h.c.unreserve(e, bl)
		e.endFill(b, ch)
		return nil, true, err
	}
	w := &blockWrite{e: e, b: b, buf: bp, n: bl, sum: crc32.Checksum(data, castagnoli), ch: ch}
	w.users.Store(2)
	if !h.c.queueWrite(w) {
		h.c.writeBlock(w)
	}
	return &Block{Data: data, c: h.c, w: w}, true, nil
}
