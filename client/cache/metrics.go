package cache

import "github.com/prometheus/client_golang/prometheus"

// metrics of the cache, on Options.Registry (subsystem client: the cache
// is the client's).
type metrics struct {
	hits, misses     prometheus.Counter // block pieces served from the cache, or not
	hitBytes         prometheus.Counter
	fills, fillBytes prometheus.Counter
	evictions        prometheus.Counter
	stale            prometheus.Counter // entries dropped at open: the file changed
	invalidations    prometheus.Counter // entries dropped: the file was written here
	passthrough      prometheus.Counter
	errors           *prometheus.CounterVec // degradations by kind: full, corrupt, io
	used, entries    prometheus.Gauge
	skipped          prometheus.Counter // fills not made: FillMemory taken
	pending          prometheus.Gauge   // bytes of fills in flight
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		hits: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_hits_total",
			Help: "Reads (per cache block touched) served from the node-local cache by the daemon."}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_misses_total",
			Help: "Reads (per cache block touched) of cached-eligible files served from the cluster."}),
		hitBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_hit_bytes_total",
			Help: "Bytes served from the node-local cache by the daemon (passthrough reads do not reach it)."}),
		fills: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_fills_total",
			Help: "Blocks written into the node-local cache."}),
		fillBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_fill_bytes_total",
			Help: "Bytes written into the node-local cache."}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_evictions_total",
			Help: "Cached files evicted to make room, least recently used first."}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_stale_total",
			Help: "Cached files dropped at open because the file changed since they were cached."}),
		invalidations: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_invalidations_total",
			Help: "Cached files dropped because the file was opened for writing or changed through this mount."}),
		passthrough: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_passthrough_opens_total",
			Help: "Opens served by the kernel from a cached file (FUSE passthrough)."}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shoal_client_cache_errors_total",
			Help: "Times the cache was bypassed, by kind: full (no room), corrupt (checksum mismatch), io (disk error)."}, []string{"kind"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_client_cache_fills_skipped_total",
			Help: "Blocks read without filling them into the node-local cache: the memory for fills not yet written (--cache-fill-memory) was taken."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "shoal_client_cache_fill_pending_bytes",
			Help: "Bytes of blocks read for the node-local cache and not yet written to it."}),
		used: prometheus.NewGauge(prometheus.GaugeOpts{Name: "shoal_client_cache_used_bytes",
			Help: "Bytes of blocks in the node-local cache."}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "shoal_client_cache_files",
			Help: "Files with an entry in the node-local cache."}),
	}
	for _, k := range []string{"full", "corrupt", "io"} {
		m.errors.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.hits, m.misses, m.hitBytes, m.fills, m.fillBytes, m.evictions, m.stale,
			m.invalidations, m.passthrough, m.errors, m.used, m.entries, m.skipped, m.pending)
	}
	return m
}
