package wire

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
)

// RequestIDHeader is the gRPC metadata key of a call's request id: the
// same id on every retry of one call, so that a replicated MDS applies a
// mutation once however often it is sent (docs/mds-raft.md, "Retries").
const RequestIDHeader = "shoal-request-id"

// SessionHeader is the gRPC metadata key of the caller's MDS session (a
// decimal number) on namespace changes: the MDS does not recall the
// caller's own directory leases for them (docs/fuse.md, "Directory
// leases").
const SessionHeader = "shoal-session"

// ReleaseHeader is the gRPC metadata key of the gens of leases the
// caller's session releases with a change (decimal, one value each): the
// MDS ends them before the change runs, so that a change of an inode the
// caller held a lease on does not wait for the release to come on the
// Watch stream (docs/fuse.md, "Inode leases").
const ReleaseHeader = "shoal-release"

// GroupRetryFor bounds how long a GroupConn call follows redirects and
// retries unreachable members before it gives up: an election takes a few
// election timeouts (about a second each).
const GroupRetryFor = 30 * time.Second

// GroupConn is a client connection to an MDS group given as a list of
// addresses. It implements grpc.ClientConnInterface, so a generated stub
// works on it as on one connection. With one address it is that
// connection and nothing more. With several, each unary call goes to the
// member believed to lead; a NOT_LEADER answer moves it to the leader the
// answer names (or to the next address), an unreachable member to the next
// address, and the call is sent again, with backoff, for up to
// GroupRetryFor. Every call carries a request id (RequestIDHeader) that
// stays the same across these retries.
type GroupConn struct {
	addrs  []string
	opts   []DialOption
	prefix string // random per connection: request ids are prefix + "-" + seq
	seq    atomic.Uint64

	mu struct {
		sync.Mutex
		conns  map[string]*grpc.ClientConn
		leader string // current guess
	}
}

// DialGroup connects to the MDS group at addrs, a comma-separated list;
// an address without a port has DefaultMDSPort.
func DialGroup(addrs string, opts ...DialOption) (*GroupConn, error) {
	g := &GroupConn{opts: opts}
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			g.addrs = append(g.addrs, WithDefaultPort(a))
		}
	}
	if len(g.addrs) == 0 {
		return nil, fmt.Errorf("no MDS address: %w", errs.ErrInvalid)
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	g.prefix = hex.EncodeToString(b[:])
	g.mu.conns = map[string]*grpc.ClientConn{}
	g.mu.leader = g.addrs[0]
	if _, err := g.conn(g.addrs[0]); err != nil {
		return nil, err
	}
	return g, nil
}

// Addrs returns the addresses of the group, as given.
func (g *GroupConn) Addrs() []string { return append([]string(nil), g.addrs...) }

// Leader returns the address calls go to now.
func (g *GroupConn) Leader() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.leader
}

// Conn returns the connection to one address (dialing it if needed), for
// calls that must reach a given member (admin status).
func (g *GroupConn) Conn(addr string) (*grpc.ClientConn, error) { return g.conn(addr) }

func (g *GroupConn) conn(addr string) (*grpc.ClientConn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cc, ok := g.mu.conns[addr]; ok {
		return cc, nil
	}
	cc, err := Dial(addr, g.opts...)
	if err != nil {
		return nil, fmt.Errorf("dial MDS %s: %w", addr, err)
	}
	g.mu.conns[addr] = cc
	return cc, nil
}

// follow moves calls away from failed: to hint when it names a member, or
// else to the address after failed.
func (g *GroupConn) follow(failed, hint string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.leader != failed {
		return // another call moved it already
	}
	if hint != "" && hint != failed {
		g.mu.leader = hint
		return
	}
	for i, a := range g.addrs {
		if a == failed {
			g.mu.leader = g.addrs[(i+1)%len(g.addrs)]
			return
		}
	}
	g.mu.leader = g.addrs[0]
}

// NewRequestID returns a new request id.
func (g *GroupConn) NewRequestID() string {
	return g.prefix + "-" + strconv.FormatUint(g.seq.Add(1), 10)
}

// Invoke sends a unary call to the leader, following redirects.
func (g *GroupConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if len(g.addrs) == 1 {
		cc, err := g.conn(g.addrs[0])
		if err != nil {
			return err
		}
		return cc.Invoke(ctx, method, args, reply, opts...)
	}
	if md, ok := metadata.FromOutgoingContext(ctx); !ok || len(md.Get(RequestIDHeader)) == 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, g.NewRequestID())
	}
	deadline := time.Now().Add(GroupRetryFor)
	backoff := 5 * time.Millisecond
	for {
		addr := g.Leader()
		cc, err := g.conn(addr)
		if err == nil {
			err = cc.Invoke(ctx, method, args, reply, opts...)
		}
		if err == nil {
			return nil
		}
		var nl *errs.NotLeaderError
		switch {
		case errors.As(err, &nl):
			g.follow(addr, nl.Leader)
		case errors.Is(err, errs.ErrUnavailable) && !errors.Is(err, errs.ErrNotLeader) && ctx.Err() == nil:
			// Unreachable (or closing): the next address. The call may
			// have been applied there; its request id makes the retry safe.
			g.follow(addr, "")
		default:
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MDS group %s: no leader answered for %v: %w", strings.Join(g.addrs, ","), GroupRetryFor, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("MDS group: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// NewStream opens a stream at the member believed to lead; streams are not
// retried.
func (g *GroupConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cc, err := g.conn(g.Leader())
	if err != nil {
		return nil, err
	}
	return cc.NewStream(ctx, desc, method, opts...)
}

// ResetConnectBackoff makes every connection try to reconnect at once.
func (g *GroupConn) ResetConnectBackoff() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, cc := range g.mu.conns {
		cc.ResetConnectBackoff()
	}
}

// Close closes every connection.
func (g *GroupConn) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var first error
	for a, cc := range g.mu.conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
		delete(g.mu.conns, a)
	}
	return first
}
