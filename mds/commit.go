package mds

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// committer makes mutations durable. Open chooses one, once: a
// localCommitter (one MDS: Pebble's WAL with a group commit) or, for a
// member of a replicated group, the Raft replica (raft.go). Nothing else
// in the server asks which it has.
type committer interface {
	// commit runs fn as one mutation, serialized with every other, and
	// returns once it is durable, or, with early set, once it is
	// visible to every caller (a local committer syncs it in the
	// background; a replica ignores early: a mutation is visible only
	// once a quorum has it). id, when set, makes the mutation happen at
	// most once: if a mutation with that id was applied, fn does not
	// run and commit fails with a *dupError carrying its recorded
	// answer. Nothing is written if fn fails.
	commit(ctx context.Context, id string, early bool, fn func(t *txn) error) error
	// flush returns once every mutation committed so far is durable.
	flush() error
	// check says whether this member may serve calls now: nil, or why
	// not (ErrNotLeader with the leader's address).
	check() error
	// leading says whether this member runs the background loops (GC,
	// sessions, the administration worker).
	leading() bool
	// close stops the committer; commits afterwards fail.
	close() error
}

// stateMachine is the MDS's state as a committer drives it: the Pebble
// database the mutations are written to, the lock that serializes them,
// and the hooks a replica calls when it starts to lead. *Server is the
// only implementation; committers know nothing else of it.
type stateMachine interface {
	// database is the Pebble database of the applied state.
	database() *pebble.DB
	// lockMutations and unlockMutations bracket one mutation (the
	// building of its batch): one at a time.
	lockMutations()
	unlockMutations()
	// newTxn is a mutation writing into b, at the current time. The
	// mutation lock is held.
	newTxn(b *pebble.Batch) *txn
	// leaderReload rebuilds the in-memory tables (OSTs, sessions) from
	// the applied state when a replica starts to lead. The mutation
	// lock is held.
	leaderReload() error
	// leaderStopped ends what only a serving leader has in memory (the
	// directory lease table's streams and waits) when a replica stops
	// serving. The mutation lock and the replica's lock are held.
	leaderStopped()
	// format writes a new database's version, counters and root
	// directory into t (a replica proposes it once, as its first leader).
	format(t *txn) error
}

// commit runs fn as one mutation of the call in ctx: with the call's
// request id, and returning early when the call asked for it and its
// method allows it (intercept.go); a ctx of no call (a background loop)
// has neither.
func (s *Server) commit(ctx context.Context, fn func(t *txn) error) error {
	ci := callFrom(ctx)
	return s.commits.commit(ctx, ci.reqID, ci.early, fn)
}

// commitOn is commit for a mutation of inode ino by the call's caller:
// fn gets the caller and the inode (ErrNotFound if there is none).
func (s *Server) commitOn(ctx context.Context, ino uint64, fn func(t *txn, cl caller, n *mdspb.Inode) error) error {
	cl := s.callerOf(ctx)
	return s.commit(ctx, func(t *txn) error {
		n, err := t.inode(ino)
		if err != nil {
			return err
		}
		return fn(t, cl, n)
	})
}

// commitIn is commit for a mutation in directory dir by the call's
// caller: fn gets the caller and the directory (ErrNotFound if there is
// none, ErrNotDir if it is not one).
func (s *Server) commitIn(ctx context.Context, dir uint64, fn func(t *txn, cl caller, d *mdspb.Inode) error) error {
	cl := s.callerOf(ctx)
	return s.commit(ctx, func(t *txn) error {
		d, err := t.dir(dir)
		if err != nil {
			return err
		}
		return fn(t, cl, d)
	})
}

// update is commit for a mutation made for no call: no request id, no
// early reply (background loops, and calls whose mutation is not the
// call's own).
func (s *Server) update(fn func(t *txn) error) error {
	return s.commits.commit(context.Background(), "", false, fn)
}

// The *Server side of stateMachine.

func (s *Server) database() *pebble.DB { return s.db }
func (s *Server) lockMutations()       { s.mu.Lock() }
func (s *Server) unlockMutations()     { s.mu.Unlock() }
func (s *Server) leaderReload() error  { return s.reloadForLeader() }
func (s *Server) format(t *txn) error  { return formatBatch(t.b, t.now, s.o.DefaultLayout) }

func (s *Server) leaderStopped() {
	s.leases.reset(&errs.NotLeaderError{Msg: "mds: this member stopped leading; directory leases end"})
}

func (s *Server) newTxn(b *pebble.Batch) *txn {
	return &txn{
		env: &s.txnEnv, b: b, now: s.now(),
		inodes: make(map[uint64]*cachedInode),
		refs:   make(map[uint64]*refDelta),
	}
}

// localCommitter is the committer of a single MDS: a mutation's batch is
// committed to Pebble's WAL under the mutation lock, and made durable by
// the group commit of walSyncer.
type localCommitter struct {
	// life guards closed: a commit holds it for reading from its batch
	// to its sync, so close waits for the commits in flight and the
	// database is never closed under one.
	life   sync.RWMutex
	closed bool

	sm    stateMachine
	db    *pebble.DB
	wal   walSyncer
	tasks *tasks // background syncs of early replies run on it
	log   *slog.Logger
}

func newLocalCommitter(sm stateMachine, g *tasks, log *slog.Logger) *localCommitter {
	return &localCommitter{sm: sm, db: sm.database(), tasks: g, log: log}
}

func (c *localCommitter) commit(_ context.Context, id string, early bool, fn func(t *txn) error) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return fmt.Errorf("mds: server closed: %w", errs.ErrUnavailable)
	}
	committed, err := c.apply(id, fn)
	if err != nil || !committed {
		return err
	}
	if early {
		c.wal.later(c.tasks, c.db, c.log)
		return nil
	}
	return c.wal.sync(c.db)
}

// apply runs fn and commits its batch without waiting for the WAL sync,
// under the mutation lock, recording request id id with it (runTxn). It
// reports whether anything was written.
func (c *localCommitter) apply(id string, fn func(t *txn) error) (bool, error) {
	c.sm.lockMutations()
	defer c.sm.unlockMutations()
	t := c.sm.newTxn(c.db.NewIndexedBatch())
	defer t.b.Close()
	if err := runTxn(t, id, fn); err != nil {
		return false, err
	}
	if t.b.Empty() {
		return false, nil
	}
	if err := t.b.Commit(pebble.NoSync); err != nil {
		return false, fmt.Errorf("mds: commit: %w", err)
	}
	return true, nil
}

func (c *localCommitter) flush() error {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return fmt.Errorf("mds: server closed: %w", errs.ErrUnavailable)
	}
	return c.wal.flush(c.db)
}

func (c *localCommitter) check() error  { return nil }
func (c *localCommitter) leading() bool { return true }

// close waits for the commits in flight (and their syncs) and fails
// every later one.
func (c *localCommitter) close() error {
	c.life.Lock()
	c.closed = true
	c.life.Unlock()
	return nil
}

// walSyncer is the MDS's group commit. A mutation commits its batch to
// the WAL without syncing, under the mutation lock, then waits here, outside
// the lock, for a WAL sync that started after its commit. One sync (a synced
// log-only record: the WAL is sequential, so it makes every earlier record
// durable) serves every mutation that committed before it started, so
// concurrent creates share fsyncs instead of queueing one fsync each behind
// the lock. A call is still acknowledged only once its batch is durable.
// Other calls may read a mutation in the moment between its commit and its
// sync; should the MDS crash then, that mutation was never acknowledged.
type walSyncer struct {
	mu        sync.Mutex
	cond      *sync.Cond
	requested uint64 // mutations registered (each after its commit)
	synced    uint64 // mutations covered by the last finished sync
	running   bool
	scheduled bool // a background sync (later) is waiting to start
}

func (w *walSyncer) sync(db *pebble.DB) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.requested++
	return w.waitLocked(db, w.requested)
}

// later registers a committed mutation whose caller does not wait, and
// syncs it on a goroutine of g, which Close waits for before it closes
// db. The goroutine waits laterDelay first, and one goroutine serves
// every mutation registered until it syncs: a run of early replies (a
// loop of creates or truncates through the mount) shares one fsync per
// laterDelay instead of one each, which on a shared disk and two cores
// cost a fifth of the MDS's CPU (docs/performance.md). Once g is stopped
// (the server closing) the sync runs here, before the caller, which
// still holds the server open, returns.
func (w *walSyncer) later(g *tasks, db *pebble.DB, log *slog.Logger) {
	w.mu.Lock()
	w.requested++
	if w.scheduled {
		w.mu.Unlock()
		return
	}
	w.scheduled = true
	w.mu.Unlock()
	bg := func(delay time.Duration) {
		if delay > 0 {
			time.Sleep(delay)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.scheduled = false
		if err := w.waitLocked(db, w.requested); err != nil {
			log.Error("background WAL sync", "err", err)
		}
	}
	if !g.Go(func(context.Context) { bg(laterDelay) }) {
		bg(0)
	}
}

// laterDelay is how long the background sync of an early reply waits
// for others to share it: a mutation acknowledged early is durable
// within about laterDelay plus one fsync.
const laterDelay = 2 * time.Millisecond

// flush returns once every mutation committed so far is durable; at once
// when all of them are.
func (w *walSyncer) flush(db *pebble.DB) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waitLocked(db, w.requested)
}

// waitLocked waits, with w.mu held, until the mutations numbered up to
// mine are synced, running the sync itself when none is running.
func (w *walSyncer) waitLocked(db *pebble.DB, mine uint64) error {
	if w.cond == nil {
		w.cond = sync.NewCond(&w.mu)
	}
	for w.synced < mine {
		if w.running {
			w.cond.Wait()
			continue
		}
		w.running = true
		target := w.requested
		w.mu.Unlock()
		err := db.LogData([]byte("sync"), pebble.Sync)
		w.mu.Lock()
		w.running = false
		if err == nil {
			w.synced = target
		}
		w.cond.Broadcast()
		if err != nil {
			return fmt.Errorf("mds: sync WAL: %w", err)
		}
	}
	return nil
}
