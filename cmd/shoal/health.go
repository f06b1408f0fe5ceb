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

	"github.com/shoalfs/shoal/mds"
)

// readyTimeout bounds one readiness check.
const readyTimeout = 2 * time.Second

// serveOps serves the operations endpoints of a daemon on addr (empty:
// none) until ctx is done:
//
//   - /metrics: Prometheus metrics of reg;
//   - /healthz: 200 while the process serves (liveness);
//   - /readyz: 200 when ready returns nil (nil: always), 503 with the
//     reason otherwise, and 503 once the daemon is shutting down;
//   - /debug/pprof/: Go profiles.
func serveOps(ctx context.Context, log *slog.Logger, addr string, reg *prometheus.Registry, ready func(context.Context) error) {
	if addr == "" {
		return
	}
	hs := &http.Server{Addr: addr, Handler: opsMux(ctx, reg, ready), ReadHeaderTimeout: 5 * time.Second}
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

// opsMux routes the endpoints of serveOps.
func opsMux(ctx context.Context, reg *prometheus.Registry, ready func(context.Context) error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := readyErr(ctx, r.Context(), ready); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// readyErr runs ready with a timeout; the daemon's ctx being done (a
// shutdown under way) makes it not ready.
func readyErr(daemon, req context.Context, ready func(context.Context) error) error {
	if daemon.Err() != nil {
		return fmt.Errorf("shutting down")
	}
	if ready == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(req, readyTimeout)
	defer cancel()
	return ready(ctx)
}

// mdsReady is the readiness of an MDS: a single MDS is ready once it
// serves; a member of a replicated group when it knows a leader (a
// follower sends clients to it).
func mdsReady(m *mds.Server) func(context.Context) error {
	return func(context.Context) error {
		st, ok := m.MemberStatus()
		if ok && st.Leader == 0 {
			return fmt.Errorf("member %d (%s, term %d) knows no leader", st.ID, st.Role, st.Term)
		}
		return nil
	}
}
