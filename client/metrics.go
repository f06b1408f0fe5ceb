package client

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	readBytes     prometheus.Counter
	writeBytes    prometheus.Counter
	degradedReads prometheus.Counter
	chunkErrors   *prometheus.CounterVec
	// Extent compression (compress.go): logical bytes of extents stored
	// compressed or raw for want of a saving, and the stored bytes of the
	// compressed ones.
	compressIn     *prometheus.CounterVec
	compressStored prometheus.Counter
}

func (m *metrics) compressed(logical, stored int) {
	m.compressIn.WithLabelValues("compressed").Add(float64(logical))
	m.compressStored.Add(float64(stored))
}

func (m *metrics) compressRaw(logical int) {
	m.compressIn.WithLabelValues("raw").Add(float64(logical))
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
		compressIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_client_compress_logical_bytes_total", Help: "Logical bytes of extents of compressing layouts, by outcome (compressed, raw)."}, []string{"outcome"}),
		compressStored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_compress_stored_bytes_total", Help: "Stored bytes of the extents written compressed."}),
	}
	if reg != nil {
		reg.MustRegister(m.readBytes, m.writeBytes, m.degradedReads, m.chunkErrors, m.compressIn, m.compressStored)
	}
	return m
}
