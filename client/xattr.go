package client

import (
	"context"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Flags of SetXattr, as setxattr(2) has them.
const (
	XattrCreate  = uint32(mdspb.SetXattrFlags_XATTR_CREATE)  // fail with errs.ErrExists if name is set
	XattrReplace = uint32(mdspb.SetXattrFlags_XATTR_REPLACE) // fail with errs.ErrNoData if name is not set
)

// Extended attribute names carry their namespace ("user.", "trusted.",
// "security."); "system." names are errs.ErrNotSupported. Each call is one
// MDS RPC; docs/fuse.md lists the limits.

// SetXattr sets the extended attribute name of ino to value and returns
// the inode's new attributes (its ctime changes).
func (c *Client) SetXattr(ctx context.Context, ino uint64, name string, value []byte, flags uint32) (*Attr, error) {
	defer c.dirs.drop(c.dirs.begin(), ino)
	r, err := c.mds.SetXattr(c.nsCtx(ctx), &mdspb.SetXattrRequest{Ino: ino, Name: []byte(name), Value: value, Flags: flags})
	return attrOf(r.GetAttr()), err
}

// GetXattr returns the value of the extended attribute name of ino;
// errs.ErrNoData if it is not set.
func (c *Client) GetXattr(ctx context.Context, ino uint64, name string) ([]byte, error) {
	r, err := c.mds.GetXattr(ctx, &mdspb.GetXattrRequest{Ino: ino, Name: []byte(name)})
	if err != nil {
		return nil, err
	}
	return r.GetValue(), nil
}

// ListXattr returns the names of ino's extended attributes, in byte order.
func (c *Client) ListXattr(ctx context.Context, ino uint64) ([]string, error) {
	r, err := c.mds.ListXattr(ctx, &mdspb.ListXattrRequest{Ino: ino})
	if err != nil {
		return nil, err
	}
	names := make([]string, len(r.GetNames()))
	for i, n := range r.GetNames() {
		names[i] = string(n)
	}
	return names, nil
}

// RemoveXattr removes the extended attribute name of ino and returns the
// inode's new attributes; errs.ErrNoData if it is not set.
func (c *Client) RemoveXattr(ctx context.Context, ino uint64, name string) (*Attr, error) {
	defer c.dirs.drop(c.dirs.begin(), ino)
	r, err := c.mds.RemoveXattr(c.nsCtx(ctx), &mdspb.RemoveXattrRequest{Ino: ino, Name: []byte(name)})
	return attrOf(r.GetAttr()), err
}
