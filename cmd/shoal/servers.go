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
	cmd := &cobra.Command{
		Use:   "mds",
		Short: "Run a metadata server, alone or as one member of a replicated group (--id, --peers)",
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			log := g.logger().With("proc", "mds")
			creds, err := tf.load()
			if err != nil {
				return err
			}
			if creds == nil {
				log.Warn("serving plaintext (--insecure): no authentication, no encryption")
			}
			reloadOnHUP(creds, log.Info, ctx.Done())
			reg := prometheus.NewRegistry()
			o := mds.Options{Dir: dir, Logger: log, Registry: reg, Creds: creds,
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
			srv, err := wire.Bind(listen, wire.ServeCreds(creds), wire.ServeAuthorizer(mds.Authorize))
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
			log.Info("MDS serving", "addr", srv.Addr(), "dir", dir)
			serveOps(ctx, log, metrics, reg, mdsReady(m))
			<-ctx.Done()
			srv.Stop(5 * time.Second)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the MDS database (required)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7700", "address to serve gRPC on")
	cmd.Flags().StringVar(&metrics, "metrics", "", "address to serve Prometheus /metrics, /healthz, /readyz and /debug/pprof on (empty: off)")
	cmd.Flags().Uint64Var(&id, "id", 0, "member id in a replicated MDS group (with --peers)")
	cmd.Flags().StringVar(&peers, "peers", "", "initial members of the group: 1=ADDR1,2=ADDR2,3=ADDR3 (this member included; read on the first start only)")
	cmd.Flags().BoolVar(&join, "join", false, "join an existing group as a new member (add it with `shoal admin mds add` first)")
	addTLSFlags(cmd, &tf)
	cmd.Flags().StringSliceVar(&squash, "squash", nil, "certificate names (CN) of client nodes whose root is squashed; \"*\" for every client certificate (docs/security.md)")
	cmd.Flags().Uint32Var(&squashUID, "squash-uid", 65534, "uid squashed root (or, with --squash-all, every uid) becomes")
	cmd.Flags().Uint32Var(&squashGID, "squash-gid", 65534, "gid squashed root (or, with --squash-all, every gid) becomes")
	cmd.Flags().BoolVar(&squashAll, "squash-all", false, "squash every uid and gid of squashed nodes, not only root")
	return configurable(cmd, mdsChecks()...)
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
	var dataListen string
	var tf tlsFlags
	cmd := &cobra.Command{
		Use:   "ost",
		Short: "Run an object storage target on one directory",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireMDS(mdsAddr); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			log := g.logger().With("proc", "ost")
			creds, err := tf.load()
			if err != nil {
				return err
			}
			if creds == nil {
				log.Warn("serving plaintext (--insecure): no authentication, no encryption")
			}
			reloadOnHUP(creds, log.Info, ctx.Done())
			reg := prometheus.NewRegistry()
			o, srv, err := startOSTWith(ctx, log, reg, dir, listen, advertise, dataListen, mdsAddr, creds)
			if err != nil {
				return err
			}
			log.Info("OST serving", "addr", srv.Addr(), "data_addr", o.DataAddr(), "id", o.ID(), "dir", dir)
			serveMetrics(ctx, log, metrics, reg)
			<-ctx.Done()
			srv.Stop(5 * time.Second)
			return o.Close()
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory holding the chunks (required)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to serve gRPC on")
	cmd.Flags().StringVar(&advertise, "advertise", "", "address clients reach this OST at (default: the listen address)")
	dataListenFlag(cmd, &dataListen, "address to serve the bulk data path (chunk reads and writes on framed TCP) on (default: the --listen host, any port; \"off\": chunk I/O over gRPC only)")
	cmd.Flags().StringVar(&metrics, "metrics", "", "address to serve Prometheus /metrics, /healthz, /readyz and /debug/pprof on (empty: off)")
	mdsFlag(cmd, &mdsAddr)
	addTLSFlags(cmd, &tf)
	return configurable(cmd, ostChecks()...)
}

// dataListenFlag adds --data-listen.
func dataListenFlag(cmd *cobra.Command, dst *string, usage string) {
	cmd.Flags().StringVar(dst, "data-listen", "", usage)
}

// startOST opens an OST on dir, serves it on listen (gRPC) and dataListen
// (the data path; "": the host of listen, any port) and registers it with
// the MDS.
func startOST(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, dir, listen, advertise, dataListen, mdsAddr string) (*ost.Server, *wire.Server, error) {
	return startOSTWith(ctx, log, reg, dir, listen, advertise, dataListen, mdsAddr, nil)
}

// startOSTWith is startOST with mutual TLS (creds nil: plaintext).
func startOSTWith(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, dir, listen, advertise, dataListen, mdsAddr string, creds *wire.Creds) (*ost.Server, *wire.Server, error) {
	srv, err := wire.Bind(listen, wire.ServeCreds(creds))
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
	o, err := ost.Open(ctx, ost.Options{Dir: dir, MDSAddr: mdsAddr, AdvertiseAddr: advertise, Logger: log, Registry: reg, DataListen: dataListen, Creds: creds})
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
