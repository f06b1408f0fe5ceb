// Package mds is Shoal's metadata server: the namespace (inodes, directory
// entries), the extent map of every file, the OST registry, extent placement
// and the garbage collection of unreferenced chunks. State lives in one
// Pebble database whose key schema is in keys.go; client sessions, their
// open handles and their file locks live in memory only (sessions.go).
//
// # Concurrency
//
// Every mutating call runs as one Pebble batch, serialized by Server.mu (a
// Raft log will take its place when the MDS is replicated), and replies
// only once the batch is durable: batches are committed to the WAL without
// a sync under Server.mu, and one synced WAL write after the lock serves
// every batch committed before it (group commit, walSyncer in txn.go). The
// batch is indexed, so a mutation reads its own writes. Reads go straight to Pebble, through a
// snapshot when they read more than one key.
//
// Lock order: Server.life (read side, held by every RPC for its duration)
// before Server.mu before Server.sess.mu before Server.osts.mu. The GC and
// session goroutines take mu, sess.mu and osts.mu, never life; Close stops
// them before taking life for writing. The directory lease table's lock
// (dirlease.go) is a leaf, taken under any of these.
package mds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/mds/peerpb"
)

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	Dir              string                // Pebble directory
	FS               vfs.FS                // optional (pebble vfs), for crash tests; nil = vfs.Default
	Logger           *slog.Logger          // nil = discard
	Registry         prometheus.Registerer // nil = none
	DefaultLayout    *mdspb.Layout         // nil = {K:4, M:2, Unit:1<<20}; the root dir's layout on first open
	HeartbeatTimeout time.Duration         // OST considered down after this without a heartbeat; default 5s
	GCGrace          time.Duration         // delay before unreferenced extents' chunks are deleted; default 2m
	GCInterval       time.Duration         // default 5s
	SessionLease     time.Duration         // a client session expires this long after its last call; default 10s
	Admin            AdminOptions          // the administration worker (admin_worker.go)
	Placement        PlacementOptions      // where chunks go, narrow writes, full OSTs (placement.go)
	Now              func() time.Time      // default time.Now
	// CacheBytes is the size of Pebble's block cache (uncompressed
	// blocks of the tables); default 128 MiB.
	CacheBytes int64
	// Raft makes this MDS one member of a replicated group
	// (docs/mds-raft.md); nil: a single MDS, no Raft at all.
	Raft *RaftOptions
	// Creds is the MDS's mutual TLS identity, used when it calls OSTs
	// and the other members of its group; nil: plaintext (--insecure).
	// The gRPC server itself is made by the caller (wire.Bind with
	// wire.ServeCreds and the Authorizer method).
	Creds *wire.Creds
	// Identity maps callers' certificates to trust levels (perm.go).
	Identity IdentityOptions
	// CapabilityTTL is the lifetime of the chunk capabilities the MDS
	// signs (caps.go); default DefaultCapabilityTTL.
	CapabilityTTL time.Duration
	// DirLeaseTime is the length of a directory lease (dirlease.go);
	// default 1s, at most SessionLease; negative: leases off (LeaseDir
	// refuses every lease, changes never wait).
	DirLeaseTime time.Duration
}

// Limits of the API.
const (
	maxNameLen      = 255
	maxSymlinkLen   = 4096
	maxUUIDLen      = 255
	maxAddrLen      = 1024
	maxStripeWidth  = 64 // k+m
	maxUnit         = 1 << 30
	maxAllocCount   = 1024
	readDirDefault  = 1000
	readDirMax      = 10000
	gcBatch         = 1000 // GC queue entries handled per round
	gcCallTimeout   = 10 * time.Second
	gcRetryDelay    = 30 * time.Second // before a failed GC entry is tried again
	defaultHBTimout = 5 * time.Second
)

func (o *Options) withDefaults() (Options, error) {
	c := *o
	if c.Dir == "" {
		return c, fmt.Errorf("mds: Options.Dir is empty: %w", errs.ErrInvalid)
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.DefaultLayout == nil {
		c.DefaultLayout = &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}
	}
	if err := validLayout(c.DefaultLayout); err != nil {
		return c, fmt.Errorf("mds: Options.DefaultLayout: %w", err)
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = defaultHBTimout
	}
	if c.GCGrace <= 0 {
		c.GCGrace = 2 * time.Minute
	}
	if c.GCInterval <= 0 {
		c.GCInterval = 5 * time.Second
	}
	if c.SessionLease <= 0 {
		c.SessionLease = 10 * time.Second
	}
	switch {
	case c.DirLeaseTime == 0:
		c.DirLeaseTime = defaultDirLeaseTime
	case c.DirLeaseTime < 0:
		c.DirLeaseTime = -1
	}
	// A session's expiry drops its leases: none may outlive it.
	c.DirLeaseTime = min(c.DirLeaseTime, c.SessionLease)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = 128 << 20
	}
	if err := c.Admin.setDefaults(c.GCGrace); err != nil {
		return c, err
	}
	if err := c.Placement.setDefaults(); err != nil {
		return c, err
	}
	c.Identity.setDefaults()
	if c.Raft != nil {
		r, err := c.Raft.withDefaults()
		if err != nil {
			return c, err
		}
		c.Raft = &r
	}
	return c, nil
}

// Server is the MDS. It implements mdspb.MdsServer.
type Server struct {
	mdspb.UnimplementedMdsServer

	o   Options
	log *slog.Logger
	db  *pebble.DB
	m   *metrics

	// raft is the Raft member of a replicated MDS (raft.go); nil for a
	// single MDS. Set in Open, never changed.
	raft *replica

	// life guards closed and the db handle's lifetime: every RPC holds it
	// for reading; Close takes it for writing.
	life   sync.RWMutex
	closed bool

	// mu serializes mutations (one batch at a time) and guards rot.
	mu struct {
		sync.Mutex
		rot uint64 // extents placed so far: the placement rule's counter (tile)
	}

	osts ostTable

	capk atomic.Pointer[capability.Key] // the capability key once known (caps.go)

	// commits makes mutations durable (commit.go): a localCommitter,
	// or the Raft replica of a replicated MDS. Set in Open, never
	// changed.
	commits committer
	// txnEnv is what every mutation reads beyond its batch (txn.go).
	txnEnv txnEnv
	// methods describes the methods of the Mds service to serve
	// (intercept.go).
	methods map[string]method

	// tasks holds every goroutine the server starts (tasks.go); Close
	// stops it and waits before closing Pebble.
	tasks tasks

	// ostPool holds the connections to OSTs of the GC, the
	// administration worker and fsck (ostpool.go); Close closes it.
	ostPool *ostPool

	// gc is the garbage collector (gc.go), started in Open.
	gc *gc
	// sess holds the client sessions, open handles and locks (memory
	// only; sessions.go).
	sess struct {
		mu sync.Mutex // guards t
		t  *sessionTable
		// graceUntil (ns): orphans are not collected before, so that
		// clients re-announce their opens after a restart.
		graceUntil int64
		done       chan struct{} // closed when the session loop stopped
	}
	// leases is the directory lease table (dirlease.go); memory only.
	leases *leaseTable
	// admin is the administration worker (admin_worker.go), started in
	// Open.
	admin     *adminWorker
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating on first use) the MDS database in o.Dir and starts
// the GC and session loops. When a step fails, everything opened before it
// (Pebble, the Raft replica) is closed again, in reverse order.
func Open(ctx context.Context, o Options) (_ *Server, err error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{o: opts, log: opts.Logger}
	s.osts.m = make(map[uint32]*ostState)
	s.sess.t = newSessionTable(int64(opts.SessionLease))
	s.leases = newLeaseTable(opts.DirLeaseTime, s.log)
	s.methods = methodTable()
	s.txnEnv = txnEnv{gcGrace: opts.GCGrace, retireGrace: opts.Admin.RetireGrace,
		placement: &s.o.Placement, open: s.inodeOpen, log: s.log}
	s.ostPool = newOstPool(s.dialOST)
	var undo []func() // the closes of what is open so far, in opening order
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	po := pebbleOptions(opts)
	db, err := pebble.Open(opts.Dir, po)
	po.Cache.Unref()
	if err != nil {
		return nil, fmt.Errorf("mds: open pebble in %s: %w", opts.Dir, err)
	}
	s.db = db
	undo = append(undo, func() { db.Close() })
	if err := s.init(); err != nil {
		return nil, err
	}
	// The group starts before the replica: a member that leads at once
	// formats a new group's database on it (raftleader.go).
	s.tasks.start(ctx)
	undo = append(undo, s.tasks.stop)
	if opts.Raft != nil {
		if err := s.startReplica(*opts.Raft); err != nil {
			return nil, err
		}
		undo = append(undo, func() { s.raft.close() })
		s.commits = s.raft
	} else {
		s.commits = newLocalCommitter(s, &s.tasks, s.log)
		// A replica starts a term of leases when it starts to lead
		// (reloadForLeader).
		marker, err := s.hasLeaseMarker()
		if err != nil {
			return nil, err
		}
		s.leases.start(marker)
	}
	if err := s.loadOsts(); err != nil {
		return nil, err
	}
	if err := s.loadOstStates(); err != nil {
		return nil, err
	}
	if s.m, err = newMetrics(opts.Registry, s); err != nil {
		return nil, err
	}
	s.startSessions()
	s.startWorkers() // admin_store.go
	s.log.Info("mds open", "dir", opts.Dir, "osts", len(s.osts.m))
	return s, nil
}

// pebbleOptions are the options of the MDS's database: a block cache
// of o.CacheBytes, a memtable of 32 MiB (recent inodes and entries stay
// in memory), and Bloom filters on every level, so that the lookups
// that find nothing (the name a create makes, the request id of every
// mutation) mostly read no table (docs/performance.md, "MDS reads").
// The caller drops its reference to the cache once the database is open
// (the database holds its own).
func pebbleOptions(o Options) *pebble.Options {
	po := &pebble.Options{FS: o.FS, Logger: pebbleLogger{o.Logger}, Cache: pebble.NewCache(o.CacheBytes), MemTableSize: 32 << 20}
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	return po
}

// init checks the format version, or formats an empty database: version,
// counters and the root directory in one synced batch.
func (s *Server) init() error {
	v, err := getValue(s.db, versionKey())
	if err != nil && !errors.Is(err, errs.ErrNotFound) {
		return err
	}
	if err == nil {
		if len(v) != 4 {
			return fmt.Errorf("mds: malformed format version %x: %w", v, errs.ErrCorrupt)
		}
		if got := uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3]); got != formatVersion {
			return fmt.Errorf("mds: database format version %d, this binary supports %d: %w", got, formatVersion, errs.ErrNotSupported)
		}
		return nil
	}
	// No version: the database must be empty.
	if s.o.Raft != nil {
		// A replicated MDS formats through its log: the first leader
		// proposes the format batch (formatBatch), so that every member
		// holds the same bytes.
		return nil
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	nonEmpty := it.First()
	if err := it.Close(); err != nil {
		return err
	}
	if nonEmpty {
		return fmt.Errorf("mds: database in %s has data but no format version: %w", s.o.Dir, errs.ErrCorrupt)
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := formatBatch(b, s.o.Now().UnixNano(), s.o.DefaultLayout); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("mds: format database: %w", err)
	}
	s.log.Info("mds formatted new database", "dir", s.o.Dir, "version", formatVersion)
	return nil
}

// formatBatch writes a new database's version, counters and root
// directory into b.
func formatBatch(b *pebble.Batch, now int64, layout *mdspb.Layout) error {
	var err error
	root := &mdspb.Inode{Attr: &mdspb.Attr{
		Ino: rootIno, Mode: sIFDIR | 0o755, Nlink: 2,
		AtimeNs: now, MtimeNs: now, CtimeNs: now,
		Layout: proto.Clone(layout).(*mdspb.Layout),
	}}
	set := func(k, v []byte) {
		if err == nil {
			err = b.Set(k, v, nil)
		}
	}
	set(versionKey(), u32(nil, formatVersion))
	set(counterKey(counterNextIno), encodeU64(rootIno+1))
	set(counterKey(counterNextExtent), encodeU64(1))
	set(counterKey(counterNextOst), encodeU64(1))
	set(counterKey(counterInodes), encodeU64(1))
	rv, merr := proto.Marshal(root)
	if merr != nil {
		return merr
	}
	set(inodeKey(rootIno), rv)
	set(parentKey(rootIno), encodeU64(rootIno))
	return err
}

// Register registers the Mds service on g (its methods run through the
// interceptor, intercept.go), and for a replicated MDS the Peer service
// of its group (the same address serves both).
func (s *Server) Register(g *grpc.Server) {
	mdspb.RegisterMdsServer(g, s)
	if s.raft != nil {
		peerpb.RegisterPeerServer(g, &peerService{s: s})
	}
}

// Close ends the Watch streams, stops the server's goroutines (the GC,
// session and administration loops, background WAL syncs) and waits for
// them, closes OST connections
// and closes Pebble. RPCs that arrive afterwards fail with ErrUnavailable.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		// Watch streams end, and changes waiting for recalls fail, first:
		// neither holds life.
		s.leases.close(fmt.Errorf("mds: server closed: %w", errs.ErrUnavailable))
		s.tasks.stop()
		rerr := s.commits.close()
		s.life.Lock()
		defer s.life.Unlock()
		s.closed = true
		s.ostPool.close()
		s.closeErr = s.db.Close()
		if s.closeErr == nil {
			s.closeErr = rerr
		}
		s.m.unregister()
	})
	return s.closeErr
}

func (s *Server) now() int64 { return s.o.Now().UnixNano() }

// leading reports whether this MDS runs the background loops (GC,
// sessions, administration worker): always for a single MDS, only the
// serving leader of a group.
func (s *Server) leading() bool { return s.commits.leading() }

// reader is what reads need from Pebble: a DB, a snapshot or an indexed batch.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// getValue returns a copy of key's value, or an error wrapping ErrNotFound.
func getValue(r reader, key []byte) ([]byte, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		// No key in the message: it reaches users (issue 18).
		return nil, errs.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), v...)
	return out, c.Close()
}

// getProto reads key into msg; ErrNotFound if absent.
func getProto(r reader, key []byte, msg proto.Message) error {
	v, err := getValue(r, key)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(v, msg); err != nil {
		return fmt.Errorf("mds: decode %x: %v: %w", key, err, errs.ErrCorrupt)
	}
	return nil
}

// getCounter returns a counter's value (0 if unset).
func getCounter(r reader, name string) (uint64, error) {
	v, err := getValue(r, counterKey(name))
	if errors.Is(err, errs.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return decodeU64(v)
}

// scan calls fn for every key with the given prefix, in order, until fn
// returns false or an error.
func scan(r reader, prefix []byte, fn func(k, v []byte) (bool, error)) error {
	return scanRange(r, prefix, prefixEnd(prefix), fn)
}

func scanRange(r reader, lower, upper []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		more, err := fn(it.Key(), v)
		if err != nil {
			it.Close()
			return err
		}
		if !more {
			break
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// snapshot runs fn on a consistent snapshot of the database.
func (s *Server) snapshot(fn func(r reader) error) error {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	return fn(snap)
}

// pebbleLogger sends Pebble's log to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble")
	panic("pebble: " + msg) // Pebble requires Fatalf not to return.
}
