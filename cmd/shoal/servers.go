package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/ost"
)

func newMDSCmd(g *globals) *cobra.Command {
	var dir, listen, metrics string
	cmd := &cobra.Command{
		Use:   "mds",
		Short: "Run a metadata server",
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			log := g.logger().With("proc", "mds")
			reg := prometheus.NewRegistry()
			m, err := mds.Open(ctx, mds.Options{Dir: dir, Logger: log, Registry: reg})
			if err != nil {
				return err
			}
			defer m.Close()
			srv, err := wire.Listen(listen, m.Register)
			if err != nil {
				return fmt.Errorf("listen %s: %w", listen, err)
			}
			log.Info("MDS serving", "addr", srv.Addr(), "dir", dir)
			serveMetrics(ctx, log, metrics, reg)
			<-ctx.Done()
			srv.Stop(5 * time.Second)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory of the MDS database (required)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7700", "address to serve gRPC on")
	cmd.Flags().StringVar(&metrics, "metrics", "", "address to serve Prometheus /metrics and /debug/pprof on (empty: off)")
	cmd.MarkFlagRequired("dir")
	return cmd
}

func newOSTCmd(g *globals) *cobra.Command {
	var dir, listen, advertise, mdsAddr, metrics string
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
			reg := prometheus.NewRegistry()
			o, srv, err := startOST(ctx, log, reg, dir, listen, advertise, mdsAddr)
			if err != nil {
				return err
			}
			log.Info("OST serving", "addr", srv.Addr(), "id", o.ID(), "dir", dir)
			serveMetrics(ctx, log, metrics, reg)
			<-ctx.Done()
			srv.Stop(5 * time.Second)
			return o.Close()
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory holding the chunks (required)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to serve gRPC on")
	cmd.Flags().StringVar(&advertise, "advertise", "", "address clients reach this OST at (default: the listen address)")
	cmd.Flags().StringVar(&metrics, "metrics", "", "address to serve Prometheus /metrics and /debug/pprof on (empty: off)")
	mdsFlag(cmd, &mdsAddr)
	cmd.MarkFlagRequired("dir")
	return cmd
}

// startOST opens an OST on dir, serves it on listen and registers it with
// the MDS.
func startOST(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, dir, listen, advertise, mdsAddr string) (*ost.Server, *wire.Server, error) {
	srv, err := wire.Bind(listen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", listen, err)
	}
	if advertise == "" {
		advertise = srv.Addr()
	}
	o, err := ost.Open(ctx, ost.Options{Dir: dir, MDSAddr: mdsAddr, AdvertiseAddr: advertise, Logger: log, Registry: reg})
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

func serveMetrics(ctx context.Context, log *slog.Logger, addr string, reg *prometheus.Registry) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Warn("metrics server", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
}
