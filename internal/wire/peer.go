package wire

// Addresses without a port, and errors that name the mistake when a client
// reaches the wrong server: an OST given as the MDS, or a TLS server dialed
// in plaintext (issue 18). Each check runs only when a call has failed.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// DefaultMDSPort is the port of an MDS address that names none: the port
// shoal mds listens on unless told otherwise.
const DefaultMDSPort = "7700"

// WithDefaultPort returns addr with DefaultMDSPort when it names no port
// ("localhost", "10.0.0.1", "::1", "host:"); an address with a port, or a
// gRPC target with a scheme ("unix:///run/x"), is returned as is.
func WithDefaultPort(addr string) string {
	if strings.Contains(addr, "://") || strings.HasPrefix(addr, "unix:") {
		return addr
	}
	if _, port, err := net.SplitHostPort(addr); err == nil {
		if port == "" {
			return addr + DefaultMDSPort
		}
		return addr
	}
	host := strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	return net.JoinHostPort(host, DefaultMDSPort)
}

// Full names of the services a wrong address is told apart by.
const (
	mdsService = "shoal.mds.v1.Mds"
	ostService = "shoal.ost.v1.Ost"
	ostProbe   = "/" + ostService + "/Info" // read-only; any answer but Unimplemented means an OST
)

// ErrWrongPeer is returned by a call whose server is not what the client
// expects: another service, or TLS where the client speaks plaintext.
var ErrWrongPeer = errors.New("wrong server")

// peerCheck returns the innermost client interceptor of a connection: it
// turns "unknown service" for the MDS service (gRPC's Unimplemented for a
// service the server does not register) and, on a plaintext connection, an unreachable server
// that answers a TLS handshake, into errors that say so and wrap
// ErrWrongPeer, which no retry loop takes for an outage.
func peerCheck(plaintext bool) grpc.UnaryClientInterceptor {
	var tlsProbed atomic.Bool // a plaintext connection probes once for TLS
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		st, ok := status.FromError(err)
		if err == nil || !ok {
			return err
		}
		addr := cc.Target()
		switch st.Code() {
		case codes.Unimplemented:
			// Only the MDS service: callers of optional services (the Raft
			// group's Peer, which a single MDS lacks) test Unimplemented.
			if serviceOf(method) != mdsService || !strings.Contains(st.Message(), "unknown service "+mdsService) {
				return err // a method the server lacks, or a typed NOT_SUPPORTED
			}
			perr := invoker(ctx, ostProbe, &emptypb.Empty{}, &emptypb.Empty{}, cc, opts...)
			if status.Code(perr) != codes.Unimplemented {
				return fmt.Errorf("%s is an OST, not an MDS: give the MDS's address (--mds, $SHOAL_MDS): %w", addr, ErrWrongPeer)
			}
			return fmt.Errorf("%s does not serve %s: it is not a Shoal MDS: %w", addr, mdsService, ErrWrongPeer)
		case codes.Unavailable:
			if !plaintext || tlsProbed.Load() {
				return err
			}
			wants, answered := speaksTLS(ctx, addr)
			if answered {
				tlsProbed.Store(true)
			}
			if wants {
				return fmt.Errorf("%s wants TLS, but this command speaks plaintext (--insecure or $SHOAL_INSECURE=1): give --cert, --key and --ca instead (or . DIR/env of shoal local): %w", addr, ErrWrongPeer)
			}
		}
		return err
	}
}

// serviceOf returns the service of a full method name ("/pkg.Svc/Method").
func serviceOf(method string) string {
	s, _, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return ""
	}
	return s
}

// speaksTLS reports whether the server at addr answers a TLS handshake;
// answered is false when it could not be reached at all. Nothing is sent
// after the handshake, so the server's certificate is not checked.
func speaksTLS(ctx context.Context, addr string) (wants, answered bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var nd net.Dialer
	raw, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, false
	}
	defer raw.Close()
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // only to learn whether the server speaks TLS
	err = c.HandshakeContext(ctx)
	var alert tls.AlertError
	return err == nil || errors.As(err, &alert), true
}
