package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The cache group (opt-in: --only cache) measures the node-local read
// cache (docs/fuse.md, "Node-local cache"; issue 22). A data set of
// CacheData bytes in shards of 64 MiB (the last one the rest, in whole
// MiB) and CacheFiles files of 4-128 KiB (the small group's sizes and
// contents) is written once to the bare disk, through the run's Shoal
// mount (no cache) and through the mount of a second `shoal local` started
// with --cache-dir; then, with the kernel's caches dropped before each
// step, read cold from the disk and through the mount without a cache,
// and twice through the mount with the cache: the first read fills the
// cache, the second is served from it (by kernel passthrough where the
// kernel allows, else by the daemon from the cache file).
//
// Figures: cache.shards.read1 and cache.small.read1 (the first read with
// the cache) against the same read through the mount without one, target
// 0.95; cache.shards.read2 and cache.small.read2 (the second read)
// against the bare disk's cold read, target 0.9. Shards: MiB/s (T
// threads, whole shards, 1 MiB reads, 4 KiB of every MiB checked);
// small files: files/s (T threads, each file read to EOF and checked).

const (
	groupCache = "cache"
	// pathCacheMount labels the steps through the mount with a cache.
	pathCacheMount = "cache-mnt"
	cacheShard     = 64 << 20
)

// cacheSets are the cache group's data sets and their units.
var cacheSets = []struct{ name, unit string }{{"cache.shards", "MiB/s"}, {"cache.small", "files/s"}}

// assembleCache is assemble for the cache figures. The values are
// SET.read on the disk and on the mount (no cache), SET.read1 and
// SET.read2 on the mount with the cache (under pathMount).
func assembleCache(v values) []Figure {
	var out []Figure
	for _, s := range cacheSets {
		for _, ph := range []struct {
			name, basePath, vs string
			target             float64
		}{{"read1", pathMount, "no cache", 0.95}, {"read2", pathDisk, pathDisk, 0.9}} {
			val, ok := v[key(s.name+"."+ph.name, s.unit, pathMount)]
			if !ok {
				continue
			}
			f := Figure{Name: s.name + "." + ph.name + "." + pathMount, Unit: s.unit, Value: round(val, 2), Vs: ph.vs}
			if base := v[key(s.name+".read", s.unit, ph.basePath)]; base > 0 {
				f.Baseline, f.Ratio = round(base, 2), round(val/base, 4)
			}
			t := ph.target
			f.Target = &t
			out = append(out, f)
		}
	}
	return out
}

// cacheShardSizes cuts total bytes into 64 MiB shards, the last one the
// rest in whole MiB; at least one shard of 1 MiB.
func cacheShardSizes(total int64) []int64 {
	var out []int64
	for ; total >= cacheShard; total -= cacheShard {
		out = append(out, cacheShard)
	}
	if rest := total &^ (ioSize - 1); rest > 0 || len(out) == 0 {
		out = append(out, max(rest, ioSize))
	}
	return out
}

// eachOf runs fn(i) for i in [0, n) on threads goroutines, thread t taking
// t, t+threads, ...
func eachOf(ctx context.Context, threads, n int, fn func(i int) error) error {
	return parallel(ctx, threads, func(ctx context.Context, t int) error {
		for i := t; i < n; i += threads {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	})
}

// skipCache says loudly that the cache group did not run.
func (r *runner) skipCache(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.progress("cache: SKIPPED: %s", msg)
	r.note("cache: SKIPPED: %s", msg)
}

func (r *runner) cache(ctx context.Context) error {
	disk, mnt := r.targetOf(pathDisk), r.targetOf(pathMount)
	if mnt == nil {
		r.skipCache("the cache group compares with the mount without a cache: select the mount path (--only cache,mount) and give a mount (or none, for the local cluster)")
		return nil
	}
	if r.o.Binary == "" {
		r.skipCache("it starts its own cluster with a cache (shoal local --cache-dir) and has no shoal binary to run")
		return nil
	}
	T, N := r.o.Threads, r.o.CacheFiles
	sizes := cacheShardSizes(r.o.CacheData)
	var shardBytes, smallBytes int64
	for _, s := range sizes {
		shardBytes += s
	}
	for i := range N {
		smallBytes += int64(smallSize(i))
	}
	// Room for everything, so that nothing is evicted between the reads.
	cacheSize := shardBytes + smallBytes + shardBytes/8 + 256<<20
	dir := r.o.Dir
	cdir, cmnt, clog := filepath.Join(dir, "cache-cluster"), filepath.Join(dir, "cache-mnt"), filepath.Join(dir, "cache-cluster.log")
	cacheDir := filepath.Join(dir, "cache-dir")
	if err := freshDir(cacheDir); err != nil {
		return err
	}
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	extra := []string{"--cache-dir", cacheDir, "--cache-size", strconv.FormatInt(cacheSize, 10), "--metrics", metrics}
	r.progress("cache: starting a second local cluster with a cache: %s local --dir %s --mount %s --osts 6 --k 4 --m 2 %s",
		r.o.Binary, cdir, cmnt, strings.Join(extra, " "))
	lc, err := startLocal(ctx, r.o.Binary, cdir, cmnt, clog, r.o.SyncNamespace, extra...)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		first, _, _ := strings.Cut(err.Error(), "\n")
		r.skipCache("could not start the local cluster with a cache: %s", first)
		r.failures = append(r.failures, "cache: start the local cluster with a cache: "+first)
		return nil
	}
	defer func() {
		r.progress("cache: stopping the local cluster with a cache")
		if err := lc.stop(); err != nil {
			first, _, _ := strings.Cut(err.Error(), "\n")
			r.failures = append(r.failures, "cache: stop the local cluster with a cache: "+first)
		}
		if !r.o.Keep {
			os.RemoveAll(cdir)
			os.Remove(cmnt)
			os.RemoveAll(cacheDir)
		}
	}()
	if r.o.MDS != "" || r.o.Mount != "" {
		r.note("cache: the mount with a cache is on a local cluster the benchmark started (the cache needs a mount of its own), the mount without one on the existing cluster: the read1 figures compare two clusters")
	}
	r.note("cache: %d shards (%d MiB) and %d files of 4-128 KiB (%d MiB), %d threads; second cluster shoal local (6 OSTs, RS 4+2) --cache-dir %s --cache-size %d MiB, passthrough offered (kernel %s, euid %d: Linux 6.9+ and a root daemon use it); disk reads buffered",
		len(sizes), shardBytes>>20, N, smallBytes>>20, T, cacheDir, cacheSize>>20, kernelRelease(), os.Geteuid())

	cm := &target{path: pathCacheMount, fs: osFS{root: filepath.Join(cmnt, "bench")}}
	if err := os.Mkdir(filepath.Join(cmnt, "bench"), 0o755); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	ts := []*target{disk, mnt, cm}
	shardName := func(i int) string { return fmt.Sprintf("cache/shards/shard-%05d", i) }
	smallName := func(i int) string { return fmt.Sprintf("cache/small/t%02d/f%06d", i%T, i) }

	// Write the data set once to each.
	for _, t := range ts {
		err := t.fs.Mkdir("cache")
		for _, d := range []string{"cache/shards", "cache/small"} {
			if err == nil {
				err = t.fs.Mkdir(d)
			}
		}
		for i := 0; i < T && err == nil; i++ {
			err = t.fs.Mkdir(fmt.Sprintf("cache/small/t%02d", i))
		}
		if ok, err := r.try(ctx, t, "mkdir cache", err); !ok {
			if err != nil {
				return err
			}
			continue
		}
		if _, _, err := r.timed(ctx, t, "cache.shards.write", func() (int64, int64, error) {
			var ops atomic.Int64
			err := eachOf(ctx, T, len(sizes), func(i int) error {
				f, err := t.fs.Create(shardName(i))
				if err != nil {
					return err
				}
				n, err := r.writeRange(ctx, f, seedOf(i), 0, sizes[i], false)
				ops.Add(n)
				return closeAfter(f, err, true)
			})
			return shardBytes, ops.Load(), err
		}); err != nil {
			return err
		}
		if r.broken[t.path] {
			continue
		}
		if _, _, err := r.timed(ctx, t, "cache.small.create", func() (int64, int64, error) {
			return smallBytes, int64(N), eachOf(ctx, T, N, func(i int) error {
				f, err := t.fs.Create(smallName(i))
				if err != nil {
					return err
				}
				_, err = f.WriteAt(r.pat.at(seedOf(i), 0, smallSize(i)), 0)
				return closeAfter(f, err, false)
			})
		}); err != nil {
			return err
		}
	}

	// Read it cold: disk, mount without a cache, then twice with one.
	readShards := func(fs fsys) (int64, int64, error) {
		var ops atomic.Int64
		err := eachOf(ctx, T, len(sizes), func(i int) error {
			f, err := fs.Open(shardName(i))
			if err != nil {
				return err
			}
			n, err := r.readRange(ctx, f, seedOf(i), sizes[i], make([]byte, ioSize), false)
			ops.Add(n)
			return closeAfter(f, err, false)
		})
		return shardBytes, ops.Load(), err
	}
	bufs := sync.Pool{New: func() any { return make([]byte, 128<<10) }}
	readSmall := func(fs fsys) (int64, int64, error) {
		return smallBytes, int64(N), eachOf(ctx, T, N, func(i int) error {
			buf := bufs.Get().([]byte)
			defer bufs.Put(buf)
			return r.readWhole(fs, smallName(i), seedOf(i), smallSize(i), buf)
		})
	}
	for _, set := range []struct {
		name, unit string
		read       func(fs fsys) (int64, int64, error)
	}{{"cache.shards", "MiB/s", readShards}, {"cache.small", "files/s", readSmall}} {
		for _, st := range []struct {
			t         *target
			fig, path string
		}{{disk, ".read", pathDisk}, {mnt, ".read", pathMount}, {cm, ".read1", pathMount}, {cm, ".read2", pathMount}} {
			if r.broken[st.t.path] {
				continue
			}
			if st.t == cm && st.fig == ".read2" {
				r.settleCache(ctx, set.name, metrics)
			}
			if err := r.coldCaches(); err != nil {
				return err
			}
			var before map[string]float64
			if st.t == cm {
				before, _ = scrapeMetrics(ctx, metrics)
			}
			m, ok, err := r.timed(ctx, st.t, set.name+st.fig, func() (int64, int64, error) { return set.read(st.t.fs) })
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			x := m.opsps()
			if set.unit == "MiB/s" {
				x = m.mibps()
			}
			r.vals.set(set.name+st.fig, set.unit, st.path, x)
			if st.t == cm {
				r.noteCacheMetrics(ctx, set.name+st.fig, metrics, before)
			}
		}
	}
	for _, t := range []*target{disk, mnt} {
		if _, err := r.try(ctx, t, "remove cache", t.fs.RemoveAll("cache")); err != nil {
			return err
		}
	}
	return nil
}

// noteCacheMetrics notes what the mount with a cache did during step fig:
// the changes of its metrics since before (nil: not scraped).
func (r *runner) noteCacheMetrics(ctx context.Context, fig, addr string, before map[string]float64) {
	after, err := scrapeMetrics(ctx, addr)
	if err != nil || before == nil {
		r.note("cache: %s: the metrics of the mount with a cache could not be read (%v)", fig, err)
		return
	}
	d := func(name, label string) float64 {
		return sumMetric(after, name, label) - sumMetric(before, name, label)
	}
	r.note("cache: %s: %.0f passthrough opens, %.0f READ requests reached the daemon, %.0f MiB filled into the cache, %.0f MiB served from it by the daemon, %.0f blocks not filled (fill memory taken), %.0f cache errors",
		fig, d("shoal_client_cache_passthrough_opens_total", ""), d("shoal_fuse_ops_total", `op="read"`),
		d("shoal_client_cache_fill_bytes_total", "")/(1<<20), d("shoal_client_cache_hit_bytes_total", "")/(1<<20),
		d("shoal_client_cache_fills_skipped_total", ""), d("shoal_client_cache_errors_total", ""))
}

// settleCache waits, untimed, until the mount with a cache has written
// the first read's fills (a cache disk slower than the reads writes them
// behind the read: client/cache/fill.go), as a second epoch would find
// them, and notes how long that took.
func (r *runner) settleCache(ctx context.Context, set, addr string) {
	t0 := time.Now()
	for {
		m, err := scrapeMetrics(ctx, addr)
		if err != nil {
			r.note("cache: %s: the fills' progress could not be read (%v); second read not waited for", set, err)
			return
		}
		if sumMetric(m, "shoal_client_cache_fill_pending_bytes", "") == 0 {
			break
		}
		if time.Since(t0) > 5*time.Minute {
			r.note("cache: %s: fills still unwritten after 5 minutes; second read not waited for", set)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	r.note("cache: %s: the first read's fills were all written %.1f s after it ended", set, time.Since(t0).Seconds())
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// scrapeMetrics reads the Prometheus text at http://addr/metrics: value by
// series (name and labels as printed).
func scrapeMetrics(ctx context.Context, addr string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(bufio.NewScanner(resp.Body))
}

func parseMetrics(sc *bufio.Scanner) (map[string]float64, error) {
	out := map[string]float64{}
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// sumMetric adds the values of the series of metric name whose labels
// contain label ("" for all).
func sumMetric(m map[string]float64, name, label string) float64 {
	var sum float64
	for series, v := range m {
		n, labels, _ := strings.Cut(series, "{")
		if n == name && strings.Contains(labels, label) {
			sum += v
		}
	}
	return sum
}

// kernelRelease returns the running kernel's release.
func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
