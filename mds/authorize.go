package mds

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/mds/peerpb"
)

// Roles at the MDS (docs/security.md, "Roles at the MDS"). Each role may
// call exactly what its holder needs:
//
//   - client (mounts, API clients): the namespace, extents, sessions,
//     locks, xattrs, layouts it owns, directory leases (LeaseDir, Watch),
//     OST addresses, and reports of the corrupt chunks its reads meet;
//   - admin (shoal admin): what a client may, and the cluster's
//     administration (jobs, OST states, fsck, gc, migrations), and the
//     Raft group's membership;
//   - ost: its registration, its heartbeats and its scrubber's reports,
//     nothing of the namespace;
//   - mds (the other members of a replicated MDS): the Raft transport
//     and member status, nothing of the namespace.
//
// A method of the Mds service not named below is a namespace method:
// client and admin only. TestAuthorizeRoles checks every method of both
// services for every role.
var (
	// ostCalls are an OST's own calls: no other role makes them (an
	// administrator registering a fake OST would receive chunks).
	ostCalls = []string{"RegisterOst", "Heartbeat"}
	// reportCalls are made by OSTs (scrub), clients (reads) and
	// administrators (fsck).
	reportCalls = []string{"ReportCorrupt"}
	// adminCalls change the cluster, or read all of it (Health scans
	// every extent): administrators only.
	adminCalls = []string{"SetOstState", "StartJob", "StopJob", "PlanRebalance", "Fsck", "RunGC", "MigrateCommit", "Health",
		"SetQuota", "RemoveQuota", "CheckQuotas"}
	// peerCalls of the Raft transport: MDS members only.
	peerCalls = []string{"Send", "Snapshot"}
	// peerStatusCalls: members and administrators.
	peerStatusCalls = []string{"Status"}
	// The other Peer methods (ChangeMember, TransferLeader) are
	// administrators' only.
)

// Role sets of the classes above.
var (
	rolesOST       = []pki.Role{pki.RoleOST}
	rolesReport    = []pki.Role{pki.RoleOST, pki.RoleClient, pki.RoleAdmin}
	rolesAdmin     = []pki.Role{pki.RoleAdmin}
	rolesNamespace = []pki.Role{pki.RoleClient, pki.RoleAdmin}
	rolesPeer      = []pki.Role{pki.RoleMDS}
	rolesStatus    = []pki.Role{pki.RoleMDS, pki.RoleAdmin}
)

// methodRoles returns the roles that may call a method of the MDS's
// services, or nil for a service that is not the MDS's (gRPC answers
// those itself: unimplemented).
func methodRoles(fullMethod string) []pki.Role {
	svc, method := splitMethod(fullMethod)
	switch svc {
	case peerpb.Peer_ServiceDesc.ServiceName:
		switch {
		case slices.Contains(peerCalls, method):
			return rolesPeer
		case slices.Contains(peerStatusCalls, method):
			return rolesStatus
		}
		return rolesAdmin
	case mdspb.Mds_ServiceDesc.ServiceName:
		switch {
		case slices.Contains(ostCalls, method):
			return rolesOST
		case slices.Contains(reportCalls, method):
			return rolesReport
		case slices.Contains(adminCalls, method):
			return rolesAdmin
		}
		return rolesNamespace
	}
	return nil
}

// Authorize is the MDS's wire.Authorizer (Server.Authorize): it checks
// the role of the caller's certificate against the method. Plaintext
// callers (a cluster run --insecure) have no role and are let through. It
// needs no server, so that a member can bind before it opens.
func (s *Server) Authorize(ctx context.Context, fullMethod string) error {
	return Authorize(ctx, fullMethod)
}

// Authorize is Server.Authorize.
func Authorize(ctx context.Context, fullMethod string) error {
	id, ok := wire.PeerIdentity(ctx)
	if !ok {
		if _, tls := wire.PeerIsTLS(ctx); tls {
			return fmt.Errorf("%s: certificate names no Shoal role: %w", fullMethod, errs.ErrPermission)
		}
		return nil
	}
	roles := methodRoles(fullMethod)
	if roles == nil || slices.Contains(roles, id.Role) {
		return nil
	}
	return fmt.Errorf("%s: %s may not call it (%v only): %w", fullMethod, id, roles, errs.ErrPermission)
}

func splitMethod(full string) (svc, method string) {
	full = strings.TrimPrefix(full, "/")
	svc, method, _ = strings.Cut(full, "/")
	return svc, method
}
