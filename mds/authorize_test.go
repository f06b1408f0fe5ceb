package mds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/mds/peerpb"
)

// methodsOf lists the methods of a gRPC service, unary and streaming.
func methodsOf(d grpc.ServiceDesc) []string {
	var out []string
	for _, m := range d.Methods {
		out = append(out, m.MethodName)
	}
	for _, s := range d.Streams {
		out = append(out, s.StreamName)
	}
	return out
}

// TestAuthorizeRoles: every method of the MDS's two services, for every
// role, against the table of docs/security.md ("Roles at the MDS"): an
// OST's certificate reaches its registration, heartbeats and reports and
// nothing of the namespace; an MDS member's the Raft transport and
// status only; clients the namespace and not the administration;
// administrators everything but an OST's own calls and the Raft
// transport. A method added to a service falls in the namespace class
// (client and admin) until it is classed; this test names each.
func TestAuthorizeRoles(t *testing.T) {
	ca, err := pki.InitCA(filepath.Join(t.TempDir(), "ca"), "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	tlsCtx := func(c *x509.Certificate) context.Context {
		st := tls.ConnectionState{}
		if c != nil {
			st.VerifiedChains = [][]*x509.Certificate{{c}}
		}
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
	}
	const (
		o = 1 << iota // ost
		m             // mds
		c             // client
		a             // admin
	)
	bit := map[pki.Role]int{pki.RoleOST: o, pki.RoleMDS: m, pki.RoleClient: c, pki.RoleAdmin: a}
	want := map[string]int{
		// Namespace, data, sessions, locks, xattrs: clients and admins.
		"Lookup": c | a, "LookupMany": c | a, "GetAttr": c | a, "SetAttr": c | a, "Create": c | a, "Mkdir": c | a,
		"Symlink": c | a, "Readlink": c | a, "Link": c | a, "Unlink": c | a, "Rmdir": c | a,
		"Rename": c | a, "ReadDir": c | a, "StatFs": c | a, "GetExtents": c | a,
		"AllocExtents": c | a, "CommitExtents": c | a, "Fallocate": c | a, "ListOsts": c | a,
		"SetXattr": c | a, "GetXattr": c | a, "ListXattr": c | a, "RemoveXattr": c | a,
		"OpenSession": c | a, "KeepAlive": c | a, "CloseSession": c | a, "Open": c | a,
		"Release": c | a, "SetLock": c | a, "GetLock": c | a, "Sync": c | a,
		"CloneExtents": c | a, "SetLayout": c | a, "GetJob": c | a,
		"LeaseDir": c | a, "Watch": c | a,
		// An OST's own.
		"RegisterOst": o, "Heartbeat": o,
		"ReportCorrupt": o | c | a,
		// Administration.
		"SetOstState": a, "StartJob": a, "StopJob": a, "PlanRebalance": a, "Fsck": a,
		"RunGC": a, "MigrateCommit": a, "Health": a,
		"SetQuota": a, "RemoveQuota": a, "CheckQuotas": a, "GetQuota": c | a, "ListQuotas": c | a,
		// Peer service.
		"Peer.Send": m, "Peer.Snapshot": m, "Peer.Status": m | a,
		"Peer.ChangeMember": a, "Peer.TransferLeader": a,
	}
	type method struct{ key, full string }
	var all []method
	for _, n := range methodsOf(mdspb.Mds_ServiceDesc) {
		all = append(all, method{n, "/" + mdspb.Mds_ServiceDesc.ServiceName + "/" + n})
	}
	for _, n := range methodsOf(peerpb.Peer_ServiceDesc) {
		all = append(all, method{"Peer." + n, "/" + peerpb.Peer_ServiceDesc.ServiceName + "/" + n})
	}
	for _, r := range pki.Roles {
		is, err := ca.Issue(pki.Request{Role: r, Name: "n-" + string(r)})
		if err != nil {
			t.Fatal(err)
		}
		ctx := tlsCtx(is.Cert)
		for _, mt := range all {
			w, ok := want[mt.key]
			if !ok {
				t.Errorf("%s: not in the test's table: class it (mds/authorize.go) and add it here", mt.key)
				continue
			}
			err := Authorize(ctx, mt.full)
			if allowed := w&bit[r] != 0; allowed != (err == nil) || (err != nil && !errors.Is(err, errs.ErrPermission)) {
				t.Errorf("%s calling %s: %v (allowed: %v)", r, mt.key, err, allowed)
			}
		}
	}
	for k := range want {
		if !slices.ContainsFunc(all, func(mt method) bool { return mt.key == k }) {
			t.Errorf("%s is in the table but no service has it", k)
		}
	}
	// Plaintext (--insecure): nothing to check.
	if err := Authorize(context.Background(), "/"+mdspb.Mds_ServiceDesc.ServiceName+"/Unlink"); err != nil {
		t.Errorf("plaintext: %v", err)
	}
	// TLS without a certificate naming a role.
	if err := Authorize(tlsCtx(nil), "/"+mdspb.Mds_ServiceDesc.ServiceName+"/GetAttr"); !errors.Is(err, errs.ErrPermission) {
		t.Errorf("TLS without a role: %v", err)
	}
}
