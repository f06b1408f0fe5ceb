package mds

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

func TestKeyEncoding(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  []byte
		want []byte
	}{
		{"version", versionKey(), []byte("V")},
		{"counter", counterKey(counterNextIno), []byte("cnext_ino")},
		{"inode", inodeKey(0x0102030405060708), []byte("i\x01\x02\x03\x04\x05\x06\x07\x08")},
		{"dentry", dentryKey(1, []byte("a/b")), []byte("d\x00\x00\x00\x00\x00\x00\x00\x01a/b")},
		{"parent", parentKey(2), []byte("u\x00\x00\x00\x00\x00\x00\x00\x02")},
		{"map", mapKey(3, 1<<20), []byte("m\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x10\x00\x00")},
		{"ref", refKey(9), []byte("r\x00\x00\x00\x00\x00\x00\x00\x09")},
		{"pending", pendingKey(9), []byte("p\x00\x00\x00\x00\x00\x00\x00\x09")},
		{"gc", gcKey(5, 9), []byte("g\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x09")},
		{"gc negative due clamps", gcKey(-5, 9), []byte("g\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x09")},
		{"ost", ostKey(0x01020304), []byte("o\x01\x02\x03\x04")},
		{"ost uuid", ostUUIDKey("abc"), []byte("Oabc")},
	} {
		if !bytes.Equal(tc.key, tc.want) {
			t.Errorf("%s: key %q, want %q", tc.name, tc.key, tc.want)
		}
	}
}

func TestKeyDecoding(t *testing.T) {
	p, name, err := decodeDentryKey(dentryKey(42, []byte("x\xffy")))
	if err != nil || p != 42 || string(name) != "x\xffy" {
		t.Errorf("dentry: %d %q %v", p, name, err)
	}
	ino, off, err := decodeMapKey(mapKey(7, 1<<40))
	if err != nil || ino != 7 || off != 1<<40 {
		t.Errorf("map: %d %d %v", ino, off, err)
	}
	due, id, err := decodeGCKey(gcKey(123, 456))
	if err != nil || due != 123 || id != 456 {
		t.Errorf("gc: %d %d %v", due, id, err)
	}
	o, err := decodeOstKey(ostKey(77))
	if err != nil || o != 77 {
		t.Errorf("ost: %d %v", o, err)
	}
	c, mode, err := decodeDentry(encodeDentry(99, sIFDIR))
	if err != nil || c != 99 || mode != sIFDIR {
		t.Errorf("dentry value: %d %o %v", c, mode, err)
	}
	n, body, err := decodePrefixed(encodePrefixed(5, []byte("pb")))
	if err != nil || n != 5 || string(body) != "pb" {
		t.Errorf("prefixed: %d %q %v", n, body, err)
	}

	// Malformed input is ErrCorrupt, never a panic.
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"short dentry key", func() error { _, _, err := decodeDentryKey([]byte("d\x00")); return err }()},
		{"dentry key without name", func() error { _, _, err := decodeDentryKey(dentryPrefix(1)); return err }()},
		{"wrong prefix map key", func() error { _, _, err := decodeMapKey(refKey(1)); return err }()},
		{"short map key", func() error { _, _, err := decodeMapKey(mapPrefix(1)); return err }()},
		{"short gc key", func() error { _, _, err := decodeGCKey([]byte("g")); return err }()},
		{"short ost key", func() error { _, err := decodeOstKey([]byte("o\x01")); return err }()},
		{"short dentry value", func() error { _, _, err := decodeDentry([]byte{1, 2}); return err }()},
		{"short u64", func() error { _, err := decodeU64([]byte{1}); return err }()},
		{"short prefixed", func() error { _, _, err := decodePrefixed([]byte{1}); return err }()},
		{"inode key", func() error { _, err := decodeInodeKey([]byte("i")); return err }()},
		{"id key", func() error { _, err := decodeIDKey(prefixRef, pendingKey(1)); return err }()},
	} {
		if !errors.Is(tc.err, errs.ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", tc.name, tc.err)
		}
	}
}

// Big-endian ids keep numeric order in key order, which ReadDir, the
// extent map and the GC queue rely on.
func TestKeyOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []byte
	}{
		{"inode", inodeKey(255), inodeKey(256)},
		{"map offsets", mapKey(1, 4095), mapKey(1, 1<<32)},
		{"map inos", mapKey(1, 1<<62), mapKey(2, 0)},
		{"dentry names", dentryKey(1, []byte("a")), dentryKey(1, []byte("ab"))},
		{"dentry dirs", dentryKey(1, []byte("\xff\xff")), dentryKey(2, []byte("\x01"))},
		{"gc due", gcKey(1, 1<<60), gcKey(2, 0)},
	} {
		if bytes.Compare(tc.a, tc.b) >= 0 {
			t.Errorf("%s: %x not before %x", tc.name, tc.a, tc.b)
		}
	}
	// prefixEnd bounds a prefix exactly.
	p := dentryPrefix(0x00000000000000ff)
	end := prefixEnd(p)
	if bytes.Compare(dentryKey(0xff, []byte("\xff\xff\xff")), end) >= 0 || bytes.Compare(end, dentryPrefix(0x100)) > 0 {
		t.Errorf("prefixEnd(%x) = %x", p, end)
	}
}

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want error
	}{
		{"a", nil},
		{"with space", nil},
		{"\xff\xfe", nil},
		{strings.Repeat("x", 255), nil},
		{strings.Repeat("x", 256), errs.ErrNameTooLong},
		{"", errs.ErrInvalid},
		{".", errs.ErrInvalid},
		{"..", errs.ErrInvalid},
		{"...", nil},
		{"a/b", errs.ErrInvalid},
		{"a\x00b", errs.ErrInvalid},
	} {
		err := validName([]byte(tc.name))
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("validName(%q) = %v, want %v", tc.name, err, tc.want)
		}
	}
}
