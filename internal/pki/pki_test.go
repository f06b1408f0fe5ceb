package pki

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRoleAndName(t *testing.T) {
	for _, r := range Roles {
		if got, err := ParseRole(string(r)); err != nil || got != r {
			t.Errorf("ParseRole(%q) = %q, %v", r, got, err)
		}
	}
	for _, s := range []string{"", "MDS", "root", "client "} {
		if _, err := ParseRole(s); err == nil {
			t.Errorf("ParseRole(%q) accepted", s)
		}
	}
	for name, ok := range map[string]bool{
		"mds1": true, "node-042.rack_3": true, "A": true, strings.Repeat("a", 63): true,
		"": false, strings.Repeat("a", 64): false, "-x": false, ".hidden": false, "a/b": false, "../x": false, "a b": false, "é": false,
	} {
		if err := ValidName(name); (err == nil) != ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := InitCA(dir, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "shoal cluster CA" {
		t.Errorf("CA certificate: IsCA %v, CN %q", ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	if d := time.Until(ca.Cert.NotAfter); d < CAValidity-time.Hour || d > CAValidity {
		t.Errorf("CA valid for %v, want %v", d, CAValidity)
	}
	for f, mode := range map[string]os.FileMode{CAKeyFile: 0o600, CACertFile: 0o644, ".": 0o700} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", f, fi.Mode().Perm(), mode)
		}
	}
	if _, err := InitCA(dir, "again", 0); err == nil {
		t.Error("InitCA overwrote a CA")
	}
	loaded, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) || !loaded.Key.Equal(ca.Key) {
		t.Error("LoadCA gave another CA")
	}
	again, err := LoadOrInitCA(dir, "x")
	if err != nil || !again.Cert.Equal(ca.Cert) {
		t.Errorf("LoadOrInitCA of an existing CA: %v", err)
	}
	fresh, err := LoadOrInitCA(filepath.Join(t.TempDir(), "new"), "fresh CA")
	if err != nil || fresh.Cert.Subject.CommonName != "fresh CA" {
		t.Errorf("LoadOrInitCA of a new dir: %v", err)
	}

	// Broken CA directories are errors, not panics.
	for name, files := range map[string]map[string]string{
		"no key":         {CACertFile: string(ca.PEM)},
		"no cert":        {CAKeyFile: "x"},
		"garbage cert":   {CACertFile: "not pem", CAKeyFile: "x"},
		"garbage key":    {CACertFile: string(ca.PEM), CAKeyFile: "not pem"},
		"key not pkcs8":  {CACertFile: string(ca.PEM), CAKeyFile: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2}}))},
		"cert not a CA":  {CACertFile: "", CAKeyFile: ""},
		"bad DER in PEM": {CACertFile: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2}})), CAKeyFile: "x"},
	} {
		d := t.TempDir()
		if name == "cert not a CA" {
			is, err := ca.Issue(Request{Role: RoleOST, Name: "ost1"})
			if err != nil {
				t.Fatal(err)
			}
			files = map[string]string{CACertFile: string(is.CertPEM), CAKeyFile: string(is.KeyPEM)}
		}
		for f, body := range files {
			if err := os.WriteFile(filepath.Join(d, f), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := LoadCA(d); err == nil {
			t.Errorf("LoadCA with %s: no error", name)
		}
	}
}

func TestIssue(t *testing.T) {
	ca, err := InitCA(t.TempDir(), "test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, r := range Roles {
		is, err := ca.Issue(Request{Role: r, Name: "n-" + string(r), Hosts: []string{"h.example", "10.0.0.1", "", "*.svc.example"}})
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		c := is.Cert
		role, name, ok := RoleOf(c)
		if !ok || role != r || name != "n-"+string(r) {
			t.Errorf("RoleOf = %q %q %v, want %q n-%s", role, name, ok, r, r)
		}
		if len(c.IPAddresses) != 1 || c.IPAddresses[0].String() != "10.0.0.1" || len(c.DNSNames) != 2 {
			t.Errorf("%s: hosts %v %v", r, c.DNSNames, c.IPAddresses)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s: verify for %v: %v", r, usage, err)
			}
		}
		if err := c.VerifyHostname("a.svc.example"); err != nil {
			t.Errorf("%s: wildcard host: %v", r, err)
		}
		if d := c.NotAfter.Sub(c.NotBefore); d != CertValidity {
			t.Errorf("%s: valid for %v, want %v", r, d, CertValidity)
		}
	}
	for name, r := range map[string]Request{
		"bad role": {Role: "root", Name: "x"},
		"bad name": {Role: RoleClient, Name: "../x"},
		"no name":  {Role: RoleClient},
	} {
		if _, err := ca.Issue(r); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
	// An expired certificate (tests of refusals make them this way).
	old, err := ca.Issue(Request{Role: RoleClient, Name: "old", NotBefore: time.Now().Add(-48 * time.Hour), Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("an expired certificate verified")
	}
	// Another CA's certificates do not verify against this one.
	other, err := InitCA(t.TempDir(), "other", 0)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Issue(Request{Role: RoleMDS, Name: "mds1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := foreign.Cert.Verify(x509.VerifyOptions{Roots: pool}); err == nil {
		t.Error("another CA's certificate verified")
	}
}

func TestIssueTo(t *testing.T) {
	ca, err := InitCA(t.TempDir(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	p, err := ca.IssueTo(dir, Request{Role: RoleClient, Name: "node042"})
	if err != nil {
		t.Fatal(err)
	}
	if p != PathsIn(dir, "node042") {
		t.Errorf("paths %+v, want %+v", p, PathsIn(dir, "node042"))
	}
	for f, mode := range map[string]os.FileMode{p.Key: 0o600, p.Cert: 0o644, p.CA: 0o644, dir: 0o700} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", f, fi.Mode().Perm(), mode)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("%d files in %s, want 3 (no temporary files left)", len(ents), dir)
	}
	b, _ := os.ReadFile(p.Cert)
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if r, n, ok := RoleOf(c); !ok || r != RoleClient || n != "node042" {
		t.Errorf("RoleOf written certificate: %q %q %v", r, n, ok)
	}
}

func TestRoleOfFallback(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *x509.Certificate
		role Role
		who  string
		ok   bool
	}{
		{"none", &x509.Certificate{}, "", "", false},
		{"OU only", &x509.Certificate{Subject: pkixName("ost", "ost7")}, RoleOST, "ost7", true},
		{"bad OU", &x509.Certificate{Subject: pkixName("root", "x")}, "", "", false},
		{"URI wins", &x509.Certificate{Subject: pkixName("ost", "ost7"), URIs: uris("shoal://mds/mds1")}, RoleMDS, "mds1", true},
		{"URI without name", &x509.Certificate{URIs: uris("shoal://mds/")}, "", "", false},
		{"other scheme", &x509.Certificate{URIs: uris("spiffe://mds/mds1")}, "", "", false},
		{"bad URI role, OU", &x509.Certificate{Subject: pkixName("client", "c"), URIs: uris("shoal://boss/x")}, RoleClient, "c", true},
	} {
		r, n, ok := RoleOf(tc.c)
		if r != tc.role || n != tc.who || ok != tc.ok {
			t.Errorf("%s: %q %q %v, want %q %q %v", tc.name, r, n, ok, tc.role, tc.who, tc.ok)
		}
	}
}

// FuzzRoleOf parses arbitrary DER as a peer's certificate, as the TLS
// handshake would, and asks its role: no panic, and a role found is a
// known one.
func FuzzRoleOf(f *testing.F) {
	ca, err := InitCA(f.TempDir(), "", 0)
	if err != nil {
		f.Fatal(err)
	}
	is, err := ca.Issue(Request{Role: RoleOST, Name: "ost1", Hosts: []string{"h", "10.0.0.1"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(is.Cert.Raw)
	f.Add(ca.Cert.Raw)
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, der []byte) {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return
		}
		r, name, ok := RoleOf(c)
		if ok {
			if _, err := ParseRole(string(r)); err != nil {
				t.Fatalf("RoleOf gave role %q: %v", r, err)
			}
		} else if r != "" || name != "" {
			t.Fatalf("RoleOf gave %q %q without ok", r, name)
		}
	})
}
