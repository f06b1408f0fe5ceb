package mds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/erasure"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// The administration worker: one goroutine of the MDS that moves and
// rebuilds chunks (repair, drain, rebalance, scrub repairs) and deletes the
// old copies of moved chunks. docs/admin.md describes it for operators.
//
// Every move follows DESIGN.md's copy, verify, switch, delete:
//
//  1. a MoveRecord ("M" key) is written for each chunk to move;
//  2. the chunk's bytes are read from its OST, or rebuilt from k other
//     chunks of the extent when that OST cannot serve them;
//  3. they are written to the destination OST (fsynced there) and read
//     back and compared;
//  4. one MDS transaction checks that the extent's placement is still the
//     one the move was planned on and that every extent-map entry naming
//     the extent was found (their number equals the refcount), rewrites
//     the placement in the "r" record and in every "m" entry, queues the
//     old copy for deletion after RetireGrace ("D" key) and drops the
//     MoveRecord;
//  5. after the grace, the old copy is deleted, unless the chunk has
//     moved back there since.
//
// A move interrupted anywhere (MDS or OST crash) leaves a MoveRecord; the
// worker's next round finishes it: if the switch happened the record goes,
// otherwise the destination copy is deleted and the record goes, and the
// next pass plans the move again. So a move is idempotent and never loses
// the only good copy. Placement switches run on this goroutine only, so
// the retire step cannot race one.
//
// Readers holding an old extent map keep reading the old copies during
// RetireGrace; after it they see the chunk missing and rebuild it from
// parity (degraded read), which works while at most m chunks of one
// extent have moved under them.

// Job kinds.
const (
	JobRepair    = "repair"
	JobDrain     = "drain"
	JobRebalance = "rebalance"
	JobScrub     = "scrub"
)

// Job states.
const (
	JobIdle    = "idle"
	JobRunning = "running"
	JobStopped = "stopped"
	JobDone    = "done"
	JobFailed  = "failed"
)

// AdminOptions configure the administration worker (Options.Admin).
type AdminOptions struct {
	// Interval between rounds of the worker; default 1s.
	Interval time.Duration
	// RepairAfter: an OST down this long has its chunks rebuilt on
	// other OSTs (a repair job starts on its own). Default 30m; negative:
	// never automatically.
	RepairAfter time.Duration
	// RetireGrace: the old copy of a moved chunk is deleted this long
	// after the switch, so that readers holding the old extent map finish.
	// Default: GCGrace.
	RetireGrace time.Duration
	// BatchExtents is how many extents' moves one switch transaction
	// commits; default 32.
	BatchExtents int
	// CallTimeout bounds each OST call of the worker; default 30s.
	CallTimeout time.Duration
	// MaxPasses bounds the passes of one job that make no progress
	// before it fails; default 5.
	MaxPasses int
	// Concurrency is how many extents of a batch the worker copies (or
	// rebuilds) at once; default DefaultAdminConcurrency, at most
	// MaxAdminConcurrency. The switch of a batch stays one transaction.
	Concurrency int
	// RebalanceBandwidth paces the bytes a rebalance job writes (bytes/s)
	// when the job's request names no --max-bandwidth; 0: unpaced.
	// Repair and drain are paced only by their request.
	RebalanceBandwidth uint64
}

// Limits and defaults of AdminOptions.
const (
	DefaultAdminConcurrency = 4
	MaxAdminConcurrency     = 64
)

// setDefaults fills in the zero values and checks the others.
func (o *AdminOptions) setDefaults(gcGrace time.Duration) error {
	if o.Concurrency < 0 || o.Concurrency > MaxAdminConcurrency {
		return fmt.Errorf("mds: Admin.Concurrency %d (0 for the default, at most %d): %w", o.Concurrency, MaxAdminConcurrency, errs.ErrInvalid)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultAdminConcurrency
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.RepairAfter == 0 {
		o.RepairAfter = 30 * time.Minute
	}
	if o.RetireGrace <= 0 {
		o.RetireGrace = gcGrace
	}
	if o.BatchExtents <= 0 {
		o.BatchExtents = 32
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 30 * time.Second
	}
	if o.MaxPasses <= 0 {
		o.MaxPasses = 5
	}
	return nil
}

// adminWorker is the worker's state. Everything but kick, connMu, conns,
// met and mu is owned by the worker goroutine (the copies of one batch run
// on goroutines of their own, which touch only conns and met).
type adminWorker struct {
	kick chan struct{} // buffered(1): run a round now
	done chan struct{} // closed when the worker stopped
	met  *adminMetrics // set by newMetrics (admin_metrics.go)

	started   time.Time  // jobs wait a heartbeat timeout after Open, until OSTs reported
	connMu    sync.Mutex // guards conns
	conns     map[uint32]*ostConn
	downSince map[uint32]time.Time // when the worker first saw an OST down
	badRetry  map[string]time.Time // bad chunks whose repair failed: not before
	stalled   map[string]int       // passes without progress, by job kind

	mu struct {
		sync.Mutex
		wake []chan struct{} // closed after the next full round (waitRound)
	}
}

func (s *Server) startAdmin(ctx context.Context) {
	w := &s.admin
	w.kick = make(chan struct{}, 1)
	w.done = make(chan struct{})
	w.conns = make(map[uint32]*ostConn)
	w.started = s.o.Now()
	w.downSince = make(map[uint32]time.Time)
	w.badRetry = make(map[string]time.Time)
	w.stalled = make(map[string]int)
	go s.adminLoop(ctx)
}

// kickAdmin asks for a worker round now.
func (s *Server) kickAdmin() {
	select {
	case s.admin.kick <- struct{}{}:
	default:
	}
}

// waitRound kicks the worker and waits until a round that started after
// the call has finished (or ctx is done).
func (s *Server) waitRound(ctx context.Context) error {
	ch := make(chan struct{})
	s.admin.mu.Lock()
	s.admin.mu.wake = append(s.admin.mu.wake, ch)
	s.admin.mu.Unlock()
	s.kickAdmin()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) adminLoop(ctx context.Context) {
	w := &s.admin
	defer close(w.done)
	defer func() {
		w.connMu.Lock()
		defer w.connMu.Unlock()
		for id, c := range w.conns {
			c.cc.Close()
			delete(w.conns, id)
		}
	}()
	tick := time.NewTicker(s.o.Admin.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-w.kick:
		}
		w.mu.Lock()
		wake := w.mu.wake
		w.mu.wake = nil
		w.mu.Unlock()
		if !s.leading() {
			// A follower plans nothing; its jobs run on the leader.
		} else if err := s.adminRound(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("admin round failed", "err", err)
		}
		for _, ch := range wake {
			close(ch)
		}
	}
}

// adminRound is one round of the worker.
func (s *Server) adminRound(ctx context.Context) error {
	var all []error
	note := func(what string, err error) {
		if err != nil && ctx.Err() == nil {
			all = append(all, fmt.Errorf("%s: %w", what, err))
		}
	}
	if s.o.Now().Sub(s.admin.started) < s.o.HeartbeatTimeout {
		// Just opened: OSTs that are up have not all heartbeated yet,
		// and a plan made now would take them for down.
		return nil
	}
	note("finish moves", s.finishMoves(ctx))
	note("retire", s.retireRound(ctx))
	note("repair bad chunks", s.repairBad(ctx))
	note("auto repair", s.autoRepair())
	note("count degraded extents", s.countDegraded(false))
	for _, kind := range []string{JobRepair, JobDrain, JobRebalance} {
		if ctx.Err() != nil {
			break
		}
		job, err := s.loadJob(kind)
		if err != nil {
			note(kind, err)
			continue
		}
		if job.State == JobRunning {
			note(kind, s.runPass(ctx, job))
		}
	}
	note("scrub", s.scrubRound(ctx))
	return errors.Join(all...)
}

// Jobs.

func (s *Server) loadJob(kind string) (*mdspb.AdminJob, error) {
	j := &mdspb.AdminJob{}
	err := getProto(s.db, jobKey(kind), j)
	if errors.Is(err, errs.ErrNotFound) {
		return &mdspb.AdminJob{Kind: kind, State: JobIdle}, nil
	}
	return j, err
}

// saveJob writes a job in t.
func (t *txn) saveJob(j *mdspb.AdminJob) error {
	j.UpdatedNs = t.now
	v, err := proto.Marshal(j)
	if err != nil {
		return err
	}
	return t.b.Set(jobKey(j.Kind), v, nil)
}

// updateJob applies fn to the stored job of kind, in one transaction. A
// job stopped meanwhile stays stopped (fn sees its state).
func (s *Server) updateJob(kind string, fn func(j *mdspb.AdminJob)) (*mdspb.AdminJob, error) {
	var out *mdspb.AdminJob
	err := s.update(func(t *txn) error {
		j := &mdspb.AdminJob{}
		err := getProto(t.b, jobKey(kind), j)
		if errors.Is(err, errs.ErrNotFound) {
			j = &mdspb.AdminJob{Kind: kind, State: JobIdle}
		} else if err != nil {
			return err
		}
		fn(j)
		out = j
		return t.saveJob(j)
	})
	return out, err
}

// View of the cluster for the planners.

// ostView is what a pass needs to know about the OSTs.
type ostView struct {
	infos map[uint32]*mdspb.OstInfo
	up    map[uint32]bool // heartbeating (whatever the admin state)
	dest  map[uint32]bool // may receive chunks: up and active
	state map[uint32]uint32
}

func (s *Server) ostView() ostView {
	v := ostView{infos: map[uint32]*mdspb.OstInfo{}, up: map[uint32]bool{}, dest: map[uint32]bool{}, state: s.ostAdmin()}
	for _, o := range s.listOsts() {
		v.infos[o.Id] = o
		v.up[o.Id] = o.Up
		v.dest[o.Id] = o.State == StateUp
	}
	return v
}

// committedExtents reads every committed extent ("r" keys).
func (s *Server) committedExtents() (map[uint64]*mdspb.Extent, []planExtent, error) {
	exts := make(map[uint64]*mdspb.Extent)
	var plan []planExtent
	err := scan(s.db, []byte{prefixRef}, func(k, v []byte) (bool, error) {
		e, err := decodeExtentValue(k, v)
		if err != nil {
			return false, err
		}
		exts[e.Id] = e
		plan = append(plan, planExtent{id: e.Id, m: int(e.GetLayout().GetM()), chunk: chunkLen(e), osts: e.Osts})
		return true, nil
	})
	return exts, plan, err
}

// chunkLen is the length of every chunk of e.
func chunkLen(e *mdspb.Extent) uint64 {
	l := layoutOfExtent(e)
	if l.K == 0 {
		return 0
	}
	return uint64(l.Geom(int64(e.GetLength())).ChunkLen())
}

func layoutOfExtent(e *mdspb.Extent) layout.Layout {
	l := e.GetLayout()
	return layout.Layout{K: int(l.GetK()), M: int(l.GetM()), Unit: int64(l.GetUnit())}
}

// Passes.

// runPass plans and runs one pass of a repair, drain or rebalance job.
func (s *Server) runPass(ctx context.Context, job *mdspb.AdminJob) error {
	kind := job.Kind
	if job.Passes == 0 {
		s.admin.stalled[kind] = 0
	}
	ov := s.ostView()
	exts, view, err := s.committedExtents()
	if err != nil {
		return err
	}
	pv := planView{extents: view, load: loadOf(view), dest: ov.dest}
	var moves []chunkMove
	var lost uint64
	stuck := 0
	unreadable := s.unreadable(ov, job)
	switch kind {
	case JobRepair:
		lostSet := s.lostSet(ov, job)
		for id := range lostSet {
			delete(pv.dest, id)
		}
		ev := planEvacuate(pv, lostSet, unreadable)
		moves, lost, stuck = ev.moves, uint64(len(ev.lost)), ev.stuck
	case JobDrain:
		drain := map[uint32]bool{}
		for id, st := range ov.state {
			if st == ostDraining {
				drain[id] = true
			}
		}
		ev := planEvacuate(pv, drain, unreadable)
		moves, lost, stuck = ev.moves, uint64(len(ev.lost)), ev.stuck
		if len(moves) == 0 && stuck == 0 && len(ev.lost) == 0 {
			// Done only when no pending allocation still targets a
			// draining OST (it may yet be committed).
			for id := range drain {
				if n, err := s.pendingOn(id); err != nil {
					return err
				} else if n > 0 {
					stuck += n
				}
			}
		}
	case JobRebalance:
		var down []uint32
		for id, st := range ov.state {
			if st == ostActive && !ov.up[id] {
				down = append(down, id)
			}
		}
		if len(down) > 0 {
			// A plan without them would be wrong once they are back:
			// wait (repair or remove a dead OST first).
			slices.Sort(down)
			_, err := s.updateJob(kind, func(j *mdspb.AdminJob) {
				j.Error = fmt.Sprintf("waiting: OSTs %v are down (repair or remove them)", down)
			})
			return err
		}
		thr := job.GetParams().GetThresholdPct()
		if thr <= 0 {
			thr = 5
		}
		moves = planRebalance(pv, thr).moves
	}
	var bytesPlanned uint64
	for _, m := range moves {
		bytesPlanned += m.bytes
	}
	job, err = s.updateJob(kind, func(j *mdspb.AdminJob) {
		j.PlannedChunks, j.PlannedBytes, j.LostExtents = uint64(len(moves)), bytesPlanned, lost
		if strings.HasPrefix(j.Error, "waiting") {
			j.Error = ""
		}
		if len(moves) == 0 && stuck > 0 {
			j.Error = fmt.Sprintf("%d chunks wait: no OST to move them to, or allocations not yet committed", stuck)
		}
		if len(moves) == 0 && stuck == 0 && j.State == JobRunning {
			j.State, j.FinishedNs = JobDone, s.now()
			if lost > 0 {
				j.State = JobFailed
				j.Error = fmt.Sprintf("%d extents have more than m chunks unreadable and cannot be rebuilt", lost)
			}
		}
	})
	if err != nil || job.State != JobRunning {
		if err == nil {
			s.log.Info("admin job finished", "job", kind, "state", job.State, "chunks", job.DoneChunks, "bytes", job.DoneBytes)
		}
		return err
	}
	if len(moves) == 0 {
		// Waiting (pending allocations, or no destination yet).
		return nil
	}
	s.log.Info("admin pass", "job", kind, "moves", len(moves), "bytes", bytesPlanned)
	keys, err := s.mapKeysOf(moves)
	if err != nil {
		return err
	}
	groups := groupMoves(moves)
	bw := job.GetParams().GetMaxBandwidth()
	if bw == 0 && kind == JobRebalance {
		bw = s.o.Admin.RebalanceBandwidth
	}
	p := newRate(bw)
	progress := false
	for i := 0; i < len(groups); i += s.o.Admin.BatchExtents {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if cur, err := s.loadJob(kind); err != nil {
			return err
		} else if cur.State != JobRunning {
			return nil // stopped
		}
		batch := groups[i:min(i+s.o.Admin.BatchExtents, len(groups))]
		// Copy the batch's extents, Concurrency at a time; results
		// keep the batch's order.
		results := make([]movedExtent, len(batch))
		copyErrs := make([]error, len(batch))
		sem := make(chan struct{}, s.o.Admin.Concurrency)
		var wg sync.WaitGroup
		for gi, g := range batch {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				me, err := s.copyChunks(ctx, kind, exts[g[0].extent], g, unreadable)
				results[gi], copyErrs[gi] = me, err
				if err == nil {
					p.wait(ctx, me.bytes)
				}
			})
		}
		wg.Wait()
		var ready []movedExtent
		var failed uint64
		var lastErr error
		for gi, g := range batch {
			if err := copyErrs[gi]; err != nil {
				failed += uint64(len(g))
				lastErr = err
				s.log.Warn("admin: move failed", "job", kind, "extent", g[0].extent, "err", err)
				continue
			}
			ready = append(ready, results[gi])
		}
		s.admin.met.moveFailed(kind, failed)
		n, b, err := s.switchPlacements(ready, keys)
		if err != nil {
			return err
		}
		s.admin.met.moved(kind, n, b)
		if n > 0 {
			progress = true
		}
		_, err = s.updateJob(kind, func(j *mdspb.AdminJob) {
			j.DoneChunks += n
			j.DoneBytes += b
			j.FailedChunks += failed
			if lastErr != nil {
				j.Error = lastErr.Error()
			}
		})
		if err != nil {
			return err
		}
	}
	w := &s.admin
	if progress {
		w.stalled[kind] = 0
	} else {
		w.stalled[kind]++
	}
	_, err = s.updateJob(kind, func(j *mdspb.AdminJob) {
		j.Passes++
		if w.stalled[kind] >= s.o.Admin.MaxPasses && j.State == JobRunning {
			j.State, j.FinishedNs = JobFailed, s.now()
			if j.Error == "" {
				j.Error = "no progress"
			}
		}
	})
	return err
}

// lostSet is the OSTs a repair job treats as gone: those it names, the
// removed ones and those down longer than RepairAfter.
func (s *Server) lostSet(ov ostView, job *mdspb.AdminJob) map[uint32]bool {
	lost := map[uint32]bool{}
	for _, id := range job.GetParams().GetOsts() {
		if !ov.up[id] || ov.state[id] == ostRemoved {
			lost[id] = true
		}
	}
	for id, st := range ov.state {
		if st == ostRemoved {
			lost[id] = true
		}
	}
	if after := s.o.Admin.RepairAfter; after > 0 {
		now := s.o.Now()
		for id, since := range s.admin.downSince {
			if now.Sub(since) >= after {
				lost[id] = true
			}
		}
	}
	return lost
}

// unreadable is the OSTs that cannot serve chunks: down or removed.
func (s *Server) unreadable(ov ostView, job *mdspb.AdminJob) map[uint32]bool {
	out := map[uint32]bool{}
	for id := range ov.infos {
		if !ov.up[id] {
			out[id] = true
		}
	}
	return out
}

// pendingOn counts pending allocations with a chunk on OST id.
func (s *Server) pendingOn(id uint32) (int, error) {
	n := 0
	err := scan(s.db, []byte{prefixPending}, func(k, v []byte) (bool, error) {
		e, err := decodeExtentValue(k, v)
		if err != nil {
			return false, err
		}
		if contains(e.GetOsts(), id) {
			n++
		}
		return true, nil
	})
	return n, err
}

// mapKeysOf finds the extent-map entries naming the moved extents, with
// one scan of the "m" keys.
func (s *Server) mapKeysOf(moves []chunkMove) (map[uint64][][]byte, error) {
	want := make(map[uint64]bool, len(moves))
	for _, m := range moves {
		want[m.extent] = true
	}
	out := make(map[uint64][][]byte)
	err := scan(s.db, []byte{prefixMap}, func(k, v []byte) (bool, error) {
		r, err := readRef(k, v)
		if err != nil {
			return false, err
		}
		if id := r.GetExtent().GetId(); want[id] {
			out[id] = append(out[id], append([]byte(nil), k...))
		}
		return true, nil
	})
	return out, err
}

// movedExtent is an extent whose moved chunks are written and verified on
// their destinations, ready to switch.
type movedExtent struct {
	old   *mdspb.Extent
	moves []chunkMove
	bytes uint64
}

// copyChunks does steps 1 to 3 of a move for the chunks of one extent:
// intent records, then each chunk read (or rebuilt) and written to its
// destination, read back and compared.
func (s *Server) copyChunks(ctx context.Context, kind string, e *mdspb.Extent, moves []chunkMove, unreadable map[uint32]bool) (movedExtent, error) {
	now := s.now()
	err := s.update(func(t *txn) error {
		for _, m := range moves {
			v, err := proto.Marshal(&mdspb.MoveRecord{Extent: m.extent, Index: m.index, From: m.from, To: m.to, Kind: kind, StartedNs: now})
			if err != nil {
				return err
			}
			if err := t.b.Set(moveKey(m.extent, m.index), v, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return movedExtent{}, err
	}
	data := make(map[uint32][]byte, len(moves))
	var rebuild []int
	for _, m := range moves {
		if !unreadable[m.from] {
			b, err := s.readWholeChunk(ctx, e, int(m.index))
			if err == nil {
				data[m.index] = b
				continue
			}
			s.log.Info("admin: source chunk unreadable; rebuilding it", "extent", e.Id, "chunk", m.index, "ost", m.from, "err", err)
		}
		rebuild = append(rebuild, int(m.index))
	}
	if len(rebuild) > 0 {
		avoid := map[uint32]bool{}
		for id := range unreadable {
			avoid[id] = true
		}
		got, err := s.rebuildChunks(ctx, e, rebuild, avoid)
		if err != nil {
			return movedExtent{}, err
		}
		s.admin.met.rebuilt.Add(float64(len(rebuild)))
		for j, b := range got {
			data[uint32(j)] = b
		}
	}
	out := movedExtent{old: e, moves: moves}
	for _, m := range moves {
		b := data[m.index]
		if err := s.writeVerified(ctx, m.to, e.Id, m.index, b); err != nil {
			return movedExtent{}, err
		}
		out.bytes += uint64(len(b))
	}
	return out, nil
}

// switchPlacements does step 4 for the extents of one batch, in one
// transaction. An extent whose placement or map entries changed since the
// plan is skipped: its MoveRecords stay, and finishMoves undoes them. It
// returns the chunks and bytes switched.
func (s *Server) switchPlacements(ready []movedExtent, keys map[uint64][][]byte) (chunks, nbytes uint64, err error) {
	if len(ready) == 0 {
		return 0, 0, nil
	}
	err = s.update(func(t *txn) error {
		chunks, nbytes = 0, 0
		for _, me := range ready {
			ok, err := t.switchPlacement(me, keys[me.old.Id], s.o.Admin.RetireGrace)
			if err != nil {
				return err
			}
			if !ok {
				s.log.Info("admin: extent changed during its move; retried later", "extent", me.old.Id)
				continue
			}
			chunks += uint64(len(me.moves))
			nbytes += me.bytes
		}
		return nil
	})
	return chunks, nbytes, err
}

// switchPlacement switches one extent in t; false if it changed.
func (t *txn) switchPlacement(me movedExtent, keys [][]byte, grace time.Duration) (bool, error) {
	id := me.old.Id
	v, err := getValue(t.b, refKey(id))
	if errors.Is(err, errs.ErrNotFound) {
		return false, nil // no longer referenced: GC has it
	}
	if err != nil {
		return false, err
	}
	count, body, err := decodePrefixed(v)
	if err != nil {
		return false, err
	}
	cur := &mdspb.Extent{}
	if err := proto.Unmarshal(body, cur); err != nil {
		return false, fmt.Errorf("mds: decode extent %d: %v: %w", id, err, errs.ErrCorrupt)
	}
	if !slices.Equal(cur.Osts, me.old.Osts) {
		return false, nil
	}
	newOsts := slices.Clone(cur.Osts)
	for _, m := range me.moves {
		newOsts[m.index] = m.to
	}
	seen := map[uint32]bool{}
	for _, o := range newOsts {
		if seen[o] {
			return false, fmt.Errorf("mds: move of extent %d would put two chunks on OST %d: %w", id, o, errs.ErrInvalid)
		}
		seen[o] = true
	}
	// Every map entry naming the extent must be among keys.
	type hit struct {
		key []byte
		ref *mdspb.ExtentRef
	}
	var hits []hit
	for _, k := range keys {
		v, err := getValue(t.b, k)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		r, err := readRef(k, v)
		if err != nil {
			return false, err
		}
		if r.Extent.GetId() != id {
			continue
		}
		hits = append(hits, hit{k, r})
	}
	if uint64(len(hits)) != count {
		return false, nil
	}
	cur.Osts = newOsts
	for _, h := range hits {
		h.ref.Extent = cur
		v, err := proto.Marshal(h.ref)
		if err != nil {
			return false, err
		}
		if err := t.b.Set(h.key, v, nil); err != nil {
			return false, err
		}
	}
	nv, err := proto.Marshal(cur)
	if err != nil {
		return false, err
	}
	if err := t.b.Set(refKey(id), encodePrefixed(count, nv), nil); err != nil {
		return false, err
	}
	for _, m := range me.moves {
		if err := t.b.Delete(moveKey(id, m.index), nil); err != nil {
			return false, err
		}
		if err := t.b.Set(retireKey(t.now+int64(grace), id, m.index), u32(nil, m.from), nil); err != nil {
			return false, err
		}
	}
	return true, nil
}

// finishMoves settles MoveRecords left by an interrupted or refused move:
// switched ones are dropped; the others have their destination copy
// deleted first (it is referenced by nothing).
func (s *Server) finishMoves(ctx context.Context) error {
	type rec struct {
		key []byte
		m   *mdspb.MoveRecord
	}
	var recs []rec
	err := scan(s.db, []byte{prefixMove}, func(k, v []byte) (bool, error) {
		m := &mdspb.MoveRecord{}
		if err := proto.Unmarshal(v, m); err != nil {
			return false, fmt.Errorf("mds: decode move %x: %v: %w", k, err, errs.ErrCorrupt)
		}
		recs = append(recs, rec{append([]byte(nil), k...), m})
		return true, nil
	})
	if err != nil || len(recs) == 0 {
		return err
	}
	ov := s.ostView()
	var firstErr error
	for _, r := range recs {
		e, err := s.extentOf(r.m.Extent)
		if err != nil {
			return err
		}
		live := e != nil && int(r.m.Index) < len(e.Osts) && e.Osts[r.m.Index] == r.m.To
		if !live {
			info, known := ov.infos[r.m.To]
			switch {
			case !known || (ov.state[r.m.To] == ostRemoved && !ov.up[r.m.To]):
			case !ov.up[r.m.To]:
				continue // later, when it is back
			default:
				err := s.ostDelete(ctx, info, []*ostpb.ChunkId{{Extent: r.m.Extent, Index: r.m.Index}})
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
			}
		}
		if err := s.update(func(t *txn) error { return t.b.Delete(r.key, nil) }); err != nil {
			return err
		}
	}
	return firstErr
}

// extentOf returns committed extent id, or nil when it is not committed.
func (s *Server) extentOf(id uint64) (*mdspb.Extent, error) {
	v, err := getValue(s.db, refKey(id))
	if errors.Is(err, errs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeExtentValue(refKey(id), v)
}

// retireRound deletes the old copies of moved chunks whose grace is over.
func (s *Server) retireRound(ctx context.Context) error {
	type entry struct {
		key    []byte
		extent uint64
		index  uint32
		ost    uint32
	}
	var due []entry
	err := scanRange(s.db, []byte{prefixRetire}, retireKey(s.now()+1, 0, 0), func(k, v []byte) (bool, error) {
		_, ext, idx, err := decodeRetireKey(k)
		if err != nil {
			return false, err
		}
		if len(v) != 4 {
			return false, fmt.Errorf("mds: bad retire value %x: %w", v, errs.ErrCorrupt)
		}
		due = append(due, entry{append([]byte(nil), k...), ext, idx, uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])})
		return len(due) < gcBatch, nil
	})
	if err != nil || len(due) == 0 {
		return err
	}
	ov := s.ostView()
	byOst := map[uint32][]entry{}
	var drop [][]byte
	for _, d := range due {
		e, err := s.extentOf(d.extent)
		if err != nil {
			return err
		}
		if e != nil && int(d.index) < len(e.Osts) && e.Osts[d.index] == d.ost {
			drop = append(drop, d.key) // moved back there since: live again
			continue
		}
		if _, known := ov.infos[d.ost]; !known || (ov.state[d.ost] == ostRemoved && !ov.up[d.ost]) {
			drop = append(drop, d.key) // gone for good with its chunks
			continue
		}
		if ov.up[d.ost] {
			byOst[d.ost] = append(byOst[d.ost], d)
		}
	}
	var firstErr error
	for id, ents := range byOst {
		ids := make([]*ostpb.ChunkId, len(ents))
		for i, d := range ents {
			ids[i] = &ostpb.ChunkId{Extent: d.extent, Index: d.index}
		}
		if err := s.ostDelete(ctx, ov.infos[id], ids); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		for _, d := range ents {
			drop = append(drop, d.key)
		}
	}
	if len(drop) > 0 {
		err := s.update(func(t *txn) error {
			for _, k := range drop {
				if err := t.b.Delete(k, nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return firstErr
}

// autoRepair tracks how long each OST has been down and starts a repair
// job for those down longer than RepairAfter that still hold chunks.
func (s *Server) autoRepair() error {
	ov := s.ostView()
	w := &s.admin
	now := s.o.Now()
	for id := range ov.infos {
		if ov.up[id] || ov.state[id] == ostRemoved {
			delete(w.downSince, id)
			continue
		}
		if _, ok := w.downSince[id]; !ok {
			since := now
			if hb := ov.infos[id].LastHeartbeatNs; hb > 0 {
				since = time.Unix(0, hb)
			}
			w.downSince[id] = since
		}
	}
	after := s.o.Admin.RepairAfter
	if after < 0 {
		return nil
	}
	var due []uint32
	for id, since := range w.downSince {
		if now.Sub(since) >= after {
			due = append(due, id)
		}
	}
	if len(due) == 0 {
		return nil
	}
	job, err := s.loadJob(JobRepair)
	if err != nil || job.State == JobRunning || job.State == JobStopped {
		return err
	}
	// Only when some extent still has a chunk there.
	var need []uint32
	for _, id := range due {
		n, err := s.extentsOn(id)
		if err != nil {
			return err
		}
		if n > 0 {
			need = append(need, id)
		}
	}
	if len(need) == 0 {
		return nil
	}
	s.log.Warn("OSTs down longer than the repair delay; rebuilding their chunks", "osts", need, "after", after)
	_, err = s.startJob(&mdspb.StartJobRequest{Kind: JobRepair, Osts: need})
	return err
}

// repairBad rebuilds chunks reported bad (scrub, fsck) in place: the bad
// copy is deleted and the rebuilt one written to the same OST (which holds
// no other chunk of the extent), then read back. Reports naming a chunk
// that is no longer where they say are dropped.
func (s *Server) repairBad(ctx context.Context) error {
	type entry struct {
		key []byte
		b   *mdspb.BadChunk
	}
	var ents []entry
	err := scan(s.db, []byte{prefixBad}, func(k, v []byte) (bool, error) {
		b := &mdspb.BadChunk{}
		if err := proto.Unmarshal(v, b); err != nil {
			return false, fmt.Errorf("mds: decode bad chunk %x: %v: %w", k, err, errs.ErrCorrupt)
		}
		ents = append(ents, entry{append([]byte(nil), k...), b})
		return len(ents) < 256, nil
	})
	if err != nil || len(ents) == 0 {
		return err
	}
	ov := s.ostView()
	now := s.o.Now()
	var firstErr error
	for _, en := range ents {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b := en.b
		rk := string(en.key)
		if t, ok := s.admin.badRetry[rk]; ok && now.Before(t) {
			continue
		}
		e, err := s.extentOf(b.Extent)
		if err != nil {
			return err
		}
		drop := e == nil || int(b.Index) >= len(e.Osts) || e.Osts[b.Index] != b.Ost || ov.state[b.Ost] != ostActive
		if drop {
			s.admin.met.badDismissed.Inc()
		} else {
			if !ov.up[b.Ost] {
				continue // the OST is down: later, or repair moves it
			}
			if b.FromClient {
				// A client's report: the OST checks the chunk's
				// checksums again; a chunk that reads back whole was a
				// passing fault (or a wrong report) and is kept.
				if _, err := s.readWholeChunk(ctx, e, int(b.Index)); err == nil {
					s.log.Info("admin: chunk reported by a client reads back whole; kept", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost)
					s.admin.met.badDismissed.Inc()
					delete(s.admin.badRetry, rk)
					if err := s.update(func(t *txn) error { return t.b.Delete(en.key, nil) }); err != nil {
						return err
					}
					continue
				} else if !errors.Is(err, errs.ErrCorrupt) && !errors.Is(err, errs.ErrNotFound) {
					// Cannot tell now (the OST is busy or unreachable):
					// later.
					s.admin.badRetry[rk] = now.Add(10 * s.o.Admin.Interval)
					continue
				}
			}
			if err := s.rebuildInPlace(ctx, e, int(b.Index), ov); err != nil {
				s.log.Warn("admin: rebuild of bad chunk failed", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost, "err", err)
				s.admin.badRetry[rk] = now.Add(10 * s.o.Admin.Interval)
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			s.log.Info("admin: bad chunk rebuilt", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost)
			s.admin.met.badRepaired.Inc()
		}
		delete(s.admin.badRetry, rk)
		if err := s.update(func(t *txn) error { return t.b.Delete(en.key, nil) }); err != nil {
			return err
		}
	}
	return firstErr
}

// rebuildInPlace rebuilds chunk j of e from the others and rewrites it on
// its own OST.
func (s *Server) rebuildInPlace(ctx context.Context, e *mdspb.Extent, j int, ov ostView) error {
	avoid := map[uint32]bool{e.Osts[j]: true}
	for id := range ov.infos {
		if !ov.up[id] {
			avoid[id] = true
		}
	}
	got, err := s.rebuildChunks(ctx, e, []int{j}, avoid)
	if err != nil {
		return err
	}
	s.admin.met.rebuilt.Add(1)
	info := ov.infos[e.Osts[j]]
	// The extent must still be placed so (this goroutine is the only one
	// that changes placements, so it stays so until the write is done).
	if err := s.ostDelete(ctx, info, []*ostpb.ChunkId{{Extent: e.Id, Index: uint32(j)}}); err != nil {
		return err
	}
	return s.writeVerified(ctx, e.Osts[j], e.Id, uint32(j), got[j])
}

// Chunk I/O of the worker.

// adminOst returns a client of OST id.
func (s *Server) adminOst(id uint32) (ostpb.OstClient, error) {
	var info *mdspb.OstInfo
	for _, o := range s.listOsts() {
		if o.Id == id {
			info = o
		}
	}
	if info == nil {
		return nil, fmt.Errorf("OST %d: %w", id, errs.ErrNotFound)
	}
	w := &s.admin
	w.connMu.Lock()
	defer w.connMu.Unlock()
	c, ok := w.conns[id]
	if ok && c.addr != info.Addr {
		c.cc.Close()
		delete(w.conns, id)
		ok = false
	}
	if !ok {
		cc, err := s.dialOST(info.Addr)
		if err != nil {
			return nil, fmt.Errorf("dial OST %d at %s: %w", id, info.Addr, err)
		}
		c = &ostConn{addr: info.Addr, cc: cc, c: ostpb.NewOstClient(cc)}
		w.conns[id] = c
	}
	return c.c, nil
}

func (s *Server) ostDelete(ctx context.Context, info *mdspb.OstInfo, ids []*ostpb.ChunkId) error {
	c, err := s.adminOst(info.Id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Admin.CallTimeout)
	defer cancel()
	_, err = c.DeleteChunks(ctx, &ostpb.DeleteChunksRequest{Ids: ids})
	if err != nil {
		return fmt.Errorf("delete %d chunks on OST %d: %w", len(ids), info.Id, err)
	}
	return nil
}

// readWholeChunk reads chunk j of e from its OST (checksums verified there).
func (s *Server) readWholeChunk(ctx context.Context, e *mdspb.Extent, j int) ([]byte, error) {
	return s.readChunkFrom(ctx, e.Osts[j], e.Id, uint32(j), chunkLen(e))
}

func (s *Server) readChunkFrom(ctx context.Context, ost uint32, extent uint64, index uint32, n uint64) ([]byte, error) {
	c, err := s.adminOst(ost)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Admin.CallTimeout)
	defer cancel()
	r, err := c.ReadChunk(ctx, &ostpb.ReadChunkRequest{Id: &ostpb.ChunkId{Extent: extent, Index: index}, Offset: 0, Length: n})
	if err != nil {
		return nil, fmt.Errorf("read chunk %d.%d on OST %d: %w", extent, index, ost, err)
	}
	if uint64(len(r.GetData())) != n {
		return nil, fmt.Errorf("read chunk %d.%d on OST %d: %d bytes, want %d: %w", extent, index, ost, len(r.GetData()), n, errs.ErrCorrupt)
	}
	return r.GetData(), nil
}

// writeVerified writes a chunk to an OST (which fsyncs it before it
// answers), reads it back and compares.
func (s *Server) writeVerified(ctx context.Context, ost uint32, extent uint64, index uint32, data []byte) error {
	c, err := s.adminOst(ost)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, s.o.Admin.CallTimeout)
	_, err = c.WriteChunk(wctx, &ostpb.WriteChunkRequest{Id: &ostpb.ChunkId{Extent: extent, Index: index}, Data: data})
	cancel()
	if err != nil {
		return fmt.Errorf("write chunk %d.%d to OST %d: %w", extent, index, ost, err)
	}
	back, err := s.readChunkFrom(ctx, ost, extent, index, uint64(len(data)))
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if !bytes.Equal(back, data) {
		return fmt.Errorf("verify chunk %d.%d on OST %d: read back differs: %w", extent, index, ost, errs.ErrCorrupt)
	}
	return nil
}

// rebuildChunks reconstructs chunks want of e from other chunks, reading
// none on an OST in avoid nor any chunk in want. It reads k chunks (data
// chunks first) and more when some fail.
func (s *Server) rebuildChunks(ctx context.Context, e *mdspb.Extent, want []int, avoid map[uint32]bool) (map[int][]byte, error) {
	lo := layoutOfExtent(e)
	coder, err := erasure.New(lo)
	if err != nil {
		return nil, err
	}
	n := chunkLen(e)
	chunks := make([][]byte, lo.Shards())
	have := 0
	var errsRead []error
	for j := 0; j < lo.Shards() && have < lo.K; j++ {
		if slices.Contains(want, j) || avoid[e.Osts[j]] {
			continue
		}
		b, err := s.readChunkFrom(ctx, e.Osts[j], e.Id, uint32(j), n)
		if err != nil {
			errsRead = append(errsRead, err)
			continue
		}
		chunks[j] = b
		have++
	}
	if have < lo.K {
		return nil, fmt.Errorf("extent %d: %d chunks readable, need %d: %w (%w)", e.Id, have, lo.K, errs.ErrUnavailable, errors.Join(errsRead...))
	}
	g := lo.Geom(int64(e.GetLength()))
	out := make(map[int][]byte, len(want))
	for _, j := range want {
		out[j] = make([]byte, n)
	}
	cells := make([][]byte, lo.Shards())
	for r := int64(0); r < g.Rows(); r++ {
		row := g.Row(r)
		for j := range cells {
			cells[j] = nil
			if chunks[j] != nil {
				cells[j] = chunks[j][row.ChunkOff : row.ChunkOff+row.Cell]
			}
		}
		if err := coder.ReconstructData(cells); err != nil {
			return nil, fmt.Errorf("extent %d row %d: %w", e.Id, r, err)
		}
		// Parity: encode afresh into new cells (the read ones are kept
		// as they are).
		par := make([][]byte, lo.Shards())
		copy(par, cells[:lo.K])
		for j := lo.K; j < lo.Shards(); j++ {
			par[j] = make([]byte, row.Cell)
		}
		if err := coder.Encode(par); err != nil {
			return nil, err
		}
		for _, j := range want {
			copy(out[j][row.ChunkOff:row.ChunkOff+row.Cell], par[j])
		}
	}
	return out, nil
}

// rate spreads the worker's writes to a bandwidth (0: unlimited). Its
// wait is safe for concurrent use.
type rate struct {
	bps   uint64
	start time.Time
	mu    struct {
		sync.Mutex
		bytes uint64 // accounted so far
	}
}

func newRate(bps uint64) *rate { return &rate{bps: bps, start: time.Now()} }

func (r *rate) wait(ctx context.Context, n uint64) {
	if r.bps == 0 {
		return
	}
	r.mu.Lock()
	r.mu.bytes += n
	total := r.mu.bytes
	r.mu.Unlock()
	due := r.start.Add(time.Duration(float64(total) / float64(r.bps) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}
