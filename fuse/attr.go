package fuse

import (
	"syscall"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// blockSize is the st_blksize reported for every inode: the preferred I/O
// size, equal to the largest FUSE request (MountOptions.MaxWrite), so that
// tools that size their buffers from it (cp, dd with no bs) issue large
// requests.
const blockSize = 1 << 20

// fillAttr converts Shoal attributes to FUSE attributes. a must not be nil.
func fillAttr(a *mdspb.Attr, out *gofuse.Attr) {
	out.Ino = a.GetIno()
	out.Size = a.GetSize()
	out.Blocks = (a.GetSize() + 511) / 512
	out.Atime, out.Atimensec = splitNs(a.GetAtimeNs())
	out.Mtime, out.Mtimensec = splitNs(a.GetMtimeNs())
	out.Ctime, out.Ctimensec = splitNs(a.GetCtimeNs())
	out.Mode = a.GetMode()
	out.Nlink = a.GetNlink()
	out.Uid = a.GetUid()
	out.Gid = a.GetGid()
	out.Rdev = a.GetRdev()
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
