package capability

import (
	"bytes"
	"crypto/hmac"
	"errors"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

func testKey(t testing.TB, fill byte) *Key {
	t.Helper()
	k, err := NewKey(bytes.Repeat([]byte{fill}, SecretSize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNewKey(t *testing.T) {
	for _, n := range []int{0, 16, SecretSize - 1, SecretSize + 1} {
		if _, err := NewKey(make([]byte, n)); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("NewKey of %d bytes: %v, want ErrInvalid", n, err)
		}
	}
	a, b := testKey(t, 1), testKey(t, 2)
	if a.ID() == b.ID() {
		t.Errorf("two secrets with key id %#x", a.ID())
	}
	if again := testKey(t, 1); again.ID() != a.ID() {
		t.Errorf("key id not stable: %#x, %#x", a.ID(), again.ID())
	}
	s := a.Secret()
	s[0] ^= 0xff
	if !bytes.Equal(a.Secret(), bytes.Repeat([]byte{1}, SecretSize)) {
		t.Error("Secret returned the key's own slice")
	}
}

func TestSignDecode(t *testing.T) {
	k := testKey(t, 7)
	exp := time.Unix(1_900_000_000, 0)
	for _, tc := range []struct {
		access Access
		extent uint64
	}{{Read, 1}, {Write, 1 << 40}, {Read | Write, ^uint64(0)}, {Admin, 0}} {
		tok := k.Sign(tc.access, tc.extent, exp)
		if len(tok) != Size {
			t.Fatalf("token of %d bytes, want %d", len(tok), Size)
		}
		c, err := Decode(tok)
		if err != nil {
			t.Fatalf("Decode(%s on %d): %v", tc.access, tc.extent, err)
		}
		if c.Access != tc.access || c.Extent != tc.extent || !c.Expires.Equal(exp) || c.KeyID != k.ID() {
			t.Errorf("Decode = %+v, want %s on %d until %v by %#x", c, tc.access, tc.extent, exp, k.ID())
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	k := testKey(t, 7)
	good := k.Sign(Read, 5, time.Now().Add(time.Minute))
	mod := func(i int, b byte) []byte {
		x := bytes.Clone(good)
		x[i] = b
		return x
	}
	for name, tok := range map[string][]byte{
		"short":           good[:Size-1],
		"long":            append(bytes.Clone(good), 0),
		"empty":           nil,
		"version":         mod(0, 2),
		"no access":       mod(1, 0),
		"unknown access":  mod(1, 4),
		"admin on extent": mod(1, byte(Admin)),
		"read on 0":       k.Sign(Read, 0, time.Now().Add(time.Minute)),
	} {
		_, err := Decode(tok)
		var ce *errs.CapabilityError
		if !errors.As(err, &ce) || ce.Reason != errs.CapMalformed || !errors.Is(err, errs.ErrPermission) {
			t.Errorf("%s: %v, want a %s refusal", name, err, errs.CapMalformed)
		}
	}
}

func TestCheck(t *testing.T) {
	k, other := testKey(t, 7), testKey(t, 8)
	now := time.Unix(1_800_000_000, 0)
	later := now.Add(5 * time.Minute)
	tampered := k.Sign(Read, 5, later)
	tampered[Size-1] ^= 1
	// The same bytes as a valid capability for extent 5, but naming 6.
	moved := k.Sign(Read, 5, later)
	moved[9] = 6
	for _, tc := range []struct {
		name   string
		tok    []byte
		extent uint64
		want   Access
		reason string // "" for accepted
	}{
		{"read", k.Sign(Read, 5, later), 5, Read, ""},
		{"write", k.Sign(Write, 5, later), 5, Write, ""},
		{"read+write for write", k.Sign(Read|Write, 5, later), 5, Write, ""},
		{"admin for anything", k.Sign(Admin, 0, later), 99, Write, ""},
		{"admin for admin", k.Sign(Admin, 0, later), 0, Admin, ""},
		{"missing", nil, 5, Read, errs.CapMissing},
		{"malformed", []byte("hello"), 5, Read, errs.CapMalformed},
		{"other key", other.Sign(Read, 5, later), 5, Read, errs.CapForged},
		{"tampered mac", tampered, 5, Read, errs.CapForged},
		{"tampered extent", moved, 6, Read, errs.CapForged},
		{"expired", k.Sign(Read, 5, now), 5, Read, errs.CapExpired},
		{"expired long ago", k.Sign(Read, 5, now.Add(-time.Hour)), 5, Read, errs.CapExpired},
		{"other extent", k.Sign(Read, 5, later), 6, Read, errs.CapExtent},
		{"read used to write", k.Sign(Read, 5, later), 5, Write, errs.CapAccess},
		{"write used to read", k.Sign(Write, 5, later), 5, Read, errs.CapAccess},
		{"read used for admin", k.Sign(Read, 5, later), 5, Admin, errs.CapAccess},
	} {
		err := k.Check(tc.tok, now, tc.extent, tc.want)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%s: %v, want accepted", tc.name, err)
			}
			continue
		}
		var ce *errs.CapabilityError
		if !errors.As(err, &ce) || ce.Reason != tc.reason || !errors.Is(err, errs.ErrPermission) {
			t.Errorf("%s: %v, want refused for %s", tc.name, err, tc.reason)
		}
	}
}

func TestAccessString(t *testing.T) {
	for a, want := range map[Access]string{Read: "read", Write: "write", Read | Write: "read+write", Admin: "admin", 4: "access(0x4)"} {
		if got := a.String(); got != want {
			t.Errorf("%#x: %q, want %q", uint8(a), got, want)
		}
	}
}

// FuzzDecode: no input panics Decode or Check, a decoded capability has
// a consistent access and extent, and Check accepts exactly the tokens
// the key signed.
func FuzzDecode(f *testing.F) {
	k := testKey(f, 7)
	exp := time.Unix(1_900_000_000, 0)
	f.Add(k.Sign(Read, 5, exp))
	f.Add(k.Sign(Admin, 0, exp))
	f.Add(testKey(f, 8).Sign(Write, 1<<40, exp))
	f.Add([]byte{})
	f.Add([]byte{version})
	f.Fuzz(func(t *testing.T, tok []byte) {
		c, err := Decode(tok)
		if err != nil {
			if k.Check(tok, exp.Add(-time.Hour), 5, Read) == nil {
				t.Fatalf("Check accepted %x, which Decode refuses: %v", tok, err)
			}
			return
		}
		if len(tok) != Size || c.Access == 0 || (c.Access&Admin != 0) != (c.Extent == 0) {
			t.Fatalf("Decode(%x) = %+v", tok, c)
		}
		now := c.Expires.Add(-time.Second)
		signed := hmac.Equal(tok, k.Sign(c.Access, c.Extent, c.Expires))
		want := c.Access
		if c.Access&Admin != 0 {
			want = Read
		}
		if err := k.Check(tok, now, c.Extent, want); (err == nil) != signed {
			t.Fatalf("Check(%x) = %v; signed by the key: %v", tok, err, signed)
		}
	})
}
