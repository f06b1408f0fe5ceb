package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// traceServer records the trace id its handlers see and logs a line with
// the handler's context.
type traceServer struct {
	grpc_health_v1.UnimplementedHealthServer
	log *slog.Logger
	mu  sync.Mutex
	ids []string
}

func (s *traceServer) seen(ctx context.Context, what string) {
	s.mu.Lock()
	s.ids = append(s.ids, TraceID(ctx))
	s.mu.Unlock()
	s.log.InfoContext(ctx, what)
}

func (s *traceServer) Check(ctx context.Context, _ *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	s.seen(ctx, "check")
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

func (s *traceServer) Watch(_ *grpc_health_v1.HealthCheckRequest, ss grpc_health_v1.Health_WatchServer) error {
	s.seen(ss.Context(), "watch")
	return ss.Send(&grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING})
}

// syncBuf is a bytes.Buffer safe for the server's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) lines() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.b.String()), "\n") {
		m := map[string]any{}
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestTraceID: a call made with a trace id arrives with it, unary and
// streaming; the server's log lines about the call (ServeLogger's, and the
// handler's own through LogHandler) carry it as "req"; a call without one
// arrives without one.
func TestTraceID(t *testing.T) {
	var buf syncBuf
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	srv := &traceServer{log: log}
	g := grpc.NewServer(ServerOptions(ServeLogger(log))...)
	grpc_health_v1.RegisterHealthServer(g, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	cc, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := grpc_health_v1.NewHealthClient(cc)

	id := NewTraceID()
	if id2 := NewTraceID(); id2 == id || !validTraceID(id) {
		t.Fatalf("trace ids %q, %q", id, id2)
	}
	ctx := WithTraceID(context.Background(), id)
	if _, err := hc.Check(ctx, &grpc_health_v1.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	ws, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	g.GracefulStop() // every call's log line is written

	srv.mu.Lock()
	ids := srv.ids
	srv.mu.Unlock()
	if want := []string{id, id, ""}; strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("handlers saw trace ids %q, want %q", ids, want)
	}
	var handler, rpc, untraced int
	for _, l := range buf.lines() {
		req, _ := l[LogKeyRequest].(string)
		switch {
		case l["msg"] == "check" || l["msg"] == "watch":
			if req == id {
				handler++
			} else if req == "" {
				untraced++
			}
		case l["msg"] == "rpc" && req == id:
			rpc++
			if !strings.HasPrefix(l["method"].(string), "/grpc.health.v1.Health/") {
				t.Errorf("rpc line names method %v", l["method"])
			}
		}
	}
	if handler != 2 || rpc != 2 || untraced != 1 {
		t.Errorf("log lines with req=%s: %d from handlers (want 2), %d from ServeLogger (want 2); handler lines without: %d (want 1)\n%s",
			id, handler, rpc, untraced, buf.b.String())
	}
}

// TestTraceIDMalformed: a server drops a trace id that is too long or not
// printable rather than logging it.
func TestTraceIDMalformed(t *testing.T) {
	for _, id := range []string{"", strings.Repeat("a", maxTraceID+1), "a b", "a\nb", "é"} {
		if validTraceID(id) {
			t.Errorf("%q accepted", id)
		}
	}
	for _, id := range []string{"a", NewTraceID(), strings.Repeat("z", maxTraceID)} {
		if !validTraceID(id) {
			t.Errorf("%q refused", id)
		}
	}
}

// TestTraceIDIncoming: a context a server received a call in has the
// call's trace id even before the interceptor ran (a handler wrapped
// outside the chain), and a server's own calls made with it send it on.
func TestTraceIDIncoming(t *testing.T) {
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(TraceIDHeader, "abc-7"))
	if got := TraceID(in); got != "abc-7" {
		t.Errorf("TraceID of an incoming context: %q", got)
	}
	out, _ := metadata.FromOutgoingContext(outgoingTraceID(in))
	if got := out.Get(TraceIDHeader); len(got) != 1 || got[0] != "abc-7" {
		t.Errorf("outgoing metadata of a server's call: %v", got)
	}
	bad := metadata.NewIncomingContext(context.Background(), metadata.Pairs(TraceIDHeader, "a b"))
	if got := TraceID(bad); got != "" {
		t.Errorf("malformed incoming trace id kept: %q", got)
	}
}
