package fuse

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
)

// node is one Shoal inode in go-fuse's tree. Its StableAttr.Ino is the
// Shoal inode number, so go-fuse hands back the existing node for a second
// name of the same inode (a hard link): a node carries no name or parent
// of its own.
type node struct {
	gofs.Inode
	m *Mounted

	// last holds the last attributes seen of the inode: a directory's
	// mode and gid decide the owner of new entries (setgid); an open
	// inode that was unlinked is still described by them (with no link).
	last atomic.Pointer[client.Attr]
	// opens counts the open file and directory handles of the inode.
	opens atomic.Int32
	// noCap caches that the inode has no security.capability, which the
	// kernel asks for before every write (fuse/xattr.go).
	noCap capCache
}

// The operations go-fuse dispatches to a node. Those not listed get
// go-fuse's defaults, none of which is ENOSYS except STATX, whose ENOSYS
// tells the kernel to use GETATTR instead.
var (
	_ gofs.NodeLookuper       = (*node)(nil)
	_ gofs.NodeGetattrer      = (*node)(nil)
	_ gofs.NodeSetattrer      = (*node)(nil)
	_ gofs.NodeCreater        = (*node)(nil)
	_ gofs.NodeMkdirer        = (*node)(nil)
	_ gofs.NodeMknoder        = (*node)(nil)
	_ gofs.NodeSymlinker      = (*node)(nil)
	_ gofs.NodeReadlinker     = (*node)(nil)
	_ gofs.NodeLinker         = (*node)(nil)
	_ gofs.NodeUnlinker       = (*node)(nil)
	_ gofs.NodeRmdirer        = (*node)(nil)
	_ gofs.NodeRenamer        = (*node)(nil)
	_ gofs.NodeOpendirHandler = (*node)(nil)
	_ gofs.NodeStatfser       = (*node)(nil)
	_ gofs.NodeOpener         = (*node)(nil)
	_ gofs.NodeReader         = (*node)(nil)
	_ gofs.NodeWriter         = (*node)(nil)
	_ gofs.NodeWritever       = (*node)(nil)
	_ gofs.NodeFlusher        = (*node)(nil)
	_ gofs.NodeFsyncer        = (*node)(nil)
	_ gofs.NodeReleaser       = (*node)(nil)
	_ gofs.NodeLseeker        = (*node)(nil)
	_ gofs.NodeGetxattrer     = (*node)(nil)
	_ gofs.NodeSetxattrer     = (*node)(nil)
	_ gofs.NodeListxattrer    = (*node)(nil)
	_ gofs.NodeRemovexattrer  = (*node)(nil)
)

func (n *node) ino() uint64 { return n.StableAttr().Ino }

// remember records fresh attributes of n.
func (n *node) remember(a *client.Attr) { n.last.Store(a) }

// attrOf checks the result of a client call that returns attributes: a
// nil attribute without an error (a server bug) becomes EIO, not a crash.
func (m *Mounted) attrOf(op string, ino uint64, a *client.Attr, err error) (*client.Attr, syscall.Errno) {
	if err != nil {
		return nil, m.errno(op, ino, err)
	}
	if a == nil {
		m.log.Warn("MDS returned no attributes", "op", op, "ino", ino)
		return nil, syscall.EIO
	}
	return a, 0
}

// dirAttrShare: a directory's attributes from the answer to this mount's
// own change in it serve the kernel's getattrs for a twentieth of the
// attribute timeout (50 ms by default). That covers the getattr the
// kernel makes right after each change (a loop of creates or unlinks),
// while another client's removal of the directory, or change of its
// mode, shows a moment later, as it did when every such getattr reached
// the MDS (TestCkptMountProtocol removes a directory the mount has just
// written into, from another client, and stats it).
const dirAttrShare = 20

// getattr fetches n's attributes from the MDS (or, for a directory this
// mount just changed, from the MDS's answer to that change). An inode removed while this
// mount holds it open (fstat after unlink, or after a rename over it) is
// described by its last known attributes with a link count of 0, as a
// local file system would.
func (n *node) getattr(ctx context.Context) (*client.Attr, syscall.Errno) {
	// A directory's attributes may come from the answer to this mount's
	// own last change in it, if younger than the attribute timeout over
	// dirAttrShare (client.GetAttrFresh): the kernel asks for them right
	// after each change.
	a, err := n.m.c.GetAttrFresh(ctx, n.ino(), n.m.o.AttrTimeout/dirAttrShare)
	if errors.Is(err, errs.ErrNotFound) && n.opens.Load() > 0 {
		if last := n.last.Load(); last != nil {
			gone := *last
			gone.Nlink = 0
			return &gone, 0
		}
	}
	a, errno := n.m.attrOf("getattr", n.ino(), a, err)
	if errno == 0 {
		n.remember(a)
	}
	return a, errno
}

// fill converts a to FUSE attributes; for a file open in this mount, the
// size is the open file's, unflushed writes included, so that the kernel
// never cuts reads of data it was just given.
func (m *Mounted) fill(a *client.Attr, out *gofuse.Attr) {
	fillAttr(a, out)
	if typeBits(a.Mode) != syscall.S_IFREG {
		return
	}
	f := m.openFile(a.Ino)
	if f == nil {
		return
	}
	out.Size = uint64(f.Size())
	out.Blocks = (out.Size + 511) / 512
	// Writes not yet committed changed mtime and ctime already.
	if w := f.WriteTimeNs(); w > a.MtimeNs {
		out.Mtime, out.Mtimensec = splitNs(w)
		if w > a.CtimeNs {
			out.Ctime, out.Ctimensec = splitNs(w)
		}
	}
}

// openFile returns the client File of ino open in this mount, or nil,
// without waiting for anything.
func (m *Mounted) openFile(ino uint64) *client.File {
	m.mu.Lock()
	of := m.mu.files[ino]
	m.mu.Unlock()
	if of == nil {
		return nil
	}
	select {
	case <-of.ready:
	default:
		return nil
	}
	if of.err != nil {
		return nil
	}
	return of.f
}

// newChild returns the go-fuse inode for a, reusing the existing one when
// the inode is already known (another name of a hard-linked file).
func (n *node) newChild(ctx context.Context, a *client.Attr, out *gofuse.EntryOut) *gofs.Inode {
	ch := n.NewInode(ctx, &node{m: n.m}, gofs.StableAttr{Ino: a.Ino, Mode: typeBits(a.Mode)})
	if cn, ok := ch.Operations().(*node); ok {
		cn.remember(a)
	}
	n.m.fill(a, &out.Attr)
	return ch
}

// owner returns the uid and gid for a new entry of directory n: the
// caller's, with the directory's gid when it is setgid (sgid reports
// that; a new directory then inherits the bit too).
func (n *node) owner(ctx context.Context) (uid, gid uint32, sgid bool) {
	if c, ok := gofuse.FromContext(ctx); ok {
		uid, gid = c.Uid, c.Gid
	}
	d := n.last.Load()
	if d == nil {
		d, _ = n.getattr(ctx) // best effort: the create reports real errors
	}
	if client.IsDir(d) && d.Mode&syscall.S_ISGID != 0 {
		return uid, d.GID, true
	}
	return uid, gid, false
}

// Lookup finds name in directory n.
func (n *node) Lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = n.m.detach(ctx)
	a, err := n.m.c.Lookup(ctx, n.ino(), name)
	a, errno := n.m.attrOf("lookup", n.ino(), a, err)
	if errno != 0 {
		return nil, errno
	}
	return n.newChild(ctx, a, out), 0
}

// Getattr reports n's attributes.
func (n *node) Getattr(ctx context.Context, f gofs.FileHandle, out *gofuse.AttrOut) syscall.Errno {
	ctx = n.m.detach(ctx)
	a, errno := n.getattr(ctx)
	if errno != 0 {
		return errno
	}
	n.m.fill(a, &out.Attr)
	return 0
}

// Setattr changes mode, owner, size and times. A size change of a file
// open in this mount goes through its client File, so that its buffers
// agree.
func (n *node) Setattr(ctx context.Context, f gofs.FileHandle, in *gofuse.SetAttrIn, out *gofuse.AttrOut) syscall.Errno {
	ctx = n.m.detach(ctx)
	ino := n.ino()
	var req client.SetAttrs
	set := func(b client.SetAttrBits) { req.Valid |= b }
	if mode, ok := in.GetMode(); ok {
		set(client.SetMode)
		req.Mode = mode
	}
	if uid, ok := in.GetUID(); ok {
		set(client.SetUID)
		req.UID = uid
	}
	if gid, ok := in.GetGID(); ok {
		set(client.SetGID)
		req.GID = gid
	}
	switch {
	case in.Valid&gofuse.FATTR_ATIME_NOW != 0:
		set(client.SetAtimeNow)
	case in.Valid&gofuse.FATTR_ATIME != 0:
		set(client.SetAtime)
		req.AtimeNs = joinNs(in.Atime, in.Atimensec)
	}
	switch {
	case in.Valid&gofuse.FATTR_MTIME_NOW != 0:
		set(client.SetMtimeNow)
	case in.Valid&gofuse.FATTR_MTIME != 0:
		set(client.SetMtime)
		req.MtimeNs = joinNs(in.Mtime, in.Mtimensec)
	}
	// FATTR_CTIME: the MDS sets ctime itself. FATTR_KILL_SUIDGID only
	// comes with CAP_HANDLE_KILLPRIV_V2, which go-fuse does not ask for:
	// the kernel sends the mode change instead.

	// A size or mtime change of a file open in this mount goes through
	// its client File.
	var of *openFile
	if in.Valid&(gofuse.FATTR_SIZE|gofuse.FATTR_MTIME|gofuse.FATTR_MTIME_NOW) != 0 {
		if h := handleOf(f); h != nil {
			of = h.of
		} else if of = n.m.pin(ctx, ino); of != nil {
			defer n.m.release(ctx, of)
		}
	}

	var truncated *client.Attr // the attributes after a truncate of the open file
	if size, ok := in.GetSize(); ok {
		if size > uint64(client.MaxFileSize) {
			return syscall.EFBIG
		}
		if of != nil {
			n.m.noteWrite(of)
			ta, err := of.f.TruncateAttr(ctx, int64(size))
			if err != nil {
				return n.m.errno("truncate", ino, err)
			}
			truncated = ta
		} else {
			n.m.invalidateCache(nil, ino)
			set(client.SetSize)
			req.Size = size
		}
	}

	// An explicit mtime (tar -x, cp -p, rsync set it before close) must
	// not be overwritten by the commit of writes still buffered: flush
	// them first.
	if in.Valid&(gofuse.FATTR_MTIME|gofuse.FATTR_MTIME_NOW) != 0 && of != nil {
		if err := of.f.Fsync(ctx); err != nil {
			return n.m.errno("setattr", ino, err)
		}
		of.f.TimesSet()
	}

	var a *client.Attr
	var errno syscall.Errno
	if req.Valid != 0 {
		var err error
		a, err = n.m.c.SetAttr(ctx, ino, req)
		if a, errno = n.m.attrOf("setattr", ino, a, err); errno != 0 {
			return errno
		}
		n.remember(a)
	} else if truncated != nil && in.Valid&(gofuse.FATTR_MTIME|gofuse.FATTR_MTIME_NOW) == 0 {
		a = truncated // the truncate's answer; nothing changed after it
		n.remember(a)
	} else if a, errno = n.getattr(ctx); errno != 0 {
		return errno
	}
	n.m.fill(a, &out.Attr)
	return 0
}

// Create creates and opens a regular file. Without O_EXCL an existing
// regular file (created meanwhile by another client) is opened instead,
// and truncated for O_TRUNC.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *gofuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	ctx = n.m.detach(ctx)
	uid, gid, _ := n.owner(ctx)
	excl := flags&syscall.O_EXCL != 0
	// Create and open in one MDS call; the File joins the mount's table
	// of open files (or is dropped for the one already there).
	f, a, err := n.m.c.CreateFileIn(ctx, n.ino(), name, client.CreateOptions{Mode: mode, UID: uid, GID: gid, Exclusive: excl, Lease: true})
	a, errno := n.m.attrOf("create", n.ino(), a, err)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	of, err := n.m.adopt(ctx, f)
	if err != nil {
		return nil, nil, 0, n.m.errno("create", a.Ino, err)
	}
	n.m.noteWrite(of)
	if !excl && flags&syscall.O_TRUNC != 0 && of.f.Size() > 0 {
		if err := of.f.Truncate(ctx, 0); err != nil {
			n.m.release(ctx, of)
			return nil, nil, 0, n.m.errno("create", a.Ino, err)
		}
		a.Size = 0
	}
	ch := n.newChild(ctx, a, out)
	if cn, ok := ch.Operations().(*node); ok {
		cn.opens.Add(1) // dropped by its Release
	}
	return ch, n.m.plainHandle(of, flags), 0, 0
}

// Mkdir creates a directory; in a setgid directory it inherits the gid and
// the setgid bit.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = n.m.detach(ctx)
	uid, gid, sgid := n.owner(ctx)
	if sgid {
		mode |= syscall.S_ISGID
	}
	a, err := n.m.c.MkdirIn(ctx, n.ino(), name, client.CreateOptions{Mode: mode, UID: uid, GID: gid})
	a, errno := n.m.attrOf("mkdir", n.ino(), a, err)
	if errno != 0 {
		return nil, errno
	}
	return n.newChild(ctx, a, out), 0
}

// Mknod creates a regular file, FIFO, socket, or block or character
// device node (its device number kept by the MDS and returned as st_rdev;
// opening it opens the device, unless the mount has nodev).
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = n.m.detach(ctx)
	uid, gid, _ := n.owner(ctx)
	o := client.CreateOptions{Mode: mode, UID: uid, GID: gid, Exclusive: true}
	var a *client.Attr
	var err error
	switch typeBits(mode) {
	case 0, syscall.S_IFREG:
		a, err = n.m.c.CreateIn(ctx, n.ino(), name, o)
	case syscall.S_IFIFO, syscall.S_IFSOCK:
		a, err = n.m.c.MknodIn(ctx, n.ino(), name, o)
	case syscall.S_IFBLK, syscall.S_IFCHR:
		// The kernel let only a caller with CAP_MKNOD this far; the MDS
		// checks the caller is root.
		o.Rdev = dev
		a, err = n.m.c.MknodIn(ctx, n.ino(), name, o)
	default:
		return nil, syscall.EINVAL
	}
	a, errno := n.m.attrOf("mknod", n.ino(), a, err)
	if errno != 0 {
		return nil, errno
	}
	return n.newChild(ctx, a, out), 0
}

// Symlink creates symlink name -> target.
func (n *node) Symlink(ctx context.Context, target, name string, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = n.m.detach(ctx)
	uid, gid, _ := n.owner(ctx)
	a, err := n.m.c.SymlinkIn(ctx, n.ino(), name, target, client.CreateOptions{UID: uid, GID: gid})
	a, errno := n.m.attrOf("symlink", n.ino(), a, err)
	if errno != 0 {
		return nil, errno
	}
	return n.newChild(ctx, a, out), 0
}

// Readlink returns the target of symlink n.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx = n.m.detach(ctx)
	t, err := n.m.c.Readlink(ctx, n.ino())
	if err != nil {
		return nil, n.m.errno("readlink", n.ino(), err)
	}
	return []byte(t), 0
}

// Link makes name in n a hard link to target. go-fuse returns target's own
// node for it, since both share the inode number.
func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx = n.m.detach(ctx)
	ino := target.EmbeddedInode().StableAttr().Ino
	a, err := n.m.c.LinkIn(ctx, ino, n.ino(), name)
	a, errno := n.m.attrOf("link", ino, a, err)
	if errno != 0 {
		return nil, errno
	}
	return n.newChild(ctx, a, out), 0
}

// Unlink removes the non-directory name from n.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx = n.m.detach(ctx)
	if err := n.m.c.UnlinkIn(ctx, n.ino(), name); err != nil {
		return n.m.errno("unlink", n.ino(), err)
	}
	return 0
}

// Rmdir removes the empty directory name from n.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx = n.m.detach(ctx)
	if err := n.m.c.RmdirIn(ctx, n.ino(), name); err != nil {
		return n.m.errno("rmdir", n.ino(), err)
	}
	return 0
}

// Linux renameat2 flags.
const (
	renameNoReplace = 1 << 0
	renameExchange  = 1 << 1
)

// Rename moves name in n to newName in newParent in one MDS transaction.
// RENAME_NOREPLACE and RENAME_EXCHANGE pass through; RENAME_WHITEOUT (for
// overlayfs) is not supported.
func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = n.m.detach(ctx)
	var f client.RenameFlags
	if flags&renameNoReplace != 0 {
		f |= client.RenameNoReplace
	}
	if flags&renameExchange != 0 {
		f |= client.RenameExchange
	}
	if flags&^(renameNoReplace|renameExchange) != 0 {
		return syscall.EINVAL
	}
	np := newParent.EmbeddedInode().StableAttr().Ino
	if err := n.m.c.RenameIn(ctx, n.ino(), name, np, newName, f); err != nil {
		return n.m.errno("rename", n.ino(), err)
	}
	return 0
}

// statfsBlock is the block size statfs reports; byte counts are rounded
// down to it.
const statfsBlock = 4096

// statfsFreeFiles is the free inode count statfs reports: the MDS has no
// inode limit.
const statfsFreeFiles = 1 << 40

// Statfs reports the capacity of the OSTs that are up; inside a quota
// directory, the tightest quota over the node instead: its limits as the
// size, its usage as used (docs/admin.md, "Quotas").
func (n *node) Statfs(ctx context.Context, out *gofuse.StatfsOut) syscall.Errno {
	ctx = n.m.detach(ctx)
	r, err := n.m.c.StatFsIno(ctx, n.ino())
	if err != nil {
		return n.m.errno("statfs", n.ino(), err)
	}
	out.Bsize = statfsBlock
	out.Frsize = statfsBlock
	out.Blocks = r.TotalBytes / statfsBlock
	out.Bfree = r.FreeBytes / statfsBlock
	out.Files = r.Files + statfsFreeFiles
	out.Ffree = statfsFreeFiles
	if q := r.Quota; q != nil {
		if q.LimitBytes != 0 {
			out.Blocks = q.LimitBytes / statfsBlock
			left := q.LimitBytes - min(q.UsedBytes, q.LimitBytes)
			out.Bfree = min(left, r.FreeBytes) / statfsBlock
		}
		if q.LimitInodes != 0 {
			out.Files = q.LimitInodes
			out.Ffree = q.LimitInodes - min(q.UsedInodes, q.LimitInodes)
		}
	}
	out.Bavail = out.Bfree
	out.NameLen = client.MaxNameLen
	return 0
}
