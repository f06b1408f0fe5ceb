package fuse

import (
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shoalfs/shoal/client"
)

// blockSize is the st_blksize reported for every inode: the preferred I/O
// size, equal to the largest FUSE request (MountOptions.MaxWrite), so that
// tools that size their buffers from it (cp, dd with no bs) issue large
// requests.
const blockSize = 1 << 20

// fillAttr converts Shoal attributes to FUSE attributes. a must not be nil.
func fillAttr(a *client.Attr, out *gofuse.Attr) {
	out.Ino = a.Ino
	out.Size = a.Size
	out.Blocks = (a.Size + 511) / 512
	out.Atime, out.Atimensec = splitNs(a.AtimeNs)
	out.Mtime, out.Mtimensec = splitNs(a.MtimeNs)
	out.Ctime, out.Ctimensec = splitNs(a.CtimeNs)
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid = a.UID
	out.Gid = a.GID
	out.Rdev = a.Rdev
	out.Blksize = blockSize
}

// splitNs splits nanoseconds since the epoch into the seconds and
// nanoseconds of a FUSE timestamp. Seconds are signed on the wire (the
// kernel reads them as s64), so times before 1970 keep their two's
// complement bits; nanoseconds are always in [0, 1e9).
func splitNs(ns int64) (sec uint64, nsec uint32) {
	s, n := ns/1e9, ns%1e9
	if n < 0 {
		s--
		n += 1e9
	}
	return uint64(s), uint32(n)
}

// joinNs is the inverse of splitNs.
func joinNs(sec uint64, nsec uint32) int64 {
	return int64(sec)*1e9 + int64(nsec)
}

// typeBits returns the S_IFMT bits of mode.
func typeBits(mode uint32) uint32 { return mode & syscall.S_IFMT }
