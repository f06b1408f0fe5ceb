package mds

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// FuzzDecodeKey feeds arbitrary bytes, as a key read from Pebble, to every
// key decoder: none panics, and a key one accepts encodes back to itself.
func FuzzDecodeKey(f *testing.F) {
	for _, k := range [][]byte{
		dentryKey(1, []byte("name")), xattrKey(7, []byte("user.x")), mapKey(7, 1<<20),
		inodeKey(1), refKey(9), pendingKey(9), gcKey(1_700_000_000_000_000_000, 9), ostKey(3),
		retireKey(5, 9, 2), ostStateKey(3), orphanKey(7), {}, {prefixDentry}, {prefixMap, 0, 0},
	} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k []byte) {
		same := func(kind string, enc []byte) {
			if !bytes.Equal(enc, k) {
				t.Fatalf("%s key %x decodes to a key that encodes to %x", kind, k, enc)
			}
		}
		if p, name, err := decodeDentryKey(k); err == nil {
			same("dentry", dentryKey(p, name))
		}
		if ino, name, err := decodeXattrKey(k); err == nil {
			same("xattr", xattrKey(ino, name))
		}
		if ino, off, err := decodeMapKey(k); err == nil {
			same("map", mapKey(ino, off))
		}
		if ino, err := decodeInodeKey(k); err == nil {
			same("inode", inodeKey(ino))
		}
		for _, p := range []struct {
			prefix byte
			enc    func(uint64) []byte
		}{{prefixRef, refKey}, {prefixPending, pendingKey}, {prefixOrphan, orphanKey}} {
			if id, err := decodeIDKey(p.prefix, k); err == nil {
				same(string(p.prefix), p.enc(id))
			}
		}
		if due, id, err := decodeGCKey(k); err == nil && due >= 0 {
			same("gc", gcKey(due, id))
		}
		if id, err := decodeOstKey(k); err == nil {
			same("ost", ostKey(id))
		}
		if due, ext, idx, err := decodeRetireKey(k); err == nil && due >= 0 {
			same("retire", retireKey(due, ext, idx))
		}
		if id, err := decodeOstStateKey(k); err == nil {
			same("ost state", ostStateKey(id))
		}
	})
}

// FuzzDecodeValue feeds arbitrary bytes, as a value read from Pebble, to
// every value decoder: none panics, and the fixed-size ones round-trip.
func FuzzDecodeValue(f *testing.F) {
	ext, _ := proto.Marshal(&mdspb.Extent{Id: 9, Layout: &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}, Length: 4 << 20, Osts: []uint32{1, 2, 3, 4, 5, 6}})
	ino, _ := proto.Marshal(&mdspb.Inode{Attr: &mdspb.Attr{Ino: 7, Mode: 0o100644, Nlink: 1, Size: 5}})
	for _, v := range [][]byte{
		encodeDentry(7, 0o40755), encodeU64(42), encodePrefixed(3, ext), ino, {}, {1, 2, 3},
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if ino, mode, err := decodeDentry(v); err == nil && !bytes.Equal(encodeDentry(ino, mode), v) {
			t.Fatalf("dentry value %x does not round-trip", v)
		}
		if n, err := decodeU64(v); err == nil && !bytes.Equal(encodeU64(n), v) {
			t.Fatalf("u64 value %x does not round-trip", v)
		}
		if n, body, err := decodePrefixed(v); err == nil && !bytes.Equal(encodePrefixed(n, body), v) {
			t.Fatalf("prefixed value %x does not round-trip", v)
		}
		decodeExtentValue(refKey(1), v)
		if r, err := readRef(mapKey(1, 0), v); err == nil && (r.GetExtent() == nil || r.GetFileOff() != 0) {
			t.Fatalf("readRef accepted %x: %v", v, r)
		}
		for _, m := range []proto.Message{&mdspb.Inode{}, &mdspb.ExtentRef{}, &mdspb.Extent{}, &mdspb.OstInfo{}} {
			proto.Unmarshal(v, m)
		}
	})
}
