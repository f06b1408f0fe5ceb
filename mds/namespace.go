package mds

import (
	"bytes"
	"cmp"
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Linux file type bits of Attr.mode.
const (
	sIFMT    = 0o170000
	sIFSOCK  = 0o140000
	sIFLNK   = 0o120000
	sIFREG   = 0o100000
	sIFDIR   = 0o040000
	sIFBLK   = 0o060000
	sIFCHR   = 0o020000
	sIFIFO   = 0o010000
	permMask = 0o7777
)

func isDir(mode uint32) bool { return mode&sIFMT == sIFDIR }
func isReg(mode uint32) bool { return mode&sIFMT == sIFREG }

// validName checks one path component.
func validName(name []byte) error {
	switch {
	case len(name) == 0:
		return fmt.Errorf("empty name: %w", errs.ErrInvalid)
	case len(name) > maxNameLen:
		return fmt.Errorf("name of %d bytes (max %d): %w", len(name), maxNameLen, errs.ErrNameTooLong)
	case bytes.Equal(name, []byte(".")) || bytes.Equal(name, []byte("..")):
		return fmt.Errorf("name %q: %w", name, errs.ErrInvalid)
	case bytes.IndexByte(name, '/') >= 0 || bytes.IndexByte(name, 0) >= 0:
		return fmt.Errorf("name %q contains '/' or NUL: %w", name, errs.ErrInvalid)
	}
	return nil
}

// validLayout checks a layout's shape.
func validLayout(l *mdspb.Layout) error {
	switch {
	case l == nil:
		return fmt.Errorf("nil layout: %w", errs.ErrInvalid)
	case l.K < 1:
		return fmt.Errorf("layout k=%d: %w", l.K, errs.ErrInvalid)
	case l.K+l.M > maxStripeWidth || l.M > maxStripeWidth:
		return fmt.Errorf("layout k+m=%d+%d exceeds %d: %w", l.K, l.M, maxStripeWidth, errs.ErrInvalid)
	case l.Unit == 0 || l.Unit > maxUnit:
		return fmt.Errorf("layout unit %d: %w", l.Unit, errs.ErrInvalid)
	}
	return validCompression(l.Compression)
}

func attrReply(n *mdspb.Inode) *mdspb.AttrReply {
	return &mdspb.AttrReply{Attr: proto.Clone(n.Attr).(*mdspb.Attr)}
}

// readInode reads inode ino outside a mutation.
func readInode(r reader, ino uint64) (*mdspb.Inode, error) {
	if ino == 0 {
		return nil, fmt.Errorf("inode 0: %w", errs.ErrInvalid)
	}
	n := &mdspb.Inode{}
	if err := getProto(r, inodeKey(ino), n); err != nil {
		return nil, fmt.Errorf("inode %d: %w", ino, err)
	}
	if n.Attr == nil {
		return nil, fmt.Errorf("inode %d has no attributes: %w", ino, errs.ErrCorrupt)
	}
	return n, nil
}

// Lookup returns the attributes of name in directory parent.
func (s *Server) handleLookup(ctx context.Context, req *mdspb.LookupRequest) (_ *mdspb.AttrReply, err error) {
	if err := validName(req.GetName()); err != nil {
		return nil, err
	}
	cl := s.callerOf(ctx)
	var out *mdspb.AttrReply
	err = s.snapshot(func(r reader) error {
		p, err := readInode(r, req.GetParent())
		if err != nil {
			return err
		}
		if !isDir(p.Attr.Mode) {
			return fmt.Errorf("lookup in inode %d: %w", p.Attr.Ino, errs.ErrNotDir)
		}
		if err := cl.check(p.Attr, mayExec, "lookup"); err != nil {
			return err
		}
		v, err := getValue(r, dentryKey(req.GetParent(), req.GetName()))
		if err != nil {
			return fmt.Errorf("lookup %q in %d: %w", req.GetName(), req.GetParent(), err)
		}
		ino, _, err := decodeDentry(v)
		if err != nil {
			return err
		}
		n, err := readInode(r, ino)
		if err != nil {
			return err
		}
		out = attrReply(n)
		return nil
	})
	return out, err
}

// GetAttr returns an inode's attributes.
func (s *Server) handleGetAttr(ctx context.Context, req *mdspb.GetAttrRequest) (_ *mdspb.AttrReply, err error) {
	n, err := readInode(s.db, req.GetIno())
	if err != nil {
		return nil, err
	}
	return attrReply(n), nil
}

const setAttrAll = uint32(mdspb.SetAttrBits_SETATTR_MODE | mdspb.SetAttrBits_SETATTR_UID |
	mdspb.SetAttrBits_SETATTR_GID | mdspb.SetAttrBits_SETATTR_SIZE | mdspb.SetAttrBits_SETATTR_ATIME |
	mdspb.SetAttrBits_SETATTR_MTIME | mdspb.SetAttrBits_SETATTR_ATIME_NOW | mdspb.SetAttrBits_SETATTR_MTIME_NOW | mdspb.SetAttrBits_SETATTR_ATIME_READ)

// SetAttr changes the attributes named by req.valid. A size change of a
// regular file truncates its extent map; growing only sets the size.
func (s *Server) handleSetAttr(ctx context.Context, req *mdspb.SetAttrRequest) (_ *mdspb.AttrReply, err error) {
	valid := req.GetValid()
	if valid&^setAttrAll != 0 {
		return nil, fmt.Errorf("setattr: unknown valid bits %#x: %w", valid&^setAttrAll, errs.ErrInvalid)
	}
	has := func(b mdspb.SetAttrBits) bool { return valid&uint32(b) != 0 }
	var out *mdspb.AttrReply
	err = s.commitOn(ctx, req.GetIno(), func(t *txn, cl caller, n *mdspb.Inode) error {
		a := n.Attr
		if err := cl.checkSetAttr(a, req); err != nil {
			return err
		}
		if valid == 0 {
			out = attrReply(n)
			return nil
		}
		if has(mdspb.SetAttrBits_SETATTR_SIZE) {
			switch {
			case isDir(a.Mode):
				return fmt.Errorf("truncate inode %d: %w", a.Ino, errs.ErrIsDir)
			case !isReg(a.Mode):
				return fmt.Errorf("truncate inode %d (mode %o): %w", a.Ino, a.Mode, errs.ErrInvalid)
			}
			if req.GetSize() < a.Size {
				if err := t.truncateMap(a.Ino, req.GetSize()); err != nil {
					return err
				}
			}
			if req.GetSize() != a.Size && !has(mdspb.SetAttrBits_SETATTR_MTIME) {
				a.MtimeNs = t.now
			}
			a.Size = req.GetSize()
		}
		if has(mdspb.SetAttrBits_SETATTR_MODE) {
			a.Mode = a.Mode&sIFMT | req.GetMode()&permMask
		}
		if has(mdspb.SetAttrBits_SETATTR_UID) {
			a.Uid = req.GetUid()
		}
		if has(mdspb.SetAttrBits_SETATTR_GID) {
			a.Gid = req.GetGid()
		}
		switch {
		case has(mdspb.SetAttrBits_SETATTR_ATIME_NOW), has(mdspb.SetAttrBits_SETATTR_ATIME_READ):
			a.AtimeNs = t.now
		case has(mdspb.SetAttrBits_SETATTR_ATIME):
			a.AtimeNs = req.GetAtimeNs()
		}
		switch {
		case has(mdspb.SetAttrBits_SETATTR_MTIME_NOW):
			a.MtimeNs = t.now
		case has(mdspb.SetAttrBits_SETATTR_MTIME):
			a.MtimeNs = req.GetMtimeNs()
		}
		if valid != uint32(mdspb.SetAttrBits_SETATTR_ATIME_READ) {
			a.CtimeNs = t.now
		}
		t.touch(n)
		out = attrReply(n)
		return t.setReply(out)
	})
	return out, err
}

// newInode allocates an inode number and builds an inode with the given
// fields set and every time at now.
func (t *txn) newInode(mode, uid, gid, nlink uint32, layout *mdspb.Layout) (*mdspb.Inode, error) {
	ino, err := t.nextID(counterNextIno)
	if err != nil {
		return nil, err
	}
	n := &mdspb.Inode{Attr: &mdspb.Attr{
		Ino: ino, Mode: mode, Uid: uid, Gid: gid, Nlink: nlink,
		AtimeNs: t.now, MtimeNs: t.now, CtimeNs: t.now,
		Layout: proto.Clone(layout).(*mdspb.Layout),
	}}
	t.create(n)
	return n, nil
}

// dirChanged updates a directory's mtime and ctime after an entry change.
func (t *txn) dirChanged(d *mdspb.Inode) {
	d.Attr.MtimeNs, d.Attr.CtimeNs = t.now, t.now
	t.touch(d)
}

// Create makes a regular file or, as mknod(2) does, a FIFO, a socket or a
// block or character device node (only for root, the holder of
// CAP_MKNOD; the device number is kept in the inode's rdev). The layout
// comes from the request or the parent directory.
func (s *Server) handleCreate(ctx context.Context, req *mdspb.CreateRequest) (_ *mdspb.AttrReply, err error) {
	if err := validName(req.GetName()); err != nil {
		return nil, err
	}
	mode := req.GetMode()
	switch mode & sIFMT {
	case 0:
		mode |= sIFREG
	case sIFREG, sIFIFO, sIFSOCK, sIFBLK, sIFCHR:
	default:
		return nil, fmt.Errorf("create with mode %o: %w", mode, errs.ErrInvalid)
	}
	device := mode&sIFMT == sIFBLK || mode&sIFMT == sIFCHR
	if !device && req.GetRdev() != 0 {
		return nil, fmt.Errorf("create with mode %o and device number %#x: %w", mode, req.GetRdev(), errs.ErrInvalid)
	}
	mode = mode&sIFMT | mode&permMask
	if req.GetLayout() != nil {
		if err := validLayout(req.GetLayout()); err != nil {
			return nil, err
		}
	}
	cl := s.callerOf(ctx)
	if device && !cl.root() {
		return nil, fmt.Errorf("mknod of a device node by uid %d (needs CAP_MKNOD): %w", cl.uid, errs.ErrNotPermitted)
	}
	var out *mdspb.AttrReply
	err = s.commit(ctx, func(t *txn) error {
		p, err := t.dir(req.GetParent())
		if err != nil {
			return err
		}
		if err := cl.check(p.Attr, mayExec, "create"); err != nil {
			return err
		}
		ino, cmode, ok, err := t.dentry(p.Attr.Ino, req.GetName())
		if err != nil {
			return err
		}
		if ok {
			switch {
			case req.GetExclusive():
				return fmt.Errorf("create %q: %w", req.GetName(), errs.ErrExists)
			case isDir(cmode):
				return fmt.Errorf("create %q: %w", req.GetName(), errs.ErrIsDir)
			case !isReg(cmode) || !isReg(mode):
				return fmt.Errorf("create %q: %w", req.GetName(), errs.ErrExists)
			}
			n, err := t.inode(ino)
			if err != nil {
				return err
			}
			out = attrReply(n)
			return s.openCreated(t, req, out)
		}
		n, err := t.newChild(cl, p, req, mode, 1, "create", s.o.DefaultLayout)
		if err != nil {
			return err
		}
		n.Attr.Rdev = req.GetRdev()
		t.dirChanged(p)
		out = attrReply(n)
		out.Created = true
		if err := t.answer(out, p); err != nil {
			return err
		}
		return s.openCreated(t, req, out)
	})
	if err == nil && req.GetLease() && req.GetOpenSession() != 0 && out.GetCreated() && isReg(mode) {
		s.leaseCreated(ctx, req.GetOpenSession(), out)
	}
	return out, err
}

// Sync makes every mutation committed so far durable; it returns at once
// when they all are.
func (s *Server) handleSync(ctx context.Context, _ *mdspb.Empty) (_ *mdspb.Empty, err error) {
	if err := s.commits.flush(); err != nil {
		return nil, err
	}
	return &mdspb.Empty{}, nil
}

// answer records out as the mutation's answer (setReply), then gives it
// the attributes of directory p as they are now, which the record leaves
// out: a retry's answer has none (it may come long after).
func (t *txn) answer(out proto.Message, p *mdspb.Inode) error {
	if err := t.setReply(out); err != nil {
		return err
	}
	pa := cloneAttr(p)
	switch o := out.(type) {
	case *mdspb.AttrReply:
		o.Parent = pa
	case *mdspb.UnlinkReply:
		o.Parent = pa
	}
	return nil
}

// removable returns the inode and mode of the entry name in directory p
// that an unlink or rmdir (op) by cl removes: cl must be able to write p;
// ErrNotFound if there is no such entry.
func (t *txn) removable(cl caller, p *mdspb.Inode, name []byte, op string) (ino uint64, mode uint32, err error) {
	if err := cl.check(p.Attr, mayWrite|mayExec, op); err != nil {
		return 0, 0, err
	}
	ino, mode, ok, err := t.dentry(p.Attr.Ino, name)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		return 0, 0, fmt.Errorf("%s %q: %w", op, name, errs.ErrNotFound)
	}
	return ino, mode, nil
}

// cloneAttr is a copy of n's attributes.
func cloneAttr(n *mdspb.Inode) *mdspb.Attr { return proto.Clone(n.Attr).(*mdspb.Attr) }

// newChild makes an inode of mode with nlink links at req's name in
// directory p, as a create or mkdir (op) by cl asks: cl must be able to
// write p; the owner is the one cl.newOwner gives; the layout req's, or
// else p's, or else def.
func (t *txn) newChild(cl caller, p *mdspb.Inode, req *mdspb.CreateRequest, mode, nlink uint32, op string, def *mdspb.Layout) (*mdspb.Inode, error) {
	if err := cl.check(p.Attr, mayWrite|mayExec, op); err != nil {
		return nil, err
	}
	uid, gid := cl.newOwner(req.GetUid(), req.GetGid())
	n, err := t.newInode(mode, uid, gid, nlink, cmp.Or(req.GetLayout(), p.Attr.Layout, def))
	if err != nil {
		return nil, err
	}
	n.Quota = quotaOf(p)
	return n, t.setDentry(p.Attr.Ino, req.GetName(), n.Attr.Ino, mode)
}

// openCreated opens the file of a create for req's session when it asks,
// as the last step of the create's transaction.
func (s *Server) openCreated(t *txn, req *mdspb.CreateRequest, out *mdspb.AttrReply) error {
	if req.GetOpenSession() == 0 || !isReg(out.GetAttr().GetMode()) {
		return nil
	}
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	h, err := s.sess.t.open(req.GetOpenSession(), out.GetAttr().GetIno(), t.now)
	out.Handle = h
	return err
}

// Mkdir makes a directory; it inherits the parent's layout unless the
// request names one.
func (s *Server) handleMkdir(ctx context.Context, req *mdspb.CreateRequest) (_ *mdspb.AttrReply, err error) {
	if err := validName(req.GetName()); err != nil {
		return nil, err
	}
	mode := req.GetMode()
	if t := mode & sIFMT; t != 0 && t != sIFDIR {
		return nil, fmt.Errorf("mkdir with mode %o: %w", mode, errs.ErrInvalid)
	}
	mode = sIFDIR | mode&permMask
	if req.GetLayout() != nil {
		if err := validLayout(req.GetLayout()); err != nil {
			return nil, err
		}
	}
	var out *mdspb.AttrReply
	err = s.commitIn(ctx, req.GetParent(), func(t *txn, cl caller, p *mdspb.Inode) error {
		if err := cl.check(p.Attr, mayExec, "mkdir"); err != nil {
			return err
		}
		if _, _, ok, err := t.dentry(p.Attr.Ino, req.GetName()); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("mkdir %q: %w", req.GetName(), errs.ErrExists)
		}
		n, err := t.newChild(cl, p, req, mode, 2, "mkdir", s.o.DefaultLayout)
		if err != nil {
			return err
		}
		if err := t.b.Set(parentKey(n.Attr.Ino), encodeU64(p.Attr.Ino), nil); err != nil {
			return err
		}
		p.Attr.Nlink++
		t.dirChanged(p)
		out = attrReply(n)
		return t.answer(out, p)
	})
	return out, err
}

// Symlink makes a symbolic link to target.
func (s *Server) handleSymlink(ctx context.Context, req *mdspb.SymlinkRequest) (_ *mdspb.AttrReply, err error) {
	if err := validName(req.GetName()); err != nil {
		return nil, err
	}
	target := req.GetTarget()
	switch {
	case len(target) == 0 || bytes.IndexByte(target, 0) >= 0:
		return nil, fmt.Errorf("symlink target empty or with NUL: %w", errs.ErrInvalid)
	case len(target) > maxSymlinkLen:
		return nil, fmt.Errorf("symlink target of %d bytes (max %d): %w", len(target), maxSymlinkLen, errs.ErrNameTooLong)
	}
	var out *mdspb.AttrReply
	err = s.commitIn(ctx, req.GetParent(), func(t *txn, cl caller, p *mdspb.Inode) error {
		if err := cl.check(p.Attr, mayWrite|mayExec, "symlink"); err != nil {
			return err
		}
		if _, _, ok, err := t.dentry(p.Attr.Ino, req.GetName()); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("symlink %q: %w", req.GetName(), errs.ErrExists)
		}
		uid, gid := cl.newOwner(req.GetUid(), req.GetGid())
		n, err := t.newInode(sIFLNK|0o777, uid, gid, 1, p.Attr.Layout)
		if err != nil {
			return err
		}
		n.Quota = quotaOf(p)
		n.Attr.Size = uint64(len(target))
		n.Symlink = append([]byte(nil), target...)
		if err := t.setDentry(p.Attr.Ino, req.GetName(), n.Attr.Ino, n.Attr.Mode); err != nil {
			return err
		}
		t.dirChanged(p)
		out = attrReply(n)
		return t.answer(out, p)
	})
	return out, err
}

// Readlink returns a symlink's target.
func (s *Server) handleReadlink(ctx context.Context, req *mdspb.GetAttrRequest) (_ *mdspb.ReadlinkReply, err error) {
	n, err := readInode(s.db, req.GetIno())
	if err != nil {
		return nil, err
	}
	if n.Attr.Mode&sIFMT != sIFLNK {
		return nil, fmt.Errorf("readlink of inode %d: not a symlink: %w", n.Attr.Ino, errs.ErrInvalid)
	}
	return &mdspb.ReadlinkReply{Target: n.Symlink}, nil
}

// Link adds a hard link to a non-directory.
func (s *Server) handleLink(ctx context.Context, req *mdspb.LinkRequest) (_ *mdspb.AttrReply, err error) {
	if err := validName(req.GetNewName()); err != nil {
		return nil, err
	}
	var out *mdspb.AttrReply
	err = s.commitOn(ctx, req.GetIno(), func(t *txn, cl caller, n *mdspb.Inode) error {
		if isDir(n.Attr.Mode) {
			return fmt.Errorf("link to directory %d: %w", n.Attr.Ino, errs.ErrNotPermitted)
		}
		if n.Attr.Nlink == 0 {
			// An orphan, open but removed: linkat(2) of it is ENOENT.
			return fmt.Errorf("link to removed inode %d: %w", n.Attr.Ino, errs.ErrNotFound)
		}
		p, err := t.dir(req.GetNewParent())
		if err != nil {
			return err
		}
		if err := cl.check(p.Attr, mayWrite|mayExec, "link"); err != nil {
			return err
		}
		if err := linkQuota(n, p); err != nil {
			return err
		}
		if _, _, ok, err := t.dentry(p.Attr.Ino, req.GetNewName()); err != nil {
			return err
		} else if ok {
			return fmt.Errorf("link %q: %w", req.GetNewName(), errs.ErrExists)
		}
		if err := t.setDentry(p.Attr.Ino, req.GetNewName(), n.Attr.Ino, n.Attr.Mode); err != nil {
			return err
		}
		n.Attr.Nlink++
		n.Attr.CtimeNs = t.now
		t.touch(n)
		t.dirChanged(p)
		out = attrReply(n)
		return t.answer(out, p)
	})
	return out, err
}

// dropLink removes one link of non-directory n; at zero links the inode and
// its extent map go, and extents left unreferenced are queued for GC. An
// inode that a client session has open stays instead, as an orphan, until
// its last release (sessions.go).
func (t *txn) dropLink(n *mdspb.Inode) error {
	if n.Attr.Nlink > 0 {
		n.Attr.Nlink--
	}
	n.Attr.CtimeNs = t.now
	t.touch(n)
	if n.Attr.Nlink > 0 {
		return nil
	}
	if t.env.open(n.Attr.Ino) {
		return t.b.Set(orphanKey(n.Attr.Ino), encodeU64(uint64(t.now)), nil)
	}
	if err := t.truncateMap(n.Attr.Ino, 0); err != nil {
		return err
	}
	t.remove(n.Attr.Ino)
	return nil
}

// removeDir deletes empty directory d, entered in parent p.
func (t *txn) removeDir(p, d *mdspb.Inode) error {
	empty, err := t.dirEmpty(d.Attr.Ino)
	if err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("directory %d: %w", d.Attr.Ino, errs.ErrNotEmpty)
	}
	d.Attr.Nlink = 0
	t.remove(d.Attr.Ino)
	if p.Attr.Nlink > 2 {
		p.Attr.Nlink--
	}
	t.touch(p)
	return nil
}

// Unlink removes a non-directory entry.
func (s *Server) handleUnlink(ctx context.Context, req *mdspb.UnlinkRequest) (_ *mdspb.UnlinkReply, err error) {
	if err := validName(req.GetName()); err != nil {
		return nil, err
	}
	var out *mdspb.UnlinkReply
	err = s.commitIn(ctx, req.GetParent(), func(t *txn, cl caller, p *mdspb.Inode) error {
		ino, mode, err := t.removable(cl, p, req.GetName(), "unlink")
		if err != nil {
			return err
		}
		if isDir(mode) {
			return fmt.Errorf("unlink %q: %w", req.GetName(), errs.ErrIsDir)
		}
		if err := s.touchContent(ctx, ino); err != nil {
			return err // its nlink and ctime change: its leases go first
		}
		n, err := t.inode(ino)
		if err != nil {
			return err
		}
		if err := cl.sticky(p.Attr, n.Attr, "unlink"); err != nil {
			return err
		}
		if err := t.delDentry(p.Attr.Ino, req.GetName()); err != nil {
			return err
		}
		if err := t.dropLink(n); err != nil {
			return err
		}
		t.dirChanged(p)
		out = &mdspb.UnlinkReply{Attr: proto.Clone(n.Attr).(*mdspb.Attr)}
		return t.answer(out, p)
	})
	return out, err
}

// Rmdir removes an empty directory.
func (s *Server) handleRmdir(ctx context.Context, req *mdspb.UnlinkRequest) (_ *mdspb.UnlinkReply, err error) {
	if err := validName(req.GetName()); err != nil {
		return nil, err
	}
	out := &mdspb.UnlinkReply{}
	err = s.commitIn(ctx, req.GetParent(), func(t *txn, cl caller, p *mdspb.Inode) error {
		ino, mode, err := t.removable(cl, p, req.GetName(), "rmdir")
		if err != nil {
			return err
		}
		if !isDir(mode) {
			return fmt.Errorf("rmdir %q: %w", req.GetName(), errs.ErrNotDir)
		}
		d, err := t.inode(ino)
		if err != nil {
			return err
		}
		if err := cl.sticky(p.Attr, d.Attr, "rmdir"); err != nil {
			return err
		}
		if err := t.removeDir(p, d); err != nil {
			return err
		}
		if err := t.delDentry(p.Attr.Ino, req.GetName()); err != nil {
			return err
		}
		t.dirChanged(p)
		out.Parent = cloneAttr(p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
