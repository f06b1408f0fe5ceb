package cluster

import (
	"fmt"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/ost"
)

// clusterTLS holds the certificates of a test cluster: a CA of its own
// under Dir/tls (kept across restarts), one certificate per role.
type clusterTLS struct {
	dir                     string
	ca                      *pki.CA
	mds, ost, client, admin *wire.Creds
}

// setupTLS makes (or loads) the cluster's CA and certificates; nothing
// when the cluster runs Insecure.
func (c *Cluster) setupTLS() error {
	if c.opts.Insecure {
		return nil
	}
	dir := filepath.Join(c.Dir, "tls")
	ca, err := pki.LoadOrInitCA(dir, "shoal test CA")
	if err != nil {
		return err
	}
	t := &clusterTLS{dir: dir, ca: ca}
	for _, x := range []struct {
		role pki.Role
		dst  **wire.Creds
	}{{pki.RoleMDS, &t.mds}, {pki.RoleOST, &t.ost}, {pki.RoleClient, &t.client}, {pki.RoleAdmin, &t.admin}} {
		cr, err := c.IssueCreds(t, x.role, "test-"+string(x.role))
		if err != nil {
			return err
		}
		*x.dst = cr
	}
	c.tls = t
	return nil
}

// IssueCreds issues a certificate of role named name from the cluster's
// CA, for tests of trust levels.
func (c *Cluster) IssueCreds(t *clusterTLS, role pki.Role, name string) (*wire.Creds, error) {
	if t == nil {
		t = c.tls
	}
	if t == nil {
		return nil, fmt.Errorf("cluster runs insecure: no CA")
	}
	p, err := t.ca.IssueTo(filepath.Join(t.dir, "certs"), pki.Request{Role: role, Name: name, Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		return nil, err
	}
	return wire.LoadCreds(wire.TLSFiles{Cert: p.Cert, Key: p.Key, CA: p.CA})
}

// Creds returns the credentials of role in this cluster (nil when it
// runs Insecure): clients get role admin unless a test asks otherwise, so
// that administration calls work from them.
func (c *Cluster) Creds(role pki.Role) *wire.Creds {
	if c.tls == nil {
		return nil
	}
	switch role {
	case pki.RoleMDS:
		return c.tls.mds
	case pki.RoleOST:
		return c.tls.ost
	case pki.RoleClient:
		return c.tls.client
	}
	return c.tls.admin
}

// CADir is the directory of the cluster's CA ("" when Insecure).
func (c *Cluster) CADir() string {
	if c.tls == nil {
		return ""
	}
	return c.tls.dir
}

// mdsServeOpts are the server options of an MDS of the cluster.
func (c *Cluster) mdsServeOpts(authorize wire.Authorizer) []wire.ServerOpt {
	return []wire.ServerOpt{wire.ServeCreds(c.Creds(pki.RoleMDS)), wire.ServeAuthorizer(authorize)}
}

// ostServeOpts are the server options of an OST of the cluster.
func (c *Cluster) ostServeOpts() []wire.ServerOpt {
	return []wire.ServerOpt{wire.ServeCreds(c.Creds(pki.RoleOST)), wire.ServeAuthorizer(ost.Authorize)}
}

// DialMDS connects to the MDS as an administrator.
func (c *Cluster) DialMDS() (*grpc.ClientConn, error) {
	return wire.Dial(c.mdsAddr, wire.WithCreds(c.Creds(pki.RoleAdmin)))
}

// DialOST connects to OST i as the MDS does (its certificate and an
// admin capability on every call).
func (c *Cluster) DialOST(i int) (*grpc.ClientConn, error) {
	return c.MDS().DialOST(c.osts[i].Addr)
}

// TLSEnv is the environment a `shoal` command needs to reach the cluster
// as an administrator: SHOAL_CERT, SHOAL_KEY and SHOAL_CA, or
// SHOAL_INSECURE=1.
func (c *Cluster) TLSEnv() []string {
	cr := c.Creds(pki.RoleAdmin)
	if cr == nil {
		return []string{"SHOAL_INSECURE=1"}
	}
	f := cr.Files()
	return []string{"SHOAL_CERT=" + f.Cert, "SHOAL_KEY=" + f.Key, "SHOAL_CA=" + f.CA}
}
