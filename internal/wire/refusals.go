package wire

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/shoalfs/shoal/internal/lograte"
)

// Refusals a server logs (issue 17, item 9): a TLS handshake it rejected
// (plaintext, a certificate of another CA, an expired one) and a call its
// Authorizer refused (a role that may not call the method). gRPC logged
// neither where an operator looks: the handshake went to grpclog at a
// level off by default, the refusal to the call log at debug. Both are
// logged at warn level to the server's logger (ServeLogger), limited per
// peer host (internal/lograte: a few, then one per 10 s with the count
// left out), since a scanner or a misconfigured node retries in a loop.
// A connection closed before its first byte (a TCP health check) is
// logged at debug level only.

// refusalLog logs the refusals of one server.
type refusalLog struct {
	log *slog.Logger
	lim lograte.Limiter
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	if log == nil {
		return nil
	}
	return &refusalLog{log: log}
}

// handshake logs a rejected TLS handshake from remote.
func (r *refusalLog) handshake(remote net.Addr, err error) {
	addr := addrString(remote)
	if errors.Is(err, io.EOF) {
		r.log.Debug("TLS handshake: connection closed before it", "peer", addr)
		return
	}
	if ok, n := r.lim.Allow("tls " + hostOf(addr)); ok {
		r.log.Warn("TLS handshake refused", "peer", addr, "err", err, "suppressed", n)
	}
}

// call logs a call the Authorizer refused.
func (r *refusalLog) call(ctx context.Context, method string, err error) {
	addr := ""
	if p, ok := peer.FromContext(ctx); ok {
		addr = addrString(p.Addr)
	}
	who := "plaintext"
	if id, ok := PeerIdentity(ctx); ok {
		who = id.String()
	} else if _, tls := PeerIsTLS(ctx); tls {
		who = "no role"
	}
	if ok, n := r.lim.Allow("call " + hostOf(addr) + " " + who); ok {
		r.log.WarnContext(ctx, "call refused", "method", method, "peer", addr, "identity", who, "err", err, "suppressed", n)
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// loggedTransport is a server's TLS transport credentials that log the
// handshakes they reject.
type loggedTransport struct {
	credentials.TransportCredentials
	refusals *refusalLog
}

func (t loggedTransport) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, ai, err := t.TransportCredentials.ServerHandshake(c)
	if err != nil {
		t.refusals.handshake(c.RemoteAddr(), err)
	}
	return out, ai, err
}

func (t loggedTransport) Clone() credentials.TransportCredentials {
	return loggedTransport{t.TransportCredentials.Clone(), t.refusals}
}
