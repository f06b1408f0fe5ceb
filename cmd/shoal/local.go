package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	osts, k, m, mdsReplicas          int
	unit                             int64
	debug, allowOther, syncNamespace bool
	shortCircuit                     bool // OSTs' local endpoints, used by the mount
	insecure                         bool // plaintext: no CA, no certificates
	layoutSet                        bool // --k or --m given: no fitting to --osts
	wireCompression                  string
	mdsWait                          time.Duration
	worker                           workerFlags // the MDS's administration worker (servers.go)
	scrub                            scrubFlags  // the OSTs' background scrub (servers.go)
	cache                            cacheFlags  // the mount's node-local read cache (cache.go)
}

func newLocalCmd(g *globals) *cobra.Command {
	f := &localFlags{}
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run an all-in-one cluster (one MDS, N OSTs) on a local directory, optionally mounted",
		Long: `shoal local runs one MDS and N OSTs in one process, each OST on its own
subdirectory of --dir, and mounts the file system at --mount when given.
It writes the MDS address to DIR/mds.addr, and DIR/env sets everything
other commands need (SHOAL_MDS and the administrator's certificate):
. DIR/env. A restart on the same --dir listens on the same port again when
it is free. Ctrl-C unmounts and stops; running it again on
the same --dir shows the same files.

Every connection is mutual TLS (the data path included), with a CA of its
own under DIR/tls made on the first start, and certificates for its MDS,
OSTs and mount. DIR/tls/env sets SHOAL_CERT, SHOAL_KEY and SHOAL_CA to an
administrator's certificate for other commands: . DIR/tls/env. With
--insecure it serves plaintext instead, to anyone who can reach its ports.

With --mds-replicas 3 the MDS is a replicated group of three members (Raft),
member i on DIR/mds-i and its own port; DIR/mds.addr holds the comma-separated
list of their addresses (what --mds takes), and a restart on the same --dir
uses the same addresses again (the group knows its members by them).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if p := append(workerChecks(cmd, args), scrubChecks(cmd, args)...); len(p) > 0 {
				return errors.New(strings.Join(p, "; "))
			}
			f.layoutSet = cmd.Flags().Changed("k") || cmd.Flags().Changed("m")
			return runLocal(g, f)
		},
	}
	cmd.Flags().StringVar(&f.dir, "dir", "./shoal-data", "directory holding the MDS database and the OSTs")
	cmd.Flags().StringVar(&f.mount, "mount", "", "mount point (empty: do not mount)")
	addCacheFlags(cmd, &f.cache)
	cmd.Flags().StringVar(&f.listen, "listen", "127.0.0.1:0", "MDS address (port 0 picks one)")
	cmd.Flags().StringVar(&f.metrics, "metrics", "", "address to serve Prometheus /metrics and /debug/pprof on (empty: off)")
	cmd.Flags().IntVar(&f.osts, "osts", 6, "number of OSTs")
	cmd.Flags().IntVar(&f.mdsReplicas, "mds-replicas", 1, "members of the MDS group, all in this process (1: a single MDS without Raft; 3 or 5: a replicated group, docs/mds-raft.md)")
	cmd.Flags().IntVar(&f.k, "k", layout.Default.K, "data cells per row of the root directory's layout (first start only)")
	cmd.Flags().IntVar(&f.m, "m", layout.Default.M, "parity cells per row of the root directory's layout (first start only)")
	cmd.Flags().Int64Var(&f.unit, "unit", layout.Default.Unit, "cell size in bytes of the root directory's layout (first start only)")
	cmd.Flags().BoolVar(&f.debug, "debug", false, "log every FUSE request")
	dataListenFlag(cmd, &f.dataListen, "HOST:0 each OST serves its bulk data path (chunk reads and writes on framed TCP) on, a port each (default 127.0.0.1:0; \"off\": chunk I/O over gRPC only)")
	syncNamespaceFlag(cmd, &f.syncNamespace)
	wireCompressionFlag(cmd, &f.wireCompression)
	shortCircuitFlag(cmd, &f.shortCircuit)
	mdsWaitFlag(cmd, &f.mdsWait)
	allowOtherFlag(cmd, &f.allowOther)
	addWorkerFlags(cmd, &f.worker)
	addScrubFlags(cmd, &f.scrub)
	cmd.Flags().BoolVar(&f.insecure, "insecure", os.Getenv("SHOAL_INSECURE") == "1", "serve plaintext, without a CA or certificates: anyone who can reach the ports can read and write every file (default $SHOAL_INSECURE=1)")
	return cmd
}

func runLocal(g *globals, f *localFlags) (err error) {
	log := g.logger()
	lo := layout.Layout{K: f.k, M: f.m, Unit: f.unit}
	if err := lo.Validate(); err != nil {
		return err
	}
	if f.osts < lo.Shards() && !f.layoutSet {
		// The default fits the OSTs, as a first MDS fits its root's
		// (docs/deploy.md, "How many OSTs a layout needs").
		fl := mds.FitLayout(&mdspb.Layout{K: uint32(lo.K), M: uint32(lo.M), Unit: uint32(lo.Unit)}, f.osts)
		lo.K, lo.M = int(fl.K), int(fl.M)
	}
	if f.osts < lo.Shards() {
		return fmt.Errorf("%d OSTs cannot hold %v: need at least %d", f.osts, lo, lo.Shards())
	}
	switch f.wireCompression {
	case client.WireNone, client.WireS2, client.WireAuto:
	default:
		return fmt.Errorf("--wire-compression %q: want none, s2 or auto", f.wireCompression)
	}
	if f.dataListen != "" && f.dataListen != ost.DataListenOff {
		if _, port, err := net.SplitHostPort(f.dataListen); err != nil || port != "0" {
			return fmt.Errorf("--data-listen %q: want HOST:0 (each OST picks its own port) or %q", f.dataListen, ost.DataListenOff)
		}
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return err
	}
	lock, err := lockLocalDir(f.dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if f.mount != "" {
		if err := refuseStackedMount(f.mount); err != nil {
			return err
		}
	}
	// Ctrl-C from here on stops cleanly (after the start, if it comes
	// during it), and the last line says so, as mds, ost and mount do.
	defer func() { log.Info("shoal local stopped", "dir", f.dir, "err", err) }()
	sctx, stop := signalContext()
	defer stop()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()

	var lc *localCreds // nil: plaintext
	var mdsCreds, ostCreds, mountCreds *wire.Creds
	if f.insecure {
		log.Warn("shoal local: serving PLAINTEXT (--insecure): no authentication, no encryption; anyone who can reach its ports can read and write every file")
	} else {
		host, _, err := net.SplitHostPort(f.listen)
		if err != nil {
			return fmt.Errorf("--listen %q: %w", f.listen, err)
		}
		if lc, err = localTLS(f.dir, host); err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		mdsCreds, ostCreds, mountCreds = lc.mds, lc.ost, lc.client
	}
	serveOpts := []wire.ServerOpt{wire.ServeCreds(mdsCreds), wire.ServeAuthorizer(mds.Authorize), wire.ServeLogger(log.With("proc", "mds"))}

	admin, err := f.worker.options()
	if err != nil {
		return err
	}
	scrub, err := f.scrub.options()
	if err != nil {
		return err
	}
	mo := mds.Options{
		Admin: admin,
		Dir:   filepath.Join(f.dir, "mds"), Logger: log.With("proc", "mds"),
		Registry:      prometheus.WrapRegistererWith(prometheus.Labels{"proc": "mds"}, reg),
		DefaultLayout: &mdspb.Layout{K: uint32(lo.K), M: uint32(lo.M), Unit: uint32(lo.Unit)},
		Creds:         mdsCreds,
	}
	var mdsAddr string
	if f.mdsReplicas > 1 {
		addrs, stop, err := startLocalGroup(ctx, f, mo, reg, serveOpts)
		if err != nil {
			return err
		}
		defer stop()
		mdsAddr = strings.Join(addrs, ",")
	} else {
		if f.mdsReplicas < 1 {
			return fmt.Errorf("--mds-replicas %d: want 1 (a single MDS) or more", f.mdsReplicas)
		}
		if _, err := os.Stat(filepath.Join(f.dir, "mds-1")); err == nil {
			return fmt.Errorf("%s holds a replicated MDS (mds-1, ...): run with --mds-replicas", f.dir)
		}
		m, err := mds.Open(ctx, mo)
		if err != nil {
			return err
		}
		defer m.Close()
		// The port of the last run when it is free (stableListen).
		msrv, err := wire.Listen(stableListen(f.dir, f.listen), m.Register, serveOpts...)
		if err != nil {
			msrv, err = wire.Listen(f.listen, m.Register, serveOpts...)
		}
		if err != nil {
			return fmt.Errorf("listen %s: %w", f.listen, err)
		}
		msrv.OnStop(m.Drain)
		defer msrv.Stop(2 * time.Second)
		mdsAddr = msrv.Addr()
	}
	if err := os.WriteFile(filepath.Join(f.dir, "mds.addr"), []byte(mdsAddr+"\n"), 0o644); err != nil {
		return err
	}
	if err := writeLocalEnv(f.dir, mdsAddr, lc); err != nil {
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
		o, srv, err := startOST(ctx, log.With("proc", fmt.Sprintf("ost-%02d", i)), r, dir, "127.0.0.1:0", "", f.dataListen, mdsAddr, ostCreds, scrub, withLocalData(f.shortCircuit))
		if err != nil {
			return err
		}
		targets = append(targets, target{o, srv})
	}
	serveMetrics(ctx, log, f.metrics, reg)

	what := "MDS"
	if f.mdsReplicas > 1 {
		what = fmt.Sprintf("MDS group of %d", f.mdsReplicas)
	}
	fmt.Printf("shoal local: %s %s (written to %s), %d OSTs under %s, layout %v\n",
		what, mdsAddr, filepath.Join(f.dir, "mds.addr"), f.osts, f.dir, lo)
	insecure := ""
	if lc != nil {
		fmt.Printf("mutual TLS, CA in %s; other commands, as administrator: . %s\n", lc.dir, filepath.Join(f.dir, localEnvFile))
	} else {
		fmt.Printf("PLAINTEXT (--insecure); other commands need --insecure (or SHOAL_INSECURE=1; . %s sets it)\n", filepath.Join(f.dir, localEnvFile))
		insecure = " --insecure"
	}
	if f.mount == "" {
		fmt.Printf("ready in %s; mount with: shoal mount%s --mds %s MOUNTPOINT; Ctrl-C stops\n", time.Since(start).Round(time.Millisecond), insecure, mdsAddr)
		<-sctx.Done()
		return nil
	}
	if err := os.MkdirAll(f.mount, 0o755); err != nil {
		return err
	}
	c, err := client.New(ctx, client.Options{MDS: mdsAddr, Logger: log.With("proc", "client"), Registry: prometheus.WrapRegistererWith(prometheus.Labels{"proc": "client"}, reg), EarlyNamespaceReplies: !f.syncNamespace, Creds: mountCreds, WireCompression: f.wireCompression, NoShortCircuit: !f.shortCircuit, MDSRetry: mdsRetry(f.mdsWait)})
	if err != nil {
		return err
	}
	defer c.Close()
	ca, err := f.cache.open(ctx, c, log, prometheus.WrapRegistererWith(prometheus.Labels{"proc": "client"}, reg))
	if err != nil {
		return err
	}
	if ca != nil {
		defer ca.Close()
	}
	mnt, err := fuse.Mount(ctx, f.mount, fuse.Options{Client: c, Logger: log.With("proc", "fuse"), Debug: f.debug, AllowOther: f.allowOther, FsName: mountSource(mdsAddr),
		Registry: prometheus.WrapRegistererWith(prometheus.Labels{"proc": "fuse"}, reg), Cache: ca, CacheNoPassthrough: f.cache.noPassthrough})
	if err != nil {
		return err
	}
	fmt.Printf("ready in %s: mounted at %s; Ctrl-C unmounts and stops\n", time.Since(start).Round(time.Millisecond), f.mount)
	return waitUnmount(log.With("proc", "fuse"), mnt)
}

// startLocalGroup runs the MDS as a replicated group of f.mdsReplicas
// members in this process, member i on DIR/mds-i. On the first start each
// member binds --listen's host (port 0: any port; port P: P+i-1); on a
// later start on the same --dir, the addresses in DIR/mds.addr, since the
// group knows its members by address. It returns the members' addresses
// in id order once one of them serves as leader, and a function that
// stops them all. The members serve with serveOpts.
func startLocalGroup(ctx context.Context, f *localFlags, mo mds.Options, reg *prometheus.Registry, serveOpts []wire.ServerOpt) (addrs []string, stop func(), err error) {
	n := f.mdsReplicas
	if _, err := os.Stat(filepath.Join(f.dir, "mds")); err == nil {
		return nil, nil, fmt.Errorf("%s holds a single MDS (mds/): it cannot become a group; use another --dir", f.dir)
	}
	_, statErr := os.Stat(filepath.Join(f.dir, "mds-1"))
	existing := statErr == nil
	host, port, err := net.SplitHostPort(f.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--listen %q: %w", f.listen, err)
	}
	if existing {
		b, err := os.ReadFile(filepath.Join(f.dir, "mds.addr"))
		if err != nil {
			return nil, nil, fmt.Errorf("%s has an MDS group but no mds.addr naming its members: %w", f.dir, err)
		}
		addrs = strings.Split(strings.TrimSpace(string(b)), ",")
		if len(addrs) != n {
			return nil, nil, fmt.Errorf("%s has an MDS group of %d members (mds.addr), not %d", f.dir, len(addrs), n)
		}
	} else {
		p0, err := strconv.Atoi(port)
		if err != nil {
			return nil, nil, fmt.Errorf("--listen %q: bad port", f.listen)
		}
		for i := 0; i < n; i++ {
			p := 0
			if p0 != 0 {
				p = p0 + i
			}
			addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(p)))
		}
	}
	var binds []*wire.Server
	var servers []*mds.Server
	stopAll := func() {
		// Each member's server waits for its calls, the other members'
		// Raft streams included: stop them all at once.
		var wg sync.WaitGroup
		for _, b := range binds {
			wg.Add(1)
			go func() { defer wg.Done(); b.Stop(2 * time.Second) }()
		}
		wg.Wait()
		for _, s := range servers {
			s.Close()
		}
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	// Bind every member first: a member must be reachable at its address
	// while its Raft node starts, and a new group learns the ports here.
	for i := range addrs {
		b, err := wire.Bind(addrs[i], serveOpts...)
		if err != nil {
			return nil, nil, fmt.Errorf("MDS member %d: listen %s: %w", i+1, addrs[i], err)
		}
		binds = append(binds, b)
		addrs[i] = b.Addr()
	}
	peers := map[uint64]string{}
	for i, a := range addrs {
		peers[uint64(i+1)] = a
	}
	for i := range addrs {
		o := mo
		o.Dir = filepath.Join(f.dir, fmt.Sprintf("mds-%d", i+1))
		o.Logger = mo.Logger.With("member", i+1)
		o.Registry = prometheus.WrapRegistererWith(prometheus.Labels{"proc": fmt.Sprintf("mds-%d", i+1)}, reg)
		o.Raft = &mds.RaftOptions{ID: uint64(i + 1), Peers: peers}
		s, err := mds.Open(ctx, o)
		if err != nil {
			return nil, nil, fmt.Errorf("MDS member %d: %w", i+1, err)
		}
		servers = append(servers, s)
		binds[i].Serve(s.Register)
		binds[i].OnStop(s.Drain)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range servers {
			if st, _ := s.MemberStatus(); st.Serving {
				return addrs, stopAll, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("no MDS member became leader in 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
