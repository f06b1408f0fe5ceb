package cache

import (
	"container/list"
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

	// usedSaved is the last use the meta file has; guarded by mu.
	usedSaved int64

	// mu guards the fields below.
	mu      sync.Mutex
	present []bool   // block filled
	crc     []uint32 // CRC32C of each present block
	// verified: checked (or filled) by this process, and the data file
	// has not changed since (its stamp is still checked).
	verified []bool
	checked  stamp                 // the data file as it was when last unused; zero: unknown
	inflight map[int64]*blockWrite // blocks being filled (read, then written)
	reserved int64                 // bytes accounted in Cache.mu.used
	dirty    bool                  // present, crc or used changed since the meta was written
	f        *os.File
	// df is the data file opened with O_DIRECT, for writing whole blocks
	// around the page cache; nil until the first, or where the file
	// system refuses O_DIRECT (noDirect).
	df       *os.File
	noDirect bool
}

// stamp identifies a data file's contents as the file system sees them:
// any write to it (another process's, a corruption through the file
// system) changes its ctime. It does not catch a disk that rots the
// bytes in place, which the kernel's passthrough reads would not catch
// either.
type stamp struct {
	ino, size uint64
	ctime     int64
}

func stampOf(st *syscall.Stat_t) stamp {
	return stamp{ino: st.Ino, size: uint64(st.Size), ctime: st.Ctim.Nano()}
}

func newEntry(ino, gen uint64, v Version, size, bs int64) *entry {
	n := (size + bs - 1) / bs
	return &entry{ino: ino, gen: gen, version: v, size: size, bs: bs,
		present: make([]bool, n), crc: make([]uint32, n), verified: make([]bool, n),
		inflight: map[int64]*blockWrite{}}
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

// allVerified reports whether every block is checked. Needs e.mu.
func (e *entry) allVerifiedLocked() bool {
	for _, v := range e.verified {
		if !v {
			return false
		}
	}
	return true
}

// completeWait bounds how long Complete waits for the writes of a file's
// last fills (behind a disk slower than the reads: fill.go) before it
// answers that the file is not complete.
const completeWait = time.Second

// covered reports whether every block is present or being filled.
func (e *entry) covered() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for b, p := range e.present {
		if _, in := e.inflight[int64(b)]; !p && !in {
			return false
		}
	}
	return true
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

// waitFills waits for the fills of e in flight now (not for those
// started later, so a file another reader is streaming does not hold the
// caller up); false if ctx ends first.
func (e *entry) waitFills(ctx context.Context) bool {
	e.mu.Lock()
	chs := make([]chan struct{}, 0, len(e.inflight))
	for _, w := range e.inflight {
		chs = append(chs, w.done)
	}
	e.mu.Unlock()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// closeData closes the data file once the entry is unused, and stamps
// it: what was verified stays so while the file keeps that stamp (the
// next use checks it, and checks the blocks again when it changed).
func (e *entry) closeData() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(e.f.Fd()), &st); err == nil {
		e.checked = stampOf(&st)
	} else {
		e.checked = stamp{}
	}
	e.f.Close()
	e.f = nil
	if e.df != nil {
		e.df.Close()
		e.df = nil
	}
}

// directFileLocked returns the data file opened with O_DIRECT, or nil
// where the file system does not take it. The data file must be open
// (dataFileLocked). Needs e.mu.
func (e *entry) directFileLocked(c *Cache) *os.File {
	if e.df != nil || e.noDirect {
		return e.df
	}
	f, err := os.OpenFile(c.dataPath(e), os.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		e.noDirect = true
		return nil
	}
	e.df = f
	return f
}

// checkStampLocked forgets what was verified unless the data file (st)
// still has the stamp it had when the entry was last unused. Needs e.mu.
func (e *entry) checkStampLocked(st *syscall.Stat_t) {
	if st == nil || e.checked == (stamp{}) || stampOf(st) != e.checked {
		clear(e.verified)
	}
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
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Size != e.size {
		if err := f.Truncate(e.size); err != nil {
			f.Close()
			return nil, err
		}
		e.checkStampLocked(nil)
	} else {
		e.checkStampLocked(&st)
	}
	e.f = f
	return f, nil
}

// unchangedLocked reports whether the blocks verified earlier can still be
// trusted without reading them: the data file is open in this use, or it
// still has its stamp. Needs e.mu.
func (e *entry) unchangedLocked(c *Cache) bool {
	if e.f != nil {
		return true
	}
	var st syscall.Stat_t
	if err := syscall.Stat(c.dataPath(e), &st); err != nil {
		e.checkStampLocked(nil)
		return false
	}
	e.checkStampLocked(&st)
	return e.allVerifiedLocked()
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
// them all first (reading the whole data file, unless this process
// checked them already and the file has not changed since): a file it
// reports complete may be handed to the kernel, whose reads are not
// checked. A corrupt block drops the entry. Fills in flight (the last
// reads' writes) are waited for.
func (h *Handle) Complete(ctx context.Context) bool {
	if h.bypass() || h.e.size == 0 || !h.e.covered() {
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, completeWait)
	defer cancel()
	if !h.e.waitFills(wctx) || !h.e.complete() {
		return false
	}
	h.e.mu.Lock()
	ok := h.e.allVerifiedLocked() && h.e.unchangedLocked(h.c)
	h.e.mu.Unlock()
	if ok {
		return !h.bypass()
	}
	bp := h.c.getBuf()
	defer h.c.putBuf(bp)
	for b := int64(0); b*h.e.bs < h.e.size; b++ {
		if ctx.Err() != nil {
			return false
		}
		if _, err := h.readBlock(b, *bp); err != nil {
			return false
		}
	}
	return !h.bypass()
}

// OpenData opens the (complete, checked) data file read-only, for the
// kernel's passthrough: the caller closes it. The kernel reads it with
// the file's own read-ahead, widened for a sequential reader.
func (h *Handle) OpenData() (*os.File, error) {
	f, err := os.Open(h.c.dataPath(h.e))
	if err == nil {
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
	}
	return f, err
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
	f, err := e.dataFileLocked(h.c)
	want, checked := e.crc[b], e.verified[b] // after the open, which checks the stamp
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
