package wire

// Trace ids follow one client request (a FUSE request, say) through every
// server it reaches, so that the log lines it causes can be found together
// (docs/deploy.md, "Logging"). They are not the per-call trace ids of
// GroupConn (TraceIDHeader), which identify one call across its retries
// so that the MDS applies it once: one FUSE request makes several calls,
// each with its own request id and all with the request's trace id.
//
// The client makes an id (NewTraceID) and puts it in the context of the
// calls it makes for the request (WithTraceID). Every connection Dial
// makes sends it in the metadata key TraceIDHeader; every server made
// with ServerOptions puts the id it receives back into the handler's
// context, from which a server's own calls to other servers (MDS to OST)
// send it on. A logger whose handler is wrapped with LogHandler adds it,
// as the attribute "req", to every line logged with that context
// (InfoContext and the like), and ServeLogger logs each call with it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TraceIDHeader is the gRPC metadata key of a call's trace id.
const TraceIDHeader = "shoal-trace-id"

// LogKeyRequest is the slog attribute key of a trace id: the request a
// log line is about.
const LogKeyRequest = "req"

// maxTraceID bounds the length of a trace id a server accepts; a
// longer or malformed one is dropped, not refused.
const maxTraceID = 64

type traceIDKey struct{}

// Trace ids are a random prefix per process and a counter, so that an id
// costs no system call and the ids of different clients differ.
var (
	traceIDPrefix = func() string {
		var b [6]byte
		_, _ = rand.Read(b[:]) // never fails on Linux; zeros are still usable
		return hex.EncodeToString(b[:]) + "-"
	}()
	traceIDSeq atomic.Uint64
)

// NewTraceID returns a new trace id, unique within the process and,
// with high probability, within the cluster.
func NewTraceID() string {
	return traceIDPrefix + strconv.FormatUint(traceIDSeq.Add(1), 36)
}

// WithTraceID returns ctx carrying id as the trace id of the calls
// made with it.
func WithTraceID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, traceIDKey{}, id)
}

// TraceID returns the trace id ctx carries: the one WithTraceID set, or
// in a server the one the call arrived with; "" if none.
func TraceID(ctx context.Context) string {
	if id, ok := ctx.Value(traceIDKey{}).(string); ok {
		return id
	}
	// A handler wrapped outside the interceptors (mds/dedup.go) sees the
	// call's context before the server interceptor put the id in it.
	if v := metadata.ValueFromIncomingContext(ctx, TraceIDHeader); len(v) == 1 && validTraceID(v[0]) {
		return v[0]
	}
	return ""
}

// validTraceID reports whether id is a trace id a server keeps:
// short, printable ASCII without spaces.
func validTraceID(id string) bool {
	if id == "" || len(id) > maxTraceID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// incomingTraceID returns ctx with the trace id of the incoming call
// in it, if it has a valid one.
func incomingTraceID(ctx context.Context) (context.Context, string) {
	v := metadata.ValueFromIncomingContext(ctx, TraceIDHeader)
	if len(v) != 1 || !validTraceID(v[0]) {
		return ctx, ""
	}
	return WithTraceID(ctx, v[0]), v[0]
}

// outgoingTraceID returns ctx with its trace id in the outgoing
// metadata.
func outgoingTraceID(ctx context.Context) context.Context {
	if id := TraceID(ctx); id != "" {
		return metadata.AppendToOutgoingContext(ctx, TraceIDHeader, id)
	}
	return ctx
}

// traceIDUnaryClient sends the trace id of ctx with the call.
func traceIDUnaryClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(outgoingTraceID(ctx), method, req, reply, cc, opts...)
}

// traceIDStreamClient sends the trace id of ctx with the stream.
func traceIDStreamClient(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(outgoingTraceID(ctx), desc, cc, method, opts...)
}

// traceIDUnaryServer puts the call's trace id in the handler's
// context and, with a logger, logs the call.
func traceIDUnaryServer(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, id := incomingTraceID(ctx)
		if log == nil {
			return h(ctx, req)
		}
		start := time.Now()
		resp, err := h(ctx, req)
		logCall(ctx, log, info.FullMethod, id, start, err)
		return resp, err
	}
}

// traceIDStreamServer is traceIDUnaryServer for streams.
func traceIDStreamServer(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx, id := incomingTraceID(ss.Context())
		if id != "" {
			ss = &traceIDStream{ServerStream: ss, ctx: ctx}
		}
		if log == nil {
			return h(srv, ss)
		}
		start := time.Now()
		err := h(srv, ss)
		logCall(ctx, log, info.FullMethod, id, start, err)
		return err
	}
}

type traceIDStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *traceIDStream) Context() context.Context { return s.ctx }

// logCall logs one served call: at debug level, or at warn level when it
// failed with a server fault (Internal, Unknown, DataLoss): the errors a
// caller cannot have caused.
func logCall(ctx context.Context, log *slog.Logger, method, id string, start time.Time, err error) {
	code := status.Code(ToStatus(err))
	level := slog.LevelDebug
	switch code {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		level = slog.LevelWarn
	}
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", method),
		slog.String("code", code.String()),
		slog.Duration("took", time.Since(start)),
	}
	if id != "" {
		attrs = append(attrs, slog.String(LogKeyRequest, id))
	}
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	log.LogAttrs(ctx, level, "rpc", attrs...)
}

// ServeLogger logs every call the server serves to log: at debug level
// each call with its method, status code, duration and trace id, at
// warn level the calls that failed with a server fault.
func ServeLogger(log *slog.Logger) ServerOpt { return func(o *serverOpts) { o.log = log } }

// LogHandler wraps h so that a record logged with a context carrying a
// trace id (TraceID) gets the attribute "req". Records that already
// have "req" (logged by ServeLogger) are left alone.
func LogHandler(h slog.Handler) slog.Handler { return reqHandler{h} }

type reqHandler struct{ h slog.Handler }

func (r reqHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r reqHandler) Handle(ctx context.Context, rec slog.Record) error {
	if id := TraceID(ctx); id != "" {
		has := false
		rec.Attrs(func(a slog.Attr) bool {
			has = a.Key == LogKeyRequest
			return !has
		})
		if !has {
			rec = rec.Clone()
			rec.AddAttrs(slog.String(LogKeyRequest, id))
		}
	}
	return r.h.Handle(ctx, rec)
}

func (r reqHandler) WithAttrs(as []slog.Attr) slog.Handler { return reqHandler{r.h.WithAttrs(as)} }
func (r reqHandler) WithGroup(name string) slog.Handler    { return reqHandler{r.h.WithGroup(name)} }
