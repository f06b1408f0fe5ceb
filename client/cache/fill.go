package cache

import (
	"context"
	"hash/crc32"
	"io"
	"sync/atomic"
)

// Fills. A block missing from the cache is read from the cluster into a
// pooled buffer and copied to the reader; checksumming it and writing it
// to the data file are left to the cache's writers, off the reader's path. Until
// it is written the block is in flight: other readers of it wait for its
// read, then copy from its buffer. A reader never waits for the cache's
// disk: the buffers of fills not yet written are bounded by
// Options.FillMemory, and a read that finds them all taken is served
// without filling (counted in shoal_client_cache_fills_skipped_total; a
// later read fills the block). So a disk that writes slower than the
// cluster reads (this machine's: 330-480 MiB/s against 900, docs/cache.md)
// costs the first read nothing; the fill ends behind it.

// writers is the number of goroutines writing filled blocks. Whole blocks
// are written with O_DIRECT, each write waiting on the device, so several
// are kept in flight to fill the device's queue (docs/cache.md measured 2,
// 4 and 8).
const writers = 8

// blockWrite is a block being filled: read from the cluster, then on its
// way to the data file. It is e.inflight[b] until the fill ends.
type blockWrite struct {
	e   *entry
	b   int64
	buf *[]byte // pooled; the block's bytes are (*buf)[:n]
	n   int64
	sum uint32
	// read is closed once the cluster's read ended: ok (set before) says
	// buf holds the block.
	read chan struct{}
	ok   bool
	// done is closed once the fill ended: the block written (present) or
	// dropped.
	done   chan struct{}
	queued bool // holds a reference to e (queueWrite)
	// users of buf: the fill (until written), and readers copying or
	// replying from it (Fill); the last to finish returns it to the pool.
	users atomic.Int32
}

// release ends one use of w's buffer.
func (w *blockWrite) release(c *Cache) {
	if w.users.Add(-1) == 0 {
		c.putBuf(w.buf)
	}
}

// getBuf returns a pooled buffer of one block, aligned to 4 KiB (bufs.go).
func (c *Cache) getBuf() *[]byte { return c.bufs.get() }

func (c *Cache) putBuf(bp *[]byte) { c.bufs.put(bp) }

// writer writes queued blocks until Close closes the queue.
func (c *Cache) writer() {
	defer c.wwg.Done()
	for w := range c.writes {
		c.writeBlock(w)
	}
}

// startFill takes Options.FillMemory room for a fill of n bytes and
// marks block b of e in flight; nil when the room is taken (the read is
// served without filling) or the block is busy or present (busy true).
func (h *Handle) startFill(b, n int64) (w *blockWrite, busy bool) {
	e := h.e
	e.mu.Lock()
	if _, in := e.inflight[b]; in || e.present[b] {
		e.mu.Unlock()
		return nil, true
	}
	bytes, count := h.c.pending.Add(n), h.c.pendingN.Add(1)
	if bytes > h.c.o.FillMemory || count > int64(cap(h.c.writes)) {
		h.c.pending.Add(-n)
		h.c.pendingN.Add(-1)
		e.mu.Unlock()
		h.c.met.skipped.Inc()
		return nil, false
	}
	w = &blockWrite{e: e, b: b, n: n, read: make(chan struct{}), done: make(chan struct{})}
	w.users.Store(1)
	e.inflight[b] = w
	e.mu.Unlock()
	h.c.met.pending.Add(float64(n))
	if !h.c.reserve(e, n) {
		h.c.warn("full", "cache: full of files in use; reading without caching", "ino", e.ino)
		h.c.met.errors.WithLabelValues("full").Inc()
		h.c.endFill(w, false, false)
		return nil, false
	}
	return w, false
}

// readFill reads w's block from the cluster into a pooled buffer and
// hands it to the writers; the cluster's error (the fill ended) when the
// read fails.
func (h *Handle) readFill(ctx context.Context, w *blockWrite, read ReadFunc) error {
	w.buf = h.c.getBuf()
	data := (*w.buf)[:w.n]
	if err := readFull(ctx, read, data, w.b*h.e.bs); err != nil {
		h.c.unreserve(h.e, w.n)
		h.c.endFill(w, false, false)
		return err
	}
	w.ok = true
	close(w.read)
	if !h.c.queueWrite(w) {
		// Closing: the block is not cached.
		h.c.unreserve(h.e, w.n)
		h.c.endFill(w, false, true)
	}
	return nil
}

// queueWrite hands w to a writer, with a reference to its entry; false
// when the cache is closing. The queue holds every fill FillMemory
// allows, so it does not block.
func (c *Cache) queueWrite(w *blockWrite) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return false
	}
	w.queued = true
	w.e.refs++
	c.writes <- w
	return true
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
	if c.o.beforeWrite != nil {
		c.o.beforeWrite(w.b)
	}
	// The checksum is the writer's work, not the reader's: on a machine
	// with few CPUs the reply goes out first.
	w.sum = crc32.Checksum((*w.buf)[:w.n], castagnoli)
	if err == nil {
		_, err = f.WriteAt((*w.buf)[:w.n], w.b*e.bs)
	}
	if err != nil {
		c.unreserve(e, w.n)
		c.fail(e, "io", "cache: write data file; reading without caching", err)
	} else {
		c.met.fills.Inc()
		c.met.fillBytes.Add(float64(w.n))
	}
	c.endFill(w, err == nil, true)
	if w.queued {
		c.release(e)
	}
}

// endFill ends the fill w: the block present (written) or not, and the
// buffer's fill use released (read: the read had filled it).
func (c *Cache) endFill(w *blockWrite, written, read bool) {
	e := w.e
	e.mu.Lock()
	if written {
		e.present[w.b], e.crc[w.b], e.verified[w.b] = true, w.sum, true
		e.dirty = true
	}
	delete(e.inflight, w.b)
	e.mu.Unlock()
	c.pending.Add(-w.n)
	c.pendingN.Add(-1)
	c.met.pending.Sub(float64(w.n))
	if !read {
		close(w.read)
	}
	close(w.done)
	if w.buf != nil {
		w.release(c)
	}
}

// fromFlight copies file bytes [pos, pos+len(dst)) of block b from the
// buffer of its fill in flight, w, once read; false when the fill ended
// without it (written meanwhile, or its read failed): look again.
func (h *Handle) fromFlight(ctx context.Context, w *blockWrite, pos int64, dst []byte) (bool, error) {
	select {
	case <-w.read:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	e := h.e
	e.mu.Lock()
	if !w.ok || e.inflight[w.b] != w {
		e.mu.Unlock()
		return false, nil
	}
	w.users.Add(1) // in flight: the fill's own use still holds buf
	e.mu.Unlock()
	w.copyOut(h.c, dst, pos-w.b*e.bs)
	return true, nil
}

// copyOut copies the fill's bytes from in, the offset in its block, into
// dst and gives back the caller's use of the buffer.
func (w *blockWrite) copyOut(c *Cache, dst []byte, in int64) {
	copy(dst, (*w.buf)[in:w.n])
	w.release(c)
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
// from the cache when present or in flight, else filling the block from
// read (or reading it without filling when the fills' memory is taken).
// It reports whether the bytes came from the cache.
func (h *Handle) serveBlock(ctx context.Context, b, pos int64, dst []byte, buf **[]byte, read ReadFunc) (bool, error) {
	e := h.e
	bstart := b * e.bs
	for {
		if h.bypass() {
			return false, readFull(ctx, read, dst, pos)
		}
		e.mu.Lock()
		if w, ok := e.inflight[b]; ok {
			e.mu.Unlock()
			got, err := h.fromFlight(ctx, w, pos, dst)
			if got || err != nil {
				return got, err
			}
			continue
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
		e.mu.Unlock()
		w, busy := h.startFill(b, e.blockLen(b))
		if busy {
			continue
		}
		if w == nil {
			return false, readFull(ctx, read, dst, pos)
		}
		w.users.Add(1) // this reader's: a writer may be done before the copy
		if err := h.readFill(ctx, w, read); err != nil {
			w.release(h.c)
			return false, err
		}
		w.copyOut(h.c, dst, pos-bstart)
		return false, nil
	}
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
// being filled, a bypassed cache, the fills' memory taken): ReadAt serves
// it then. An error is the cluster's.
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
	w, _ := h.startFill(b, bl)
	if w == nil {
		return nil, false, nil
	}
	h.c.met.misses.Inc()
	w.users.Add(1) // the reply's
	if err := h.readFill(ctx, w, read); err != nil {
		w.release(h.c)
		return nil, true, err
	}
	return &Block{Data: (*w.buf)[:bl], c: h.c, w: w}, true, nil
}
