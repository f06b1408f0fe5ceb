package client

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// File type bits of Attr.Mode (Linux values).
const (
	sIFMT  = 0o170000
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
)

// Mode type bits, exported for callers that build modes.
const (
	ModeType    = sIFMT
	ModeDir     = sIFDIR
	ModeRegular = sIFREG
	ModeSymlink = sIFLNK
)

// MaxNameLen is the longest name in a directory.
const MaxNameLen = 255

// The inode-level calls below are what the FUSE file system uses; each is
// one MDS RPC.

// Lookup finds name in directory parent.
// A name that a directory lease (dirlease.go) says is not there is
// answered without asking the MDS.
func (c *Client) Lookup(ctx context.Context, parent uint64, name string) (*Attr, error) {
	if c.absent(parent, name) {
		c.metrics.leaseLookups.Inc()
		return nil, fmt.Errorf("lookup %q in %d: %w", name, parent, errs.ErrNotFound)
	}
	if a := c.leases.leasedEntry(parent, name); a != nil {
		c.metrics.leasedAttrs.Inc()
		return a, nil
	}
	a, err := c.lookupMDS(ctx, parent, name)
	if errors.Is(err, errs.ErrNotFound) || err == nil && c.leases.leaseWorth(parent) {
		c.missed(ctx, parent)
	}
	return attrOf(a), err
}

// GetAttr returns the attributes of ino: from an inode lease this client
// holds on it (contentlease.go), or the MDS.
func (c *Client) GetAttr(ctx context.Context, ino uint64) (*Attr, error) {
	if a := c.leases.leasedAttr(ino); a != nil {
		c.metrics.leasedAttrs.Inc()
		return a, nil
	}
	r, err := c.mds.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: ino})
	return attrOf(r.GetAttr()), err
}

// SetAttr changes the attributes of ino that s.Valid names. A size
// change of an open file must go through File.Truncate instead, so that
// its buffers agree.
func (c *Client) SetAttr(ctx context.Context, ino uint64, s SetAttrs) (*Attr, error) {
	defer c.dirs.drop(c.dirs.begin(), ino)
	r, err := c.mds.SetAttr(c.changeCtx(ctx), s.request(ino))
	return attrOf(r.GetAttr()), err
}

// CreateOptions are the attributes of a new inode: CreateIn,
// CreateFileIn, MknodIn, MkdirIn and SymlinkIn take them.
type CreateOptions struct {
	// Mode holds the permission bits; for MknodIn also the file type
	// (a FIFO, a socket, a block or character device).
	Mode uint32
	// UID and GID own the new inode.
	UID, GID uint32
	// Exclusive has CreateIn and CreateFileIn fail with errs.ErrExists
	// when name exists; without it an existing regular file is returned.
	// MknodIn, MkdirIn and SymlinkIn are always exclusive.
	Exclusive bool
	// Rdev is the device number of a block or character device made by
	// MknodIn (Linux's st_rdev encoding).
	Rdev uint32
	// Lease has CreateFileIn ask for an inode lease on the file it
	// creates (contentlease.go), so that its stats and lookups need no
	// MDS call until someone changes it: the mount asks, since the
	// kernel stats what it created; a writer through the API would only
	// drop it at its first commit.
	Lease bool
}

// createRequest is the MDS request of a create of name in parent with
// mode (type and permission bits) and o's owner; o.Rdev is MknodIn's.
func (o CreateOptions) createRequest(parent uint64, name string, mode uint32, exclusive bool) *mdspb.CreateRequest {
	return &mdspb.CreateRequest{Parent: parent, Name: []byte(name), Mode: mode, Uid: o.UID, Gid: o.GID, Exclusive: exclusive}
}

// CreateIn creates a regular file name in parent. Without o.Exclusive an
// existing regular file is returned instead.
func (c *Client) CreateIn(ctx context.Context, parent uint64, name string, o CreateOptions) (*Attr, error) {
	seq := c.dirs.begin()
	c.leases.begin(parent)
	r, err := c.mds.Create(c.changeCtx(ctx), o.createRequest(parent, name, sIFREG|o.Mode&0o7777, o.Exclusive))
	c.leases.end(err, added(name, r.GetAttr().GetIno()), parent)
	c.dirs.answered(seq, parent, r.GetParent(), err)
	return attrOf(r.GetAttr()), err
}

// MknodIn makes a special file name in parent, as mknod(2): a FIFO, a
// socket, or (for root) a block or character device with device number
// o.Rdev. o.Mode holds the type and permission bits.
func (c *Client) MknodIn(ctx context.Context, parent uint64, name string, o CreateOptions) (*Attr, error) {
	req := o.createRequest(parent, name, o.Mode, true)
	req.Rdev = o.Rdev
	seq := c.dirs.begin()
	c.leases.begin(parent)
	r, err := c.mds.Create(c.changeCtx(ctx), req)
	c.leases.end(err, added(name, r.GetAttr().GetIno()), parent)
	c.dirs.answered(seq, parent, r.GetParent(), err)
	return attrOf(r.GetAttr()), err
}

// SyncNamespace returns once every namespace change acknowledged so far
// is durable in the MDS. Without EarlyNamespaceReplies they all are, and
// it does nothing; nor does it call the MDS when every change this
// client was answered early has been covered by an earlier Sync.
func (c *Client) SyncNamespace(ctx context.Context) error {
	if !c.opts.EarlyNamespaceReplies {
		return nil
	}
	answered := c.early.answered.Load()
	if answered == c.early.synced.Load() {
		c.metrics.syncsSkipped.Inc()
		return nil
	}
	if _, err := c.mds.Sync(ctx, &mdspb.Empty{}); err != nil {
		return err
	}
	// Every early change answered before the Sync was sent is durable.
	for {
		s := c.early.synced.Load()
		if s >= answered || c.early.synced.CompareAndSwap(s, answered) {
			return nil
		}
	}
}

// earlyCount counts the MDS calls this client sent asking for an early
// reply (mdspb.CommitEarly), once each has returned, and how many of
// them a Sync has covered.
type earlyCount struct {
	answered atomic.Uint64
	synced   atomic.Uint64
}

// earlyInterceptor counts the calls that asked for an early reply, when
// they return: answered or failed, for a failed call may have been
// applied. SyncNamespace skips the MDS when a Sync sent after the last
// of them has returned.
func (c *Client) earlyInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		if v := md.Get(mdspb.CommitHeader); len(v) == 1 && v[0] == mdspb.CommitEarly {
			c.early.answered.Add(1)
		}
	}
	return err
}

// MkdirIn creates directory name in parent.
func (c *Client) MkdirIn(ctx context.Context, parent uint64, name string, o CreateOptions) (*Attr, error) {
	seq := c.dirs.begin()
	c.leases.begin(parent)
	r, err := c.mds.Mkdir(c.changeCtx(ctx), o.createRequest(parent, name, sIFDIR|o.Mode&0o7777, true))
	c.leases.end(err, added(name, r.GetAttr().GetIno()), parent)
	c.dirs.answered(seq, parent, r.GetParent(), err)
	return attrOf(r.GetAttr()), err
}

// SymlinkIn creates symlink name -> target in parent, owned by o.UID and
// o.GID (the other options do not apply).
func (c *Client) SymlinkIn(ctx context.Context, parent uint64, name, target string, o CreateOptions) (*Attr, error) {
	seq := c.dirs.begin()
	c.leases.begin(parent)
	r, err := c.mds.Symlink(c.changeCtx(ctx), &mdspb.SymlinkRequest{Parent: parent, Name: []byte(name), Target: []byte(target), Uid: o.UID, Gid: o.GID})
	c.leases.end(err, added(name, r.GetAttr().GetIno()), parent)
	c.dirs.answered(seq, parent, r.GetParent(), err)
	return attrOf(r.GetAttr()), err
}

// Readlink returns the target of symlink ino.
func (c *Client) Readlink(ctx context.Context, ino uint64) (string, error) {
	r, err := c.mds.Readlink(ctx, &mdspb.GetAttrRequest{Ino: ino})
	return string(r.GetTarget()), err
}

// LinkIn makes a hard link to ino named name in parent.
func (c *Client) LinkIn(ctx context.Context, ino, parent uint64, name string) (*Attr, error) {
	seq := c.dirs.begin()
	c.leases.begin(parent)
	r, err := c.mds.Link(c.changeCtx(ctx), &mdspb.LinkRequest{Ino: ino, NewParent: parent, NewName: []byte(name)})
	c.leases.end(err, added(name, r.GetAttr().GetIno()), parent)
	c.dirs.answered(seq, parent, r.GetParent(), err)
	return attrOf(r.GetAttr()), err
}

// UnlinkIn removes the non-directory name from parent.
func (c *Client) UnlinkIn(ctx context.Context, parent uint64, name string) error {
	seq := c.dirs.begin()
	c.leases.begin(parent)
	ctx = c.leases.dropNamed(c.changeCtx(ctx), parent, name)
	r, err := c.mds.Unlink(ctx, &mdspb.UnlinkRequest{Parent: parent, Name: []byte(name)})
	c.leases.end(err, removed(name), parent)
	c.dirs.answered(seq, parent, r.GetParent(), err)
	return err
}

// RmdirIn removes the empty directory name from parent.
func (c *Client) RmdirIn(ctx context.Context, parent uint64, name string) error {
	seq := c.dirs.begin()
	c.leases.begin(parent)
	r, err := c.mds.Rmdir(c.changeCtx(ctx), &mdspb.UnlinkRequest{Parent: parent, Name: []byte(name)})
	c.leases.end(err, removed(name), parent)
	c.dirs.answered(seq, parent, r.GetParent(), err)
	return err
}

// RenameIn renames oldName in oldParent to newName in newParent, as
// renameat2(2) with flags.
func (c *Client) RenameIn(ctx context.Context, oldParent uint64, oldName string, newParent uint64, newName string, flags RenameFlags) error {
	seq := c.dirs.begin()
	c.leases.begin(oldParent, newParent)
	ctx = c.leases.dropNamed(c.changeCtx(ctx), oldParent, oldName)
	ctx = c.leases.dropNamed(ctx, newParent, newName)
	r, err := c.mds.Rename(ctx, &mdspb.RenameRequest{OldParent: oldParent, OldName: []byte(oldName), NewParent: newParent, NewName: []byte(newName), Flags: uint32(flags)})
	c.leases.end(err, renamed(oldParent, oldName, newParent, newName, flags), oldParent, newParent)
	c.dirs.answered(seq, oldParent, r.GetOldParent(), err)
	c.dirs.answered(seq, newParent, r.GetNewParent(), err)
	return err
}

// ReadDirPage returns up to limit entries of directory ino after the name
// after, and whether the listing is complete.
func (c *Client) ReadDirPage(ctx context.Context, ino uint64, after string, limit int) ([]DirEntry, bool, error) {
	r, err := c.mds.ReadDir(ctx, &mdspb.ReadDirRequest{Ino: ino, After: []byte(after), Limit: uint32(limit)})
	return dirEntriesOf(r.GetEntries()), r.GetEof(), err
}

// ReadDirPlusPage is ReadDirPage with each entry's attributes.
func (c *Client) ReadDirPlusPage(ctx context.Context, ino uint64, after string, limit int) ([]DirEntry, bool, error) {
	r, err := c.mds.ReadDir(ctx, &mdspb.ReadDirRequest{Ino: ino, After: []byte(after), Limit: uint32(limit), Plus: true})
	return dirEntriesOf(r.GetEntries()), r.GetEof(), err
}

// ReadDirIno returns every entry of directory ino.
func (c *Client) ReadDirIno(ctx context.Context, ino uint64) ([]DirEntry, error) {
	var all []DirEntry
	after := ""
	for {
		es, eof, err := c.ReadDirPage(ctx, ino, after, 0)
		if err != nil {
			return nil, err
		}
		all = append(all, es...)
		if eof || len(es) == 0 {
			return all, nil
		}
		after = es[len(es)-1].Name
	}
}

// StatFs returns the cluster's capacity.
func (c *Client) StatFs(ctx context.Context) (*StatFs, error) {
	r, err := c.mds.StatFs(ctx, &mdspb.StatFsRequest{})
	if err != nil {
		return nil, err
	}
	return &StatFs{TotalBytes: r.GetTotalBytes(), FreeBytes: r.GetFreeBytes(), Files: r.GetFiles(), OSTsUp: int(r.GetOstsUp()), OSTsTotal: int(r.GetOstsTotal())}, nil
}

// The path calls below resolve slash-separated paths from the root. They
// do not follow symlinks in the last component; intermediate components
// must be directories.

func splitPath(p string) ([]string, error) {
	p = path.Clean("/" + p)
	if p == "/" {
		return nil, nil
	}
	parts := strings.Split(p[1:], "/")
	for _, s := range parts {
		if len(s) > MaxNameLen {
			return nil, fmt.Errorf("%q: %w", s, errs.ErrNameTooLong)
		}
	}
	return parts, nil
}

// resolve returns the attributes of path p.
func (c *Client) resolve(ctx context.Context, p string) (*Attr, error) {
	parts, err := splitPath(p)
	if err != nil {
		return nil, err
	}
	a, err := c.GetAttr(ctx, RootIno)
	if err != nil {
		return nil, err
	}
	for i, name := range parts {
		if !IsDir(a) {
			return nil, fmt.Errorf("not a directory: /%s: %w", strings.Join(parts[:i], "/"), errs.ErrNotDir)
		}
		if a, err = c.Lookup(ctx, a.Ino, name); err != nil {
			if errors.Is(err, errs.ErrNotFound) {
				return nil, &NotFoundError{Path: "/" + strings.Join(parts[:i+1], "/")}
			}
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return a, nil
}

// NotFoundError is a path with a name that is not there: Path, from the
// root, ends at the first name missing. It is errs.ErrNotFound, and says
// so as ls would, without the MDS's inode numbers or keys.
type NotFoundError struct{ Path string }

func (e *NotFoundError) Error() string { return "no such file or directory: " + e.Path }

// Is makes errors.Is(err, errs.ErrNotFound) hold.
func (e *NotFoundError) Is(target error) bool { return target == errs.ErrNotFound }

// resolveParent returns the directory holding p and p's last name.
func (c *Client) resolveParent(ctx context.Context, p string) (uint64, string, error) {
	parts, err := splitPath(p)
	if err != nil {
		return 0, "", err
	}
	if len(parts) == 0 {
		return 0, "", fmt.Errorf("%q is the root: %w", p, errs.ErrInvalid)
	}
	dir, err := c.resolve(ctx, strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return 0, "", err
	}
	if !IsDir(dir) {
		return 0, "", fmt.Errorf("%s: %w", p, errs.ErrNotDir)
	}
	return dir.Ino, parts[len(parts)-1], nil
}

// Stat returns the attributes of path p.
func (c *Client) Stat(ctx context.Context, p string) (*Attr, error) { return c.resolve(ctx, p) }

// Mkdir creates directory p.
func (c *Client) Mkdir(ctx context.Context, p string, mode uint32) error {
	parent, name, err := c.resolveParent(ctx, p)
	if err != nil {
		return err
	}
	_, err = c.MkdirIn(ctx, parent, name, CreateOptions{Mode: mode})
	return err
}

// MkdirAll creates p and any missing parents; a directory another client
// makes at the same time is taken as made.
func (c *Client) MkdirAll(ctx context.Context, p string, mode uint32) error {
	parts, err := splitPath(p)
	if err != nil {
		return err
	}
	ino := uint64(RootIno)
	for _, name := range parts {
		a, err := c.Lookup(ctx, ino, name)
		if err != nil {
			a, err = c.MkdirIn(ctx, ino, name, CreateOptions{Mode: mode})
			if errors.Is(err, errs.ErrExists) {
				// Made by another client since the lookup.
				a, err = c.Lookup(ctx, ino, name)
			}
			if err != nil {
				return fmt.Errorf("mkdir %s: %w", name, err)
			}
		}
		if !IsDir(a) {
			return fmt.Errorf("%s: %w", name, errs.ErrNotDir)
		}
		ino = a.Ino
	}
	return nil
}

// Create creates or truncates the regular file p and opens it.
func (c *Client) Create(ctx context.Context, p string, mode uint32) (*File, error) {
	parent, name, err := c.resolveParent(ctx, p)
	if err != nil {
		return nil, err
	}
	f, _, err := c.CreateFileIn(ctx, parent, name, CreateOptions{Mode: mode})
	if err != nil {
		return nil, err
	}
	if f.Size() > 0 {
		if err := f.Truncate(ctx, 0); err != nil {
			f.Close(ctx)
			return nil, err
		}
	}
	return f, nil
}

// Open opens the regular file p.
func (c *Client) Open(ctx context.Context, p string) (*File, error) {
	a, err := c.resolve(ctx, p)
	if err != nil {
		return nil, err
	}
	return c.OpenIno(ctx, a.Ino)
}

// ReadDir lists directory p.
func (c *Client) ReadDir(ctx context.Context, p string) ([]DirEntry, error) {
	a, err := c.resolve(ctx, p)
	if err != nil {
		return nil, err
	}
	if !IsDir(a) {
		return nil, fmt.Errorf("%s: %w", p, errs.ErrNotDir)
	}
	return c.ReadDirIno(ctx, a.Ino)
}

// Remove removes the file, symlink or empty directory p.
func (c *Client) Remove(ctx context.Context, p string) error {
	parent, name, err := c.resolveParent(ctx, p)
	if err != nil {
		return err
	}
	a, err := c.Lookup(ctx, parent, name)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if IsDir(a) {
		return c.RmdirIn(ctx, parent, name)
	}
	return c.UnlinkIn(ctx, parent, name)
}

// Rename renames oldPath to newPath, replacing newPath as POSIX rename does.
func (c *Client) Rename(ctx context.Context, oldPath, newPath string) error {
	op, on, err := c.resolveParent(ctx, oldPath)
	if err != nil {
		return err
	}
	np, nn, err := c.resolveParent(ctx, newPath)
	if err != nil {
		return err
	}
	return c.RenameIn(ctx, op, on, np, nn, 0)
}

// Truncate sets the size of the closed file p.
func (c *Client) Truncate(ctx context.Context, p string, size int64) error {
	a, err := c.resolve(ctx, p)
	if err != nil {
		return err
	}
	if size < 0 || size > MaxFileSize {
		return fmt.Errorf("truncate %s to %d: %w", p, size, errs.ErrInvalid)
	}
	_, err = c.SetAttr(ctx, a.Ino, SetAttrs{Valid: SetSize, Size: uint64(size)})
	return err
}

// Symlink creates symlink p pointing at target.
func (c *Client) Symlink(ctx context.Context, target, p string) error {
	parent, name, err := c.resolveParent(ctx, p)
	if err != nil {
		return err
	}
	_, err = c.SymlinkIn(ctx, parent, name, target, CreateOptions{})
	return err
}

// Link makes newPath a hard link to oldPath.
func (c *Client) Link(ctx context.Context, oldPath, newPath string) error {
	a, err := c.resolve(ctx, oldPath)
	if err != nil {
		return err
	}
	parent, name, err := c.resolveParent(ctx, newPath)
	if err != nil {
		return err
	}
	_, err = c.LinkIn(ctx, a.Ino, parent, name)
	return err
}
