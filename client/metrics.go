package client

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/internal/datanet"
)

type metrics struct {
	readBytes     prometheus.Counter
	writeBytes    prometheus.Counter
	degradedReads prometheus.Counter
	// balancedReads counts data chunk reads taken from a parity chunk on
	// a less busy OST (balance.go).
	balancedReads prometheus.Counter
	chunkErrors   *prometheus.CounterVec
	// Extent compression (compress.go): logical bytes of extents stored
	// compressed or raw for want of a saving, and the stored bytes of the
	// compressed ones.
	compressIn     *prometheus.CounterVec
	compressStored prometheus.Counter
	// dirAttrHits counts directory getattrs answered from the client's
	// own namespace changes (dirattrs.go).
	dirAttrHits prometheus.Counter
	// leaseLookups counts lookups answered ENOENT from a directory
	// lease (dirlease.go).
	leaseLookups prometheus.Counter
	// leasedOpens counts opens answered from a content lease
	// (contentlease.go).
	leasedOpens prometheus.Counter
	// leasedAttrs counts lookups and getattrs answered from inode
	// leases (contentlease.go).
	leasedAttrs prometheus.Counter
	// syncsSkipped counts SyncNamespace calls answered without the MDS
	// (namespace.go).
	syncsSkipped prometheus.Counter
	// spares counts spare allocations (spare.go) by outcome: used, or
	// unused (too old, failed, or left at close).
	spares *prometheus.CounterVec
	// lookupsBatched counts lookups answered by a LookupMany call
	// (lookupbatch.go).
	lookupsBatched prometheus.Counter
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
		balancedReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_balanced_reads_total", Help: "Data chunk reads served from a parity chunk on a less busy OST instead (reads over the network)."}),
		chunkErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_client_chunk_errors_total", Help: "Failed chunk calls by operation."}, []string{"op"}),
		compressIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_client_compress_logical_bytes_total", Help: "Logical bytes of extents of compressing layouts, by outcome (compressed, raw)."}, []string{"outcome"}),
		compressStored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_compress_stored_bytes_total", Help: "Stored bytes of the extents written compressed."}),
		dirAttrHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_dir_attr_hits_total", Help: "Directory attribute requests answered from the answers to this client's own namespace changes, without the MDS."}),
		leaseLookups: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_lease_lookups_total", Help: "Lookups of absent names answered from a directory lease, without the MDS."}),
		leasedOpens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_leased_opens_total", Help: "Opens answered from a content lease, without the MDS."}),
		leasedAttrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_leased_attrs_total", Help: "Lookups and getattrs answered from inode leases, without the MDS."}),
		syncsSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_namespace_syncs_skipped_total", Help: "Namespace syncs (fsync's barrier) answered without the MDS: no change answered early since the last one."}),
		spares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_client_spare_allocs_total", Help: "Extent allocations asked for ahead of a small write after an fsync, by outcome: used, or unused (too old, failed, left at close)."}, []string{"outcome"}),
		lookupsBatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_client_lookups_batched_total", Help: "Lookups sent to the MDS in a LookupMany call with others made at the same time."}),
	}
	if reg != nil {
		reg.MustRegister(m.readBytes, m.writeBytes, m.degradedReads, m.balancedReads, m.chunkErrors, m.compressIn, m.compressStored, m.dirAttrHits, m.leaseLookups, m.leasedOpens, m.leasedAttrs, m.syncsSkipped, m.spares, m.lookupsBatched)
	}
	return m
}

// registerDataStats exposes the data path's byte counts (datanet.Stats)
// on reg, read at each scrape: the chunk payload bytes written and read,
// and the bytes that carried them on the wire, fewer where wire
// compression paid (docs/compression.md, "Wire compression").
func registerDataStats(reg prometheus.Registerer, stats func() datanet.Stats) {
	if reg == nil {
		return
	}
	for _, d := range []struct {
		direction            string
		payload, wire, local func(datanet.Stats) uint64
	}{
		{"write", func(s datanet.Stats) uint64 { return s.WriteBytes }, func(s datanet.Stats) uint64 { return s.WriteWireBytes }, func(s datanet.Stats) uint64 { return s.LocalWriteBytes }},
		{"read", func(s datanet.Stats) uint64 { return s.ReadBytes }, func(s datanet.Stats) uint64 { return s.ReadWireBytes }, func(s datanet.Stats) uint64 { return s.LocalReadBytes }},
	} {
		labels := prometheus.Labels{"direction": d.direction}
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shoal_client_data_payload_bytes_total", Help: "Chunk payload bytes of successful data path requests, by direction (write, read).", ConstLabels: labels},
				func() float64 { return float64(d.payload(stats())) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shoal_client_data_wire_bytes_total", Help: "Bytes on the wire that carried the chunk payloads, after wire compression, by direction.", ConstLabels: labels},
				func() float64 { return float64(d.wire(stats())) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shoal_client_data_local_bytes_total", Help: "Chunk payload bytes that went through OSTs' local endpoints on this host (short-circuit reads from the chunk files, writes over unix sockets), by direction.", ConstLabels: labels},
				func() float64 { return float64(d.local(stats())) }),
		)
	}
}
