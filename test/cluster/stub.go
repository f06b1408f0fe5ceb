package cluster

import (
	"context"

	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// MDSStub returns a raw MDS stub that reaches the MDS as client cl does
// (MDSStubWith of the options cl was made with); cl must have been made
// by Client or ClientWith. One stub per client, closed with the
// cluster's clients.
func (c *Cluster) MDSStub(cl *client.Client) mdspb.MdsClient {
	c.t.Helper()
	c.mu.Lock()
	stub, ok := c.stubs[cl]
	o, made := c.clientOpts[cl]
	c.mu.Unlock()
	if ok {
		return stub
	}
	if !made {
		c.t.Fatalf("MDSStub: a client the cluster did not make (use MDSStubWith)")
	}
	stub = c.MDSStubWith(o)
	c.mu.Lock()
	if c.stubs == nil {
		c.stubs = map[*client.Client]mdspb.MdsClient{}
	}
	c.stubs[cl] = stub
	c.mu.Unlock()
	return stub
}

// MDSStubWith returns a raw MDS stub that reaches the MDS as a client
// with options o would: with o.Creds (the cluster's administrator's when
// nil, as ClientWith), and with o.User on every call whose context names
// no other identity. It is for tests that send calls the client does not
// make, or malformed ones; unlike a client it records no capabilities
// and does not wait for an MDS that cannot be reached. Its connection is
// closed with the cluster's clients.
func (c *Cluster) MDSStubWith(o client.Options) mdspb.MdsClient {
	c.t.Helper()
	if o.Creds == nil {
		o.Creds = c.Creds(pki.RoleAdmin)
	}
	g, err := wire.DialGroup(c.mdsAddr, wire.WithCreds(o.Creds), wire.WithUnaryInterceptor(userInterceptor(o.User)))
	if err != nil {
		c.t.Fatalf("MDSStub: %v", err)
	}
	c.mu.Lock()
	c.stubConns = append(c.stubConns, g)
	c.mu.Unlock()
	return mdspb.NewMdsClient(g)
}

// userInterceptor makes calls for u (nil: none) unless their context
// names an identity, as a client with Options.User does.
func userInterceptor(u *client.User) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if u != nil && !wire.HasUser(ctx) {
			ctx = wire.WithUser(ctx, *u)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// closeStubs closes the connections of MDSStub and forgets the clients'
// options.
func (c *Cluster) closeStubs() {
	c.mu.Lock()
	conns := c.stubConns
	c.stubs, c.stubConns, c.clientOpts = nil, nil, nil
	c.mu.Unlock()
	for _, g := range conns {
		g.Close()
	}
}
