package client

// Capabilities (docs/security.md): the MDS hands out a capability per
// extent with every extent map (GetExtents, Open) and allocation
// (AllocExtents); OSTs refuse chunk calls without the right one. The
// client keeps them in a table filled by an interceptor on its MDS
// connection and attaches them to gRPC chunk calls with an interceptor on
// its OST connections; chunkio.go hands them to the data path
// (internal/datanet, which sends them after each request's header) with
// ChunkCapability.
// A capability about to expire is renewed by asking the MDS for the
// file's extent map again.

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// capRenewBefore is how long before its expiry a read capability is
// renewed.
const capRenewBefore = time.Minute

// capPruneAt is the table size at which expired entries are dropped.
const capPruneAt = 1 << 16

type capEntry struct {
	read, write []byte
	readExp     time.Time
	ino         uint64
}

// capTable holds the capabilities of the extents the client was told about.
type capTable struct {
	mu sync.Mutex
	m  map[uint64]*capEntry // guarded by mu; by extent id
}

func (t *capTable) put(ino, extent uint64, tok []byte, access capability.Access) {
	c, err := capability.Decode(tok)
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]*capEntry{}
	}
	if len(t.m) >= capPruneAt {
		now := time.Now()
		for id, e := range t.m {
			if now.After(e.readExp) && e.write == nil {
				delete(t.m, id)
			}
		}
	}
	e := t.m[extent]
	if e == nil {
		e = &capEntry{}
		t.m[extent] = e
	}
	if ino != 0 {
		e.ino = ino
	}
	if access == capability.Write {
		e.write = tok
	} else {
		e.read, e.readExp = tok, c.Expires
	}
}

func (t *capTable) get(extent uint64, access capability.Access) (tok []byte, ino uint64, exp time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[extent]
	if e == nil {
		return nil, 0, time.Time{}
	}
	if access == capability.Write {
		return e.write, e.ino, time.Time{}
	}
	return e.read, e.ino, e.readExp
}

// mdsCapInterceptor records the capabilities of MDS replies.
func (c *Client) mdsCapInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.opts.User != nil && !wireHasUser(ctx) {
		ctx = withUser(ctx, *c.opts.User)
	}
	if ino, ok := contentChange(req); ok && !c.leases.off {
		// This client's own inode lease ends before its change reaches
		// the MDS, which therefore need not recall it: the change names
		// the session (contentlease.go).
		c.leases.dropFile(ino)
		ctx = c.sessionCtx(ctx)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		return err
	}
	if r, ok := req.(*mdspb.SetAttrRequest); ok && r.GetValid() == uint32(mdspb.SetAttrBits_SETATTR_ATIME_READ) {
		// A relatime update leaves this client's lease on the file be
		// (mds/intercept.go): its attributes are the answer's.
		if a, ok := reply.(*mdspb.AttrReply); ok {
			c.leases.readTimeSet(r.GetIno(), a.GetAttr())
		}
	}
	c.recordCaps(req, reply)
	return nil
}

// recordCaps takes the capabilities out of an MDS reply.
func (c *Client) recordCaps(req, reply any) {
	switch r := reply.(type) {
	case *mdspb.GetExtentsReply:
		c.recordRefs(r.GetAttr().GetIno(), r.GetExtents(), r.GetCaps())
	case *mdspb.OpenReply:
		ino := r.GetAttr().GetIno()
		if q, ok := req.(*mdspb.OpenRequest); ok {
			ino = q.GetIno()
		}
		c.recordRefs(ino, r.GetExtents(), r.GetCaps())
	case *mdspb.AllocExtentsReply:
		var ino uint64
		if q, ok := req.(*mdspb.AllocExtentsRequest); ok {
			ino = q.GetIno()
		}
		for i, e := range r.GetExtents() {
			if i < len(r.GetCaps()) {
				c.caps.put(ino, e.GetId(), r.GetCaps()[i], capability.Write)
			}
		}
	}
}

func (c *Client) recordRefs(ino uint64, refs []*mdspb.ExtentRef, caps [][]byte) {
	for i, r := range refs {
		if i < len(caps) {
			c.caps.put(ino, r.GetExtent().GetId(), caps[i], capability.Read)
		}
	}
}

// ostCapInterceptor attaches the capability of a chunk call's extent.
func (c *Client) ostCapInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var extent uint64
	var access capability.Access
	switch r := req.(type) {
	case *ostpb.ReadChunkRequest:
		extent, access = r.GetId().GetExtent(), capability.Read
	case *ostpb.StatChunkRequest:
		extent, access = r.GetId().GetExtent(), capability.Read
	case *ostpb.WriteChunkRequest:
		extent, access = r.GetId().GetExtent(), capability.Write
	default:
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if tok := c.capFor(ctx, extent, access); tok != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, capability.MetadataKey, string(tok))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// capFor returns the capability for access to extent, renewing a read
// capability that is about to expire; nil when the client has none (the
// OST then refuses the call).
func (c *Client) capFor(ctx context.Context, extent uint64, access capability.Access) []byte {
	tok, ino, exp := c.caps.get(extent, access)
	if access == capability.Read && ino != 0 && time.Until(exp) < capRenewBefore {
		// GetExtents goes through mdsCapInterceptor, which records the
		// new capabilities.
		if _, err := c.mds.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: ino}); err == nil {
			tok, _, _ = c.caps.get(extent, access)
		}
	}
	return tok
}

// ChunkCapability returns the capability the client holds for access
// (capability.Read or Write) to extent's chunks, for transports that carry
// it themselves (the data path, internal/datanet).
func (c *Client) ChunkCapability(ctx context.Context, extent uint64, access capability.Access) []byte {
	return c.capFor(ctx, extent, access)
}

// contentChange returns the inode whose attributes or contents req may
// change (the MDS recalls inode leases for them: mds/intercept.go), but
// for a relatime update, which leaves this client's own lease be.
func contentChange(req any) (uint64, bool) {
	switch r := req.(type) {
	case *mdspb.CommitExtentsRequest:
		return r.GetIno(), true
	case *mdspb.SetAttrRequest:
		return r.GetIno(), r.GetValid() != uint32(mdspb.SetAttrBits_SETATTR_ATIME_READ)
	case *mdspb.SetXattrRequest:
		return r.GetIno(), true
	case *mdspb.RemoveXattrRequest:
		return r.GetIno(), true
	case *mdspb.LinkRequest:
		return r.GetIno(), true
	case *mdspb.FallocateRequest:
		return r.GetIno(), true
	case *mdspb.CloneExtentsRequest:
		return r.GetDstIno(), true
	case *mdspb.SetLayoutRequest:
		return r.GetIno(), true
	case *mdspb.MigrateCommitRequest:
		return r.GetSrcIno(), true
	}
	return 0, false
}
