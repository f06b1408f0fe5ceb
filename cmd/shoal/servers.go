package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/ost"
)

func newMDSCmd(g *globals) *cobra.Command {
	var dir, listen, metrics, peers string
	var id uint64
	var join bool
	var tf tlsFlags
	var squash []string
	var squashUID, squashGID uint32
	var squashAll bool
	var af workerFlags
	var pf placementFlags
	cmd := &cobra.Command{
		Use:   "mds",
		Args:  cobra.NoArgs,
		Short: "Run a metadata server, alone or as one member of a replicated group (--id, --peers)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.serve("mds", &tf, func(ctx context.Context, log *slog.Logger, creds *wire.Creds, reg *prometheus.Registry) error {
				admin, err := af.options()
				if err != nil {
					return err
				}
				o := mds.Options{Dir: dir, Logger: log, Registry: reg, Creds: creds, Admin: admin, Placement: pf.options(),
					Identity: mds.IdentityOptions{Squash: squash, SquashUID: squashUID, SquashGID: squashGID, SquashAll: squashAll}}
				if peers != "" || id != 0 || join {
					p, err := parsePeers(peers)
					if err != nil {
						return err
					}
					o.Raft = &mds.RaftOptions{ID: id, Peers: p, Join: join}
				}
				// Bind first: a member must be reachable at its address
				// while its Raft node starts.
				srv, err := wire.Bind(listen, wire.ServeCreds(creds), wire.ServeAuthorizer(mds.Authorize), wire.ServeLogger(log))
				if err != nil {
					return fmt.Errorf("listen %s: %w", listen, err)
				}
				m, err := mds.Open(ctx, o)
				if err != nil {
					srv.Stop(0)
					return err
				}
				defer m.Close()
				srv.Serve(m.Register)
				srv.OnStop(m.Drain)
				log.Info("MDS serving", "addr", srv.Addr(), "dir", dir)
				serveOps(ctx, log, metrics, reg, mdsReady(m))
				<-ctx.Done()
				log.Info("MDS stopping", "addr", srv.Addr(), "why", context.Cause(ctx))
				srv.Stop(5 * time.Second)
				err = m.Close()
				log.Info("MDS stopped", "addr", srv.Addr(), "err", err)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the MDS database (required)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:"+wire.DefaultMDSPort, "address to serve gRPC on")
	cmd.Flags().StringVar(&metrics, "metrics", "", "address to serve Prometheus /metrics, /healthz, /readyz and /debug/pprof on (empty: off)")
	cmd.Flags().Uint64Var(&id, "id", 0, "member id in a replicated MDS group (with --peers)")
	cmd.Flags().StringVar(&peers, "peers", "", "initial members of the group: 1=ADDR1,2=ADDR2,3=ADDR3 (this member included; read on the first start only)")
	cmd.Flags().BoolVar(&join, "join", false, "join an existing group as a new member (add it with 'shoal admin mds add' first)")
	addTLSFlags(cmd, &tf)
	cmd.Flags().StringSliceVar(&squash, "squash", nil, "certificate names (CN) of client nodes whose root is squashed; \"*\" for every client certificate (docs/security.md)")
	cmd.Flags().Uint32Var(&squashUID, "squash-uid", 65534, "uid squashed root (or, with --squash-all, every uid) becomes")
	cmd.Flags().Uint32Var(&squashGID, "squash-gid", 65534, "gid squashed root (or, with --squash-all, every gid) becomes")
	cmd.Flags().BoolVar(&squashAll, "squash-all", false, "squash every uid and gid of squashed nodes, not only root")
	addWorkerFlags(cmd, &af)
	addPlacementFlags(cmd, &pf)
	return configurable(cmd, append(mdsChecks(), workerChecks, placementChecks)...)
}

// serve runs fn, the body of `shoal mds` or `shoal ost`, under a context
// that a signal cancels, with the logger of proc, the TLS credentials
// (reloaded on SIGHUP; nil, with a warning, under --insecure) and a
// metrics registry.
func (g *globals) serve(proc string, tf *tlsFlags, fn func(ctx context.Context, log *slog.Logger, creds *wire.Creds, reg *prometheus.Registry) error) error {
	ctx, cancel := signalContext()
	defer cancel()
	log := g.logger().With("proc", proc)
	creds, err := tf.load()
	if err != nil {
		return err
	}
	if creds == nil {
		log.Warn("serving plaintext (--insecure): no authentication, no encryption")
	}
	reloadOnHUP(creds, log.Info, ctx.Done())
	return fn(ctx, log, creds, prometheus.NewRegistry())
}

// parsePeers parses "1=host:port,2=host:port".
func parsePeers(s string) (map[uint64]string, error) {
	out := map[uint64]string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		id, err := strconv.ParseUint(k, 10, 64)
		if !ok || err != nil || id == 0 || v == "" {
			return nil, fmt.Errorf("--peers: %q is not ID=ADDR", p)
		}
		out[id] = v
	}
	return out, nil
}

func newOSTCmd(g *globals) *cobra.Command {
	var dir, listen, advertise, mdsAddr, metrics string
	var dataListen, capacity string
	var shortCircuit bool
	var tf tlsFlags
	var sf scrubFlags
	cmd := &cobra.Command{
		Use:   "ost",
		Args:  cobra.NoArgs,
		Short: "Run an object storage target on one directory",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireMDS(mdsAddr); err != nil {
				return err
			}
			return g.serve("ost", &tf, func(ctx context.Context, log *slog.Logger, creds *wire.Creds, reg *prometheus.Registry) error {
				scrub, err := sf.options()
				if err != nil {
					return err
				}
				capOpt, err := withCapacity(capacity)
				if err != nil {
					return err
				}
				o, srv, err := startOST(ctx, log, reg, dir, listen, advertise, dataListen, mdsAddr, creds, scrub, capOpt, withLocalData(shortCircuit))
				if err != nil {
					return err
				}
				log.Info("OST serving", "addr", srv.Addr(), "data_addr", o.DataAddr(), "id", o.ID(), "dir", dir)
				serveMetrics(ctx, log, metrics, reg)
				<-ctx.Done()
				log.Info("OST stopping", "ost", o.ID(), "addr", srv.Addr(), "why", context.Cause(ctx))
				srv.Stop(5 * time.Second)
				err = o.Close()
				log.Info("OST stopped", "ost", o.ID(), "err", err)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory holding the chunks (required)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to serve gRPC on")
	cmd.Flags().StringVar(&advertise, "advertise", "", "address clients reach this OST at (default: the listen address)")
	dataListenFlag(cmd, &dataListen, "address to serve the bulk data path (chunk reads and writes on framed TCP) on (default: the --listen host, any port; \"off\": chunk I/O over gRPC only)")
	shortCircuitFlag(cmd, &shortCircuit)
	cmd.Flags().StringVar(&metrics, "metrics", "", "address to serve Prometheus /metrics, /healthz, /readyz and /debug/pprof on (empty: off)")
	mdsFlag(cmd, &mdsAddr)
	addTLSFlags(cmd, &tf)
	addScrubFlags(cmd, &sf)
	capacityFlag(cmd, &capacity)
	return configurable(cmd, append(ostChecks(), scrubChecks, capacityCheck)...)
}

// shortCircuitFlag adds --short-circuit: on an OST, serve the data path's
// local endpoint; on a client, use the local endpoints of OSTs on its
// host.
func shortCircuitFlag(cmd *cobra.Command, dst *bool) {
	cmd.Flags().BoolVar(dst, "short-circuit", true, "short-circuit reads on one host: OSTs serve a local endpoint (an abstract unix socket) through which clients on the same host read chunk files directly, verified, and write without TLS; off: every chunk goes over TCP (docs/data-path.md)")
}

// withLocalData is startOST's option for --short-circuit.
func withLocalData(on bool) func(*ost.Options) {
	return func(o *ost.Options) { o.NoLocalData = !on }
}

// dataListenFlag adds --data-listen.
func dataListenFlag(cmd *cobra.Command, dst *string, usage string) {
	cmd.Flags().StringVar(dst, "data-listen", "", usage)
}

// startOST opens an OST on dir with the scrubber's options (and the
// options tune sets), serves it on listen (gRPC) and dataListen (the data
// path; "": the host of listen, any port) with mutual TLS (creds nil:
// plaintext), and registers it with the MDS.
func startOST(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, dir, listen, advertise, dataListen, mdsAddr string, creds *wire.Creds, scrub ost.ScrubOptions, tune ...func(*ost.Options)) (*ost.Server, *wire.Server, error) {
	srv, err := wire.Bind(listen, wire.ServeCreds(creds), wire.ServeAuthorizer(ost.Authorize), wire.ServeLogger(log))
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", listen, err)
	}
	if advertise == "" {
		advertise = srv.Addr()
	}
	if dataListen == "" {
		host, _, err := net.SplitHostPort(listen)
		if err != nil {
			srv.Kill()
			return nil, nil, fmt.Errorf("--listen %s: %w", listen, err)
		}
		dataListen = net.JoinHostPort(host, "0")
	}
	oo := ost.Options{Dir: dir, MDSAddr: mdsAddr, AdvertiseAddr: advertise, Logger: log, Registry: reg, DataListen: dataListen, Creds: creds, Scrub: scrub}
	for _, t := range tune {
		t(&oo)
	}
	o, err := ost.Open(ctx, oo)
	if err != nil {
		srv.Kill()
		return nil, nil, err
	}
	srv.Serve(o.Register)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := o.Start(sctx); err != nil {
		srv.Kill()
		o.Close()
		return nil, nil, fmt.Errorf("register with MDS %s: %w", mdsAddr, err)
	}
	return o, srv, nil
}

// serveMetrics serves /metrics, /healthz, /readyz (ready while serving)
// and /debug/pprof on addr (health.go).
func serveMetrics(ctx context.Context, log *slog.Logger, addr string, reg *prometheus.Registry) {
	serveOps(ctx, log, addr, reg, nil)
}

// Flags of the administration worker (shoal mds) and of the scrubber
// (shoal ost); docs/admin.md, "Configuration".

type workerFlags struct {
	repairAfter time.Duration
	moveGrace   time.Duration
	interval    time.Duration
	concurrency int
	rebalanceBW string
}

func addWorkerFlags(cmd *cobra.Command, f *workerFlags) {
	fs := cmd.Flags()
	fs.DurationVar(&f.repairAfter, "repair-after", 30*time.Minute, "an OST down this long has its chunks rebuilt on other OSTs without an operator (a repair job starts); 0: never on its own")
	fs.DurationVar(&f.moveGrace, "move-grace", 2*time.Minute, "how long the old copy of a moved chunk is kept after the switch, for readers holding the old placement")
	fs.DurationVar(&f.interval, "admin-interval", time.Second, "pause between rounds of the administration worker (moves, repairs, old copies' deletion)")
	fs.IntVar(&f.concurrency, "admin-concurrency", mds.DefaultAdminConcurrency, fmt.Sprintf("extents the administration worker copies or rebuilds at once (1 to %d)", mds.MaxAdminConcurrency))
	fs.StringVar(&f.rebalanceBW, "rebalance-bandwidth", "0", "a rebalance started without --max-bandwidth writes at most `RATE` bytes/s (e.g. 200MiB); 0: unlimited")
}

// options turns the flags into mds.AdminOptions (workerChecks has
// checked them).
func (f *workerFlags) options() (mds.AdminOptions, error) {
	bw, err := parseBytes(f.rebalanceBW)
	if err != nil {
		return mds.AdminOptions{}, fmt.Errorf("--rebalance-bandwidth: %w", err)
	}
	o := mds.AdminOptions{
		Interval: f.interval, RepairAfter: f.repairAfter, RetireGrace: f.moveGrace,
		Concurrency: f.concurrency, RebalanceBandwidth: bw,
	}
	if o.RepairAfter <= 0 {
		o.RepairAfter = -1 // never (0 is the Options' default)
	}
	return o, nil
}

// workerChecks validates the administration worker's keys.
func workerChecks(cmd *cobra.Command, _ []string) []string {
	var p []string
	fs := cmd.Flags()
	if d, err := fs.GetDuration("repair-after"); err == nil && d < 0 {
		p = append(p, fmt.Sprintf("repair-after: %v is negative (0 turns automatic repair off)", d))
	}
	if d, err := fs.GetDuration("move-grace"); err == nil && d <= 0 {
		p = append(p, fmt.Sprintf("move-grace: %v: want a positive duration (e.g. 2m): readers of the old placement need time to finish", d))
	}
	if d, err := fs.GetDuration("admin-interval"); err == nil && (d < 10*time.Millisecond || d > time.Hour) {
		p = append(p, fmt.Sprintf("admin-interval: %v: want 10ms to 1h", d))
	}
	if n, err := fs.GetInt("admin-concurrency"); err == nil && (n < 1 || n > mds.MaxAdminConcurrency) {
		p = append(p, fmt.Sprintf("admin-concurrency: %d: want 1 to %d", n, mds.MaxAdminConcurrency))
	}
	if _, err := parseBytes(flagString(cmd, "rebalance-bandwidth")); err != nil {
		p = append(p, "rebalance-bandwidth: "+err.Error())
	}
	return p
}

type scrubFlags struct {
	on        bool
	rate      string
	adminRate string
	interval  time.Duration
}

func addScrubFlags(cmd *cobra.Command, f *scrubFlags) {
	fs := cmd.Flags()
	fs.BoolVar(&f.on, "scrub", true, "scrub continuously in the background (false: only the passes that \"shoal admin scrub\" asks for)")
	fs.StringVar(&f.rate, "scrub-rate", "4MiB", "speed of the background scrub: `RATE` bytes/s (e.g. 4MiB, 50MB)")
	fs.StringVar(&f.adminRate, "scrub-admin-rate", "256MiB", "speed of a pass that \"shoal admin scrub\" asks for without --rate: `RATE` bytes/s")
	fs.DurationVar(&f.interval, "scrub-interval", ost.DefaultScrubPassInterval, "pause between two background passes over every chunk (0: none)")
}

// options turns the flags into ost.ScrubOptions (scrubChecks has checked
// them).
func (f *scrubFlags) options() (ost.ScrubOptions, error) {
	rate, err := parseBytes(f.rate)
	if err != nil {
		return ost.ScrubOptions{}, fmt.Errorf("--scrub-rate: %w", err)
	}
	adminRate, err := parseBytes(f.adminRate)
	if err != nil {
		return ost.ScrubOptions{}, fmt.Errorf("--scrub-admin-rate: %w", err)
	}
	o := ost.ScrubOptions{Rate: int64(rate), AdminRate: int64(adminRate), PassInterval: f.interval}
	if !f.on {
		o.Rate = -1
	}
	if o.PassInterval == 0 {
		o.PassInterval = -1 // none (0 is the Options' default)
	}
	return o, nil
}

// scrubChecks validates the scrubber's keys.
func scrubChecks(cmd *cobra.Command, _ []string) []string {
	var p []string
	for _, k := range []string{"scrub-rate", "scrub-admin-rate"} {
		n, err := parseBytes(flagString(cmd, k))
		switch {
		case err != nil:
			p = append(p, k+": "+err.Error())
		case n < 4096:
			p = append(p, fmt.Sprintf("%s: %s: want at least 4KiB/s (turn the background scrub off with scrub: false)", k, flagString(cmd, k)))
		case n > 1<<40:
			p = append(p, fmt.Sprintf("%s: %s: want at most 1TiB/s", k, flagString(cmd, k)))
		}
	}
	if d, err := cmd.Flags().GetDuration("scrub-interval"); err == nil && d < 0 {
		p = append(p, fmt.Sprintf("scrub-interval: %v is negative (0: no pause)", d))
	}
	return p
}
