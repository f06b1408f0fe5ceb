package mds

import (
	"encoding/binary"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Metrics of the administration worker (admin_worker.go). They are
// registered with the MDS's other metrics (metrics.go) and, like them,
// count even without a registry. docs/admin.md lists them.

// Sources of bad-chunk reports (the label of badReported).
const (
	badFromOST    = "ost"    // an OST's scrubber
	badFromClient = "client" // a client's read path
	badFromFsck   = "fsck"   // fsck --repair
)

// degradedEvery bounds how often the worker counts degraded extents (a
// scan of every committed extent) while some OST is down or removed.
const degradedEvery = 30 * time.Second

type adminMetrics struct {
	movedChunks  *prometheus.CounterVec // by job kind
	movedBytes   *prometheus.CounterVec // by job kind
	moveFailures *prometheus.CounterVec // by job kind
	rebuilt      prometheus.Counter
	badReported  *prometheus.CounterVec // by source
	badRepaired  prometheus.Counter
	badDismissed prometheus.Counter
	degraded     prometheus.Gauge
	lost         prometheus.Gauge
	badQueued    prometheus.Gauge

	lastDegraded time.Time // worker goroutine only: last full count
}

// newAdminMetrics makes the worker's metrics and returns them with the
// collectors for newMetrics to register.
func newAdminMetrics(s *Server) (*adminMetrics, []prometheus.Collector) {
	m := &adminMetrics{
		movedChunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_mds_admin_moved_chunks_total",
			Help: "Chunks moved (copied, verified and switched) by the administration worker, by job kind (repair, drain, rebalance).",
		}, []string{"kind"}),
		movedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_mds_admin_moved_bytes_total",
			Help: "Bytes of the chunks moved by the administration worker, by job kind.",
		}, []string{"kind"}),
		moveFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_mds_admin_move_failures_total",
			Help: "Chunk moves that failed (read, rebuild, write or verify) and are planned again, by job kind.",
		}, []string{"kind"}),
		rebuilt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_admin_rebuilt_chunks_total",
			Help: "Chunks the administration worker reconstructed from the other chunks of their extent (repairs of lost OSTs and of bad chunks).",
		}),
		badReported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_mds_admin_bad_chunks_reported_total",
			Help: "Bad chunks queued for repair, by source (ost: scrub, client: a read, fsck); a chunk already queued is not counted again.",
		}, []string{"source"}),
		badRepaired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_admin_bad_chunks_repaired_total",
			Help: "Bad chunks rebuilt in place on their OST.",
		}),
		badDismissed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_mds_admin_bad_chunks_dismissed_total",
			Help: "Bad-chunk reports dropped without a rebuild: the chunk moved or its extent is gone since, or (a client's report) it reads back whole.",
		}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_mds_admin_degraded_extents",
			Help: "Committed extents needing repair: a chunk on a down or removed OST, or reported bad (counted at most every 30s while an OST is down).",
		}),
		lost: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_mds_admin_unreadable_extents",
			Help: "Committed extents with more than m chunks on down or removed OSTs: unreadable until OSTs come back.",
		}),
		badQueued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_mds_admin_bad_chunks_queued",
			Help: "Bad chunks waiting for their rebuild.",
		}),
	}
	return m, []prometheus.Collector{m.movedChunks, m.movedBytes, m.moveFailures, m.rebuilt,
		m.badReported, m.badRepaired, m.badDismissed, m.degraded, m.lost, m.badQueued, jobsCollector{s}}
}

func (m *adminMetrics) moved(kind string, chunks, nbytes uint64) {
	if chunks > 0 {
		m.movedChunks.WithLabelValues(kind).Add(float64(chunks))
		m.movedBytes.WithLabelValues(kind).Add(float64(nbytes))
	}
}

func (m *adminMetrics) moveFailed(kind string, chunks uint64) {
	if chunks > 0 {
		m.moveFailures.WithLabelValues(kind).Add(float64(chunks))
	}
}

// countDegraded updates the degraded, unreadable and queued gauges. With
// every OST up and active it only counts the bad-chunk queue; otherwise it
// scans the committed extents, at most every degradedEvery (force: now).
func (w *adminWorker) countDegraded(force bool) error {
	m := w.met
	bad := map[uint64]bool{}
	queued := 0
	err := w.scanKind(prefixBad, func(k, v []byte) (bool, error) {
		if len(k) != 13 {
			return false, errCorruptKey("bad chunk", k)
		}
		bad[binary.BigEndian.Uint64(k[1:9])] = true
		queued++
		return true, nil
	})
	if err != nil {
		return err
	}
	m.badQueued.Set(float64(queued))
	ov := w.osts.ostView()
	gone := map[uint32]bool{}
	for id := range ov.infos {
		if !ov.up[id] || ov.state[id] == ostRemoved {
			gone[id] = true
		}
	}
	if len(gone) == 0 {
		m.degraded.Set(float64(len(bad)))
		m.lost.Set(0)
		m.lastDegraded = time.Time{}
		return nil
	}
	now := w.clock()
	if !force && now.Sub(m.lastDegraded) < degradedEvery {
		return nil
	}
	m.lastDegraded = now
	degraded, lost := 0, 0
	err = w.extents.eachExtent(func(e *mdspb.Extent) (bool, error) {
		n := 0
		for _, o := range e.GetOsts() {
			if gone[o] {
				n++
			}
		}
		if n > 0 || bad[e.GetId()] {
			degraded++
		}
		if n > int(e.GetLayout().GetM()) {
			lost++
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	m.degraded.Set(float64(degraded))
	m.lost.Set(float64(lost))
	return nil
}

// jobsCollector exports the state of each job kind, read from Pebble at
// each scrape: shoal_mds_admin_jobs{kind, state} is 1 for the job's
// current state and 0 for the others.
type jobsCollector struct{ s *Server }

var jobsDesc = prometheus.NewDesc("shoal_mds_admin_jobs",
	"Administration jobs by kind and state: 1 for the state each job kind is in (idle, running, stopped, done, failed), 0 for the others.",
	[]string{"kind", "state"}, nil)

func (c jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- jobsDesc }

func (c jobsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return
	}
	for _, kind := range []string{JobRepair, JobDrain, JobRebalance, JobScrub} {
		j, err := s.loadJob(kind)
		if err != nil {
			j = &mdspb.AdminJob{Kind: kind} // unknown: every state 0
		}
		for _, st := range []string{JobIdle, JobRunning, JobStopped, JobDone, JobFailed} {
			v := 0.0
			if j.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, v, kind, st)
		}
	}
}
