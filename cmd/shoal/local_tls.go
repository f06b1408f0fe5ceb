package main

import (
	"path/filepath"

	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
)

// localCreds are the certificates of an all-in-one cluster.
type localCreds struct {
	mds, ost, admin *wire.Creds
	dir             string // DIR/tls: ca.crt, certs/admin.{crt,key} for other commands
}

// localTLS makes (the first time) or loads a throwaway CA under dir/tls
// and certificates for the MDS, the OSTs and an administrator, all for
// 127.0.0.1 and localhost: `shoal local` serves mutual TLS by default.
// Other commands use certs/admin.crt, certs/admin.key and ca.crt there.
func localTLS(dir string) (*localCreds, error) {
	tdir := filepath.Join(dir, "tls")
	ca, err := pki.LoadOrInitCA(tdir, "shoal local CA")
	if err != nil {
		return nil, err
	}
	out := &localCreds{dir: tdir}
	for _, x := range []struct {
		role pki.Role
		name string
		dst  **wire.Creds
	}{{pki.RoleMDS, "mds", &out.mds}, {pki.RoleOST, "ost", &out.ost}, {pki.RoleAdmin, "admin", &out.admin}} {
		certs := filepath.Join(tdir, "certs")
		p := pki.PathsIn(certs, x.name)
		c, err := wire.LoadCreds(wire.TLSFiles{Cert: p.Cert, Key: p.Key, CA: p.CA})
		if err != nil {
			if p, err = ca.IssueTo(certs, pki.Request{Role: x.role, Name: x.name, Hosts: []string{"127.0.0.1", "::1", "localhost"}}); err != nil {
				return nil, err
			}
			if c, err = wire.LoadCreds(wire.TLSFiles{Cert: p.Cert, Key: p.Key, CA: p.CA}); err != nil {
				return nil, err
			}
		}
		*x.dst = c
	}
	return out, nil
}
