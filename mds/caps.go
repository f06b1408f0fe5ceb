package mds

// Capabilities for the OSTs (docs/security.md, "Capabilities").
//
// The MDS signs a short-lived capability per extent with every extent map
// it hands out (GetExtents, Open: read, when the caller may read the
// file) and every extent it allocates (AllocExtents: write, when the
// caller may write it). OSTs check the capability on every chunk call
// without asking the MDS. The secret is created by the first OST
// registration, in the same replicated batch, so that every member of a
// replicated MDS signs with the same one; every registration hands it to
// the OST (over mutual TLS). The MDS's own calls to OSTs (GC, repair,
// rebalance, fsck, scrub) carry an admin capability minted per call.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// DefaultCapabilityTTL is the default lifetime of a capability. Clients
// ask again (GetExtents) when one is about to expire.
const DefaultCapabilityTTL = 5 * time.Minute

// adminCapTTL is the lifetime of the admin capability of one MDS call.
const adminCapTTL = 2 * time.Minute

// prefixSecret is the key space of cluster secrets (keys.go): "K" + name.
const prefixSecret = 'K'

// secretCap names the capability secret.
const secretCap = "cap"

func secretKey(name string) []byte { return append([]byte{prefixSecret}, name...) }

// capKey returns the capability key, loading it from the database the
// first time it is there; nil before any OST registered.
func (s *Server) capKey() (*capability.Key, error) {
	if k := s.capk.Load(); k != nil {
		return k, nil
	}
	v, err := getValue(s.db, secretKey(secretCap))
	if errors.Is(err, errs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	k, err := capability.NewKey(v)
	if err != nil {
		return nil, fmt.Errorf("mds: capability secret: %w", errs.ErrCorrupt)
	}
	s.capk.Store(k)
	return k, nil
}

// ensureCapSecret returns the capability secret, creating it in t's batch
// when the database has none yet.
func (t *txn) ensureCapSecret() ([]byte, error) {
	v, err := getValue(t.b, secretKey(secretCap))
	if err == nil {
		if len(v) != capability.SecretSize {
			return nil, fmt.Errorf("mds: capability secret of %d bytes: %w", len(v), errs.ErrCorrupt)
		}
		return v, nil
	}
	if !errors.Is(err, errs.ErrNotFound) {
		return nil, err
	}
	v = make([]byte, capability.SecretSize)
	if _, err := rand.Read(v); err != nil {
		return nil, err
	}
	return v, t.b.Set(secretKey(secretCap), v, nil)
}

func (s *Server) capTTL() time.Duration {
	if s.o.CapabilityTTL > 0 {
		return s.o.CapabilityTTL
	}
	return DefaultCapabilityTTL
}

// extentCaps returns a capability granting access to each extent's chunks,
// or nil when no OST ever registered (there are no chunks then).
func (s *Server) extentCaps(ids []uint64, access capability.Access) ([][]byte, error) {
	k, err := s.capKey()
	if err != nil || k == nil || len(ids) == 0 {
		return nil, err
	}
	exp := s.o.Now().Add(s.capTTL())
	out := make([][]byte, len(ids))
	for i, id := range ids {
		out[i] = k.Sign(access, id, exp)
	}
	return out, nil
}

// refCaps returns read capabilities for refs when c may read a.
func (s *Server) refCaps(c caller, a *mdspb.Attr, refs []*mdspb.ExtentRef) ([][]byte, error) {
	if a == nil || !c.mayData(a, mayRead) {
		return nil, nil
	}
	ids := make([]uint64, len(refs))
	for i, r := range refs {
		ids[i] = r.GetExtent().GetId()
	}
	return s.extentCaps(ids, capability.Read)
}

// adminCapInterceptor attaches an admin capability to every call the MDS
// makes to an OST.
func (s *Server) adminCapInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	k, err := s.capKey()
	if err != nil {
		return err
	}
	if k != nil {
		tok := k.Sign(capability.Admin, 0, s.o.Now().Add(adminCapTTL))
		ctx = metadata.AppendToOutgoingContext(ctx, capability.MetadataKey, string(tok))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// dialOST connects to an OST for the MDS's own calls: mutual TLS with the
// MDS's certificate and an admin capability on every call.
func (s *Server) dialOST(addr string) (*grpc.ClientConn, error) {
	return wire.Dial(addr, wire.WithCreds(s.o.Creds), wire.WithUnaryInterceptor(s.adminCapInterceptor))
}

// DialOST connects to the OST at addr as the MDS does for its own calls
// (its certificate, an admin capability on every call): for tests and
// tools that act for the MDS.
func (s *Server) DialOST(addr string) (*grpc.ClientConn, error) { return s.dialOST(addr) }

// Capability signs a capability with the cluster key, for tests and tools
// that need one made by hand (an expired one, say).
func (s *Server) Capability(access capability.Access, extent uint64, expires time.Time) ([]byte, error) {
	k, err := s.capKey()
	if err != nil {
		return nil, err
	}
	if k == nil {
		return nil, fmt.Errorf("mds: no capability key yet (no OST registered): %w", errs.ErrUnavailable)
	}
	return k.Sign(access, extent, expires), nil
}
