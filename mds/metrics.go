package mds

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the MDS's Prometheus collectors. With a nil registry they
// still count (cheaply) but are exported nowhere.
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	ops              *prometheus.CounterVec   // by op
	opErrors         *prometheus.CounterVec   // by op
	opSeconds        *prometheus.HistogramVec // by op
	extentsAllocated prometheus.Counter
	extentsCommitted prometheus.Counter
	gcChunksDeleted  prometheus.Counter
	gcExtentsDone    prometheus.Counter
	admin            *adminMetrics // the administration worker's (admin_metrics.go)
	// Placement (placement.go, narrow.go).
	allocRefused  *prometheus.CounterVec // by reason: unavailable, no_space
	narrowPlaced  prometheus.Counter
	narrowExtents prometheus.Gauge
	widenedChunks prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Server) (*metrics, error) {
	m := &metrics{
		reg: reg,
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_mds_ops_total", Help: "MDS RPCs handled, by op.",
		}, []string{"op"}),
		opErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_mds_op_errors_total", Help: "MDS RPCs that returned an error, by op.",
		}, []string{"op"}),
		opSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "shoal_mds_op_duration_seconds", Help: "MDS RPC latency, by op.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10),
		}, []string{"op"}),
		extentsAllocated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_extents_allocated_total", Help: "Extents handed out by AllocExtents.",
		}),
		extentsCommitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_extents_committed_total", Help: "Extent-map entries committed by CommitExtents.",
		}),
		gcChunksDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_gc_chunks_deleted_total", Help: "Chunks whose deletion an OST confirmed.",
		}),
		gcExtentsDone: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_gc_extents_collected_total", Help: "Extents removed from the GC queue after all their chunks were deleted.",
		}),
	}
	m.allocRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_mds_alloc_refused_total", Help: "AllocExtents calls refused: too few OSTs up (unavailable) or with room (no_space).",
	}, []string{"reason"})
	m.narrowPlaced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_mds_extents_narrow_placed_total", Help: "Extents placed on fewer than k+m OSTs, because no more could take a chunk.",
	})
	m.narrowExtents = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shoal_mds_extents_narrow", Help: "Committed extents with unplaced chunks, waiting to be widened (as of the last worker round).",
	})
	m.widenedChunks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_mds_narrow_chunks_widened_total", Help: "Missing chunks of narrow extents rebuilt and placed.",
	})
	full := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shoal_mds_osts_full", Help: "OSTs up that placement skips for want of space (at the full ratio).",
	}, func() float64 {
		n := 0
		for _, o := range s.listOsts() {
			if o.Up && o.Full {
				n++
			}
		}
		return float64(n)
	})
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shoal_mds_osts_up", Help: "OSTs that heartbeated within the timeout.",
	}, func() float64 {
		n := 0
		for _, o := range s.listOsts() {
			if o.Up {
				n++
			}
		}
		return float64(n)
	})
	total := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shoal_mds_osts", Help: "Registered OSTs.",
	}, func() float64 { return float64(len(s.listOsts())) })
	sessions := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shoal_mds_sessions", Help: "Client sessions (live or expired, not yet collected).",
	}, func() float64 {
		s.sess.mu.Lock()
		defer s.sess.mu.Unlock()
		return float64(len(s.sess.t.sessions))
	})
	locks := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shoal_mds_locks", Help: "File locks held: flock locks and POSIX byte ranges.",
	}, func() float64 {
		s.sess.mu.Lock()
		defer s.sess.mu.Unlock()
		return float64(s.sess.t.locks.len())
	})
	m.collectors = []prometheus.Collector{m.ops, m.opErrors, m.opSeconds, m.extentsAllocated,
		m.extentsCommitted, m.gcChunksDeleted, m.gcExtentsDone, up, total, sessions, locks,
		m.allocRefused, m.narrowPlaced, m.narrowExtents, m.widenedChunks, full, quotaCollector{s}}
	var admin []prometheus.Collector
	m.admin, admin = newAdminMetrics(s) // admin_metrics.go
	m.collectors = append(m.collectors, admin...)
	m.collectors = append(m.collectors, s.leases.collectors()...)
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, r := range m.collectors[:i] {
				reg.Unregister(r)
			}
			return nil, errors.Join(errors.New("mds: register metrics"), err)
		}
	}
	return m, nil
}

// observe records one RPC.
func (m *metrics) observe(op string, start time.Time, err error) {
	m.ops.WithLabelValues(op).Inc()
	if err != nil {
		m.opErrors.WithLabelValues(op).Inc()
	}
	m.opSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// unregister removes the collectors, so the registry may be reused by a
// Server opened later.
func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

// raftMetrics are a replicated MDS member's Raft collectors
// (docs/reliability.md): registered when the member starts, removed when
// it closes.
type raftMetrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	proposals       prometheus.Counter
	proposalsFailed prometheus.Counter
	leaderChanges   prometheus.Counter
	snapshotSends   prometheus.Counter
	applySeconds    prometheus.Histogram
	logSyncSeconds  prometheus.Histogram
}

func newRaftMetrics(reg prometheus.Registerer, r *replica) (*raftMetrics, error) {
	m := &raftMetrics{
		reg: reg,
		proposals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_raft_proposals_total", Help: "Mutations this member proposed as leader.",
		}),
		proposalsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_raft_proposals_failed_total", Help: "Proposals that were not applied: refused, dropped at a change of leader, or skipped as computed in an older term.",
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_raft_leader_changes_total", Help: "Changes of the leader this member knows (including to none).",
		}),
		snapshotSends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_raft_snapshot_sends_total", Help: "State machine snapshots this member streamed to a member catching up.",
		}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shoal_mds_raft_apply_duration_seconds", Help: "Time to apply one Ready's committed entries to the state machine.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10),
		}),
		logSyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shoal_mds_raft_log_sync_duration_seconds", Help: "Time of one synced write of the Raft log (one per Ready that carries entries or a vote).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10),
		}),
	}
	status := func(f func(st *replica) uint64) func() float64 {
		return func() float64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			return float64(f(r))
		}
	}
	m.collectors = []prometheus.Collector{m.proposals, m.proposalsFailed, m.leaderChanges, m.snapshotSends, m.applySeconds, m.logSyncSeconds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shoal_mds_raft_term", Help: "This member's Raft term."}, status(func(r *replica) uint64 { return r.mu.term })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shoal_mds_raft_is_leader", Help: "1 while this member serves as leader, else 0."}, status(func(r *replica) uint64 {
			if r.mu.serving {
				return 1
			}
			return 0
		})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shoal_mds_raft_commit_index", Help: "Highest log index this member knows committed."}, status(func(r *replica) uint64 { return r.mu.commit })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shoal_mds_raft_applied_index", Help: "Highest log index applied to this member's state machine."}, status(func(r *replica) uint64 { return r.mu.applied })),
	}
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, r := range m.collectors[:i] {
				reg.Unregister(r)
			}
			return nil, errors.Join(errors.New("mds: register raft metrics"), err)
		}
	}
	return m, nil
}

func (m *raftMetrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}
