package gds

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the reader's Prometheus metrics (shoal_gds_*), registered on
// the registry passed in Options (none when nil).
type metrics struct {
	bytes       *prometheus.CounterVec // by path and source
	reads       prometheus.Counter
	readErrors  prometheus.Counter
	seconds     prometheus.Histogram
	localFailed *prometheus.CounterVec // by reason
	slotsBusy   prometheus.Gauge
	verifySecs  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_gds_read_bytes_total",
			Help: "Bytes placed in device memory, by path (host, direct, compat, bounce) and source (local chunk file, remote through the client, zero for holes).",
		}, []string{"path", "source"}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_gds_reads_total", Help: "Reads into device memory.",
		}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_gds_read_errors_total", Help: "Reads into device memory that failed.",
		}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shoal_gds_read_seconds", Help: "Duration of reads into device memory.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
		localFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_gds_local_failures_total",
			Help: "Local chunk pieces that failed (missing, io, corrupt) and were read through the client instead, which rebuilds them from parity when needed.",
		}, []string{"reason"}),
		slotsBusy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_gds_staging_slots_busy", Help: "Pinned staging slots being filled or copied.",
		}),
		verifySecs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_gds_verify_seconds_total", Help: "Time spent checking the CRC32C of bytes read directly into device memory.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.bytes, m.reads, m.readErrors, m.seconds, m.localFailed, m.slotsBusy, m.verifySecs)
	}
	return m
}
