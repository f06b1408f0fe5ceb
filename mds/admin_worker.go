package mds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// The worker's view of the rest of the MDS: narrow interfaces, each
// implemented by *Server with small adapter methods (admin_store.go), and
// the shared OST connection pool behind a chunkMover (admin_chunkio.go).

// extentStore is the namespace as the background workers see it: the
// committed extents, the extent-map entries naming them, and the one
// transaction that switches placements.
type extentStore interface {
	// eachExtent calls fn for every committed extent, in id order,
	// until fn returns false or an error.
	eachExtent(fn func(e *mdspb.Extent) (bool, error)) error
	// extentOf returns committed extent id, or nil when it is not
	// committed.
	extentOf(id uint64) (*mdspb.Extent, error)
	// mapKeysOf finds the extent-map entries naming the extents ids,
	// with one scan of the map.
	mapKeysOf(ids map[uint64]bool) (map[uint64][][]byte, error)
	// pendingOn counts the pending allocations with a chunk on OST id;
	// extentsOn the committed and pending extents.
	pendingOn(id uint32) (int, error)
	extentsOn(id uint32) (int, error)
	// switchPlacements makes each switch whose extent is still placed as
	// planned, in one committed transaction, and reports which it made
	// (step 4 of a move).
	switchPlacements(sw []placementSwitch) ([]bool, error)
}

// recordStore holds the worker's own records (admin_keys.go, narrow.go:
// moves, old copies to retire, bad chunks, narrow extents).
type recordStore interface {
	// scanRecords calls fn for the records in [lower, upper), in order,
	// until fn returns false or an error.
	scanRecords(lower, upper []byte, fn func(k, v []byte) (bool, error)) error
	// writeRecords sets and deletes records in one committed
	// transaction.
	writeRecords(set []record, del [][]byte) error
}

// record is one key and value of a recordStore or placementSwitch.
type record struct{ key, value []byte }

// jobStore holds the administration jobs, one per kind ("J" keys).
type jobStore interface {
	// loadJob returns the job of kind (idle if it never ran).
	loadJob(kind string) (*mdspb.AdminJob, error)
	// updateJob applies fn to the job of kind in one committed
	// transaction and returns it as written.
	updateJob(kind string, fn func(j *mdspb.AdminJob)) (*mdspb.AdminJob, error)
}

// ostDirectory is the OST table as the workers see it.
type ostDirectory interface {
	ostView() ostView
}

// leadership says whether this MDS runs the background loops (always for
// a single MDS; the serving leader of a group), and when not, why (a
// committer, commit.go).
type leadership interface {
	leading() bool
	check() error
}

// placementSwitch is one extent's change of placement: chunk j goes to
// OST to[j]. It is made only when the extent is still placed as old is
// and every extent-map entry naming it is among keys; set and del are
// records written and deleted in the same transaction. what names the
// change in errors.
type placementSwitch struct {
	old  *mdspb.Extent
	keys [][]byte
	to   map[int]uint32
	what string
	set  []record
	del  [][]byte
}

// adminConfig is what newAdminWorker needs.
type adminConfig struct {
	Options   AdminOptions
	Heartbeat time.Duration // Options.HeartbeatTimeout: jobs wait this long after Open
	FullRatio float64       // PlacementOptions.FullRatio: widening leaves OSTs this full alone
	Now       func() time.Time
	Log       *slog.Logger
	Metrics   *adminMetrics
	Narrow    narrowMetrics

	Extents extentStore
	Records recordStore
	Jobs    jobStore
	Osts    ostDirectory
	Chunks  chunkMover
	Lead    leadership
}

// adminWorker is the worker. Its state is owned by its goroutine (loop),
// but for kick, met and mu (the copies of one batch run on goroutines of
// their own, which touch only met and the chunkMover).
type adminWorker struct {
	o         AdminOptions
	heartbeat time.Duration
	fullRatio float64
	clock     func() time.Time
	log       *slog.Logger
	extents   extentStore
	records   recordStore
	jobs      jobStore
	osts      ostDirectory
	chunks    chunkMover
	lead      leadership

	kick   chan struct{} // buffered(1): run a round now
	met    *adminMetrics // admin_metrics.go
	narrow narrowMetrics // narrow.go

	started   time.Time            // jobs wait a heartbeat timeout after Open, until OSTs reported
	downSince map[uint32]time.Time // when the worker first saw an OST down
	badRetry  map[string]badRetry  // bad chunks whose repair failed or could not be checked: not before (admin_bad.go)
	stalled   map[string]int       // passes without progress, by job kind

	mu struct {
		sync.Mutex
		wake []chan struct{} // closed after the next full round (waitRound)
	}
}

func newAdminWorker(c adminConfig) *adminWorker {
	return &adminWorker{
		o: c.Options, heartbeat: c.Heartbeat, fullRatio: c.FullRatio, clock: c.Now, log: c.Log,
		extents: c.Extents, records: c.Records, jobs: c.Jobs, osts: c.Osts, chunks: c.Chunks, lead: c.Lead,
		kick: make(chan struct{}, 1), met: c.Metrics, narrow: c.Narrow,
		started:   c.Now(),
		downSince: make(map[uint32]time.Time),
		badRetry:  make(map[string]badRetry),
		stalled:   make(map[string]int),
	}
}

// scanKind calls fn for every record with prefix p (admin_keys.go).
func (w *adminWorker) scanKind(p byte, fn func(k, v []byte) (bool, error)) error {
	return w.records.scanRecords([]byte{p}, prefixEnd([]byte{p}), fn)
}

// now is the worker's clock in ns, as transactions date records.
func (w *adminWorker) now() int64 { return w.clock().UnixNano() }

// kickRound asks for a worker round now.
func (w *adminWorker) kickRound() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// waitRound kicks the worker and waits until a round that started after
// the call has finished (or ctx is done).
func (w *adminWorker) waitRound(ctx context.Context) error {
	ch := make(chan struct{})
	w.mu.Lock()
	w.mu.wake = append(w.mu.wake, ch)
	w.mu.Unlock()
	w.kickRound()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop runs rounds until ctx is done (Close stops the server's goroutine
// group).
func (w *adminWorker) loop(ctx context.Context) {
	tick := time.NewTicker(w.o.Interval)
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
		if !w.lead.leading() {
			// A follower plans nothing; its jobs run on the leader.
		} else if err := w.round(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("admin round failed", "err", err)
		}
		for _, ch := range wake {
			close(ch)
		}
	}
}

// round is one round of the worker.
func (w *adminWorker) round(ctx context.Context) error {
	var all []error
	note := func(what string, err error) {
		if err != nil && ctx.Err() == nil {
			all = append(all, fmt.Errorf("%s: %w", what, err))
		}
	}
	if w.clock().Sub(w.started) < w.heartbeat {
		// Just opened: OSTs that are up have not all heartbeated yet,
		// and a plan made now would take them for down.
		return nil
	}
	note("finish moves", w.finishMoves(ctx))
	note("retire", w.retireRound(ctx))
	note("repair bad chunks", w.repairBad(ctx))
	note("auto repair", w.autoRepair())
	note("widen narrow extents", w.widenRound(ctx)) // narrow.go
	note("count degraded extents", w.countDegraded(false))
	for _, kind := range []string{JobRepair, JobDrain, JobRebalance} {
		if ctx.Err() != nil {
			break
		}
		job, err := w.jobs.loadJob(kind)
		if err != nil {
			note(kind, err)
			continue
		}
		if job.State == JobRunning {
			note(kind, w.runPass(ctx, job))
		}
	}
	note("scrub", w.scrubRound(ctx)) // admin_scrub.go
	return errors.Join(all...)
}

// inParallel runs fn(i) for every i in [0, n), at most limit at once,
// and returns when all have (the copies of a batch).
func inParallel(n, limit int, fn func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}

// Jobs.

// startJob starts a job, or resumes a stopped one (keeping its progress;
// non-zero parameters of req replace the stored ones). A running job is
// returned as it is.
func (w *adminWorker) startJob(req *mdspb.StartJobRequest) (*mdspb.AdminJob, error) {
	if err := validJobKind(req.GetKind()); err != nil {
		return nil, err
	}
	if req.GetThresholdPct() < 0 || req.GetThresholdPct() > 100 {
		return nil, fmt.Errorf("threshold %v%% (0..100): %w", req.GetThresholdPct(), errs.ErrInvalid)
	}
	ov := w.osts.ostView()
	if req.GetKind() == JobRepair {
		if err := checkRepairOsts(ov, req.GetOsts()); err != nil {
			return nil, err
		}
	}
	params := proto.Clone(req).(*mdspb.StartJobRequest)
	if params.Kind == JobRepair && len(params.Osts) == 0 {
		// Every OST down now is lost for this repair.
		for _, id := range sortedIDs(mapKeys(ov.infos)) {
			if o := ov.infos[id]; !o.Up && o.State != StateRemoved {
				params.Osts = append(params.Osts, o.Id)
			}
		}
	}
	j, err := w.jobs.updateJob(req.GetKind(), func(j *mdspb.AdminJob) {
		switch j.State {
		case JobRunning:
			return
		case JobStopped:
			p := j.Params
			if p == nil {
				p = &mdspb.StartJobRequest{Kind: j.Kind}
			}
			if params.ThresholdPct != 0 {
				p.ThresholdPct = params.ThresholdPct
			}
			if params.MaxBandwidth != 0 {
				p.MaxBandwidth = params.MaxBandwidth
			}
			if len(params.Osts) > 0 {
				p.Osts = params.Osts
			}
			j.Params, j.State, j.Error = p, JobRunning, ""
			return
		}
		*j = mdspb.AdminJob{Kind: j.Kind, State: JobRunning, Params: params, StartedNs: w.now()}
	})
	if err != nil {
		return nil, err
	}
	w.log.Info("admin job started", "job", j.Kind, "state", j.State)
	w.kickRound()
	return j, nil
}

// checkRepairOsts checks the OSTs a repair names (--ost) before the job
// starts: each must be known and down or removed, since a repair rebuilds
// only the chunks of OSTs that cannot serve them (an OST that is up is
// drained instead). Before, `repair --ost 999` said done.
func checkRepairOsts(ov ostView, ids []uint32) error {
	for _, id := range ids {
		o, ok := ov.infos[id]
		switch {
		case !ok:
			return fmt.Errorf("repair: there is no OST %d (shoal admin osts lists them): %w", id, errs.ErrNotFound)
		case o.Up && o.State != StateRemoved:
			return fmt.Errorf("repair: OST %d is up (%s): repair rebuilds the chunks of down or removed OSTs; drain an OST that is up to move its chunks off: %w", id, o.State, errs.ErrInvalid)
		}
	}
	return nil
}

// View of the cluster for the planners.

// ostView is what a pass needs to know about the OSTs.
type ostView struct {
	infos map[uint32]*mdspb.OstInfo
	up    map[uint32]bool // heartbeating (whatever the admin state)
	dest  map[uint32]bool // may receive chunks: up and active
	state map[uint32]uint32
}

// committedExtents reads every committed extent.
func committedExtents(st extentStore) (map[uint64]*mdspb.Extent, []planExtent, error) {
	exts := make(map[uint64]*mdspb.Extent)
	var plan []planExtent
	err := st.eachExtent(func(e *mdspb.Extent) (bool, error) {
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
