// Package cache is a node-local read cache of Shoal files: blocks of files
// read through a mount are kept in a directory on local disk, bounded in
// size with LRU eviction, and kept across mounts (docs/fuse.md,
// "Node-local cache").
//
// An entry is one file (by inode number) at one Version, an identity of
// its extent map that the caller computes at open (close-to-open: a file
// changed anywhere has a new extent map). Opening a file whose entry has
// another version drops the entry. Each block of BlockSize bytes is
// checksummed with CRC32C when it is filled; the checksums are checked
// once per process (its first read of a block, or the whole file when
// Complete is asked, before it is handed to the kernel for passthrough),
// and again after the data file changed on disk (its ino, size and ctime,
// taken when the entry was last unused). Filled blocks are written by
// background writers, off the reader's path (fill.go). Any failure of the cache (full, corrupt, I/O errors)
// degrades to the caller's own read with a log line and a metric, never to
// an error or wrong bytes.
//
// On disk, DIR holds "lock" (flock'd by the owning process), and per entry
// "<ino>.meta" (meta.go) and "<ino>-<gen>.data", a sparse file of the
// file's size. A data file without a meta naming it is deleted at Open.
//
// Lock order: Cache.mu, then entry.mu.
package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/errs"
)

// Version identifies the contents of a file: a hash of its extent map and
// size as the MDS gave them at open.
type Version [32]byte

// Options configure a cache.
type Options struct {
	// Dir is the cache directory; created when missing. Required.
	Dir string
	// Size bounds the bytes of cached blocks. Required (> 0).
	Size int64
	// BlockSize is the unit of fills and checksums. Default 1 MiB.
	BlockSize int64
	// Cluster names the cluster the entries belong to; a directory that
	// holds another cluster's entries is emptied at Open. Required.
	Cluster string
	// FillMemory bounds the memory of fills not yet written to the cache
	// directory (fill.go): a read that finds it taken is served without
	// filling. Default DefaultFillMemory().
	FillMemory int64
	// FlushInterval is how often changed entries' metadata is written.
	// Default 5s; Close writes the rest.
	FlushInterval time.Duration
	// Logger receives the degradations (full, corrupt, failing disk).
	Logger *slog.Logger
	// Registry receives the metrics (metrics.go); nil keeps none.
	Registry prometheus.Registerer

	// beforeWrite, when set (tests), runs in a writer before each block's
	// write.
	beforeWrite func(b int64)
}

func (o *Options) setDefaults() error {
	if o.Dir == "" || o.Size <= 0 || o.Cluster == "" {
		return fmt.Errorf("cache: Dir, Size and Cluster are required: %w", errs.ErrInvalid)
	}
	if o.BlockSize == 0 {
		o.BlockSize = 1 << 20
	}
	if o.BlockSize < 4096 || o.BlockSize%4096 != 0 {
		return fmt.Errorf("cache: block size %d is not a multiple of 4 KiB: %w", o.BlockSize, errs.ErrInvalid)
	}
	if o.FillMemory == 0 {
		o.FillMemory = DefaultFillMemory()
	}
	if o.FillMemory < o.BlockSize {
		return fmt.Errorf("cache: fill memory %d is under one block (%d): %w", o.FillMemory, o.BlockSize, errs.ErrInvalid)
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// DefaultFillMemory is an eighth of the machine's memory, between 64 MiB
// and 4 GiB: enough to hold a first epoch's fills while a cache disk that
// writes slower than the cluster reads catches up.
func DefaultFillMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 256 << 20
	}
	return min(max(int64(si.Totalram)*int64(si.Unit)/8, 64<<20), 4<<30)
}

// Cache is a node-local read cache. It is safe for concurrent use.
type Cache struct {
	o    Options
	log  *slog.Logger
	met  *metrics
	lock *os.File // DIR/lock, flock'd while open

	stop chan struct{}
	done chan struct{} // closed when the flusher has returned

	bufs   blockBufs        // one block each (bufs.go)
	writes chan *blockWrite // filled blocks for the writers; closed by Close
	// pending and pendingN are the bytes and the number of fills in
	// flight, bounded by FillMemory and cap(writes).
	pending, pendingN atomic.Int64
	wwg               sync.WaitGroup // the writers

	// mu guards the fields in it and each entry's refs, elem and dropped.
	mu struct {
		sync.Mutex
		entries map[uint64]*entry
		lru     *list.List // of *entry, most recently used first
		used    int64      // bytes of present blocks, fills in flight included
		nextGen uint64
		closed  bool
	}
	// warned rate-limits the degradation log lines, by kind.
	warned sync.Map
}

// Open opens (or creates) the cache directory o.Dir, loads the entries a
// previous process left and starts the metadata flusher; Close stops it.
// A directory in use by another process is an error.
func Open(ctx context.Context, o Options) (*Cache, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(o.Dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("cache: %s is in use by another process: %w", o.Dir, errs.ErrExists)
	}
	c := &Cache{o: o, log: o.Logger, lock: lock, stop: make(chan struct{}), done: make(chan struct{})}
	c.met = newMetrics(o.Registry)
	c.mu.entries = map[uint64]*entry{}
	c.mu.lru = list.New()
	if err := c.load(ctx); err != nil {
		lock.Close()
		return nil, err
	}
	c.bufs.start(o.BlockSize)
	go c.flusher()
	c.writes = make(chan *blockWrite, max(64, 2*o.FillMemory/o.BlockSize))
	for range writers {
		c.wwg.Add(1)
		go c.writer()
	}
	return c, nil
}

// Dir returns the cache directory.
func (c *Cache) Dir() string { return c.o.Dir }

// load reads the entries of the directory, oldest use last in the LRU
// list, and deletes what no valid meta names.
func (c *Cache) load(ctx context.Context) error {
	cl, _ := os.ReadFile(filepath.Join(c.o.Dir, "cluster"))
	if string(cl) != c.o.Cluster {
		if len(cl) > 0 {
			c.log.Info("cache: directory held another cluster's files; emptied", "dir", c.o.Dir)
		}
		if err := removeEntries(c.o.Dir); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(c.o.Dir, "cluster"), []byte(c.o.Cluster), 0o600); err != nil {
			return fmt.Errorf("cache: %w", err)
		}
	}
	des, err := os.ReadDir(c.o.Dir)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	keep := map[string]bool{"lock": true, "cluster": true}
	var loaded []*entry
	for _, de := range des {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		name, ok := strings.CutSuffix(de.Name(), ".meta")
		if !ok {
			continue
		}
		ino, err := strconv.ParseUint(name, 16, 64)
		if err != nil {
			continue
		}
		e, err := readMeta(filepath.Join(c.o.Dir, de.Name()), c.o.BlockSize)
		if err != nil || e.ino != ino {
			c.warn("corrupt", "cache: unreadable entry dropped", "ino", ino, "err", err)
			c.met.errors.WithLabelValues("corrupt").Inc()
			continue
		}
		if st, err := os.Stat(c.dataPath(e)); err != nil || st.Size() != e.size {
			continue
		}
		keep[de.Name()] = true
		keep[filepath.Base(c.dataPath(e))] = true
		c.mu.nextGen = max(c.mu.nextGen, e.gen+1)
		e.usedSaved = e.used
		loaded = append(loaded, e)
	}
	// Most recent first.
	sortByUse(loaded)
	for _, e := range loaded {
		e.elem = c.mu.lru.PushBack(e)
		c.mu.entries[e.ino] = e
		c.mu.used += e.presentBytes()
	}
	for _, de := range des {
		if !keep[de.Name()] {
			os.Remove(filepath.Join(c.o.Dir, de.Name()))
		}
	}
	c.met.used.Set(float64(c.mu.used))
	c.met.entries.Set(float64(len(c.mu.entries)))
	// Evict down to the bound, which may have shrunk since.
	c.mu.Lock()
	c.evictLocked(0, nil)
	c.mu.Unlock()
	return nil
}

// removeEntries deletes every entry file of dir.
func removeEntries(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	for _, de := range des {
		if n := de.Name(); strings.HasSuffix(n, ".meta") || strings.HasSuffix(n, ".data") || strings.HasSuffix(n, ".tmp") {
			os.Remove(filepath.Join(dir, n))
		}
	}
	return nil
}

func (c *Cache) dataPath(e *entry) string {
	return filepath.Join(c.o.Dir, fmt.Sprintf("%x-%d.data", e.ino, e.gen))
}

func (c *Cache) metaPath(ino uint64) string {
	return filepath.Join(c.o.Dir, fmt.Sprintf("%x.meta", ino))
}

// Close writes the metadata of changed entries and releases the
// directory. Handles still open keep reading their files.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	c.mu.Unlock()
	close(c.writes) // queueWrite sends only while not closed
	c.wwg.Wait()
	close(c.stop)
	<-c.done
	c.flush()
	c.bufs.stop()
	c.bufs.trim(0) // unless a reply still holds a buffer
	return c.lock.Close()
}

// flusher writes changed entries' metadata every FlushInterval until
// Close.
func (c *Cache) flusher() {
	defer close(c.done)
	t := time.NewTicker(c.o.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.flush()
			c.bufs.trim(trimIdle)
		}
	}
}

// flush writes the metadata of every changed entry.
func (c *Cache) flush() {
	c.mu.Lock()
	var dirty []*entry
	for _, e := range c.mu.entries {
		dirty = append(dirty, e)
	}
	c.mu.Unlock()
	for _, e := range dirty {
		if err := c.writeMeta(e); err != nil {
			c.fail(e, "io", "cache: write entry metadata", err)
		}
	}
}

// Open returns a handle on the entry of ino for an open of the file at
// version v and size size, creating an empty entry when there is none;
// an entry of another version is dropped first. Release the handle when
// the file is closed.
func (c *Cache) Open(ino uint64, v Version, size int64) *Handle {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.mu.entries[ino]
	if e != nil && (e.version != v || e.size != size) {
		c.dropLocked(e)
		c.met.stale.Inc()
		e = nil
	}
	if e == nil {
		e = newEntry(ino, c.mu.nextGen, v, size, c.o.BlockSize)
		c.mu.nextGen++
		e.elem = c.mu.lru.PushFront(e)
		c.mu.entries[ino] = e
		c.met.entries.Set(float64(len(c.mu.entries)))
	} else {
		c.mu.lru.MoveToFront(e.elem)
	}
	e.refs++
	e.mu.Lock()
	e.used = time.Now().UnixNano()
	if e.used-e.usedSaved > int64(usedPrecision) {
		e.dirty = true // the new last use orders the LRU after a restart
	}
	e.mu.Unlock()
	return &Handle{c: c, e: e}
}

// usedPrecision is how stale the last use in an entry's meta may be: an
// open does not rewrite the meta for less (the LRU order after a restart
// is that coarse).
const usedPrecision = time.Minute

// Invalidate drops the entry of ino, if any: the file is being written.
func (c *Cache) Invalidate(ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.mu.entries[ino]; e != nil {
		c.dropLocked(e)
		c.met.invalidations.Inc()
	}
}

// DropAll drops every entry.
func (c *Cache) DropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.mu.entries {
		c.dropLocked(e)
	}
}

// Stats are the cache's occupancy.
type Stats struct {
	Entries, Complete int
	Used, Size        int64
}

// Stats returns the cache's occupancy.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Entries: len(c.mu.entries), Used: c.mu.used, Size: c.o.Size}
	for _, e := range c.mu.entries {
		if e.complete() {
			s.Complete++
		}
	}
	return s
}

// CountPassthroughOpen counts an open the kernel serves from a cache file
// by itself (FUSE passthrough).
func (c *Cache) CountPassthroughOpen() { c.met.passthrough.Inc() }

// dropLocked removes e from the cache and deletes its files; handles on
// it stop using the cache. Needs c.mu.
func (c *Cache) dropLocked(e *entry) {
	if e.dropped {
		return
	}
	e.dropped = true
	c.mu.lru.Remove(e.elem)
	if c.mu.entries[e.ino] == e {
		delete(c.mu.entries, e.ino)
	}
	e.mu.Lock()
	c.mu.used -= e.reserved
	e.reserved = 0
	e.mu.Unlock()
	os.Remove(c.metaPath(e.ino))
	os.Remove(c.dataPath(e))
	c.met.used.Set(float64(c.mu.used))
	c.met.entries.Set(float64(len(c.mu.entries)))
}

// reserve accounts n more bytes to e, evicting unused entries (least
// recently used first) to make room. It reports false when the cache is
// full of entries in use or e was dropped.
func (c *Cache) reserve(e *entry, n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.dropped || c.mu.closed {
		return false
	}
	if !c.evictLocked(n, e) {
		return false
	}
	c.mu.used += n
	e.mu.Lock()
	e.reserved += n
	e.mu.Unlock()
	c.met.used.Set(float64(c.mu.used))
	return true
}

// unreserve gives back n bytes reserved for a fill that failed.
func (c *Cache) unreserve(e *entry, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.dropped {
		return // dropLocked gave back all of it
	}
	c.mu.used -= n
	e.mu.Lock()
	e.reserved -= n
	e.mu.Unlock()
	c.met.used.Set(float64(c.mu.used))
}

// evictLocked drops unused entries, least recently used first, until n
// more bytes fit; keep is never dropped. Needs c.mu.
func (c *Cache) evictLocked(n int64, keep *entry) bool {
	for el := c.mu.lru.Back(); el != nil && c.mu.used+n > c.o.Size; {
		prev := el.Prev()
		if e := el.Value.(*entry); e != keep && e.refs == 0 {
			c.dropLocked(e)
			c.met.evictions.Inc()
		}
		el = prev
	}
	return c.mu.used+n <= c.o.Size
}

// release drops one reference to e.
func (c *Cache) release(e *entry) {
	c.mu.Lock()
	e.refs--
	last := e.refs == 0
	c.mu.Unlock()
	if last {
		e.closeData()
	}
}

// warn logs a degradation: at warn level the first time per kind, then at
// debug level.
func (c *Cache) warn(kind, msg string, args ...any) {
	if _, seen := c.warned.LoadOrStore(kind, true); seen {
		c.log.Debug(msg, args...)
		return
	}
	c.log.Warn(msg, args...)
}

// fail drops e after a failure of the cache itself (a failing disk, a
// corrupt block), logs it and counts it under kind.
func (c *Cache) fail(e *entry, kind, msg string, err error) {
	c.warn(kind, msg, "ino", e.ino, "err", err)
	c.met.errors.WithLabelValues(kind).Inc()
	c.mu.Lock()
	c.dropLocked(e)
	c.mu.Unlock()
}

var errCorrupt = errors.New("cache block checksum mismatch")
