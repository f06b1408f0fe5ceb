package wire

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"
)

// DialOption configures Dial and DialGroup.
type DialOption func(*dialOpts)

type dialOpts struct {
	creds *Creds
	unary []grpc.UnaryClientInterceptor
}

// WithCreds dials with mutual TLS using c; nil leaves the connection
// plaintext (a cluster run with --insecure).
func WithCreds(c *Creds) DialOption { return func(o *dialOpts) { o.creds = c } }

// WithUnaryInterceptor adds a client interceptor that runs after the error
// translation (it sees the call's outgoing context first).
func WithUnaryInterceptor(i grpc.UnaryClientInterceptor) DialOption {
	return func(o *dialOpts) { o.unary = append(o.unary, i) }
}

// ServerOpt configures a server made by Bind, Listen or ServerOptions.
type ServerOpt func(*serverOpts)

type serverOpts struct {
	creds     *Creds
	authorize Authorizer
	log       *slog.Logger // ServeLogger (reqid.go); nil: calls are not logged
}

// Authorizer decides whether the caller of a gRPC method (its full name,
// "/shoal.mds.v1.Mds/Create") may call it; the error it returns (wrapping
// errs.ErrPermission, say) goes back to the caller.
type Authorizer func(ctx context.Context, fullMethod string) error

// ServeCreds serves mutual TLS with c: every client must present a
// certificate from the cluster CA. nil serves plaintext (--insecure).
func ServeCreds(c *Creds) ServerOpt { return func(o *serverOpts) { o.creds = c } }

// ServeAuthorizer checks every call, unary and streaming, with a.
func ServeAuthorizer(a Authorizer) ServerOpt { return func(o *serverOpts) { o.authorize = a } }

// authorizeUnary checks each call with a, logging refusals to r (nil:
// not logged; refusals.go).
func authorizeUnary(a Authorizer, r *refusalLog) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := a(ctx, info.FullMethod); err != nil {
			if r != nil {
				r.call(ctx, info.FullMethod, err)
			}
			return nil, ToStatus(err)
		}
		return h(ctx, req)
	}
}

func authorizeStream(a Authorizer, r *refusalLog) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := a(ss.Context(), info.FullMethod); err != nil {
			if r != nil {
				r.call(ss.Context(), info.FullMethod, err)
			}
			return ToStatus(err)
		}
		return h(srv, ss)
	}
}
