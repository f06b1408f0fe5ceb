package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/tools/bench"
)

func newBenchCmd(g *globals) *cobra.Command {
	o := bench.Options{}
	var size, cacheData string
	var asJSON, markdown bool
	var replicas int
	var tf tlsFlags
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "bench --dir D [--mds ADDR] [--mount MNT]",
		Short: "Measure a cluster (or a local one it starts) next to the bare disk and a loopback FUSE mount",
		Long: `shoal bench runs big-file, small-file, metadata and checkpoint-shaped
workloads through a Shoal FUSE mount and through the client library, and
the same workloads on two baselines in the same run: plain files on the
disk under --dir, and go-fuse's loopback file system over that disk,
mounted with Shoal's mount options and FUSE passthrough off. It prints
each figure, its baseline, the ratio and the target issue 4 sets.

With neither --mds nor --mount it starts its own cluster:
  shoal local --dir D/cluster --mount D/mnt --osts 6 --k 4 --m 2
and stops it at the end. --mds aims the API figures at an existing
cluster, --mount the mount figures. (Unlike other client commands, --mds
does not default to $SHOAL_MDS, so that a plain run always measures a
fresh local cluster.) With --mds, the API clients take the TLS flags of
the other client commands (--cert, --key, --ca, or $SHOAL_CERT, $SHOAL_KEY,
$SHOAL_CA: . DIR/tls/env of a shoal local), or --insecure; the cluster
it starts itself runs with the default settings (mutual TLS; its API
clients use the administrator's certificate from its env file). Cold reads need root to drop the kernel
caches. See docs/performance.md.

--only cache (opt-in: it writes --cache-data and --cache-files three
times and reads it four times: much longer than a plain run) measures
the node-local read cache: it starts a second cluster of its own,
  shoal local --dir D/cache-cluster --mount D/cache-mnt --cache-dir D/cache-dir
(also when --mds or --mount name an existing cluster), writes the data set
to the disk, the run's mount and that mount, and reads it cold from the
disk, through the mount without a cache, and twice through the one with
(the first read fills the cache, the second is served from it). Figures
cache.{shards,small}.read1 (target 0.95 x no cache) and .read2 (target
0.9 x the disk). See docs/cache.md.

--mds-replicas N (N > 1) compares the MDS alone: it runs the API
workloads of --only (default meta) against two clusters started one
after the other under --dir, "shoal local --mds-replicas 1" and
"shoal local --mds-replicas N", and prints their figures side by side
as a plain table (docs/reliability.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := bench.ParseSize(size)
			if err != nil {
				return err
			}
			o.Size = n
			if o.CacheData, err = bench.ParseSize(cacheData); err != nil {
				return fmt.Errorf("--cache-data: %w", err)
			}
			if o.Binary, err = os.Executable(); err != nil {
				return err
			}
			o.Progress = os.Stderr
			if o.MDS != "" {
				if o.Creds, err = tf.load(); err != nil {
					return err
				}
			}
			if cpuProfile != "" {
				pf, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(pf); err != nil {
					pf.Close()
					return err
				}
				defer func() {
					pprof.StopCPUProfile()
					pf.Close()
				}()
			}
			ctx, stop := signalContext()
			defer stop()
			if replicas > 1 {
				return benchReplicas(ctx, o, replicas, os.Stdout)
			}
			rep, err := bench.Run(ctx, o)
			if rep == nil {
				return err
			}
			// With bench.ErrStepsFailed the figures measured are printed
			// (the failures are in the notes), then the error.
			var werr error
			switch {
			case asJSON:
				rep.WriteNotes(os.Stderr)
				werr = rep.WriteJSON(os.Stdout)
			case markdown:
				werr = rep.WriteMarkdown(os.Stdout)
			default:
				fmt.Println()
				werr = rep.WriteTable(os.Stdout)
			}
			if err != nil {
				return err
			}
			return werr
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "dir", "", "scratch directory for the baselines and the local cluster, on the disk to compare with (required)")
	f.StringVar(&o.MDS, "mds", "", "MDS address of an existing cluster: the API figures")
	f.StringVar(&o.Mount, "mount", "", "mount point of an existing cluster: the mount figures")
	f.StringVar(&size, "size", "256MiB", "size of each big file and checkpoint shard (whole MiB)")
	f.IntVar(&o.Threads, "threads", 4, "big files, checkpoint shards and threads of the data workloads")
	f.IntVar(&o.MetaThreads, "meta-threads", 16, "threads of the metadata workloads")
	f.IntVar(&o.Files, "files", 1000, "small files, and files per metadata run")
	f.StringVar(&o.Only, "only", "", "comma list of workload groups (big, small, meta, ckpt; ckpt-api, compress and cache only when named) and paths (mount, api) to run; empty: all but the named-only groups")
	f.StringVar(&cacheData, "cache-data", "2GiB", "cache group: bytes of 64 MiB shards")
	f.IntVar(&o.CacheFiles, "cache-files", 10_000, "cache group: small files (4-128 KiB)")
	f.BoolVar(&o.Keep, "keep", false, "keep the baseline files and the local cluster under --dir")
	f.BoolVar(&o.SyncNamespace, "sync-namespace", false, "start the local cluster's mount with --sync-namespace (every namespace change durable before its reply)")
	f.BoolVar(&asJSON, "json", false, "print the figures as a JSON array")
	f.BoolVar(&markdown, "markdown", false, "print the table as Markdown")
	f.IntVar(&replicas, "mds-replicas", 1, "with N > 1: run the API workloads of --only (default meta) against a single MDS and a group of N members (shoal local --mds-replicas), side by side")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the benchmark process (the API clients and the loopback daemon; not the cluster's servers: profile those with shoal local --metrics and /debug/pprof) to this file")
	f.StringVar(&o.LocalMetrics, "local-metrics", "", "start the benchmark's own cluster with --metrics ADDR, to profile its servers during the run (ADDR/debug/pprof/profile)")
	addTLSFlags(cmd, &tf)
	cmd.MarkFlagRequired("dir")
	return cmd
}

// benchReplicas runs the API workloads of o.Only against a local cluster
// with a single MDS and then one with an MDS group of n members, and
// prints each figure of both side by side.
func benchReplicas(ctx context.Context, o bench.Options, n int, w io.Writer) error {
	if o.MDS != "" || o.Mount != "" {
		return errors.New("--mds-replicas starts its own clusters: do not give --mds or --mount")
	}
	only := o.Only
	if only == "" {
		only = "meta"
	}
	if !strings.Contains(only, "api") {
		only += ",api"
	}
	var reps []*bench.Report
	for _, r := range []int{1, n} {
		dir := filepath.Join(o.Dir, fmt.Sprintf("cluster-mds%d", r))
		addr, stop, err := startBenchLocal(ctx, o.Binary, dir, r)
		if err != nil {
			return err
		}
		ro := o
		ro.MDS, ro.Only, ro.Dir = addr, only, filepath.Join(o.Dir, fmt.Sprintf("run-mds%d", r))
		fmt.Fprintf(o.Progress, "bench: %d MDS member(s) at %s\n", r, addr)
		rep, err := bench.Run(ctx, ro)
		serr := stop()
		if rep == nil {
			return errors.Join(err, serr)
		}
		if err != nil {
			rep.WriteNotes(os.Stderr)
			fmt.Fprintf(os.Stderr, "bench with %d MDS member(s): %v\n", r, err)
		}
		reps = append(reps, rep)
		if !o.Keep {
			os.RemoveAll(dir)
			os.RemoveAll(ro.Dir)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "figure\tunit\t1 MDS\t%d members\tratio\t\n", n)
	for _, f := range reps[0].Figures {
		g := "-"
		ratio := "-"
		for _, h := range reps[1].Figures {
			if h.Name == f.Name && h.Unit == f.Unit {
				g = fmt.Sprintf("%.0f", h.Value)
				if f.Value > 0 {
					ratio = fmt.Sprintf("%.2f", h.Value/f.Value)
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t\n", f.Name, f.Unit, f.Value, g, ratio)
	}
	return tw.Flush()
}

// startBenchLocal runs `bin local --dir dir --mds-replicas r` (6 OSTs,
// RS 4+2, no mount, plaintext on loopback) and returns the MDS address
// list once dir/mds.addr is written, and a function that stops it.
func startBenchLocal(ctx context.Context, bin, dir string, r int) (addr string, stop func() error, err error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	logPath := dir + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "local", "--dir", dir, "--osts", "6", "--k", "4", "--m", "2",
		"--mds-replicas", fmt.Sprint(r), "--log-level", "warn", "--insecure") // the benchmark's clients carry no certificates
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGINT}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s local: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() error {
		cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			return fmt.Errorf("shoal local (%s) did not stop within 30 s of SIGINT and was killed", dir)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "mds.addr")); err == nil && strings.TrimSpace(string(b)) != "" {
			return strings.TrimSpace(string(b)), stop, nil
		}
		select {
		case err := <-exited:
			return "", nil, fmt.Errorf("shoal local exited before it was ready (%v): see %s", err, logPath)
		case <-ctx.Done():
			stop()
			return "", nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("shoal local was not ready after 2 minutes: see %s", logPath)
		}
	}
}
