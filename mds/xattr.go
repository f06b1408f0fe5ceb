package mds

// Extended attributes. Each is one key, "x" + ino + name -> value (see
// keys.go), so a get is one point read, a list one prefix scan, and the
// attributes of an inode go in the batch that deletes it (txn.flush).
//
// Names carry their namespace. "user.", "trusted." and "security." are
// stored alike. "system." names (POSIX ACLs, capabilities) are refused with
// ErrNotSupported, as Shoal has no ACLs yet.
//
// Access follows Linux's xattr_permission, with the caller's identity
// after squashing (perm.go), so that a client that is not the kernel is
// held to the same rules:
//   - user.*: reading needs read permission on the inode, writing write
//     permission (EACCES); only regular files and directories have them
//     (EPERM on a write); in a sticky directory only its owner or root
//     may write them (EPERM).
//   - trusted.*: root only. A write is EPERM; a read is ENODATA, and
//     listxattr leaves the names out, as Linux does without
//     CAP_SYS_ADMIN.
//   - security.*: writing needs root (EPERM), as Linux's capability module
//     asks CAP_SYS_ADMIN; reading is open, as on Linux. Removing
//     security.capability is also open to whoever may write the file: the
//     kernel does it, as the writer, before a write (file_remove_privs).
//   - listxattr needs no permission on the inode (Linux asks none).

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Limits of extended attributes, Linux's where Linux has one.
const (
	maxXattrName  = 255      // XATTR_NAME_MAX: longer names are ErrRange
	maxXattrValue = 64 << 10 // XATTR_SIZE_MAX: larger values are ErrArgTooBig
	// maxXattrList bounds the names of one inode as listxattr(2) returns
	// them (each followed by NUL) to XATTR_LIST_MAX, so that a list always
	// fits the kernel's buffer; a set beyond it is ErrNoSpace.
	maxXattrList = 64 << 10
	// maxXattrBytes bounds names plus values of one inode; a set beyond it
	// is ErrNoSpace.
	maxXattrBytes = 1 << 20
)

const xattrFlagsAll = uint32(mdspb.SetXattrFlags_XATTR_CREATE | mdspb.SetXattrFlags_XATTR_REPLACE)

// xattrNamespaces are the stored namespaces.
var xattrNamespaces = [][]byte{[]byte("user."), []byte("trusted."), []byte("security.")}

var (
	xattrUser     = []byte("user.")
	xattrTrusted  = []byte("trusted.")
	xattrSecurity = []byte("security.")
	xattrSystem   = []byte("system.")
	xattrCaps     = []byte("security.capability")
)

// validXattrName checks an attribute name as setxattr(2) and getxattr(2)
// do: empty or over 255 bytes is ErrRange, a namespace without a name or
// a NUL is ErrInvalid, system.* or an unknown namespace ErrNotSupported.
func validXattrName(name []byte) error {
	switch {
	case len(name) == 0:
		return fmt.Errorf("empty xattr name: %w", errs.ErrRange)
	case len(name) > maxXattrName:
		return fmt.Errorf("xattr name of %d bytes (max %d): %w", len(name), maxXattrName, errs.ErrRange)
	case bytes.IndexByte(name, 0) >= 0:
		return fmt.Errorf("xattr name %q contains NUL: %w", name, errs.ErrInvalid)
	case bytes.HasPrefix(name, xattrSystem):
		return fmt.Errorf("xattr %q: system attributes (ACLs): %w", name, errs.ErrNotSupported)
	}
	for _, ns := range xattrNamespaces {
		if bytes.HasPrefix(name, ns) {
			if len(name) == len(ns) {
				return fmt.Errorf("xattr name %q has no name after its namespace: %w", name, errs.ErrInvalid)
			}
			return nil
		}
	}
	return fmt.Errorf("xattr %q: unknown namespace: %w", name, errs.ErrNotSupported)
}

// xattrWritable refuses to change a user.* attribute of anything but a
// regular file or a directory, as Linux does (EPERM).
func xattrWritable(n *mdspb.Inode, name []byte) error {
	if bytes.HasPrefix(name, xattrUser) && !isReg(n.Attr.Mode) && !isDir(n.Attr.Mode) {
		return fmt.Errorf("xattr %q of inode %d (mode %o): user attributes only on files and directories: %w",
			name, n.Attr.Ino, n.Attr.Mode&sIFMT, errs.ErrNotPermitted)
	}
	return nil
}

// xattrAccess checks whether c may read (want mayRead) or write
// (mayWrite) attribute name of n; the rules are at the top of this file.
func (c caller) xattrAccess(n *mdspb.Inode, name []byte, want uint32) error {
	a := n.Attr
	switch {
	case bytes.HasPrefix(name, xattrTrusted):
		if c.root() {
			return nil
		}
		if want&mayWrite != 0 {
			return fmt.Errorf("xattr %q of inode %d: uid %d is not root: %w", name, a.Ino, c.uid, errs.ErrNotPermitted)
		}
		return fmt.Errorf("xattr %q of inode %d: %w", name, a.Ino, errs.ErrNoData)
	case bytes.HasPrefix(name, xattrSecurity):
		if want&mayWrite != 0 && !c.root() {
			return fmt.Errorf("xattr %q of inode %d: uid %d is not root: %w", name, a.Ino, c.uid, errs.ErrNotPermitted)
		}
		return nil
	case bytes.HasPrefix(name, xattrUser):
		if want&mayWrite != 0 {
			if err := xattrWritable(n, name); err != nil {
				return err
			}
			if isDir(a.Mode) && a.Mode&0o1000 != 0 && !c.owns(a) {
				return fmt.Errorf("xattr %q of sticky directory %d owned by %d: uid %d: %w", name, a.Ino, a.Uid, c.uid, errs.ErrNotPermitted)
			}
		}
		return c.check(a, want, "xattr")
	}
	return nil // validXattrName refused every other namespace
}

// xattrUsage returns the space the attributes of ino take: list is the
// length of their names as listxattr(2) returns them (NUL-terminated),
// total the bytes of names and values.
func xattrUsage(r reader, ino uint64) (list, total int, err error) {
	p := xattrPrefix(ino)
	err = scan(r, p, func(k, v []byte) (bool, error) {
		name := len(k) - len(p)
		list += name + 1
		total += name + len(v)
		return true, nil
	})
	return list, total, err
}

// SetXattr sets an extended attribute of an inode and its ctime. With
// XATTR_CREATE an existing name is ErrExists; with XATTR_REPLACE a missing
// one is ErrNoData.
func (s *Server) handleSetXattr(ctx context.Context, req *mdspb.SetXattrRequest) (_ *mdspb.AttrReply, err error) {
	name, value, flags := req.GetName(), req.GetValue(), req.GetFlags()
	if err := validXattrName(name); err != nil {
		return nil, err
	}
	if len(value) > maxXattrValue {
		return nil, fmt.Errorf("xattr %q: value of %d bytes (max %d): %w", name, len(value), maxXattrValue, errs.ErrArgTooBig)
	}
	if flags&^xattrFlagsAll != 0 {
		return nil, fmt.Errorf("setxattr: unknown flags %#x: %w", flags&^xattrFlagsAll, errs.ErrInvalid)
	}
	var out *mdspb.AttrReply
	err = s.commitOn(ctx, req.GetIno(), func(t *txn, cl caller, n *mdspb.Inode) error {
		if err := cl.xattrAccess(n, name, mayWrite); err != nil {
			return err
		}
		key := xattrKey(n.Attr.Ino, name)
		old, err := getValue(t.b, key)
		exists := err == nil
		if err != nil && !errors.Is(err, errs.ErrNotFound) {
			return err
		}
		switch {
		case flags&uint32(mdspb.SetXattrFlags_XATTR_CREATE) != 0 && exists:
			return fmt.Errorf("xattr %q of inode %d: %w", name, n.Attr.Ino, errs.ErrExists)
		case flags&uint32(mdspb.SetXattrFlags_XATTR_REPLACE) != 0 && !exists:
			return fmt.Errorf("xattr %q of inode %d: %w", name, n.Attr.Ino, errs.ErrNoData)
		}
		list, total, err := xattrUsage(t.b, n.Attr.Ino)
		if err != nil {
			return err
		}
		if exists {
			total -= len(old)
		} else {
			list += len(name) + 1
			total += len(name)
		}
		total += len(value)
		if list > maxXattrList || total > maxXattrBytes {
			return fmt.Errorf("xattrs of inode %d would take %d bytes (max %d), names %d (max %d): %w",
				n.Attr.Ino, total, maxXattrBytes, list, maxXattrList, errs.ErrNoSpace)
		}
		if err := t.b.Set(key, value, nil); err != nil {
			return err
		}
		n.Attr.CtimeNs = t.now
		t.touch(n)
		out = attrReply(n)
		return t.setReply(out)
	})
	return out, err
}

// GetXattr returns the value of an extended attribute; ErrNoData if the
// inode has no attribute of that name.
func (s *Server) handleGetXattr(ctx context.Context, req *mdspb.GetXattrRequest) (_ *mdspb.GetXattrReply, err error) {
	name := req.GetName()
	if err := validXattrName(name); err != nil {
		return nil, err
	}
	cl := s.callerOf(ctx)
	var out *mdspb.GetXattrReply
	err = s.snapshot(func(r reader) error {
		n, err := readInode(r, req.GetIno())
		if err != nil {
			return err
		}
		if err := cl.xattrAccess(n, name, mayRead); err != nil {
			return err
		}
		v, err := getValue(r, xattrKey(n.Attr.Ino, name))
		if errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("xattr %q of inode %d: %w", name, n.Attr.Ino, errs.ErrNoData)
		}
		if err != nil {
			return err
		}
		out = &mdspb.GetXattrReply{Value: v}
		return nil
	})
	return out, err
}

// ListXattr returns the names of an inode's extended attributes, in byte
// order.
func (s *Server) handleListXattr(ctx context.Context, req *mdspb.ListXattrRequest) (_ *mdspb.ListXattrReply, err error) {
	cl := s.callerOf(ctx)
	out := &mdspb.ListXattrReply{}
	err = s.snapshot(func(r reader) error {
		n, err := readInode(r, req.GetIno())
		if err != nil {
			return err
		}
		return scan(r, xattrPrefix(n.Attr.Ino), func(k, _ []byte) (bool, error) {
			_, name, err := decodeXattrKey(k)
			if err != nil {
				return false, err
			}
			if !cl.root() && bytes.HasPrefix(name, xattrTrusted) {
				return true, nil // hidden from all but root, as on Linux
			}
			out.Names = append(out.Names, append([]byte(nil), name...))
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveXattr removes an extended attribute and sets the inode's ctime;
// ErrNoData if it has none of that name.
func (s *Server) handleRemoveXattr(ctx context.Context, req *mdspb.RemoveXattrRequest) (_ *mdspb.AttrReply, err error) {
	name := req.GetName()
	if err := validXattrName(name); err != nil {
		return nil, err
	}
	var out *mdspb.AttrReply
	err = s.commitOn(ctx, req.GetIno(), func(t *txn, cl caller, n *mdspb.Inode) error {
		// The kernel removes security.capability itself, with the
		// writer's credentials, when a file that has it is written
		// (file_remove_privs): whoever may write the file may remove it.
		killPriv := bytes.Equal(name, xattrCaps) && cl.mayData(n.Attr, mayWrite)
		if err := cl.xattrAccess(n, name, mayWrite); err != nil && !killPriv {
			return err
		}
		key := xattrKey(n.Attr.Ino, name)
		if _, err := getValue(t.b, key); errors.Is(err, errs.ErrNotFound) {
			return fmt.Errorf("xattr %q of inode %d: %w", name, n.Attr.Ino, errs.ErrNoData)
		} else if err != nil {
			return err
		}
		if err := t.b.Delete(key, nil); err != nil {
			return err
		}
		n.Attr.CtimeNs = t.now
		t.touch(n)
		out = attrReply(n)
		return t.setReply(out)
	})
	return out, err
}

// dropXattrs deletes every extended attribute of ino, in this batch; it is
// part of deleting the inode.
func (t *txn) dropXattrs(ino uint64) error {
	var keys [][]byte
	err := scan(t.b, xattrPrefix(ino), func(k, _ []byte) (bool, error) {
		keys = append(keys, append([]byte(nil), k...))
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := t.b.Delete(k, nil); err != nil {
			return err
		}
	}
	return nil
}
