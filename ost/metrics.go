package ost

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the OST's Prometheus metrics. An OST process with several
// targets (shoal local) wraps its registry with an "ost" label per target.
type metrics struct {
	readBytes     prometheus.Counter
	writeBytes    prometheus.Counter
	corruptBlocks prometheus.Counter
	capRefused    prometheus.Counter
	localOpens    prometheus.Counter // chunk files passed to local clients (OpOpen)
	logWrites     prometheus.Counter // chunks written through the chunk log
	logRetires    prometheus.Counter // log files retired
	// Scrub (scrub.go), by pass: "background" or "admin".
	scrubBytes   *prometheus.CounterVec
	scrubChunks  *prometheus.CounterVec
	scrubCorrupt *prometheus.CounterVec

	reg        prometheus.Registerer // nil: not registered
	collectors []prometheus.Collector
}

func newMetrics() *metrics {
	return &metrics{
		readBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_ost_read_bytes_total",
			Help: "Chunk bytes returned by ReadChunk, after verification.",
		}),
		writeBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_ost_write_bytes_total",
			Help: "Chunk bytes stored by WriteChunk (new chunks only).",
		}),
		corruptBlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_ost_corrupt_blocks_total",
			Help: "Checksum mismatches found: data blocks, or sidecars that are missing or fail their own check.",
		}),
		localOpens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_ost_local_opens_total",
			Help: "Chunk files passed to clients on this host through the data path's local endpoint, which read them directly (short-circuit reads).",
		}),
		capRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_ost_capability_refused_total",
			Help: "Chunk calls refused for a missing, forged, expired or mismatched capability (docs/security.md).",
		}),
		logWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_ost_log_writes_total",
			Help: "Small chunks written through the chunk log (durable at one shared fdatasync, written as files after).",
		}),
		logRetires: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_ost_log_retires_total",
			Help: "Chunk log files retired: their chunks made durable as files, the file emptied.",
		}),
		scrubBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_ost_scrub_read_bytes_total",
			Help: "Chunk bytes the scrubber read and verified, by pass (background, admin).",
		}, []string{"pass"}),
		scrubChunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_ost_scrub_chunks_total",
			Help: "Chunks the scrubber checked, by pass (background, admin).",
		}, []string{"pass"}),
		scrubCorrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_ost_scrub_corrupt_chunks_total",
			Help: "Chunks the scrubber found corrupt (a checksum mismatch, a bad sidecar or a short file) and reported to the MDS, by pass.",
		}, []string{"pass"}),
	}
}

// register adds the metrics, and gauges reading st's counters, to reg.
func (m *metrics) register(reg prometheus.Registerer, st *store) error {
	if reg == nil {
		return nil
	}
	cs := []prometheus.Collector{
		m.readBytes, m.writeBytes, m.corruptBlocks, m.capRefused, m.localOpens, m.logWrites, m.logRetires,
		m.scrubBytes, m.scrubChunks, m.scrubCorrupt,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_ost_chunks",
			Help: "Chunks stored.",
		}, func() float64 { return float64(st.chunks.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_ost_used_bytes",
			Help: "Bytes held in chunk data files.",
		}, func() float64 { return float64(st.used.Load()) }),
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	m.reg, m.collectors = reg, cs
	return nil
}

// unregister removes what register added.
func (m *metrics) unregister() error {
	var errsUnreg error
	for _, c := range m.collectors {
		if !m.reg.Unregister(c) {
			errsUnreg = errors.New("ost: metric was not registered")
		}
	}
	m.collectors = nil
	return errsUnreg
}

// scrubbed counts one chunk checked by a pass of the scrubber.
func (m *metrics) scrubbed(pass string, n int64, bad bool) {
	m.scrubChunks.WithLabelValues(pass).Inc()
	m.scrubBytes.WithLabelValues(pass).Add(float64(n))
	if bad {
		m.scrubCorrupt.WithLabelValues(pass).Inc()
	}
}
