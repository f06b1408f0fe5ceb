package ost

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Roles allowed on an OST (docs/security.md, "Roles"). OSTs never call
// each other: the MDS drives repair, rebalance and scrub, and clients
// move chunk data; so an OST's certificate reaches no chunk of another.
var (
	// chunkRoles may read, write and stat chunks, on gRPC and on the data
	// path: the users of the client library (mounts and API clients,
	// administrators) and the MDS.
	chunkRoles = []pki.Role{pki.RoleClient, pki.RoleAdmin, pki.RoleMDS}
	// adminRoles may delete and list chunks and run scrubs; these calls
	// also need an admin capability, which only the MDS signs.
	adminRoles = []pki.Role{pki.RoleAdmin, pki.RoleMDS}
)

// roleAllowed returns nil when id's role is one of roles, else a
// permission error naming what.
func roleAllowed(what string, id wire.Identity, roles []pki.Role) error {
	for _, r := range roles {
		if id.Role == r {
			return nil
		}
	}
	return fmt.Errorf("%s: %s may not call it (%v only): %w", what, id, roles, errs.ErrPermission)
}

// Authorize is the OST's wire.Authorizer for its gRPC server (wire.Bind
// with wire.ServeAuthorizer; it needs no Server, since the server is bound
// before the OST opens): it checks the role of the caller's certificate
// against the method, with the rule of the data path (authorizeData).
// Chunk reads, writes and stats: client, admin and mds; DeleteChunks,
// ListChunks and Scrub: admin and mds; Info: any role. Calls of other
// services (none today) pass. Plaintext callers (a cluster run
// --insecure) have no role and are let through; a TLS caller whose
// certificate names no role is refused. Capabilities are checked after,
// by the handlers.
func Authorize(ctx context.Context, fullMethod string) error {
	svc, method, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if svc != ostpb.Ost_ServiceDesc.ServiceName {
		return nil
	}
	id, ok := wire.PeerIdentity(ctx)
	if !ok {
		if _, tls := wire.PeerIsTLS(ctx); tls {
			return fmt.Errorf("ost: %s: certificate names no Shoal role: %w", fullMethod, errs.ErrPermission)
		}
		return nil
	}
	switch method {
	case "Info":
		return nil
	case "DeleteChunks", "ListChunks", "Scrub":
		return roleAllowed("ost: "+fullMethod, id, adminRoles)
	}
	// WriteChunk, ReadChunk, StatChunk, and any method added later until
	// it is classed above.
	return roleAllowed("ost: "+fullMethod, id, chunkRoles)
}

// authorizeData is the data path's check of a peer's certificate: the
// roles of chunkRoles may read and write chunks; OSTs never read or write
// each other's.
func authorizeData(cert *x509.Certificate) error {
	if cert == nil {
		return fmt.Errorf("ost: data path: no client certificate: %w", errs.ErrPermission)
	}
	id, ok := wire.IdentityOf(cert)
	if !ok {
		return fmt.Errorf("ost: data path: certificate names no Shoal role: %w", errs.ErrPermission)
	}
	return roleAllowed("ost: data path: read or write chunks", id, chunkRoles)
}
