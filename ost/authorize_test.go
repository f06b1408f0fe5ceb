package ost

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// TestAuthorize: the gRPC authorizer's role table (docs/security.md,
// "Roles at the OSTs"), the data path's check with the same roles,
// plaintext callers let through and a TLS caller without a role refused.
func TestAuthorize(t *testing.T) {
	ca, err := pki.InitCA(filepath.Join(t.TempDir(), "ca"), "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	cert := func(role pki.Role) *x509.Certificate {
		is, err := ca.Issue(pki.Request{Role: role, Name: "n-" + string(role)})
		if err != nil {
			t.Fatal(err)
		}
		return is.Cert
	}
	tlsCtx := func(c *x509.Certificate) context.Context {
		st := tls.ConnectionState{}
		if c != nil {
			st.VerifiedChains = [][]*x509.Certificate{{c}}
		}
		return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
	}
	m := func(name string) string { return "/" + ostpb.Ost_ServiceDesc.ServiceName + "/" + name }
	chunk := []string{"ReadChunk", "WriteChunk", "StatChunk"}
	admin := []string{"DeleteChunks", "ListChunks", "Scrub"}
	for _, role := range pki.Roles {
		c := cert(role)
		ctx := tlsCtx(c)
		chunkOK := role == pki.RoleClient || role == pki.RoleAdmin || role == pki.RoleMDS
		adminOK := role == pki.RoleAdmin || role == pki.RoleMDS
		for _, name := range chunk {
			if err := Authorize(ctx, m(name)); (err == nil) != chunkOK || (err != nil && !errors.Is(err, errs.ErrPermission)) {
				t.Errorf("%s calling %s: %v", role, name, err)
			}
		}
		for _, name := range admin {
			if err := Authorize(ctx, m(name)); (err == nil) != adminOK || (err != nil && !errors.Is(err, errs.ErrPermission)) {
				t.Errorf("%s calling %s: %v", role, name, err)
			}
		}
		if err := Authorize(ctx, m("Info")); err != nil {
			t.Errorf("%s calling Info: %v", role, err)
		}
		if err := authorizeData(c); (err == nil) != chunkOK {
			t.Errorf("%s on the data path: %v", role, err)
		}
	}
	// Plaintext: no roles to check.
	if err := Authorize(context.Background(), m("ReadChunk")); err != nil {
		t.Errorf("plaintext: %v", err)
	}
	// TLS without a verified certificate naming a role.
	if err := Authorize(tlsCtx(nil), m("Info")); !errors.Is(err, errs.ErrPermission) {
		t.Errorf("TLS without a role, Info: %v", err)
	}
	if err := authorizeData(nil); !errors.Is(err, errs.ErrPermission) {
		t.Errorf("data path without a certificate: %v", err)
	}
	// Other services (the health service, say) are not the OST's to check.
	if err := Authorize(tlsCtx(cert(pki.RoleOST)), "/grpc.health.v1.Health/Check"); err != nil {
		t.Errorf("another service: %v", err)
	}
}
