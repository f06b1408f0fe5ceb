// Package wire carries Shoal's sentinel errors over gRPC and holds the gRPC
// options shared by servers and clients. Errors travel as a status code plus
// an errdetails.ErrorInfo whose Reason names the sentinel; they are
// translated in exactly two places: ToStatus (server side, installed as an
// interceptor) and FromStatus (client side, installed as an interceptor).
package wire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/shoalfs/shoal/internal/errs"
)

// Domain is the ErrorInfo domain of Shoal's typed reasons.
const Domain = "shoal"

// MaxMsgSize bounds one gRPC message: the largest chunk plus headroom.
const MaxMsgSize = 80 << 20

type entry struct {
	err    error
	code   codes.Code
	reason string
}

var table = []entry{
	{errs.ErrNotFound, codes.NotFound, "NOT_FOUND"},
	{errs.ErrExists, codes.AlreadyExists, "EXISTS"},
	{errs.ErrNotEmpty, codes.FailedPrecondition, "NOT_EMPTY"},
	{errs.ErrNotDir, codes.FailedPrecondition, "NOT_DIR"},
	{errs.ErrIsDir, codes.FailedPrecondition, "IS_DIR"},
	{errs.ErrInvalid, codes.InvalidArgument, "INVALID"},
	{errs.ErrNameTooLong, codes.InvalidArgument, "NAME_TOO_LONG"},
	{errs.ErrNoSpace, codes.ResourceExhausted, "NO_SPACE"},
	{errs.ErrCorrupt, codes.DataLoss, "CORRUPT"},
	{errs.ErrUnavailable, codes.Unavailable, "UNAVAILABLE"},
	{errs.ErrStale, codes.Aborted, "STALE"},
	{errs.ErrPermission, codes.PermissionDenied, "PERMISSION"},
	{errs.ErrNotPermitted, codes.PermissionDenied, "NOT_PERMITTED"},
	{errs.ErrNotSupported, codes.Unimplemented, "NOT_SUPPORTED"},
	{errs.ErrTooLarge, codes.OutOfRange, "TOO_LARGE"},
	{errs.ErrLoop, codes.FailedPrecondition, "LOOP"},
	{errs.ErrNoData, codes.NotFound, "NO_DATA"},
	{errs.ErrRange, codes.OutOfRange, "RANGE"},
	{errs.ErrArgTooBig, codes.InvalidArgument, "ARG_TOO_BIG"},
	{errs.ErrQuota, codes.ResourceExhausted, "QUOTA"},
	{errs.ErrCrossDevice, codes.FailedPrecondition, "CROSS_DEVICE"},
	{errs.ErrNotLeader, codes.Unavailable, "NOT_LEADER"},
}

// leaderKey is the ErrorInfo metadata key of a NOT_LEADER status naming
// the leader's address.
const leaderKey = "leader"

// capabilityKey is the ErrorInfo metadata key of a PERMISSION status that
// refused a capability (errs.CapabilityError), naming the reason.
const capabilityKey = "capability"

// ToStatus turns an error into a gRPC status error carrying its sentinel's
// reason. Errors that already are statuses pass through; context errors
// become Canceled/DeadlineExceeded; anything else is Internal.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isSentinelWrapped(err) {
		return err
	}
	for _, e := range table {
		if errors.Is(err, e.err) {
			st := status.New(e.code, err.Error())
			info := &errdetails.ErrorInfo{Domain: Domain, Reason: e.reason}
			if nl := (*errs.NotLeaderError)(nil); errors.As(err, &nl) && nl.Leader != "" {
				info.Metadata = map[string]string{leaderKey: nl.Leader}
			}
			if ce := (*errs.CapabilityError)(nil); errors.As(err, &ce) {
				info.Metadata = map[string]string{capabilityKey: ce.Reason}
			}
			if d, derr := st.WithDetails(info); derr == nil {
				st = d
			}
			return st.Err()
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func isSentinelWrapped(err error) bool {
	for _, e := range table {
		if errors.Is(err, e.err) {
			return true
		}
	}
	return false
}

// remoteError is a sentinel received from a peer, with the peer's message.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// FromStatus turns a gRPC status error back into an error that errors.Is
// matches against its sentinel. A status without a Shoal reason is returned
// as is; Unavailable without a reason (the peer is unreachable) also matches
// errs.ErrUnavailable.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != Domain {
			continue
		}
		if info.GetReason() == "NOT_LEADER" {
			return &errs.NotLeaderError{Leader: info.GetMetadata()[leaderKey], Msg: st.Message()}
		}
		if r, ok := info.GetMetadata()[capabilityKey]; ok && info.GetReason() == "PERMISSION" {
			return &errs.CapabilityError{Reason: r, Msg: st.Message()}
		}
		for _, e := range table {
			if e.reason == info.GetReason() {
				return &remoteError{sentinel: e.err, msg: st.Message()}
			}
		}
	}
	switch st.Code() {
	case codes.Unavailable:
		return &remoteError{sentinel: errs.ErrUnavailable, msg: fmt.Sprintf("unavailable: %s", st.Message())}
	case codes.Canceled:
		return fmt.Errorf("%s: %w", st.Message(), context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", st.Message(), context.DeadlineExceeded)
	}
	return err
}

// UnaryServerInterceptor translates handler errors with ToStatus.
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	return resp, ToStatus(err)
}

// UnaryClientInterceptor translates call errors with FromStatus.
func UnaryClientInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return FromStatus(invoker(ctx, method, req, reply, cc, opts...))
}

// ServerOptions are the options every Shoal gRPC server uses, with the
// transport security and authorization opts give.
func ServerOptions(opts ...ServerOpt) []grpc.ServerOption {
	var so serverOpts
	for _, o := range opts {
		o(&so)
	}
	// The trace id (reqid.go) first, so that it is in the context of
	// everything after it and its log sees the final status.
	unary := []grpc.UnaryServerInterceptor{traceIDUnaryServer(so.log), UnaryServerInterceptor}
	stream := []grpc.StreamServerInterceptor{traceIDStreamServer(so.log)}
	refusals := newRefusalLog(so.log) // refusals.go; nil without a logger
	if so.authorize != nil {
		unary = append(unary, authorizeUnary(so.authorize, refusals))
		stream = append(stream, authorizeStream(so.authorize, refusals))
	}
	out := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMsgSize),
		grpc.MaxSendMsgSize(MaxMsgSize),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.InitialWindowSize(8 << 20),
		grpc.InitialConnWindowSize(32 << 20),
		grpc.ReadBufferSize(1 << 20),
		grpc.WriteBufferSize(1 << 20),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		// A pool of long-lived workers serves the streams: a new goroutine
		// per call spent about a fifth of a small call's CPU growing its
		// stack (docs/performance.md, "Metadata round trips").
		grpc.NumStreamWorkers(streamWorkers),
		// Clients ping every KeepaliveTime (Dial); gRPC's default policy
		// (one ping per 5 minutes) would close their connections.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveTime / 2, PermitWithoutStream: true}),
	}
	if so.creds != nil {
		var tc credentials.TransportCredentials = so.creds.serverTransport()
		if refusals != nil {
			tc = loggedTransport{tc, refusals}
		}
		out = append(out, grpc.Creds(tc))
	}
	return out
}

// streamWorkers is the number of goroutines a server keeps to serve calls;
// calls beyond them still get goroutines of their own.
const streamWorkers = 32

// Dial opens a client connection with Shoal's options: mutual TLS with
// the credentials WithCreds gives, plaintext without them. A call that
// reaches the wrong server (another service, TLS for plaintext) fails with
// an error that says so (peer.go).
func Dial(addr string, opts ...DialOption) (*grpc.ClientConn, error) {
	var do dialOpts
	for _, o := range opts {
		o(&do)
	}
	tc := insecure.NewCredentials()
	if do.creds != nil {
		tc = do.creds.clientTransport(addr)
	}
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(tc),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMsgSize), grpc.MaxCallSendMsgSize(MaxMsgSize)),
		grpc.WithChainUnaryInterceptor(append(append([]grpc.UnaryClientInterceptor{UnaryClientInterceptor, traceIDUnaryClient}, do.unary...), peerCheck(do.creds == nil))...),
		grpc.WithChainStreamInterceptor(traceIDStreamClient),
		grpc.WithInitialWindowSize(8<<20),
		grpc.WithInitialConnWindowSize(32<<20),
		grpc.WithReadBufferSize(1<<20),
		grpc.WithWriteBufferSize(1<<20),
		// A peer whose host is cut off (link down, power lost) sends no
		// RST: without pings a call on its connection waits until the
		// host comes back, and an MDS group's client never moved to the
		// new leader (docs/scale.md, "Failures of hosts").
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}),
	)
}

// KeepaliveTime is how long a client connection may hear nothing from its
// server before it pings (gRPC's least: 10 s), and KeepaliveTimeout how
// long it then waits for the answer before it fails its calls with
// UNAVAILABLE (which a GroupConn retries at the next member).
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 3 * time.Second
)
