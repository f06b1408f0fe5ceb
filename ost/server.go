package ost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Defaults of Options.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultBlockSize         = 64 << 10
)

// lockFile is locked (the FS's Lock: on vfs.Default an fcntl lock) while a
// Server has the directory open.
const lockFile = "ost.lock"

// Options configure an OST.
type Options struct {
	Dir               string                // the OST's directory (one disk); created if missing
	MDSAddr           string                // "" = don't register (tests of the store alone)
	AdvertiseAddr     string                // address clients use to reach this OST (set by the caller after Listen)
	Logger            *slog.Logger          // nil = discard
	Registry          prometheus.Registerer // nil = none; several OSTs in one process need a label each (prometheus.WrapRegistererWith)
	HeartbeatInterval time.Duration         // default 1s
	BlockSize         int                   // checksum block of new chunks, default 64 KiB
	// DataListen is the address the bulk data path (internal/datanet:
	// chunk reads and writes on framed TCP) listens on. Empty: the host of
	// AdvertiseAddr (127.0.0.1 without one), port picked by the kernel.
	// DataListenOff: no data path; clients use gRPC for chunk I/O. Info
	// reports the address clients reach it at.
	DataListen string
	// NoLocalData turns off the data path's local endpoint: the abstract
	// unix socket by which clients on this host read chunk files
	// directly and write without TLS (datanet's local.go;
	// docs/data-path.md, "Short-circuit reads").
	NoLocalData bool
	// DirectIO chooses where chunk data bypasses the page cache
	// (O_DIRECT); default DirectDefault.
	DirectIO DirectIO
	// Creds is the OST's mutual TLS identity for its calls to the MDS
	// and for the data path's listener; nil: plaintext (--insecure). The
	// gRPC server itself is made by the caller (wire.Bind, wire.ServeCreds).
	Creds *wire.Creds
	// Now is the clock capabilities are checked against; default time.Now.
	Now func() time.Time
	// Scrub configures the scrubber (scrub.go); it runs once Start has
	// registered with the MDS.
	Scrub ScrubOptions
	// Capacity caps the chunk bytes the OST holds, for an OST that shares
	// its disk or must leave room on it: it reports at most this capacity
	// and the part of it its chunks leave free, and a chunk write that
	// would pass it fails with ENOSPC (errs.ErrNoSpace), as a full disk
	// does. 0: the file system's capacity.
	Capacity uint64
	// FS is the file system Dir lives on; nil: vfs.Default, the OS's.
	// The chunk store (chunks/ and tmp/), the directory lock, the
	// identity files and statfs all go through it, so that tests inject
	// faults there (errorfs, vfs.NewCrashableMem). Any other FS turns
	// O_DIRECT off (vfs.go); one without GetDiskUsage (vfs.MemFS) makes
	// Info fail. Only the file system id sent to the MDS (fsID) asks the
	// OS at Dir.
	FS vfs.FS
}

// DirectIO chooses the chunk I/O that uses O_DIRECT. Only 4 KiB-aligned
// ranges of aligned buffers go direct; the rest, and every file system
// that refuses O_DIRECT (tmpfs), use the page cache.
type DirectIO int

const (
	// DirectDefault is what docs/performance.md measured best: O_DIRECT
	// writes, page-cache reads (directReadsByDefault).
	DirectDefault DirectIO = iota
	// DirectOff puts every chunk read and write through the page cache.
	DirectOff
	// DirectWrites writes chunk data with O_DIRECT, reads through the page cache.
	DirectWrites
	// DirectAll writes and reads chunk data with O_DIRECT.
	DirectAll
)

func (o *Options) setDefaults() error {
	if o.Dir == "" {
		return fmt.Errorf("ost: Options.Dir is empty: %w", errs.ErrInvalid)
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.HeartbeatInterval < 0 {
		return fmt.Errorf("ost: HeartbeatInterval %v: %w", o.HeartbeatInterval, errs.ErrInvalid)
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if err := checksum.CheckBlockSize(o.BlockSize); err != nil {
		return fmt.Errorf("ost: Options.BlockSize: %w", err)
	}
	if o.DirectIO < DirectDefault || o.DirectIO > DirectAll {
		return fmt.Errorf("ost: Options.DirectIO %d: %w", o.DirectIO, errs.ErrInvalid)
	}
	return nil
}

// Server is one OST: a chunk store in one directory, its gRPC service and
// its registration with the MDS.
type Server struct {
	opts Options
	log  *slog.Logger
	st   *store
	m    *metrics
	uuid string
	id   atomic.Uint32 // 0 until registered (or loaded from ost.id)
	lock io.Closer     // holds the lock on ost.lock (lockDir)
	bufs *datanet.BufPool

	data     *datanet.Server // the data path; nil when off
	local    *datanet.Server // its local endpoint; nil when off or not bound
	dataAddr string          // its address for clients; "" when off

	scrub scrubber // the scrubber's state (scrub.go)

	capk    atomic.Pointer[capability.Key] // the MDS's capability key once registered (caps.go)
	capNone atomic.Bool                    // the MDS handed no key over: nothing is checked

	mu struct {
		sync.Mutex
		started bool               // Start succeeded or is running
		closed  bool               // Close was called
		cancel  context.CancelFunc // stops the MDS loop; nil when none runs
		done    chan struct{}      // closed when the MDS loop has exited
	}
}

// Open opens the OST in o.Dir, creating it (and its uuid) the first time,
// empties its tmp/ directory and counts its chunks.
func Open(ctx context.Context, o Options) (*Server, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	if err := o.FS.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("ost: %w", err)
	}
	lock, err := lockDir(o.FS, o.Dir)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, log: o.Logger, m: newMetrics(), lock: lock, bufs: &datanet.BufPool{}}
	fail := func(err error) (*Server, error) {
		lock.Close()
		return nil, err
	}
	directW, directR := o.DirectIO != DirectOff, o.DirectIO == DirectAll || (o.DirectIO == DirectDefault && directReadsByDefault)
	st, rep, err := openStore(ctx, storeOptions{dir: o.Dir, fs: o.FS, blockSize: o.BlockSize, m: s.m, log: s.log, bufs: s.bufs, directWrites: directW, directReads: directR, limit: o.Capacity})
	if err != nil {
		return fail(err)
	}
	s.st = st
	if s.uuid, err = st.loadOrCreateUUID(); err != nil {
		return fail(err)
	}
	id, err := st.loadID()
	if err != nil {
		return fail(err)
	}
	s.id.Store(id)
	if err := s.m.register(o.Registry, st); err != nil {
		return fail(fmt.Errorf("ost: metrics: %w", err))
	}
	if err := s.startData(); err != nil {
		s.m.unregister()
		return fail(err)
	}
	opened := []any{"dir", o.Dir, "uuid", s.uuid,
		"chunks", st.chunks.Load(), "used", st.used.Load(), "data_addr", s.dataAddr,
		"direct_writes", st.directWrites.Load(), "direct_reads", st.directReads.Load()}
	if id != 0 {
		opened = append([]any{"ost", id}, opened...)
	} else {
		// A new OST: the MDS gives it its id at registration, which
		// logs it ("registered with MDS").
		opened = append(opened, "new", true)
	}
	s.log.Info("ost opened", opened...)
	if rep.replayed > 0 {
		s.log.Info("chunk log replayed: chunks written as files again", "count", rep.replayed)
	}
	if rep.orphanSidecars > 0 {
		s.log.Info("removed checksum sidecars of interrupted writes", "count", rep.orphanSidecars)
	}
	if n := len(rep.missingSidecar); n > 0 {
		s.log.Warn("chunks without checksum sidecar; reads of them fail as corrupt",
			"count", n, "first", rep.missingSidecar[0])
	}
	if n := len(rep.strays); n > 0 {
		s.log.Warn("files under chunks/ that are not chunks, ignored", "count", n, "first", rep.strays[0])
	}
	return s, nil
}

// lockDir locks dir/ost.lock through fsys, so that two servers never
// share a directory.
func lockDir(fsys vfs.FS, dir string) (io.Closer, error) {
	path := filepath.Join(dir, lockFile)
	key, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("ost: lock %s: %w", dir, err)
	}
	heldDirs.Lock()
	defer heldDirs.Unlock()
	c, err := fsys.Lock(path)
	switch {
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EACCES), err != nil && heldDirs.m[key] > 0:
		return nil, fmt.Errorf("ost: %s is in use by another server: %w", dir, errs.ErrExists)
	case err != nil:
		return nil, fmt.Errorf("ost: lock %s: %w", dir, err)
	}
	if heldDirs.m == nil {
		heldDirs.m = map[string]int{}
	}
	heldDirs.m[key]++
	return &dirLock{key: key, c: c}, nil
}

// heldDirs counts the lock files (absolute paths) that Servers of this
// process hold, so that a second Server here on the same directory gets
// errs.ErrExists too: an fcntl lock excludes other processes only, and
// vfs.Default refuses a second lock in one process with an error of no
// type.
var heldDirs struct {
	sync.Mutex
	m map[string]int
}

// dirLock is a lock taken by lockDir.
type dirLock struct {
	key string
	c   io.Closer
}

func (l *dirLock) Close() error {
	heldDirs.Lock()
	defer heldDirs.Unlock()
	if heldDirs.m[l.key]--; heldDirs.m[l.key] <= 0 {
		delete(heldDirs.m, l.key)
	}
	return l.c.Close()
}

// Register registers the ostpb.Ost service on g.
func (s *Server) Register(g *grpc.Server) { ostpb.RegisterOstServer(g, &service{s: s}) }

// ID is the id the MDS assigned, or 0 before the first registration.
func (s *Server) ID() uint32 { return s.id.Load() }

// UUID is this OST's uuid, created once with its directory.
func (s *Server) UUID() string { return s.uuid }

// ChunkPath is the path of a chunk's data file (which may not exist). A
// chunk still in the chunk log is written out first, so that its file
// exists when ChunkPath returns.
func (s *Server) ChunkPath(extent uint64, index uint32) string {
	c := chunkID{extent: extent, index: index}
	if err := s.st.clog.flushChunk(c); err != nil {
		s.log.Warn("chunk log: writing a chunk as files failed", "chunk", c.String(), "err", err)
	}
	return s.st.dataPath(c)
}

// FlushChunkLog writes every chunk still held by the chunk log as files
// now (the flusher does so on its own within moments), so that a walk of
// chunks/ finds them all.
func (s *Server) FlushChunkLog() error { return s.st.clog.flushAll() }

// Close stops the data path (requests in flight get a moment to finish),
// stops the MDS loop and waits for it, and releases the directory. Calls
// in flight on the gRPC service are the caller's to stop first
// (grpc.Server.GracefulStop).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	cancel, done := s.mu.cancel, s.mu.done
	s.mu.Unlock()
	derr := s.stopData()
	if cancel != nil {
		cancel()
		<-done
	}
	var err error
	if s.m.reg != nil {
		err = s.m.unregister()
	}
	return errors.Join(derr, err, s.st.clog.close(), s.lock.Close())
}

// space is the capacity and free space of the OST's file system, within
// Options.Capacity.
func (s *Server) space() (capacity, free uint64, err error) {
	du, err := s.st.fs.GetDiskUsage(s.opts.Dir)
	if err != nil {
		return 0, 0, fmt.Errorf("ost: statfs %s: %w", s.opts.Dir, err)
	}
	capacity, free = statfsSpace(du)
	if limit := s.opts.Capacity; limit > 0 {
		used := uint64(max(s.st.used.Load(), 0))
		capacity, free = min(capacity, limit), min(free, limit-min(used, limit))
	}
	return capacity, free, nil
}

// statfsSpace is the size and free space of a file system as df(1)
// counts them, from the FS's statfs (on vfs.Default: UsedBytes is Blocks -
// Bfree, AvailBytes Bavail, in fragments of Frsize as df counts): used is
// what is not free, available what an unprivileged writer may still take,
// and the size the sum of the two. The blocks the disk reserves for root
// (Bfree - Bavail, 5% of ext4 by default) are neither used nor available
// to Shoal, so they count in neither, and (size - free) / size is df's
// Use%.
func statfsSpace(du vfs.DiskUsage) (size, free uint64) {
	used := du.UsedBytes
	if used > du.TotalBytes {
		used = 0 // more free blocks than blocks: wrapped below zero
	}
	return used + du.AvailBytes, du.AvailBytes
}

// fsID names the file system under Dir (device number and statfs f_fsid),
// so that the MDS counts OSTs sharing one disk once in StatFs.
func (s *Server) fsID() string {
	var st syscall.Stat_t
	var fs syscall.Statfs_t
	if syscall.Stat(s.opts.Dir, &st) != nil || syscall.Statfs(s.opts.Dir, &fs) != nil {
		return ""
	}
	return fmt.Sprintf("%x/%x.%x", st.Dev, uint32(fs.Fsid.X__val[0]), uint32(fs.Fsid.X__val[1]))
}

func (s *Server) info() (*ostpb.InfoReply, error) {
	capacity, free, err := s.space()
	if err != nil {
		return nil, err
	}
	return &ostpb.InfoReply{
		Id:       s.ID(),
		Uuid:     s.uuid,
		Capacity: capacity,
		Free:     free,
		Used:     uint64(max(s.st.used.Load(), 0)),
		Chunks:   uint64(max(s.st.chunks.Load(), 0)),
		FsId:     s.fsID(),
		DataAddr: s.dataAddr,
	}, nil
}
