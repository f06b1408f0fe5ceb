// Package bench is `shoal bench`: big-file, small-file, metadata and
// checkpoint-shaped workloads run through a Shoal FUSE mount and through
// the client library, next to the same workloads on two baselines measured
// in the same run: the bare disk under the benchmark directory, and
// go-fuse's loopback file system over that disk mounted with Shoal's mount
// options and the kernel's FUSE passthrough off (so that its daemon serves
// every byte, as Shoal's does). Issue 4 sets targets as ratios to these
// baselines; Run reports each figure, its baseline, the ratio and the
// target. docs/performance.md says what each figure means.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/wire"
)

// ErrStepsFailed is returned by Run, with a report of what was measured,
// when some steps failed; the report's notes say which and why.
var ErrStepsFailed = errors.New("bench: steps failed")

// Options configure a run.
type Options struct {
	// Dir holds everything the run writes outside the cluster: the
	// baselines (Dir/baseline-disk, Dir/baseline-src mounted at
	// Dir/baseline-mnt) and, when no cluster is named, the local cluster
	// (Dir/cluster, mounted at Dir/mnt, its log in Dir/cluster.log).
	// Required.
	Dir string
	// MDS is an existing cluster's MDS address: the API figures need it.
	MDS string
	// Mount is an existing cluster's mount point: the mount figures need
	// it. With neither MDS nor Mount set, Run starts `Binary local` under
	// Dir and measures both.
	Mount string
	// Binary is the shoal binary that runs the local cluster.
	Binary string
	// Size is the size of each big file and checkpoint shard, rounded down
	// to whole MiB. Default 256 MiB.
	Size int64
	// Threads is the number of big files, checkpoint shards and threads
	// of the data workloads. Default 4.
	Threads int
	// MetaThreads is the number of threads of the metadata workloads.
	// Default 16.
	MetaThreads int
	// Files is the number of small files, and of files in each metadata
	// run. Default 1000.
	Files int
	// Only selects workload groups (big, small, meta, ckpt; ckpt-api,
	// compress and cache only when named) and paths (mount, api), comma
	// separated; empty selects all.
	Only string
	// CacheData is the size of the cache group's shards, together
	// (cache.go). Default 2 GiB.
	CacheData int64
	// CacheFiles is the number of the cache group's small files. Default
	// 10,000.
	CacheFiles int
	// Keep leaves the files of the run (baselines, local cluster) in Dir.
	Keep bool
	// SyncNamespace starts the local cluster's mount with
	// --sync-namespace: every namespace change durable before its reply
	// (docs/fuse.md, "Durability").
	SyncNamespace bool
	// LocalMetrics, when set, starts the local cluster with --metrics
	// LocalMetrics, so that its servers can be profiled during the run
	// (/debug/pprof/profile).
	LocalMetrics string
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// Creds is the API clients' mutual TLS identity for the cluster at
	// MDS; nil: plaintext (a cluster run --insecure). Run sets it to the
	// administrator's of the local cluster it starts, which runs mutual TLS.
	Creds *wire.Creds
}

func (o *Options) setDefaults() error {
	if o.Dir == "" {
		return errors.New("bench: no directory: --dir is required")
	}
	if o.Size == 0 {
		o.Size = 256 << 20
	}
	o.Size &^= ioSize - 1
	if o.Size <= 0 {
		return errors.New("bench: the big-file size must be at least 1 MiB")
	}
	if o.Threads <= 0 {
		o.Threads = 4
	}
	if o.MetaThreads <= 0 {
		o.MetaThreads = 16
	}
	if o.Files <= 0 {
		o.Files = 1000
	}
	if o.CacheData <= 0 {
		o.CacheData = 2 << 30
	}
	if o.CacheFiles <= 0 {
		o.CacheFiles = 10_000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.MDS == "" && o.Mount == "" && o.Binary == "" {
		return errors.New("bench: no cluster and no shoal binary to start one")
	}
	return nil
}

// target is one path the workloads run through.
type target struct {
	path string // pathDisk, pathLoopback, pathMount or pathAPI
	fs   fsys
	// direct is the O_DIRECT view of the disk (disk only).
	direct fsys
	// reader returns the file system a cold read goes through and a
	// function that releases it: for the API a new client, whose caches
	// are empty; otherwise fs.
	reader func() (fsys, func(), error)
}

func (t *target) readFS() (fsys, func(), error) {
	if t.reader != nil {
		return t.reader()
	}
	return t.fs, func() {}, nil
}

// measure is what one timed step moved.
type measure struct {
	bytes, ops int64
	dur, cpu   time.Duration
	self       time.Duration // of cpu, the benchmark process's own (an API step's client)
}

func (m measure) mibps() float64 { return float64(m.bytes) / (1 << 20) / m.dur.Seconds() }
func (m measure) opsps() float64 { return float64(m.ops) / m.dur.Seconds() }

type runner struct {
	o       Options
	pat     *pattern
	cpu     cpuMeter
	cold    bool // kernel caches can be dropped
	targets []*target
	vals    values
	notes   []string
	cpuAcc  map[string]*measure    // big-file phases, by path
	cpuDir  map[[2]string]*measure // big-file phases, by path and direction (read, write)
	step    int
	// broken holds the paths that failed a step of the current group;
	// failures says what failed.
	broken   map[string]bool
	failures []string
}

// Run measures the selected workloads on the selected paths and the
// baselines, and returns the figures. On return every mount it made is
// unmounted and the local cluster is stopped.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	sel, err := parseOnly(o.Only)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	o.Dir = dir
	r := &runner{o: o, pat: newPattern(), vals: values{}, cpuAcc: map[string]*measure{}, cpuDir: map[[2]string]*measure{}}
	r.note("machine: %s; load average at start %s", machine(), loadAvg())

	// The cluster.
	var local *localCluster
	defer func() {
		if local == nil {
			return
		}
		r.progress("stopping the local cluster")
		if serr := local.stop(); serr != nil && err == nil {
			err = serr
		}
		// A run that failed before it measured anything keeps the
		// cluster for a look; one that finished (failed steps are in the
		// report, their stacks in the progress output) or was
		// interrupted does not. Its log stays in any case.
		if !o.Keep && (err == nil || errors.Is(err, ErrStepsFailed) || errors.Is(err, context.Canceled)) {
			os.RemoveAll(filepath.Join(dir, "cluster"))
			os.Remove(filepath.Join(dir, "mnt"))
		}
	}()
	if o.MDS == "" && o.Mount == "" {
		r.progress("starting a local cluster: %s local --dir %s --mount %s --osts 6 --k 4 --m 2",
			o.Binary, filepath.Join(dir, "cluster"), filepath.Join(dir, "mnt"))
		var extra []string
		if o.LocalMetrics != "" {
			extra = append(extra, "--metrics", o.LocalMetrics)
		}
		local, err = startLocal(ctx, o.Binary, filepath.Join(dir, "cluster"), filepath.Join(dir, "mnt"), filepath.Join(dir, "cluster.log"), o.SyncNamespace, extra...)
		if err != nil {
			return nil, err
		}
		o.MDS, o.Mount = local.mdsAddr, local.mnt
		o.Creds = local.creds // mutual TLS, the default
		r.cpu.pid = local.cmd.Process.Pid
		r.note("cluster: shoal local started by the benchmark (6 OSTs, RS 4+2) under %s; CPU figures count the benchmark process (with the loopback daemon) and the cluster process", dir)
		if o.SyncNamespace {
			r.note("mount: --sync-namespace: every namespace change is durable in the MDS before its reply")
		} else {
			r.note("mount: early namespace replies (the default): a namespace change is acknowledged once visible and synced within milliseconds or by fsync (docs/fuse.md)")
		}
	} else {
		r.note("cluster: existing (MDS %q, mount %q); CPU figures count only the benchmark process (with the loopback daemon), not the cluster", o.MDS, o.Mount)
	}
	useMount := sel.paths[pathMount] && o.Mount != ""
	useAPI := sel.paths[pathAPI] && o.MDS != ""
	if !useMount && !useAPI {
		return nil, errors.New("bench: nothing to measure: the mount figures need --mount, the API figures need --mds")
	}

	if err := dropCaches(); err != nil {
		r.note("caches: NOT dropped (%v): reads, stats and readdirs after writes are warm, not cold", err)
	} else {
		r.cold = true
		r.note("caches: the kernel's caches are dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every read, stat and readdir phase; API reads use a new client")
	}
	r.note("threads %d (metadata %d), big files and shards %d MiB each, %d small files (4-128 KiB), %d files per metadata run",
		o.Threads, o.MetaThreads, o.Size>>20, o.Files, o.Files)

	// The baselines.
	diskDir := filepath.Join(dir, "baseline-disk")
	if err := freshDir(diskDir); err != nil {
		return nil, err
	}
	defer func() {
		if !o.Keep {
			os.RemoveAll(diskDir)
		}
	}()
	r.targets = append(r.targets, &target{path: pathDisk, fs: osFS{root: diskDir}, direct: osFS{root: diskDir, direct: true}})

	if useMount {
		src, mnt := filepath.Join(dir, "baseline-src"), filepath.Join(dir, "baseline-mnt")
		if err := freshDir(src); err != nil {
			return nil, err
		}
		ra := readAheadKB(o.Mount)
		lb, lerr := mountLoopback(src, mnt, ra)
		if lerr != nil {
			return nil, lerr
		}
		defer func() {
			if uerr := lb.unmount(); uerr != nil && err == nil {
				err = uerr
			}
			if !o.Keep {
				os.RemoveAll(src)
				os.Remove(mnt)
			}
		}()
		r.note("loopback: go-fuse %s loopback of %s at %s: MaxWrite 1 MiB, no splice, default_permissions, 1 s attr/entry timeouts, passthrough off, read_ahead_kb %d (as the Shoal mount)", goFuseVersion(), src, mnt, ra)
		r.targets = append(r.targets, &target{path: pathLoopback, fs: osFS{root: mnt}})
	}

	// The cluster's paths, each in a new directory.
	run := "bench-" + time.Now().Format("20060102-150405")
	overhead := 1.5
	if useMount {
		root := filepath.Join(o.Mount, run+"-mount")
		if err := os.Mkdir(root, 0o755); err != nil {
			return nil, err
		}
		defer func() {
			if local == nil && !o.Keep {
				os.RemoveAll(root)
			}
		}()
		r.targets = append(r.targets, &target{path: pathMount, fs: osFS{root: root}})
	}
	if useAPI {
		c, err := client.New(ctx, client.Options{MDS: o.MDS, Creds: o.Creds})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		if a, err := c.GetAttr(ctx, client.RootIno); err == nil && a.Layout.K > 0 {
			l := a.Layout
			overhead = float64(l.K+l.M) / float64(l.K)
		}
		root := "/" + run + "-api"
		if err := c.Mkdir(ctx, root, 0o755); err != nil {
			return nil, err
		}
		api := newAPIFS(ctx, c, root)
		defer func() {
			if local == nil && !o.Keep {
				api.RemoveAll(".")
			}
		}()
		r.targets = append(r.targets, &target{path: pathAPI, fs: api, reader: func() (fsys, func(), error) {
			c2, err := client.New(ctx, client.Options{MDS: o.MDS, Creds: o.Creds})
			if err != nil {
				return nil, nil, err
			}
			return newAPIFS(ctx, c2, root), func() { c2.Close() }, nil
		}})
	}
	if useAPI {
		r.note("EC overhead %.3g (the root directory's layout): API write figures are judged against the disk's rate divided by it", overhead)
	}

	start := time.Now()
	for _, g := range []struct {
		name string
		fn   func(context.Context) error
	}{{"big", r.big}, {"small", r.small}, {"meta", r.meta}, {"ckpt", r.ckpt}, {"ckpt-api", r.ckptAPI}, {"compress", r.compress}, {groupCache, r.cache}} {
		if !sel.groups[g.name] {
			continue
		}
		r.broken = map[string]bool{}
		if err := g.fn(ctx); err != nil {
			return nil, fmt.Errorf("bench %s: %w", g.name, err)
		}
	}
	for p, m := range r.cpuAcc {
		if m.cpu > 0 {
			r.vals.set("cpu.big", "MiB/cpu-s", p, float64(m.bytes)/(1<<20)/m.cpu.Seconds())
		}
	}
	r.setCPUFigures()
	r.note("run took %s; load average at end %s", time.Since(start).Round(time.Second), loadAvg())
	for _, f := range r.failures {
		r.note("FAILED: %s", f)
	}
	figs := append(assemble(r.vals, overhead), assembleCkptAPI(r.vals, overhead)...)
	figs = append(figs, assembleCompress(r.vals)...)
	rep = &Report{Figures: append(figs, assembleCache(r.vals)...), Notes: r.notes}
	if len(r.failures) > 0 {
		// The figures that were measured are still worth printing.
		return rep, fmt.Errorf("%w: %s", ErrStepsFailed, strings.Join(r.failures, "; "))
	}
	return rep, nil
}

func (r *runner) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.o.Progress, "bench: "+format+"\n", args...)
}

// coldCaches drops the kernel's caches when it may (the check at the start
// said so), and writes back dirty data in any case.
func (r *runner) coldCaches() error {
	if !r.cold {
		return nil
	}
	return dropCaches()
}

// timed runs fn as one step on target t: it prints a progress line and
// measures wall and CPU time. A step that fails (a panic included) is
// recorded, t is left out of the rest of its group, and ok is false; err
// is set only when ctx is done, which ends the run.
func (r *runner) timed(ctx context.Context, t *target, phase string, fn func() (bytes, ops int64, err error)) (m measure, ok bool, err error) {
	r.step++
	fmt.Fprintf(r.o.Progress, "bench: [%2d] %-22s %-9s ", r.step, phase, t.path)
	c0, s0, t0 := r.cpu.now(), selfCPU(), time.Now()
	b, n, err := recovered(fn)
	m = measure{bytes: b, ops: n, dur: time.Since(t0), cpu: r.cpu.now() - c0, self: selfCPU() - s0}
	if err != nil {
		fmt.Fprintf(r.o.Progress, "FAILED\n")
		if ok, err := r.try(ctx, t, phase, err); !ok {
			return m, false, err
		}
	}
	if m.dur <= 0 {
		m.dur = time.Nanosecond
	}
	switch {
	case b > 0:
		fmt.Fprintf(r.o.Progress, "%6.0f MiB in %6.2fs = %7.1f MiB/s (%d ops, %.1f cpu-s)\n", float64(b)/(1<<20), m.dur.Seconds(), m.mibps(), n, m.cpu.Seconds())
	default:
		unit := "ops"
		if strings.Contains(phase, "readdir") {
			unit = "entries"
		}
		fmt.Fprintf(r.o.Progress, "%6d %s in %6.2fs = %7.0f %s/s\n", n, unit, m.dur.Seconds(), m.opsps(), unit)
	}
	return m, true, nil
}

// try records err (if any) of what on target t: the target sits out the
// rest of the group. It returns ok when err is nil, and an error only when
// ctx is done.
func (r *runner) try(ctx context.Context, t *target, what string, err error) (ok bool, _ error) {
	if err == nil {
		return true, nil
	}
	if ctx.Err() != nil {
		return false, fmt.Errorf("%s on %s: %w", what, t.path, ctx.Err())
	}
	r.broken[t.path] = true
	msg := fmt.Sprintf("%s on %s: %v", what, t.path, err)
	r.progress("FAILED: %s", msg)
	first, _, _ := strings.Cut(msg, "\n") // a panic's stack goes to the progress output only
	r.failures = append(r.failures, first)
	return false, nil
}

// live returns the targets that have not failed in the current group.
func (r *runner) live() []*target {
	var ts []*target
	for _, t := range r.targets {
		if !r.broken[t.path] {
			ts = append(ts, t)
		}
	}
	return ts
}

// recovered runs fn, turning a panic into an error with its stack.
func recovered(fn func() (int64, int64, error)) (b, n int64, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn()
}

// accountCPU adds a big-file step (of figure fig) to its path's CPU
// accounts.
func (r *runner) accountCPU(fig, path string, m measure) {
	a := r.cpuAcc[path]
	if a == nil {
		a = &measure{}
		r.cpuAcc[path] = a
	}
	a.bytes += m.bytes
	a.cpu += m.cpu
	dir := "write"
	if strings.Contains(fig, "read") {
		dir = "read"
	}
	d := r.cpuDir[[2]string{path, dir}]
	if d == nil {
		d = &measure{}
		r.cpuDir[[2]string{path, dir}] = d
	}
	d.bytes += m.bytes
	d.cpu += m.cpu
	d.self += m.self
}

// setCPUFigures sets cpu.read and cpu.write (CPU-seconds per GiB of the
// big-file steps): for the API, the client's alone (this process); for
// the mount, the reader's or writer's (this process: the kernel's FUSE
// copies) with the cluster process's (the mount's client and the
// servers, which share it); for the loopback, this process's (the reader
// and the loopback daemon); for the disk, this process's, the baseline.
func (r *runner) setCPUFigures() {
	for k, m := range r.cpuDir {
		path, dir := k[0], k[1]
		cpu := m.cpu
		if path == pathAPI {
			cpu = m.self
		}
		if m.bytes > 0 && cpu > 0 {
			r.vals.set("cpu."+dir, "cpu-s/GiB", path, cpu.Seconds()/(float64(m.bytes)/(1<<30)))
		}
	}
}

// parallel runs fn(ctx, i) for i in [0, n) on n goroutines and returns the
// first error; the others see ctx cancelled.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	for i := range n {
		g.Go(func() error {
			_, _, err := recovered(func() (int64, int64, error) { return 0, 0, fn(gctx, i) })
			return err
		})
	}
	return g.Wait()
}

// freshDir makes dir an empty directory.
func freshDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755)
}
