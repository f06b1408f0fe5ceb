package mds

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	rpb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
)

// RaftOptions make the MDS one member of a replicated group
// (docs/mds-raft.md). Options.Raft nil is a single MDS with no Raft at all.
type RaftOptions struct {
	// ID is this member's id (1, 2, 3...), unique in the group, never reused.
	ID uint64
	// Peers maps every initial member's id to its address, this member
	// included. It is read on the first start only (an empty Raft log);
	// afterwards the configuration is in the log and in "P" keys.
	Peers map[uint64]string
	// Join starts a member that is not in the group yet: it waits to be
	// added (shoal admin mds add) and catches up from the leader's log or
	// a snapshot. Peers then names the group's current members (this
	// one may be among them or not): the new member knows them by it
	// until it has applied the group's own record of its members.
	Join bool
	// TickInterval is the Raft clock; default 50ms. ElectionTicks (default
	// 10) and HeartbeatTicks (default 1) are counted in it.
	TickInterval   time.Duration
	ElectionTicks  int
	HeartbeatTicks int
	// SnapshotEntries: the log is compacted (a snapshot taken at the
	// applied index) every this many applied entries; default 10000.
	// KeepEntries are kept behind it for followers a little behind;
	// default 5000.
	SnapshotEntries uint64
	KeepEntries     uint64
	// DialAddr, when set, maps a member's address to the one this member
	// dials it at: tests put a proxy between each pair of members
	// (test/cluster, partitions). nil dials members at their addresses.
	DialAddr func(addr string) string
}

func (o *RaftOptions) withDefaults() (RaftOptions, error) {
	c := *o
	if c.ID == 0 {
		return c, fmt.Errorf("mds: Raft.ID must not be 0: %w", errs.ErrInvalid)
	}
	if !c.Join {
		if _, ok := c.Peers[c.ID]; !ok {
			return c, fmt.Errorf("mds: Raft.Peers does not name this member (%d): %w", c.ID, errs.ErrInvalid)
		}
	} else if len(c.Peers) == 0 {
		// A new member answers the leader at the address it has for it;
		// until it has applied the group's entries, Peers is all it has.
		return c, fmt.Errorf("mds: Raft.Join needs Raft.Peers naming the group's members: %w", errs.ErrInvalid)
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 50 * time.Millisecond
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = 10
	}
	if c.ElectionTicks < 4 {
		// The read lease lasts ElectionTicks-2 ticks (renewLease).
		return c, fmt.Errorf("mds: Raft.ElectionTicks %d: want 4 or more: %w", c.ElectionTicks, errs.ErrInvalid)
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 1
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 10000
	}
	if c.KeepEntries == 0 {
		c.KeepEntries = 5000
	}
	return c, nil
}

// replica is the Raft side of a replicated MDS: the etcd raft.Node, the
// loop that persists, sends and applies its Ready batches, the leader's
// overlay of proposed but not yet applied batches, and the waiters of
// proposals.
//
// The replica drives the MDS's state through the stateMachine interface
// (commit.go) and is its committer.
//
// A mutation on the leader (propose) runs under the mutation lock as in a
// single MDS, but its txn reads and writes the overlay batch (ov), which holds
// every batch this leader proposed in its term on top of the applied
// state; the txn's own writes (the tail of ov) become the Raft entry. So
// mutations pipeline: the next one does not wait for the previous one's
// round trip. Every member applies committed entries in log order to
// Pebble, with the applied index in the same batch (apply.go).
//
// Entry data: version(1) + term(8) + proposal id(8) + Pebble batch repr.
// The term is the leader term the batch was computed in; an entry whose
// Raft term differs (a batch proposed by a leader that had just lost its
// term, appended by a later term) is skipped by every member, so that only
// batches computed over exactly the log before them are applied.
//
// Lock order: the mutation lock before replica.mu.
type replica struct {
	sm    stateMachine
	db    *pebble.DB // sm.database()
	tasks *tasks     // the server's goroutine group: the format proposal runs on it
	creds *wire.Creds
	o     RaftOptions
	log   *slog.Logger
	node  raft.Node
	store *raftLog
	net   *peerNet
	m     *raftMetrics

	stop          chan struct{}
	done          chan struct{}
	ctx           context.Context // canceled by close
	stopCtxCancel context.CancelFunc

	// Owned by the Ready loop.
	confState    *rpb.ConfState
	snapIndex    uint64 // index of the last compaction
	lastHardTerm uint64
	leaseReqs    map[uint64]leaseReq // ReadIndex token -> when and in which term it was sent
	leaseToken   uint64

	mu struct {
		sync.Mutex
		role        raft.StateType
		leader      uint64
		term        uint64
		applied     uint64
		appliedTerm uint64
		commit      uint64
		members     map[uint64]string
		// serving: this member leads in term servingTerm and has applied
		// every entry before its term; only then does it take calls.
		serving     bool
		servingTerm uint64
		formatted   bool            // the applied state has a format version
		termCtx     context.Context // canceled when the term it serves ends
		// leaseUntil: the serving leader answers calls until then
		// (renewLease); leaseHold: a leadership transfer is under way,
		// the lease is not renewed.
		leaseUntil time.Time
		leaseHold  bool
		leaseWait  chan struct{} // closed and replaced when the lease is renewed
		servingAt  time.Time     // when serving last began
		applyWait  chan struct{} // closed and replaced when entries are applied or pending dropped
		termCancel context.CancelFunc
		waiters    map[uint64]chan error // proposal id -> outcome
		nextProp   uint64
		pending    []pendingProp // proposed in servingTerm, not applied yet, in order
	}

	// ov is the overlay batch: an indexed batch on the database holding
	// the pending proposals (and some applied ones). Guarded by the
	// mutation lock.
	ov      *pebble.Batch
	ovTerm  uint64
	removed bool // this member was removed from the group

	closeOnce sync.Once // close runs once: Halt, then Server.Close
	stopOnce  sync.Once // stopLoop runs once
	closeErr  error
}

// leaseReq is a ReadIndex request made to renew the lease.
type leaseReq struct {
	sent time.Time
	term uint64
}

type pendingProp struct {
	id   uint64
	repr []byte
}

const entryVersion = 1

func encodeEntry(term, id uint64, repr []byte) []byte {
	b := make([]byte, 17, 17+len(repr))
	b[0] = entryVersion
	binary.BigEndian.PutUint64(b[1:], term)
	binary.BigEndian.PutUint64(b[9:], id)
	return append(b, repr...)
}

func decodeEntry(d []byte) (term, id uint64, repr []byte, err error) {
	if len(d) < 17+12 || d[0] != entryVersion {
		return 0, 0, nil, fmt.Errorf("mds: raft entry of %d bytes, version %d: %w", len(d), d[0], errs.ErrCorrupt)
	}
	return binary.BigEndian.Uint64(d[1:]), binary.BigEndian.Uint64(d[9:]), d[17:], nil
}

// raftLogger sends etcd raft's log to slog; its Info messages (every
// vote, every configuration step) go out at Debug: the member logs role
// changes and leadership itself.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)                 { r.l.Debug(fmt.Sprint(v...), "component", "raft") }
func (r raftLogger) Debugf(f string, v ...any)      { r.l.Debug(fmt.Sprintf(f, v...), "component", "raft") }
func (r raftLogger) Error(v ...any)                 { r.l.Error(fmt.Sprint(v...), "component", "raft") }
func (r raftLogger) Errorf(f string, v ...any)      { r.l.Error(fmt.Sprintf(f, v...), "component", "raft") }
func (r raftLogger) Info(v ...any)                  { r.l.Debug(fmt.Sprint(v...), "component", "raft") }
func (r raftLogger) Infof(f string, v ...any)       { r.l.Debug(fmt.Sprintf(f, v...), "component", "raft") }
func (r raftLogger) Warning(v ...any)               { r.l.Warn(fmt.Sprint(v...), "component", "raft") }
func (r raftLogger) Warningf(f string, v ...any)    { r.l.Warn(fmt.Sprintf(f, v...), "component", "raft") }
func (r raftLogger) Fatal(v ...any)                 { r.l.Error(fmt.Sprint(v...)); panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any)      { r.Fatal(fmt.Sprintf(f, v...)) }
func (r raftLogger) Panic(v ...any)                 { r.Fatal(v...) }
func (r raftLogger) Panicf(f string, v ...any)      { r.Fatal(fmt.Sprintf(f, v...)) }
func (r raftLogger) With(...any) raft.Logger        { return r }
func (r raftLogger) WithContext(string) raft.Logger { return r }

// startReplica opens the Raft log and starts the node and its loop. The
// state machine (s.db) is open; its applied index says where to resume.
func (s *Server) startReplica(o RaftOptions) (err error) {
	r := &replica{sm: s, db: s.db, tasks: &s.tasks, creds: s.o.Creds, o: o,
		log: s.log.With("member", o.ID), stop: make(chan struct{}), done: make(chan struct{})}
	r.ctx, r.stopCtxCancel = context.WithCancel(context.Background())
	if r.m, err = newRaftMetrics(s.o.Registry, r); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			r.m.unregister()
		}
	}()
	r.mu.members = map[uint64]string{}
	r.mu.waiters = map[uint64]chan error{}
	r.mu.leaseWait = make(chan struct{})
	r.mu.applyWait = make(chan struct{})
	r.leaseReqs = map[uint64]leaseReq{}
	store, fresh, err := openRaftLog(s.o.FS, s.o.Dir, pebbleLogger{s.log})
	if err != nil {
		return err
	}
	r.store = store
	if v, err := getValue(s.db, appliedKey()); err == nil {
		idx, term, ok := decodeApplied(v)
		if !ok {
			store.close()
			return fmt.Errorf("mds: malformed applied index %x: %w", v, errs.ErrCorrupt)
		}
		if idx == 0 && term == snapInstalling {
			store.close()
			return fmt.Errorf("mds: a snapshot install was interrupted in %s: remove this member's directory and add it again: %w", s.o.Dir, errs.ErrCorrupt)
		}
		r.mu.applied, r.mu.appliedTerm = idx, term
	}
	var voters []uint64 // the group as of the applied index ("P" keys)
	if err := scan(s.db, []byte{prefixMember}, func(k, v []byte) (bool, error) {
		r.mu.members[binary.BigEndian.Uint64(k[1:])] = string(v)
		voters = append(voters, binary.BigEndian.Uint64(k[1:]))
		return true, nil
	}); err != nil {
		store.close()
		return err
	}
	for id, a := range o.Peers {
		if _, ok := r.mu.members[id]; !ok {
			r.mu.members[id] = a
		}
	}
	snap, _ := store.mem.Snapshot()
	r.snapIndex = snap.GetMetadata().GetIndex()
	r.confState = proto.Clone(rpb.EnsureConfState(snap.GetMetadata().GetConfState())).(*rpb.ConfState)
	if r.mu.applied < r.snapIndex {
		store.close()
		return fmt.Errorf("mds: state machine at index %d is behind the raft snapshot at %d: %w", r.mu.applied, r.snapIndex, errs.ErrCorrupt)
	}
	if !fresh {
		if err := r.restoreConfState(voters); err != nil {
			store.close()
			return err
		}
		if err := store.raiseCommit(r.mu.applied); err != nil {
			store.close()
			return err
		}
	}
	cfg := &raft.Config{
		ID:                        o.ID,
		ElectionTick:              o.ElectionTicks,
		HeartbeatTick:             o.HeartbeatTicks,
		Storage:                   store.mem,
		Applied:                   r.mu.applied,
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  8 << 20,
		MaxUncommittedEntriesSize: 64 << 20,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		// ReadIndex requests are confirmed by a heartbeat round: the
		// loop makes one every tick to renew the leader's read lease
		// (renewLease); calls never wait for one.
		ReadOnlyOption:            raft.ReadOnlySafe,
		DisableProposalForwarding: true,
		// A leader removed from the group steps down at once; without
		// this it would go on sending heartbeats, and the others would
		// not elect a new leader until its process stopped.
		StepDownOnRemoval: true,
		Logger:            raftLogger{s.log},
	}
	r.net = newPeerNet(r)
	switch {
	case fresh && !o.Join:
		// The log cannot start below the state machine.
		if r.mu.applied > 0 {
			store.close()
			return fmt.Errorf("mds: empty raft log but the database is at index %d: %w", r.mu.applied, errs.ErrCorrupt)
		}
		ids := make([]uint64, 0, len(o.Peers))
		for id := range o.Peers {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		peers := make([]raft.Peer, 0, len(ids))
		for _, id := range ids {
			peers = append(peers, raft.Peer{ID: id, Context: []byte(o.Peers[id])})
		}
		r.node = raft.StartNode(cfg, peers)
	default:
		r.node = raft.RestartNode(cfg)
	}
	s.log.Info("mds raft member started", "member", o.ID, "applied", r.mu.applied, "fresh", fresh, "members", len(r.mu.members))
	s.raft = r
	go r.run()
	return nil
}

// restoreConfState gives the Raft library the group's configuration as
// of the applied index. The library takes it from the log's snapshot
// (raft.Storage.InitialState) and does not deliver again the entries up
// to Config.Applied, conf changes included; so a member restarted before
// any snapshot, or after a membership change applied since the last
// one, would start with no configuration (or an old one) and never
// elect. The state machine knows the group at its applied index: its
// "P" keys, written in the same batch as each conf change (members are
// all voters). When they differ from the snapshot's voters, the state
// machine is synced and a snapshot is recorded at the applied index
// with them. Runs before the node starts.
func (r *replica) restoreConfState(voters []uint64) error {
	applied := r.mu.applied
	if applied == 0 || len(voters) == 0 || applied <= r.snapIndex {
		return nil
	}
	have := slices.Clone(r.confState.GetVoters())
	slices.Sort(have)
	slices.Sort(voters)
	if slices.Equal(have, voters) && len(r.confState.GetLearners()) == 0 {
		return nil
	}
	if err := r.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("mds: sync before restoring the group configuration: %w", err)
	}
	cs := &rpb.ConfState{Voters: voters}
	if err := r.store.compact(applied, cs, u64(nil, r.o.ID), r.o.KeepEntries); err != nil {
		return fmt.Errorf("mds: record the group configuration at %d: %w", applied, err)
	}
	r.confState, r.snapIndex = cs, applied
	r.log.Info("mds raft configuration restored from the state machine", "applied", applied, "voters", voters)
	return nil
}

// snapInstalling in the applied key's term field (with index 0) marks a
// state machine being replaced by a snapshot.
const snapInstalling = ^uint64(0)

// run is the Ready loop: persist, install snapshot, send, apply, advance.
func (r *replica) run() {
	defer close(r.done)
	t := time.NewTicker(r.o.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.node.Tick()
			r.renewLease()
		case rd := <-r.node.Ready():
			if err := r.handle(rd); err != nil {
				// A member that cannot persist or apply must stop: its
				// state would diverge. It stops serving; the others go on.
				r.log.Error("raft member stopped", "err", err)
				r.stepDown()
				<-r.stop
				return
			}
			r.node.Advance()
		}
	}
}

func (r *replica) handle(rd raft.Ready) error {
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		r.mu.Lock()
		r.mu.term = rd.HardState.GetTerm()
		r.mu.commit = rd.HardState.GetCommit()
		r.mu.Unlock()
	}
	if rd.SoftState != nil {
		r.mu.Lock()
		was, wasLead := r.mu.role, r.mu.leader
		r.mu.role, r.mu.leader = rd.SoftState.RaftState, rd.SoftState.Lead
		r.mu.Unlock()
		if wasLead != rd.SoftState.Lead {
			r.m.leaderChanges.Inc()
		}
		if was != rd.SoftState.RaftState {
			r.log.Info("mds raft role", "role", rd.SoftState.RaftState.String(), "leader", rd.SoftState.Lead)
		}
	}
	// A leader that is no longer one (or leads a new term) stops serving
	// before anything of the new term is applied.
	r.mu.Lock()
	lost := r.mu.serving && (r.mu.role != raft.StateLeader || r.mu.term != r.mu.servingTerm)
	r.mu.Unlock()
	if lost {
		r.stepDown()
	}
	r.extendLease(rd.ReadStates)
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		if err := r.installSnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	// A leader sends its messages (appends to the followers) before it
	// writes the same entries to its own log, so that its fsync and
	// theirs overlap (Raft thesis 10.2.1; etcd's server does the same):
	// an entry still commits only once a quorum has it durably, and the
	// leader counts itself only after the Ready is persisted (Advance).
	// Any other member persists first (its votes and acknowledgements
	// promise what is on its disk).
	r.mu.Lock()
	leader := r.mu.role == raft.StateLeader
	r.mu.Unlock()
	if leader {
		r.freshenSnapshots(rd.Messages)
		r.net.send(rd.Messages)
	}
	// Committed entries that an earlier Ready persisted here (below
	// this Ready's first new entry: on the leader, all of them) are
	// applied, and their callers answered, before this Ready's new
	// entries are synced rather than one fsync later. A crash after the
	// apply and before the save may leave the state machine past the
	// log's persisted commit index: raiseCommit mends it at the start.
	// The rest (a follower told of the commit of entries it receives in
	// the same Ready) are applied after the save, and with a snapshot
	// the order stays: install, persist, apply.
	hasSnap := rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot)
	ce, later := rd.CommittedEntries, []*rpb.Entry(nil)
	if hasSnap {
		ce, later = nil, ce
	} else if len(rd.Entries) > 0 {
		first := rd.Entries[0].GetIndex()
		i := 0
		for i < len(ce) && ce[i].GetIndex() < first {
			i++
		}
		ce, later = ce[:i], ce[i:]
	}
	if err := r.apply(ce); err != nil {
		return err
	}
	t0 := time.Now()
	synced, err := r.store.save(rd.HardState, rd.Entries, rd.Snapshot)
	if err != nil {
		return err
	}
	if synced {
		r.m.logSyncSeconds.Observe(time.Since(t0).Seconds())
	}
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		r.confState = proto.Clone(rpb.EnsureConfState(rd.Snapshot.GetMetadata().GetConfState())).(*rpb.ConfState)
		r.snapIndex = rd.Snapshot.GetMetadata().GetIndex()
	}
	if !leader {
		r.freshenSnapshots(rd.Messages)
		r.net.send(rd.Messages)
	}
	if err := r.apply(later); err != nil {
		return err
	}
	return r.maybeCompact()
}

// apply applies committed entries, timed.
func (r *replica) apply(ents []*rpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	t0 := time.Now()
	if err := r.applyEntries(ents); err != nil {
		return err
	}
	r.m.applySeconds.Observe(time.Since(t0).Seconds())
	return nil
}

// freshenSnapshots moves every outgoing snapshot message to this
// member's applied index, term and configuration, as etcd's server does
// (createMergedSnapshotMessage). The snapshot the library picks is the
// last compaction's, whose configuration may predate the member it goes
// to (one just added), and a member that is not in a snapshot's
// configuration refuses it, so it would never catch up. The state
// machine the receiver fetches (Peer.Snapshot) is at the sender's
// applied index or past it in any case, and the log holds every entry
// after it.
func (r *replica) freshenSnapshots(msgs []*rpb.Message) {
	for _, m := range msgs {
		if m.GetType() != rpb.MessageType_MsgSnap || m.GetSnapshot() == nil {
			continue
		}
		r.mu.Lock()
		idx, term := r.mu.applied, r.mu.appliedTerm
		r.mu.Unlock()
		md := m.GetSnapshot().GetMetadata()
		if md == nil || idx <= md.GetIndex() {
			continue
		}
		m.Snapshot = &rpb.Snapshot{Data: m.GetSnapshot().GetData(), Metadata: &rpb.SnapshotMetadata{
			Index: &idx, Term: &term, ConfState: proto.Clone(r.confState).(*rpb.ConfState)}}
	}
}

// stepDown ends this member's service as leader: proposals in flight fail
// with ErrNotLeader (they may still commit; a retry with the same request
// id finds them applied), the overlay is dropped.
func (r *replica) stepDown() {
	r.mu.Lock()
	if r.mu.termCancel != nil {
		r.mu.termCancel()
	}
	r.mu.Unlock()
	r.sm.lockMutations()
	defer r.sm.unlockMutations()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mu.serving {
		return
	}
	r.log.Info("mds raft leader stops serving", "term", r.mu.servingTerm)
	r.mu.serving = false // check refuses calls: the lease no longer counts
	r.sm.leaderStopped()
	for id, w := range r.mu.waiters {
		w <- r.notLeaderLocked()
		delete(r.mu.waiters, id)
	}
	r.mu.pending = nil
	r.appliedLocked()
	if r.ov != nil {
		r.ov.Close()
		r.ov = nil
	}
}

// appliedLocked wakes the calls waiting for pending proposals
// (waitPending). r.mu is held.
func (r *replica) appliedLocked() {
	close(r.mu.applyWait)
	r.mu.applyWait = make(chan struct{})
}

// startServing opens the gate of a leader that has applied every entry
// before its term: fresh overlay, in-memory tables reloaded from the
// applied state (as after a restart: sessions start over, OSTs are seen
// by their next heartbeat).
func (r *replica) startServing(term uint64) error {
	r.sm.lockMutations()
	defer r.sm.unlockMutations()
	if err := r.sm.leaderReload(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.role != raft.StateLeader || r.mu.term != term {
		return nil
	}
	r.ov = r.db.NewIndexedBatch()
	r.ovTerm = term
	r.mu.pending = nil
	_, verr := getValue(r.db, versionKey())
	r.mu.formatted = verr == nil
	if !r.mu.formatted {
		r.tasks.Go(r.formatReplicated)
	}
	r.mu.serving, r.mu.servingTerm = true, term
	r.mu.leaseUntil, r.mu.leaseHold = time.Time{}, false
	r.mu.servingAt = time.Now()
	r.mu.termCtx, r.mu.termCancel = context.WithCancel(context.Background())
	r.log.Info("mds raft leader serving", "term", term, "applied", r.mu.applied)
	return nil
}

// notLeaderLocked is the error of a call this member cannot serve, with
// the leader's address when one is known. r.mu is held.
func (r *replica) notLeaderLocked() error {
	e := &errs.NotLeaderError{}
	if r.mu.leader != 0 && r.mu.leader != r.o.ID {
		e.Leader = r.mu.members[r.mu.leader]
	}
	return e
}

// stopLoop stops the Ready loop between two Ready batches and waits for
// it: nothing more is persisted, sent or applied by it. Only the first
// call does anything. (A power-cut test clones the member's file system
// right after it, before close writes anything more.)
func (r *replica) stopLoop() {
	r.stopOnce.Do(func() {
		r.stopCtxCancel()
		close(r.stop)
		<-r.done
	})
}

// close stops the loop, the node and the transport, and closes the log.
// Only the first call does anything.
func (r *replica) close() error {
	r.closeOnce.Do(func() {
		r.stopLoop()
		r.node.Stop()
		r.net.close()
		r.stepDown()
		r.sm.lockMutations()
		if r.ov != nil {
			r.ov.Close()
			r.ov = nil
		}
		r.sm.unlockMutations()
		r.closeErr = r.store.close()
		r.m.unregister()
	})
	return r.closeErr
}
