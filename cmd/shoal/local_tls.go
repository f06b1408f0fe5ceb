package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
)

// localCreds are the certificates of an all-in-one cluster.
type localCreds struct {
	mds, ost, client, admin *wire.Creds
	dir                     string // DIR/tls: ca.crt, certs/admin.{crt,key} for other commands
}

// localTLS makes (the first time) or loads a throwaway CA under dir/tls
// and certificates for the MDS, the OSTs, the mount (role client) and an
// administrator, for 127.0.0.1, ::1, localhost and the extra hosts (the
// --listen host): `shoal local` serves mutual TLS by default. A
// certificate that does not name every host is issued again. Other
// commands use certs/admin.crt, certs/admin.key and certs/ca.crt there
// (written to dir/tls/env as SHOAL_CERT, SHOAL_KEY and SHOAL_CA).
func localTLS(dir string, extraHosts ...string) (*localCreds, error) {
	tdir := filepath.Join(dir, "tls")
	ca, err := pki.LoadOrInitCA(tdir, "shoal local CA")
	if err != nil {
		return nil, err
	}
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	for _, h := range extraHosts {
		if h != "" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	out := &localCreds{dir: tdir}
	certs := filepath.Join(tdir, "certs")
	for _, x := range []struct {
		role pki.Role
		name string
		dst  **wire.Creds
	}{{pki.RoleMDS, "mds", &out.mds}, {pki.RoleOST, "ost", &out.ost}, {pki.RoleClient, "mount", &out.client}, {pki.RoleAdmin, "admin", &out.admin}} {
		p := pki.PathsIn(certs, x.name)
		c, err := wire.LoadCreds(wire.TLSFiles{Cert: p.Cert, Key: p.Key, CA: p.CA})
		if err == nil && !namesHosts(p.Cert, hosts) {
			c, err = nil, fmt.Errorf("%s does not name every host", p.Cert)
		}
		if err != nil {
			if p, err = ca.IssueTo(certs, pki.Request{Role: x.role, Name: x.name, Hosts: hosts}); err != nil {
				return nil, err
			}
			if c, err = wire.LoadCreds(wire.TLSFiles{Cert: p.Cert, Key: p.Key, CA: p.CA}); err != nil {
				return nil, err
			}
		}
		*x.dst = c
	}
	if err := out.writeEnv(); err != nil {
		return nil, err
	}
	return out, nil
}

// namesHosts reports whether the certificate in file names every host.
func namesHosts(file string, hosts []string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return false
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// envFile is the file, under DIR/tls, that sets the environment other
// commands need to reach the cluster as its administrator.
const envFile = "env"

// env returns the environment of the administrator's certificate:
// SHOAL_CERT, SHOAL_KEY and SHOAL_CA, with absolute paths.
func (l *localCreds) env() [][2]string {
	f := l.admin.Files()
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	return [][2]string{{"SHOAL_CERT", abs(f.Cert)}, {"SHOAL_KEY", abs(f.Key)}, {"SHOAL_CA", abs(f.CA)}}
}

// writeEnv writes DIR/tls/env, to be sourced by a shell: `. DIR/tls/env`.
func (l *localCreds) writeEnv() error {
	var b strings.Builder
	b.WriteString("# shoal local: the administrator's certificate, for other shoal commands\n")
	for _, kv := range l.env() {
		fmt.Fprintf(&b, "export %s='%s'\n", kv[0], strings.ReplaceAll(kv[1], "'", `'\''`))
	}
	return os.WriteFile(filepath.Join(l.dir, envFile), []byte(b.String()), 0o644)
}
