package cache

import (
	"container/list"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"sync"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entry is the cached copy of one file at one version.
type entry struct {
	ino     uint64
	gen     uint64 // names the data file; new for every entry of the inode
	version Version
	size    int64
	bs      int64 // block size

	// Guarded by Cache.mu.
	refs    int           // open handles
	elem    *list.Element // in Cache.mu.lru
	dropped bool          // removed from the cache; handles bypass it
	used    int64         // last open, unix ns (the LRU order across restarts)

	// mu guards the fields below.
	mu       sync.Mutex
	present  []bool   // block filled
	crc      []uint32 // CRC32C of each present block
	verified []bool   // checked (or filled) since the entry was last unused
	inflight map[int64]chan struct{}
	reserved int64 // bytes accounted in Cache.mu.used
	dirty    bool  // present or crc changed since the meta was written
	f        *os.File
}

func newEntry(ino, gen uint64, v Version, size, bs int64) *entry {
	n := (size + bs - 1) / bs
	return &entry{ino: ino, gen: gen, version: v, size: size, bs: bs,
		present: make([]bool, n), crc: make([]uint32, n), verified: make([]bool, n),
		inflight: map[int64]chan struct{}{}}
}

func (e *entry) blockLen(b int64) int64 { return min(e.bs, e.size-b*e.bs) }

// presentBytes is the size of the present blocks.
func (e *entry) presentBytes() int64 {
	var n int64
	for b, p := range e.present {
		if p {
			n += e.blockLen(int64(b))
		}
	}
	return n
}

// complete reports whether every block is present.
func (e *entry) complete() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.present {
		if !p {
			return false
		}
	}
	return true
}

// closeData closes the data file once the entry is unused, and forgets
// what was verified: the next open checks its blocks again.
func (e *entry) closeData() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f != nil {
		e.f.Close()
		e.f = nil
	}
	clear(e.verified)
}

// dataFile returns the open data file, creating it (sparse, of the file's
// size) on first use. Needs e.mu.
func (e *entry) dataFileLocked(c *Cache) (*os.File, error) {
	if e.f != nil {
		return e.f, nil
	}
	f, err := os.OpenFile(c.dataPath(e), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || st.Size() != e.size {
		if err := f.Truncate(e.size); err != nil {
			f.Close()
			return nil, err
		}
	}
	e.f = f
	return f, nil
}

func sortByUse(es []*entry) {
	sort.Slice(es, func(i, j int) bool { return es[i].used > es[j].used })
}

// Handle is one open file's use of its cache entry.
type Handle struct {
	c *Cache
	e *entry

	mu     sync.Mutex
	off    bool // stopped using the cache (dropped, failed, Disable)
	closed bool
}

// ReadFunc reads file bytes from the cluster, as client.File.ReadAt does.
type ReadFunc func(ctx context.Context, p []byte, off int64) (int, error)

// bypass reports whether reads go straight to the cluster.
func (h *Handle) bypass() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.off {
		return true
	}
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	return h.e.dropped
}

// Disable stops the handle from using the cache and drops its entry: the
// file is being written through it.
func (h *Handle) Disable() {
	h.mu.Lock()
	h.off = true
	h.mu.Unlock()
	h.c.mu.Lock()
	if !h.e.dropped {
		h.c.dropLocked(h.e)
		h.c.met.invalidations.Inc()
	}
	h.c.mu.Unlock()
}

// Release ends the handle's use of the entry.
func (h *Handle) Release() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	h.mu.Unlock()
	h.c.release(h.e)
}

// Complete reports whether every block of the file is cached and checks
// them all first (reading the whole data file): a file it reports
// complete may be handed to the kernel, whose reads are not checked. A
// corrupt block drops the entry.
func (h *Handle) Complete(ctx context.Context) bool {
	if h.bypass() || h.e.size == 0 || !h.e.complete() {
		return false
	}
	buf := make([]byte, h.e.bs)
	for b := int64(0); b*h.e.bs < h.e.size; b++ {
		if ctx.Err() != nil {
			return false
		}
		if _, err := h.readBlock(b, buf); err != nil {
			return false
		}
	}
	return !h.bypass()
}

// OpenData opens the (complete, checked) data file read-only, for the
// kernel's passthrough: the caller closes it.
func (h *Handle) OpenData() (*os.File, error) {
	return os.Open(h.c.dataPath(h.e))
}

// readBlock returns block b in buf (checked against its CRC32C unless
// already checked during this use of the entry), or an error when it is
// not present or not right, in which case the entry is dropped.
func (h *Handle) readBlock(b int64, buf []byte) ([]byte, error) {
	e := h.e
	n := e.blockLen(b)
	e.mu.Lock()
	if !e.present[b] {
		e.mu.Unlock()
		return nil, fmt.Errorf("block %d not present", b)
	}
	want, checked := e.crc[b], e.verified[b]
	f, err := e.dataFileLocked(h.c)
	e.mu.Unlock()
	if err != nil {
		h.c.fail(e, "io", "cache: open data file", err)
		return nil, err
	}
	if _, err := f.ReadAt(buf[:n], b*e.bs); err != nil {
		h.c.fail(e, "io", "cache: read data file", err)
		return nil, err
	}
	if !checked {
		if crc32.Checksum(buf[:n], castagnoli) != want {
			h.c.fail(e, "corrupt", "cache: corrupt block; entry dropped, reading from the cluster", fmt.Errorf("block %d: %w", b, errCorrupt))
			return nil, errCorrupt
		}
		e.mu.Lock()
		e.verified[b] = true
		e.mu.Unlock()
	}
	return buf[:n], nil
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
	var buf []byte
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
func (h *Handle) serveBlock(ctx context.Context, b, pos int64, dst []byte, buf *[]byte, read ReadFunc) (bool, error) {
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
				*buf = make([]byte, e.bs)
			}
			blk, err := h.readBlock(b, *buf)
			if err != nil {
				continue // dropped: read from the cluster
			}
			copy(dst, blk[pos-bstart:])
			return true, nil
		}
		ch := make(chan struct{})
		e.inflight[b] = ch
		e.mu.Unlock()
		err := h.fill(ctx, b, pos, dst, buf, read)
		e.mu.Lock()
		delete(e.inflight, b)
		e.mu.Unlock()
		close(ch)
		return false, err
	}
}

// fill reads block b from the cluster, writes it to the data file with its
// checksum, and copies the part at pos into dst. Only a read error of the
// cluster is returned; a cache that cannot take the block is bypassed.
func (h *Handle) fill(ctx context.Context, b, pos int64, dst []byte, buf *[]byte, read ReadFunc) error {
	e := h.e
	n := e.blockLen(b)
	if !h.c.reserve(e, n) {
		h.c.warn("full", "cache: full of files in use; reading without caching", "ino", e.ino)
		h.c.met.errors.WithLabelValues("full").Inc()
		return readFull(ctx, read, dst, pos)
	}
	if *buf == nil {
		*buf = make([]byte, e.bs)
	}
	blk := (*buf)[:n]
	bstart := b * e.bs
	if err := readFull(ctx, read, blk, bstart); err != nil {
		h.c.unreserve(e, n)
		return err
	}
	copy(dst, blk[pos-bstart:])
	sum := crc32.Checksum(blk, castagnoli)
	e.mu.Lock()
	f, err := e.dataFileLocked(h.c)
	e.mu.Unlock()
	if err == nil {
		_, err = f.WriteAt(blk, bstart)
	}
	if err != nil {
		h.c.unreserve(e, n)
		h.c.fail(e, "io", "cache: write data file; reading without caching", err)
		return nil
	}
	e.mu.Lock()
	e.present[b], e.crc[b], e.verified[b] = true, sum, true
	e.dirty = true
	e.mu.Unlock()
	h.c.met.fills.Inc()
	h.c.met.fillBytes.Add(float64(n))
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
