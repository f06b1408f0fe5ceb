package client

import (
	"context"
	"fmt"
	"strings"
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Lookups made at the same time go to the MDS together. While
// lookupsInFlight lookup calls of one caller identity are at the MDS,
// further lookups of that identity wait, and go as one LookupMany call
// when one of those returns. A lone lookup costs one Lookup call as
// before; the kernel's parallel lookups of a cold stat of many files (a
// job start, `ls -l`, `find`) share the cost of a call, which on the
// mount is most of a lookup's CPU (docs/performance.md).

const (
	// lookupsInFlight is how many lookup calls of one identity may be at
	// the MDS at once before the next lookups wait to be batched.
	lookupsInFlight = 2
	// lookupBatchMax bounds the lookups of one LookupMany call (the
	// MDS's limit is 256).
	lookupBatchMax = 128
)

// lookupBatcher is the Client's table of lookups in flight and waiting,
// by caller identity.
type lookupBatcher struct {
	mu     sync.Mutex
	groups map[string]*lookupGroup
	noMany bool           // the MDS does not know LookupMany
	wg     sync.WaitGroup // batch calls started for waiting lookups
}

type lookupGroup struct {
	inflight int
	queue    []*pendingLookup
}

// pendingLookup is a lookup waiting for a batch.
type pendingLookup struct {
	ctx  context.Context
	req  *mdspb.LookupRequest
	attr *mdspb.Attr
	err  error
	done chan struct{}
}

// identityKey is the caller identity that ctx's outgoing calls carry.
func identityKey(ctx context.Context) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	return strings.Join(md.Get(wire.UIDHeader), ",") + "/" + strings.Join(md.Get(wire.GIDHeader), ",") + "/" + strings.Join(md.Get(wire.GroupsHeader), ",")
}

// lookupMDS looks name up in parent at the MDS, alone or batched with
// other lookups of the same identity made at the same time.
func (c *Client) lookupMDS(ctx context.Context, parent uint64, name string) (*mdspb.Attr, error) {
	req := &mdspb.LookupRequest{Parent: parent, Name: []byte(name)}
	b := &c.lookups
	key := identityKey(ctx)
	b.mu.Lock()
	if b.groups == nil {
		b.groups = map[string]*lookupGroup{}
	}
	g := b.groups[key]
	if g == nil {
		g = &lookupGroup{}
		b.groups[key] = g
	}
	if g.inflight < lookupsInFlight || b.noMany || c.closed.Load() {
		g.inflight++
		b.mu.Unlock()
		r, err := c.mds.Lookup(ctx, req)
		c.lookupReturned(key)
		return r.GetAttr(), err
	}
	p := &pendingLookup{ctx: ctx, req: req, done: make(chan struct{})}
	g.queue = append(g.queue, p)
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.attr, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// lookupReturned notes that a lookup call of identity key returned, and
// sends the lookups waiting for it as one batch.
func (c *Client) lookupReturned(key string) {
	b := &c.lookups
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[key]
	g.inflight--
	if len(g.queue) == 0 {
		if g.inflight == 0 {
			delete(b.groups, key)
		}
		return
	}
	n := min(len(g.queue), lookupBatchMax)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.inflight++
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		c.lookupBatch(batch)
		c.lookupReturned(key)
	}()
}

// lookupBatch sends batch in one LookupMany call (one Lookup for one) and
// answers each of its lookups. The call carries the first lookup's
// metadata (all share its identity) and is not cancelled with it; each
// waiter stops waiting when its own ctx ends.
func (c *Client) lookupBatch(batch []*pendingLookup) {
	ctx := context.WithoutCancel(batch[0].ctx)
	if len(batch) == 1 {
		r, err := c.mds.Lookup(ctx, batch[0].req)
		batch[0].attr, batch[0].err = r.GetAttr(), err
		close(batch[0].done)
		return
	}
	req := &mdspb.LookupManyRequest{Lookups: make([]*mdspb.LookupRequest, len(batch))}
	for i, p := range batch {
		req.Lookups[i] = p.req
	}
	r, err := c.mds.LookupMany(ctx, req)
	if status.Code(err) == codes.Unimplemented {
		// An MDS older than LookupMany: one call each from now on.
		c.lookups.mu.Lock()
		c.lookups.noMany = true
		c.lookups.mu.Unlock()
		var wg sync.WaitGroup
		for _, p := range batch {
			wg.Go(func() {
				r, err := c.mds.Lookup(ctx, p.req)
				p.attr, p.err = r.GetAttr(), err
				close(p.done)
			})
		}
		wg.Wait()
		return
	}
	if err == nil {
		c.metrics.lookupsBatched.Add(float64(len(batch)))
	}
	if err == nil && len(r.GetResults()) != len(batch) {
		err = fmt.Errorf("the MDS answered %d of %d lookups: %w", len(r.GetResults()), len(batch), errs.ErrCorrupt)
	}
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.attr, p.err = lookupResult(r.GetResults()[i])
		}
		close(p.done)
	}
}

// lookupResult turns one answer of LookupMany into Lookup's.
func lookupResult(r *mdspb.LookupResult) (*mdspb.Attr, error) {
	if len(r.GetStatus()) == 0 {
		if r.GetAttr() == nil {
			return nil, fmt.Errorf("the MDS answered a lookup without attributes: %w", errs.ErrCorrupt)
		}
		return r.GetAttr(), nil
	}
	var st spb.Status
	if err := proto.Unmarshal(r.GetStatus(), &st); err != nil {
		return nil, fmt.Errorf("the MDS answered a lookup with a bad status: %v: %w", err, errs.ErrCorrupt)
	}
	err := status.FromProto(&st).Err()
	if err == nil {
		return nil, fmt.Errorf("the MDS answered a lookup with status OK and no attributes: %w", errs.ErrCorrupt)
	}
	return nil, wire.FromStatus(err)
}
