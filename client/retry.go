package client

// Waiting through server restarts (docs/reliability.md, "Server
// restarts under load").
//
// The MDS: a call that finds a single MDS unreachable (the connection
// refused or lost, no answer from the MDS itself) is sent again, with
// backoff and gRPC's reconnection backoff reset, until the MDS answers or
// Options.MDSRetry has passed (mdsWaitInterceptor). A call that reached
// the MDS is never sent again here, whatever it answered. A replicated
// MDS is retried by its group connection (wire.GroupConn), which also
// moves calls to another member.
//
// The OSTs: a chunk read or write that cannot reach its OST is tried
// again at once on a new connection with the OST's address asked again
// (internal/datanet drops every idle connection to a server it finds
// dead). A write then waits, with backoff, while the MDS still counts
// the OST up and for at most Options.OSTRetry (chunkIO): a restarted OST
// is back well within the MDS's heartbeat timeout, and one that is not
// back by then is counted down, the write fails and its extent goes to
// another placement. A read does not wait for one chunk, which parity
// rebuilds; it waits, for the same OSTRetry and while at least k of the
// extent's OSTs are counted up, only when too few chunks are readable to
// rebuild the bytes (readRows). Both are idempotent: a chunk write stores
// the same bytes under the same name.
//
// Each outage is logged when the first call starts waiting for the
// server and when the server answers again (outages), not once per call.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Backoff between the tries of a call waiting for a server.
const (
	retryMinBackoff = 20 * time.Millisecond
	retryMaxBackoff = 250 * time.Millisecond
)

// mdsWaitInterceptor sends a call again while a single MDS cannot be
// reached, for up to Options.MDSRetry (see the top of this file). It runs
// inside the error translation, so it sees gRPC statuses. Every call
// carries a request id, the same on every try (wire.RequestIDHeader),
// with which an MDS that records them applies a mutation once.
func (c *Client) mdsWaitInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !c.mdsWait || method == mdspb.Mds_CloseSession_FullMethodName {
		// A group retries for itself; a client closing does not wait
		// (the MDS lets an unclosed session expire).
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if md, ok := metadata.FromOutgoingContext(ctx); !ok || len(md.Get(wire.RequestIDHeader)) == 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.RequestIDHeader, c.mdsConn.NewRequestID())
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if !mdsUnreachable(err) {
		c.outages.end(c.log, "mds")
		return err
	}
	start := time.Now()
	deadline := start.Add(c.opts.MDSRetry)
	c.outages.begin(c.log, "mds", c.mdsWho(), "MDS unreachable: calls wait for it", "wait", c.opts.MDSRetry, "op", method, "err", err)
	tctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for backoff := retryMinBackoff; ; backoff = min(2*backoff, retryMaxBackoff) {
		cc.ResetConnectBackoff()
		t := time.NewTimer(min(backoff, time.Until(deadline)))
		select {
		case <-tctx.Done():
			t.Stop()
		case <-t.C:
		}
		if tctx.Err() != nil {
			break
		}
		err = invoker(tctx, method, req, reply, cc, opts...)
		if !mdsUnreachable(err) && (err == nil || tctx.Err() == nil) {
			c.outages.end(c.log, "mds")
			return err
		}
		if tctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		// The caller's own deadline or cancellation.
		return status.FromContextError(ctx.Err()).Err()
	}
	c.outages.gaveUp(c.log, "mds", c.mdsWho(), "MDS still unreachable: calls fail", "waited", time.Since(start).Round(time.Millisecond), "op", method)
	msg := "unreachable"
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	return status.Errorf(codes.Unavailable, "MDS %s unreachable for %v: %s", c.opts.MDS, c.opts.MDSRetry, msg)
}

// mdsUnreachable reports whether err is gRPC's UNAVAILABLE for a server
// that did not answer: one without a Shoal reason (an MDS that answered
// UNAVAILABLE itself, "need 6 OSTs up" or NOT_LEADER, gives one).
func mdsUnreachable(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == wire.Domain {
			return false
		}
	}
	return true
}

// chunkIO runs io, one chunk read or write on OST id, with the OST's
// stub and data address (chunkRoute) and a ChunkTimeout of its own. When
// it fails with ErrUnavailable it is tried again at once with the OST's
// address asked again (the OST may have moved), and then, with wait, for
// up to Options.OSTRetry while the MDS counts the OST up (see the top of
// this file).
func (c *Client) chunkIO(ctx context.Context, id uint32, wait bool, io func(ctx context.Context, o ostpb.OstClient, daddr string) error) error {
	var start, deadline time.Time
	backoff := retryMinBackoff
	for try := 0; ; try++ {
		o, daddr, err := c.chunkRoute(ctx, id, try > 0)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, c.opts.ChunkTimeout)
			err = io(cctx, o, daddr)
			cancel()
		}
		if err == nil {
			if try > 0 {
				c.outages.end(c.log, ostKey(id))
			}
			return nil
		}
		if !errors.Is(err, errs.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		if try == 0 {
			// At once, with the OST's address asked again: its gRPC
			// connection may be waiting out a reconnection backoff.
			c.resetOSTBackoff(id)
			continue
		}
		if !wait || c.opts.OSTRetry <= 0 {
			return err
		}
		now := time.Now()
		if start.IsZero() {
			start, deadline = now, now.Add(c.opts.OSTRetry)
		}
		if !c.ostUp(id) || !now.Before(deadline) {
			c.outages.gaveUp(c.log, ostKey(id), ostWho(id), "OST still unreachable: the write goes elsewhere", "waited", now.Sub(start).Round(time.Millisecond), "up", c.ostUp(id), "err", err)
			if now.Before(deadline) {
				return err
			}
			return fmt.Errorf("OST %d unreachable for %v: %w", id, c.opts.OSTRetry, err)
		}
		c.outages.begin(c.log, ostKey(id), ostWho(id), "OST unreachable: chunk writes wait for it", "wait", c.opts.OSTRetry, "err", err)
		c.resetOSTBackoff(id)
		if err := sleepCtx(ctx, min(backoff, deadline.Sub(now))); err != nil {
			return err
		}
		backoff = min(2*backoff, retryMaxBackoff)
	}
}

// The key and log attributes of a server in outages.
func ostKey(id uint32) string   { return fmt.Sprintf("ost %d", id) }
func ostWho(id uint32) []any    { return []any{"ost", id} }
func (c *Client) mdsWho() []any { return []any{"mds", c.opts.MDS} }

// ostUp reports whether the MDS counted OST id up when last asked.
func (c *Client) ostUp(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.ostUp[id]
}

// mayRecover reports whether at least k of ext's OSTs were up when the
// MDS was last asked: a read that found too few of its chunks may then
// succeed once they answer again (restarting OSTs).
func (c *Client) mayRecover(ext *mdspb.Extent) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	up := 0
	for _, id := range ext.GetOsts() {
		if id != 0 && c.mu.ostUp[id] {
			up++
		}
	}
	return up >= int(ext.GetLayout().GetK())
}

// resetOSTBackoff makes the gRPC connection to OST id reconnect at once
// (its Info call finds the OST's data address after a restart).
func (c *Client) resetOSTBackoff(id uint32) {
	c.mu.Lock()
	cc := c.mu.conns[c.mu.ostAddr[id]]
	c.mu.Unlock()
	if cc != nil {
		cc.ResetConnectBackoff()
	}
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// outages are the servers a client cannot reach now, each logged when
// the first call starts waiting for it, when a call gives up on it (the
// first time) and when it answers again: three lines an outage, however
// many calls wait.
type outages struct {
	n  atomic.Int32 // len(mu.m): end costs no lock while every server answers
	mu struct {
		sync.Mutex
		m map[string]*outage // by server: "mds", "ost 3"
	}
}

type outage struct {
	since  time.Time
	who    []any // the server's log attributes: "mds", addr or "ost", id
	gaveUp bool
}

// note returns the outage of server, starting one (with attributes who)
// if there is none; isNew says so. o.mu is held.
func (o *outages) note(server string, who []any) (u *outage, isNew bool) {
	if u, ok := o.mu.m[server]; ok {
		return u, false
	}
	if o.mu.m == nil {
		o.mu.m = map[string]*outage{}
	}
	u = &outage{since: time.Now(), who: who}
	o.mu.m[server] = u
	o.n.Add(1)
	return u, true
}

// begin records that server (log attributes who) cannot be reached,
// logging msg at warn, with who and args, if it could until now.
func (o *outages) begin(log *slog.Logger, server string, who []any, msg string, args ...any) {
	o.mu.Lock()
	_, isNew := o.note(server, who)
	o.mu.Unlock()
	if isNew {
		log.Warn(msg, append(who, args...)...)
	}
}

// gaveUp logs msg at warn, with who and args, the first time a call gives
// up on server in this outage (and at debug after that).
func (o *outages) gaveUp(log *slog.Logger, server string, who []any, msg string, args ...any) {
	o.mu.Lock()
	u, _ := o.note(server, who)
	first := !u.gaveUp
	u.gaveUp = true
	o.mu.Unlock()
	if first {
		log.Warn(msg, append(who, args...)...)
	} else {
		log.Debug(msg, append(who, args...)...)
	}
}

// end records that server answered, logging how long it could not be
// reached if it could not.
func (o *outages) end(log *slog.Logger, server string) {
	if o.n.Load() == 0 {
		return
	}
	o.mu.Lock()
	u, ok := o.mu.m[server]
	if ok {
		delete(o.mu.m, server)
		o.n.Add(-1)
	}
	o.mu.Unlock()
	if ok {
		log.Info("server reachable again", append(u.who, "unreachable_for", time.Since(u.since).Round(time.Millisecond))...)
	}
}
