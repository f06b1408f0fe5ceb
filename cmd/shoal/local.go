package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/fuse"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost"
)

type localFlags struct {
	dataListen                       string // host:0 or "off"
	dir, mount, listen, metrics      string
	osts, k, m                       int
	unit                             int64
	debug, allowOther, syncNamespace bool
}

func newLocalCmd(g *globals) *cobra.Command {
	f := &localFlags{}
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run an all-in-one cluster (one MDS, N OSTs) on a local directory, optionally mounted",
		Long: `shoal local runs one MDS and N OSTs in one process, each OST on its own
subdirectory of --dir, and mounts the file system at --mount when given.
It writes the MDS address to DIR/mds.addr, so that other commands can use
--mds $(cat DIR/mds.addr). Ctrl-C unmounts and stops; running it again on
the same --dir shows the same files.`,
		RunE: func(cmd *cobra.Command, args []string) error { return runLocal(g, f) },
	}
	cmd.Flags().StringVar(&f.dir, "dir", "./shoal-data", "directory holding the MDS database and the OSTs")
	cmd.Flags().StringVar(&f.mount, "mount", "", "mount point (empty: do not mount)")
	cmd.Flags().StringVar(&f.listen, "listen", "127.0.0.1:0", "MDS address (port 0 picks one)")
	cmd.Flags().StringVar(&f.metrics, "metrics", "", "address to serve Prometheus /metrics and /debug/pprof on (empty: off)")
	cmd.Flags().IntVar(&f.osts, "osts", 6, "number of OSTs")
	cmd.Flags().IntVar(&f.k, "k", layout.Default.K, "data cells per row of the root directory's layout (first start only)")
	cmd.Flags().IntVar(&f.m, "m", layout.Default.M, "parity cells per row of the root directory's layout (first start only)")
	cmd.Flags().Int64Var(&f.unit, "unit", layout.Default.Unit, "cell size in bytes of the root directory's layout (first start only)")
	cmd.Flags().BoolVar(&f.debug, "debug", false, "log every FUSE request")
	dataListenFlag(cmd, &f.dataListen, "HOST:0 each OST serves its bulk data path (chunk reads and writes on framed TCP) on, a port each (default 127.0.0.1:0; \"off\": chunk I/O over gRPC only)")
	syncNamespaceFlag(cmd, &f.syncNamespace)
	allowOtherFlag(cmd, &f.allowOther)
	return cmd
}

func runLocal(g *globals, f *localFlags) error {
	log := g.logger()
	lo := layout.Layout{K: f.k, M: f.m, Unit: f.unit}
	if err := lo.Validate(); err != nil {
		return err
	}
	if f.osts < lo.Shards() {
		return fmt.Errorf("%d OSTs cannot hold %v: need at least %d", f.osts, lo, lo.Shards())
	}
	if f.dataListen != "" && f.dataListen != ost.DataListenOff {
		if _, port, err := net.SplitHostPort(f.dataListen); err != nil || port != "0" {
			return fmt.Errorf("--data-listen %q: want HOST:0 (each OST picks its own port) or %q", f.dataListen, ost.DataListenOff)
		}
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()

	m, err := mds.Open(ctx, mds.Options{
		Dir: filepath.Join(f.dir, "mds"), Logger: log.With("proc", "mds"),
		Registry:      prometheus.WrapRegistererWith(prometheus.Labels{"proc": "mds"}, reg),
		DefaultLayout: &mdspb.Layout{K: uint32(lo.K), M: uint32(lo.M), Unit: uint32(lo.Unit)},
	})
	if err != nil {
		return err
	}
	defer m.Close()
	msrv, err := wire.Listen(f.listen, m.Register)
	if err != nil {
		return fmt.Errorf("listen %s: %w", f.listen, err)
	}
	defer msrv.Stop(2 * time.Second)
	mdsAddr := msrv.Addr()
	if err := os.WriteFile(filepath.Join(f.dir, "mds.addr"), []byte(mdsAddr+"\n"), 0o644); err != nil {
		return err
	}

	type target struct {
		o   *ost.Server
		srv *wire.Server
	}
	var targets []target
	defer func() {
		for _, t := range targets {
			t.srv.Stop(2 * time.Second)
			t.o.Close()
		}
	}()
	for i := 1; i <= f.osts; i++ {
		dir := filepath.Join(f.dir, fmt.Sprintf("ost-%02d", i))
		r := prometheus.WrapRegistererWith(prometheus.Labels{"proc": fmt.Sprintf("ost-%02d", i)}, reg)
		o, srv, err := startOST(ctx, log.With("proc", fmt.Sprintf("ost-%02d", i)), r, dir, "127.0.0.1:0", "", f.dataListen, mdsAddr)
		if err != nil {
			return err
		}
		targets = append(targets, target{o, srv})
	}
	serveMetrics(ctx, log, f.metrics, reg)

	fmt.Printf("shoal local: MDS %s (written to %s), %d OSTs under %s, layout %v\n",
		mdsAddr, filepath.Join(f.dir, "mds.addr"), f.osts, f.dir, lo)
	if f.mount == "" {
		fmt.Printf("ready in %s; mount with: shoal mount --mds %s MOUNTPOINT; Ctrl-C stops\n", time.Since(start).Round(time.Millisecond), mdsAddr)
		sctx, stop := signalContext()
		defer stop()
		<-sctx.Done()
		return nil
	}
	if err := os.MkdirAll(f.mount, 0o755); err != nil {
		return err
	}
	c, err := client.New(ctx, client.Options{MDS: mdsAddr, Logger: log.With("proc", "client"), Registry: prometheus.WrapRegistererWith(prometheus.Labels{"proc": "client"}, reg), EarlyNamespaceReplies: !f.syncNamespace})
	if err != nil {
		return err
	}
	defer c.Close()
	mnt, err := fuse.Mount(ctx, f.mount, fuse.Options{Client: c, Logger: log.With("proc", "fuse"), Debug: f.debug, AllowOther: f.allowOther})
	if err != nil {
		return err
	}
	fmt.Printf("ready in %s: mounted at %s; Ctrl-C unmounts and stops\n", time.Since(start).Round(time.Millisecond), f.mount)
	return waitUnmount(log.With("proc", "fuse"), mnt)
}
