// Package pki makes Shoal's cluster certificate authority and the
// certificates it issues to servers, clients and administrators
// (docs/security.md). Keys are ECDSA P-256; a certificate names its
// holder's role in its OrganizationalUnit and as a URI SAN
// shoal://ROLE/NAME, and its name as the CommonName. Private keys are
// written with mode 0600.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// Role is what a certificate's holder is in the cluster.
type Role string

// Roles.
const (
	RoleMDS    Role = "mds"    // a metadata server
	RoleOST    Role = "ost"    // an object storage target
	RoleClient Role = "client" // a mount or an API client
	RoleAdmin  Role = "admin"  // an administrator (shoal admin)
)

// Roles lists every role.
var Roles = []Role{RoleMDS, RoleOST, RoleClient, RoleAdmin}

// ParseRole checks s names a role.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown role %q: want one of mds, ost, client, admin", s)
}

// File names in a CA directory and in an issued certificate's directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Default lifetimes.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 365 * 24 * time.Hour
)

// uriScheme is the scheme of the URI SAN naming role and name.
const uriScheme = "shoal"

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidName checks a certificate holder's name: 1-63 letters, digits, '.',
// '_' or '-', starting with a letter or digit (it becomes a file name).
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("certificate name %q: want 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// CA is a loaded certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // the certificate, PEM encoded
}

// InitCA creates a new CA in dir (made 0700 if missing): ca.crt and
// ca.key. It refuses to overwrite an existing CA.
func InitCA(dir, name string, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		validity = CAValidity
	}
	if name == "" {
		name = "shoal cluster CA"
	}
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); err == nil {
		return nil, fmt.Errorf("%s already holds a CA (%s): refusing to overwrite it", dir, CAKeyFile)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"shoal"}},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, Key: key, PEM: pemBlock("CERTIFICATE", der)}
	if err := writeKey(filepath.Join(dir, CAKeyFile), key); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, CACertFile), ca.PEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadCA reads the CA in dir.
func LoadCA(dir string) (*CA, error) {
	cp, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	kp, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	cb, _ := pem.Decode(cp)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("load CA: %s: no PEM certificate", filepath.Join(dir, CACertFile))
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	kb, _ := pem.Decode(kp)
	if kb == nil {
		return nil, fmt.Errorf("load CA: %s: no PEM key", filepath.Join(dir, CAKeyFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("load CA key: not an ECDSA key")
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("load CA: %s is not a CA certificate", filepath.Join(dir, CACertFile))
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(cb)}, nil
}

// LoadOrInitCA loads the CA in dir, or creates one there.
func LoadOrInitCA(dir, name string) (*CA, error) {
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); err == nil {
		return LoadCA(dir)
	}
	return InitCA(dir, name, 0)
}

// Request describes a certificate to issue.
type Request struct {
	Role     Role
	Name     string
	Hosts    []string      // DNS names and IP addresses the holder serves on
	Validity time.Duration // default CertValidity
	// NotBefore is the start of validity; default now (minus 5 minutes of
	// clock skew). Tests use it to make expired certificates.
	NotBefore time.Time
}

// Issued is an issued certificate and its key, PEM encoded.
type Issued struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
}

// Issue signs a new certificate for r. Every certificate may serve and be
// a client (servers call each other); its role and name are in the
// subject (OU, CN) and in the URI SAN shoal://ROLE/NAME.
func (ca *CA) Issue(r Request) (*Issued, error) {
	if _, err := ParseRole(string(r.Role)); err != nil {
		return nil, err
	}
	if err := ValidName(r.Name); err != nil {
		return nil, err
	}
	if r.Validity <= 0 {
		r.Validity = CertValidity
	}
	nb := r.NotBefore
	if nb.IsZero() {
		nb = time.Now().Add(-5 * time.Minute)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: r.Name, OrganizationalUnit: []string{string(r.Role)}, Organization: []string{"shoal"}},
		NotBefore:    nb,
		NotAfter:     nb.Add(r.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{{Scheme: uriScheme, Host: string(r.Role), Path: "/" + r.Name}},
	}
	for _, h := range r.Hosts {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Issued{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", kd), Cert: cert}, nil
}

// Paths are the files of an issued certificate in a directory.
type Paths struct{ Cert, Key, CA string }

// PathsIn returns the file names IssueTo writes for name in dir.
func PathsIn(dir, name string) Paths {
	return Paths{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, CACertFile)}
}

// IssueTo issues a certificate and writes NAME.crt, NAME.key (0600) and a
// copy of ca.crt into dir (made 0700 if missing).
func (ca *CA) IssueTo(dir string, r Request) (Paths, error) {
	is, err := ca.Issue(r)
	if err != nil {
		return Paths{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Paths{}, err
	}
	p := PathsIn(dir, r.Name)
	if err := writeFile(p.Key, is.KeyPEM, 0o600); err != nil {
		return Paths{}, err
	}
	if err := writeFile(p.Cert, is.CertPEM, 0o644); err != nil {
		return Paths{}, err
	}
	if err := writeFile(p.CA, ca.PEM, 0o644); err != nil {
		return Paths{}, err
	}
	return p, nil
}

// RoleOf returns the role and name a certificate issued by Issue names.
func RoleOf(c *x509.Certificate) (Role, string, bool) {
	for _, u := range c.URIs {
		if u.Scheme == uriScheme {
			r, err := ParseRole(u.Host)
			if err == nil && len(u.Path) > 1 {
				return r, u.Path[1:], true
			}
		}
	}
	if len(c.Subject.OrganizationalUnit) == 1 {
		if r, err := ParseRole(c.Subject.OrganizationalUnit[0]); err == nil {
			return r, c.Subject.CommonName, true
		}
	}
	return "", "", false
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writeFile(path, pemBlock("PRIVATE KEY", kd), 0o600)
}

// writeFile writes data to path through a temporary file and a rename, with
// mode perm from the start (a key is never readable by others, not even
// for a moment).
func writeFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
