package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
)

// TLSFiles names the PEM files of a node's mutual TLS identity: its
// certificate, its private key and the cluster CA's certificate
// (shoal admin ca init / cert issue; docs/security.md).
type TLSFiles struct {
	Cert, Key, CA string
}

// IsZero reports whether no file is named.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

// Validate checks that all three files are named.
func (f TLSFiles) Validate() error {
	var missing []string
	if f.Cert == "" {
		missing = append(missing, "certificate")
	}
	if f.Key == "" {
		missing = append(missing, "key")
	}
	if f.CA == "" {
		missing = append(missing, "CA certificate")
	}
	if len(missing) > 0 {
		return fmt.Errorf("TLS: no %v file given: %w", missing, errs.ErrInvalid)
	}
	return nil
}

// Creds is a node's loaded mutual TLS identity. One Creds serves every
// gRPC server and client connection of a process and the data path
// (internal/datanet); Reload reads the files again (on SIGHUP), and new
// handshakes use the new certificate and CA from then on, while open
// connections keep theirs. A nil *Creds means plaintext: allowed only
// where a caller asked for it explicitly (--insecure).
type Creds struct {
	files TLSFiles
	mu    struct {
		sync.RWMutex
		cert *tls.Certificate
		pool *x509.CertPool
		id   Identity
	}
}

// Identity is who holds a certificate: its role and name.
type Identity struct {
	Role pki.Role
	Name string
}

func (id Identity) String() string { return string(id.Role) + "/" + id.Name }

// CredsFromEnv loads the credentials that a `shoal local`'s env file
// names ($SHOAL_CERT, $SHOAL_KEY, $SHOAL_CA), or returns nil for a
// plaintext cluster ($SHOAL_INSECURE=1): for the experiment tools, which
// take no TLS flags.
func CredsFromEnv() (*Creds, error) {
	if os.Getenv("SHOAL_INSECURE") == "1" {
		return nil, nil
	}
	return LoadCreds(TLSFiles{Cert: os.Getenv("SHOAL_CERT"), Key: os.Getenv("SHOAL_KEY"), CA: os.Getenv("SHOAL_CA")})
}

// LoadCreds reads the certificate, key and CA named by f.
func LoadCreds(f TLSFiles) (*Creds, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	c := &Creds{files: f}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again. On error the old identity stays.
func (c *Creds) Reload() error {
	cert, err := tls.LoadX509KeyPair(c.files.Cert, c.files.Key)
	if err != nil {
		return fmt.Errorf("TLS: load %s and %s: %w", c.files.Cert, c.files.Key, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("TLS: %s: %w", c.files.Cert, err)
		}
	}
	role, name, ok := pki.RoleOf(leaf)
	if !ok {
		return fmt.Errorf("TLS: %s names no Shoal role (issue it with shoal admin cert issue): %w", c.files.Cert, errs.ErrInvalid)
	}
	caPEM, err := os.ReadFile(c.files.CA)
	if err != nil {
		return fmt.Errorf("TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("TLS: %s holds no PEM certificate: %w", c.files.CA, errs.ErrInvalid)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("TLS: %s is not valid under the CA in %s: %w", c.files.Cert, c.files.CA, err)
	}
	c.mu.Lock()
	c.mu.cert, c.mu.pool, c.mu.id = &cert, pool, Identity{Role: role, Name: name}
	c.mu.Unlock()
	return nil
}

// Identity is the role and name of this node's own certificate.
func (c *Creds) Identity() Identity {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mu.id
}

// Files returns the files the credentials were loaded from.
func (c *Creds) Files() TLSFiles { return c.files }

func (c *Creds) current() (*tls.Certificate, *x509.CertPool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mu.cert, c.mu.pool
}

// ServerConfig is the TLS configuration of a server: TLS 1.3, a client
// certificate from the cluster CA required. Each handshake takes the
// certificate and CA loaded at that moment, so that Reload applies to
// new connections.
func (c *Creds) ServerConfig() *tls.Config { return c.serverConfig(false, "h2", DataALPN) }

// DataServerConfig is ServerConfig for the chunk data path
// (internal/datanet): its only ALPN protocol is DataALPN, so that a
// client of another protocol fails the handshake, and its records are
// full-size from the first byte (bulk transfers, no latency to save).
func (c *Creds) DataServerConfig() *tls.Config { return c.serverConfig(true, DataALPN) }

func (c *Creds) serverConfig(bulk bool, protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := c.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				NextProtos:   protos,
				// Bulk transfers: full-size records from the first byte.
				DynamicRecordSizingDisabled: bulk,
			}, nil
		},
	}
}

// DataALPN is the ALPN protocol name of the chunk data path
// (internal/datanet) when it runs over TLS.
const DataALPN = "shoal-data"

// DataClientConfig is ClientConfig for a connection to the chunk data
// path of the server at serverName: it asks for DataALPN, and its records
// are full-size from the first byte.
func (c *Creds) DataClientConfig(serverName string) *tls.Config {
	cfg := c.ClientConfig(serverName)
	cfg.NextProtos = []string{DataALPN}
	cfg.DynamicRecordSizingDisabled = true
	return cfg
}

// ClientConfig is the TLS configuration of a client connection to the
// server at serverName (a host name or IP address, which its certificate
// must name): TLS 1.3, the server's certificate checked against the
// cluster CA as loaded now (so that a reloaded CA applies to new
// connections) and required to be a server's (role mds or ost).
func (c *Creds) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: serverName,
		// The chain is verified in VerifyConnection against the CA as
		// it is at handshake time; tls.Config's own check would pin
		// the pool of the moment the config was made.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := c.current()
			return cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, pool := c.current()
			return verifyServer(cs, pool)
		},
	}
}

// verifyServer checks a server's chain against pool, its name, and that it
// is a server.
func verifyServer(cs tls.ConnectionState, pool *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("server sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter, DNSName: cs.ServerName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return fmt.Errorf("server certificate: %w", err)
	}
	role, name, ok := pki.RoleOf(leaf)
	if !ok || (role != pki.RoleMDS && role != pki.RoleOST) {
		return fmt.Errorf("server certificate %q has role %q, not a server's (mds or ost)", name, role)
	}
	return nil
}

// transportCreds is the gRPC transport security of a server.
func (c *Creds) serverTransport() credentials.TransportCredentials {
	return credentials.NewTLS(c.ServerConfig())
}

// clientTransport is the gRPC transport security of a client connection
// to addr.
func (c *Creds) clientTransport(addr string) credentials.TransportCredentials {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return credentials.NewTLS(c.ClientConfig(host))
}

// PeerIdentity returns the verified identity of the caller of a gRPC
// handler, from its client certificate. ok is false on a plaintext
// connection (a server started --insecure) or a certificate without a
// Shoal role.
func PeerIdentity(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return Identity{}, false
	}
	return IdentityOf(ti.State.VerifiedChains[0][0])
}

// IdentityOf returns the role and name a verified certificate names.
func IdentityOf(cert *x509.Certificate) (Identity, bool) {
	role, name, ok := pki.RoleOf(cert)
	if !ok {
		return Identity{}, false
	}
	return Identity{Role: role, Name: name}, true
}

// PeerIsTLS reports whether the caller of a gRPC handler came over TLS,
// and its certificate (verified) when so.
func PeerIsTLS(ctx context.Context) (*x509.Certificate, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, false
	}
	if len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
		return ti.State.VerifiedChains[0][0], true
	}
	return nil, true
}
