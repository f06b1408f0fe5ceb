package mds

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/mds/mdspb"
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

// adminWorker is the worker's state. Everything but kick, met and mu is
// owned by the worker goroutine (the copies of one batch run on goroutines
// of their own, which touch only met and the server's OST pool).
type adminWorker struct {
	kick chan struct{} // buffered(1): run a round now
	met  *adminMetrics // set by newMetrics (admin_metrics.go)

	started   time.Time            // jobs wait a heartbeat timeout after Open, until OSTs reported
	downSince map[uint32]time.Time // when the worker first saw an OST down
	badRetry  map[string]badRetry  // bad chunks whose repair failed or could not be checked: not before (admin_bad.go)
	stalled   map[string]int       // passes without progress, by job kind

	mu struct {
		sync.Mutex
		wake []chan struct{} // closed after the next full round (waitRound)
	}
}

func (s *Server) startAdmin() {
	w := &s.admin
	w.kick = make(chan struct{}, 1)
	w.started = s.o.Now()
	w.downSince = make(map[uint32]time.Time)
	w.badRetry = make(map[string]badRetry)
	w.stalled = make(map[string]int)
	s.tasks.Go(s.adminLoop)
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
	note("widen narrow extents", s.widenRound(ctx)) // narrow.go
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
