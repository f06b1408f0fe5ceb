// Package capability is the format of the short-lived capabilities the MDS
// signs and the OSTs check (docs/security.md, "Capabilities"). A
// capability grants one access (read or write) to the chunks of one
// extent until it expires; the MDS's own calls to OSTs carry an admin
// capability, valid for every extent and every operation. It is signed
// with HMAC-SHA256 under a cluster secret that the MDS keeps in its
// database and hands to each OST when it registers (over mutual TLS), so
// that an OST checks a capability without asking the MDS.
//
// Encoding, 38 bytes:
//
//	0       version (1)
//	1       access bits: 1 read, 2 write, 0x80 admin (any extent, any call)
//	2..10   extent id, big-endian (0 for admin)
//	10..18  expiry, Unix seconds, big-endian
//	18..22  key id: the first 4 bytes of SHA-256(secret)
//	22..38  HMAC-SHA256(secret, bytes 0..22), first 16 bytes
package capability

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

// MetadataKey is the gRPC metadata key (binary) a chunk call carries its
// capability under.
const MetadataKey = "shoal-cap-bin"

// Size is the length of an encoded capability.
const Size = 38

const (
	version = 1
	macLen  = 16
	signed  = Size - macLen
)

// SecretSize is the length of a cluster secret.
const SecretSize = 32

// Access is what a capability grants.
type Access uint8

// Accesses.
const (
	Read  Access = 1
	Write Access = 2
	// Admin grants every call on every extent: the MDS's own calls
	// (GC deletes, repair and rebalance copies, fsck listings, scrubs).
	Admin Access = 0x80
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case Read | Write:
		return "read+write"
	case Admin:
		return "admin"
	}
	return fmt.Sprintf("access(%#x)", uint8(a))
}

// Cap is a decoded capability.
type Cap struct {
	Access  Access
	Extent  uint64 // 0 with Admin
	Expires time.Time
	KeyID   uint32
}

// Key signs and checks capabilities with one cluster secret.
type Key struct {
	secret []byte
	id     uint32
}

// NewKey makes a key of secret (SecretSize bytes).
func NewKey(secret []byte) (*Key, error) {
	if len(secret) != SecretSize {
		return nil, fmt.Errorf("capability secret of %d bytes, want %d: %w", len(secret), SecretSize, errs.ErrInvalid)
	}
	sum := sha256.Sum256(secret)
	return &Key{secret: append([]byte(nil), secret...), id: binary.BigEndian.Uint32(sum[:4])}, nil
}

// ID identifies the key in the capabilities it signs.
func (k *Key) ID() uint32 { return k.id }

// Secret returns the key's secret (for the MDS to hand to OSTs).
func (k *Key) Secret() []byte { return append([]byte(nil), k.secret...) }

// Sign encodes and signs a capability.
func (k *Key) Sign(access Access, extent uint64, expires time.Time) []byte {
	b := make([]byte, signed, Size)
	b[0] = version
	b[1] = byte(access)
	binary.BigEndian.PutUint64(b[2:], extent)
	binary.BigEndian.PutUint64(b[10:], uint64(expires.Unix()))
	binary.BigEndian.PutUint32(b[18:], k.id)
	return append(b, k.mac(b)...)
}

func (k *Key) mac(b []byte) []byte {
	h := hmac.New(sha256.New, k.secret)
	h.Write(b[:signed])
	return h.Sum(nil)[:macLen]
}

// Decode parses a capability without checking its signature.
func Decode(token []byte) (Cap, error) {
	if len(token) != Size || token[0] != version {
		return Cap{}, refuse(errs.CapMalformed, "capability of %d bytes, version %d", len(token), first(token))
	}
	c := Cap{
		Access:  Access(token[1]),
		Extent:  binary.BigEndian.Uint64(token[2:]),
		Expires: time.Unix(int64(binary.BigEndian.Uint64(token[10:])), 0),
		KeyID:   binary.BigEndian.Uint32(token[18:]),
	}
	if c.Access == 0 || c.Access&^(Read|Write|Admin) != 0 || (c.Access&Admin != 0) != (c.Extent == 0) {
		return Cap{}, refuse(errs.CapMalformed, "capability with access %#x on extent %d", uint8(c.Access), c.Extent)
	}
	return c, nil
}

func first(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// Check verifies token: signed with this key, not expired at now, and
// granting want on extent (an Admin capability grants everything). The
// error is an *errs.CapabilityError (errors.Is errs.ErrPermission).
func (k *Key) Check(token []byte, now time.Time, extent uint64, want Access) error {
	if len(token) == 0 {
		return refuse(errs.CapMissing, "chunk call without a capability")
	}
	c, err := Decode(token)
	if err != nil {
		return err
	}
	if c.KeyID != k.id || !hmac.Equal(token[signed:], k.mac(token)) {
		return refuse(errs.CapForged, "capability for extent %d not signed by the cluster key", c.Extent)
	}
	if !now.Before(c.Expires) {
		return refuse(errs.CapExpired, "capability for extent %d expired at %s", c.Extent, c.Expires.UTC().Format(time.RFC3339))
	}
	if c.Access&Admin != 0 {
		return nil
	}
	if want&Admin != 0 {
		return refuse(errs.CapAccess, "%s capability for extent %d used for an administrative call", c.Access, c.Extent)
	}
	if c.Extent != extent {
		return refuse(errs.CapExtent, "capability for extent %d used on extent %d", c.Extent, extent)
	}
	if c.Access&want != want {
		return refuse(errs.CapAccess, "%s capability for extent %d used to %s", c.Access, c.Extent, want)
	}
	return nil
}

func refuse(reason, format string, args ...any) error {
	return &errs.CapabilityError{Reason: reason, Msg: "capability refused (" + reason + "): " + fmt.Sprintf(format, args...)}
}
