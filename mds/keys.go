package mds

// Pebble key schema of the MDS, format version 1.
//
// Every key starts with one prefix byte naming its space; integers are
// big-endian so that byte order is numeric order. No client-supplied string
// is ever a prefix: names and uuids only appear after a fixed prefix and a
// fixed-width id, so they cannot escape their space. docs/mds-keys.md
// explains the same schema with its invariants.
//
//	key                                 value
//	"V"                                 format version, uint32
//	"c" + counter name                  uint64: next id to hand out / inode count
//	"i" + ino(8)                        mdspb.Inode proto
//	"d" + parent(8) + name              child ino(8) + child mode(4)
//	"u" + dir ino(8)                    parent ino(8) (directories only; root -> 1)
//	"m" + ino(8) + file_off(8)          mdspb.ExtentRef proto (extent embedded)
//	"r" + extent id(8)                  refcount(8) + mdspb.Extent proto
//	"p" + extent id(8)                  alloc time ns(8) + mdspb.Extent proto
//	"g" + due ns(8) + extent id(8)      mdspb.Extent proto
//	"o" + ost id(4)                     mdspb.OstInfo proto (id, uuid, addr, capacity, free)
//	"O" + uuid                          ost id(4)
//	"n" + ino(8)                        unlink time ns(8): orphan, an inode with no name left, kept while open
//	"x" + ino(8) + name                 xattr value (name includes its namespace: "user.x")
//	"L"                                 time ns(8): a directory lease was granted once (dirlease.go)
//	"y" + dir ino(8)                    mdspb.QuotaRecord: a directory quota's limits and usage (quota.go)
//
// Counters ("c" keys): "next_ino", "next_extent", "next_ost" hold the next
// id to allocate and are written in the same batch as the object that uses
// the id, so an id is never reused after a crash. "inodes" is the number of
// inode keys (StatFs).
//
// Changing any of this needs a new formatVersion and a migration in Open.

import (
	"encoding/binary"
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
)

// formatVersion is the schema version written at first Open and checked on
// every later Open.
const formatVersion uint32 = 1

// Key prefixes.
const (
	prefixVersion = 'V'
	prefixCounter = 'c'
	prefixInode   = 'i'
	prefixDentry  = 'd'
	prefixParent  = 'u'
	prefixMap     = 'm'
	prefixRef     = 'r'
	prefixPending = 'p'
	prefixGC      = 'g'
	prefixOst     = 'o'
	prefixOstUUID = 'O'
	prefixOrphan  = 'n'
	prefixXattr   = 'x'
	prefixLeases  = 'L'
)

// Counter names.
const (
	counterNextIno    = "next_ino"
	counterNextExtent = "next_extent"
	counterNextOst    = "next_ost"
	counterInodes     = "inodes"
)

// rootIno is the inode number of the root directory.
const rootIno uint64 = 1

func u64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }
func u32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

func versionKey() []byte { return []byte{prefixVersion} }

func counterKey(name string) []byte { return append([]byte{prefixCounter}, name...) }

func inodeKey(ino uint64) []byte { return u64([]byte{prefixInode}, ino) }

// dentryPrefix is the prefix of every entry of directory parent.
func dentryPrefix(parent uint64) []byte { return u64([]byte{prefixDentry}, parent) }

func dentryKey(parent uint64, name []byte) []byte {
	return append(dentryPrefix(parent), name...)
}

func parentKey(dir uint64) []byte { return u64([]byte{prefixParent}, dir) }

// mapPrefix is the prefix of every extent-map entry of ino.
func mapPrefix(ino uint64) []byte { return u64([]byte{prefixMap}, ino) }

func mapKey(ino, fileOff uint64) []byte { return u64(mapPrefix(ino), fileOff) }

func refKey(id uint64) []byte { return u64([]byte{prefixRef}, id) }

func pendingKey(id uint64) []byte { return u64([]byte{prefixPending}, id) }

func gcKey(dueNs int64, id uint64) []byte {
	return u64(u64([]byte{prefixGC}, uint64(max(dueNs, 0))), id)
}

func ostKey(id uint32) []byte { return u32([]byte{prefixOst}, id) }

func ostUUIDKey(uuid string) []byte { return append([]byte{prefixOstUUID}, uuid...) }

// orphanKey marks inode ino as an orphan: its last name is gone but a
// client session had it open (sessions.go).
func orphanKey(ino uint64) []byte { return u64([]byte{prefixOrphan}, ino) }

// xattrPrefix is the prefix of every extended attribute of ino.
func xattrPrefix(ino uint64) []byte { return u64([]byte{prefixXattr}, ino) }

func xattrKey(ino uint64, name []byte) []byte { return append(xattrPrefix(ino), name...) }

// leaseMarkerKey is committed before the first directory lease is
// granted: an MDS that finds it when it starts to serve waits out the
// leases an earlier one may have granted (dirlease.go).
func leaseMarkerKey() []byte { return []byte{prefixLeases} }

// prefixEnd returns the smallest key greater than every key starting with p
// (p must not be all 0xff bytes, which none of ours is).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Decoders. Each checks the length and prefix so that a corrupt or foreign
// key is an error, never a panic.

func errCorruptKey(kind string, k []byte) error {
	return fmt.Errorf("mds: malformed %s key %x: %w", kind, k, errs.ErrCorrupt)
}

func decodeDentryKey(k []byte) (parent uint64, name []byte, err error) {
	if len(k) < 10 || k[0] != prefixDentry {
		return 0, nil, errCorruptKey("dentry", k)
	}
	return binary.BigEndian.Uint64(k[1:9]), k[9:], nil
}

func decodeXattrKey(k []byte) (ino uint64, name []byte, err error) {
	if len(k) < 10 || k[0] != prefixXattr {
		return 0, nil, errCorruptKey("xattr", k)
	}
	return binary.BigEndian.Uint64(k[1:9]), k[9:], nil
}

func decodeMapKey(k []byte) (ino, fileOff uint64, err error) {
	if len(k) != 17 || k[0] != prefixMap {
		return 0, 0, errCorruptKey("extent map", k)
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:17]), nil
}

func decodeInodeKey(k []byte) (uint64, error) {
	if len(k) != 9 || k[0] != prefixInode {
		return 0, errCorruptKey("inode", k)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

func decodeIDKey(prefix byte, k []byte) (uint64, error) {
	if len(k) != 9 || k[0] != prefix {
		return 0, errCorruptKey(string(prefix), k)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

func decodeGCKey(k []byte) (dueNs int64, id uint64, err error) {
	if len(k) != 17 || k[0] != prefixGC {
		return 0, 0, errCorruptKey("gc", k)
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), binary.BigEndian.Uint64(k[9:]), nil
}

func decodeOstKey(k []byte) (uint32, error) {
	if len(k) != 5 || k[0] != prefixOst {
		return 0, errCorruptKey("ost", k)
	}
	return binary.BigEndian.Uint32(k[1:]), nil
}

// Values.

// dentryValue is the value of a dentry key: the child's ino and mode (type
// bits included), so ReadDir needs no inode reads.
func encodeDentry(ino uint64, mode uint32) []byte { return u32(u64(nil, ino), mode) }

func decodeDentry(v []byte) (ino uint64, mode uint32, err error) {
	if len(v) != 12 {
		return 0, 0, fmt.Errorf("mds: malformed dentry value %x: %w", v, errs.ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v[:8]), binary.BigEndian.Uint32(v[8:]), nil
}

func encodeU64(v uint64) []byte { return u64(nil, v) }

func decodeU64(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("mds: malformed uint64 value %x: %w", v, errs.ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v), nil
}

// encodePrefixed is an 8-byte integer followed by a proto's bytes: the value
// of refcount ("r": count) and pending ("p": alloc time) keys.
func encodePrefixed(n uint64, msg []byte) []byte { return append(u64(nil, n), msg...) }

func decodePrefixed(v []byte) (uint64, []byte, error) {
	if len(v) < 8 {
		return 0, nil, fmt.Errorf("mds: malformed value %x: %w", v, errs.ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v[:8]), v[8:], nil
}
