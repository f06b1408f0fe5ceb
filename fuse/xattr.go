package fuse

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

// Extended attributes are stored by the MDS, one RPC per call. The kernel
// has already checked the caller's access (trusted.* needs CAP_SYS_ADMIN,
// user.* only on files and directories), the name length (ERANGE) and the
// value size (E2BIG) before a request arrives; the MDS checks the same
// limits for other clients. For get and list, go-fuse turns an ERANGE
// answer to a size probe (an empty dest) into the size.
//
// One answer is cached: the kernel asks for security.capability before
// every write(2) (to drop it, as a write must), so "absent" is remembered
// for the attribute timeout, the staleness the mount already allows for
// attributes. Without it every write would cost an MDS round trip.

// xattrCap is the attribute the kernel probes before each write.
const xattrCap = "security.capability"

// capCache remembers that an inode has no security.capability until a
// deadline. gen changes around every set or remove of the attribute
// through this mount, so that a probe answered before the change cannot
// install a stale "absent" after it.
type capCache struct {
	until atomic.Int64 // unix ns; 0: unknown
	gen   atomic.Uint64
}

// absent reports whether the attribute is known to be absent now.
func (c *capCache) absent() bool { return time.Now().UnixNano() < c.until.Load() }

// remember records an "absent" answer to a probe that started at
// generation gen.
func (c *capCache) remember(gen uint64, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	c.until.Store(time.Now().Add(ttl).UnixNano())
	if c.gen.Load() != gen {
		c.until.Store(0)
	}
}

// changing brackets a set or remove of the attribute: call it before and
// after the RPC.
func (c *capCache) changing() {
	c.gen.Add(1)
	c.until.Store(0)
}

// Getxattr copies the value of attr into dest: ERANGE, with the size, if
// dest is too small.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	ctx = n.m.detach(ctx)
	isCap := attr == xattrCap
	if isCap && n.noCap.absent() {
		return 0, syscall.ENODATA
	}
	gen := n.noCap.gen.Load()
	v, err := n.m.c.GetXattr(ctx, n.ino(), attr)
	if err != nil {
		if isCap && errors.Is(err, errs.ErrNoData) {
			n.noCap.remember(gen, n.m.o.AttrTimeout)
		}
		return 0, n.m.errno("getxattr", n.ino(), err)
	}
	if len(v) > len(dest) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// Listxattr writes the NUL-terminated names of n's attributes into dest:
// ERANGE, with the size, if dest is too small.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx = n.m.detach(ctx)
	names, err := n.m.c.ListXattr(ctx, n.ino())
	if err != nil {
		return 0, n.m.errno("listxattr", n.ino(), err)
	}
	size := 0
	for _, name := range names {
		size += len(name) + 1
	}
	if size > len(dest) {
		return uint32(size), syscall.ERANGE
	}
	off := 0
	for _, name := range names {
		off += copy(dest[off:], name)
		dest[off] = 0
		off++
	}
	return uint32(off), 0
}

// Setxattr sets attr to data; flags are setxattr(2)'s XATTR_CREATE and
// XATTR_REPLACE, which the MDS takes as they are.
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	ctx = n.m.detach(ctx)
	if attr == xattrCap {
		n.noCap.changing()
		defer n.noCap.changing()
	}
	a, err := n.m.c.SetXattr(ctx, n.ino(), attr, data, flags)
	if _, errno := n.m.attrOf("setxattr", n.ino(), a, err); errno != 0 {
		return errno
	}
	n.remember(a)
	return 0
}

// Removexattr removes attr; ENODATA if n has none of that name.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx = n.m.detach(ctx)
	if attr == xattrCap {
		n.noCap.changing()
		defer n.noCap.changing()
	}
	a, err := n.m.c.RemoveXattr(ctx, n.ino(), attr)
	if _, errno := n.m.attrOf("removexattr", n.ino(), a, err); errno != 0 {
		return errno
	}
	n.remember(a)
	return 0
}
