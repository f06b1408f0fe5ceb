package client

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	readBytes     prometheus.Counter
	writeBytes    prometheus.Counter
	degradedReads prometheus.Counter
	chunkErrors   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		readBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_read_bytes_total", Help: "File bytes returned by reads."}),
		writeBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_write_bytes_total", Help: "File bytes committed by writes."}),
		degradedReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_degraded_reads_total", Help: "Rows rebuilt from parity because a data chunk failed."}),
		chunkErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_client_chunk_errors_total", Help: "Failed chunk calls by operation."}, []string{"op"}),
	}
	if reg != nil {
		reg.MustRegister(m.readBytes, m.writeBytes, m.degradedReads, m.chunkErrors)
	}
	return m
}
