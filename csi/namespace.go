package csi

import (
	"context"
	"errors"
	"path"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
)

// Namespace is what the controller needs of the file system: paths are
// from its root. NewNamespace serves it with a client; tests may use
// another.
type Namespace interface {
	// IsDir reports whether path is a directory; errs.ErrNotFound when
	// nothing is there.
	IsDir(ctx context.Context, path string) (bool, error)
	// MkdirAll makes path and its missing parents.
	MkdirAll(ctx context.Context, path string, mode uint32) error
	// Mkdir makes the directory path; errs.ErrExists when a name is
	// there.
	Mkdir(ctx context.Context, path string, mode uint32) error
	// RenameNoReplace renames oldPath to newPath, failing with
	// errs.ErrExists when newPath exists.
	RenameNoReplace(ctx context.Context, oldPath, newPath string) error
	// RemoveAll removes path and everything under it; a path already
	// gone is not an error.
	RemoveAll(ctx context.Context, path string) error
	// GetXattr returns an extended attribute; errs.ErrNoData when it is
	// not set.
	GetXattr(ctx context.Context, path, name string) ([]byte, error)
	// SetXattr sets an extended attribute.
	SetXattr(ctx context.Context, path, name string, value []byte) error
	// StatFs returns the cluster's capacity.
	StatFs(ctx context.Context) (total, free uint64, err error)
	// SetQuota sets the byte limit of the directory quota of path (0:
	// none on bytes); errs.ErrNotSupported when the cluster has no
	// quotas.
	SetQuota(ctx context.Context, path string, limitBytes uint64) error
	// RemoveQuota removes the quota of path; none is not an error.
	RemoveQuota(ctx context.Context, path string) error
}

// NewNamespace returns the Namespace of a client's cluster. The caller
// keeps closing c.
func NewNamespace(c *client.Client) Namespace { return clientNS{c} }

type clientNS struct{ c *client.Client }

func (n clientNS) IsDir(ctx context.Context, p string) (bool, error) {
	a, err := n.c.Stat(ctx, p)
	if err != nil {
		return false, err
	}
	return client.IsDir(a), nil
}

func (n clientNS) MkdirAll(ctx context.Context, p string, mode uint32) error {
	return n.c.MkdirAll(ctx, p, mode)
}

func (n clientNS) Mkdir(ctx context.Context, p string, mode uint32) error {
	return n.c.Mkdir(ctx, p, mode)
}

func (n clientNS) RenameNoReplace(ctx context.Context, oldPath, newPath string) error {
	op, err := n.c.Stat(ctx, path.Dir(oldPath))
	if err != nil {
		return err
	}
	np, err := n.c.Stat(ctx, path.Dir(newPath))
	if err != nil {
		return err
	}
	return n.c.RenameIn(ctx, op.Ino, path.Base(oldPath), np.Ino, path.Base(newPath), client.RenameNoReplace)
}

func (n clientNS) RemoveAll(ctx context.Context, p string) error {
	parent, err := n.c.Stat(ctx, path.Dir(p))
	if errors.Is(err, errs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return n.removeTree(ctx, parent.Ino, path.Base(p))
}

// removeTree removes name from directory parent with everything under
// it; names already gone are not errors (as client/ckpt's removeTree).
func (n clientNS) removeTree(ctx context.Context, parent uint64, name string) error {
	a, err := n.c.Lookup(ctx, parent, name)
	if err != nil {
		return ignoreNotFound(err)
	}
	if !client.IsDir(a) {
		return ignoreNotFound(n.c.UnlinkIn(ctx, parent, name))
	}
	es, err := n.c.ReadDirIno(ctx, a.Ino)
	if err != nil {
		return ignoreNotFound(err)
	}
	for _, e := range es {
		if err := n.removeTree(ctx, a.Ino, e.Name); err != nil {
			return err
		}
	}
	return ignoreNotFound(n.c.RmdirIn(ctx, parent, name))
}

func ignoreNotFound(err error) error {
	if errors.Is(err, errs.ErrNotFound) {
		return nil
	}
	return err
}

func (n clientNS) GetXattr(ctx context.Context, p, name string) ([]byte, error) {
	a, err := n.c.Stat(ctx, p)
	if err != nil {
		return nil, err
	}
	return n.c.GetXattr(ctx, a.Ino, name)
}

func (n clientNS) SetXattr(ctx context.Context, p, name string, value []byte) error {
	a, err := n.c.Stat(ctx, p)
	if err != nil {
		return err
	}
	_, err = n.c.SetXattr(ctx, a.Ino, name, value, 0)
	return err
}

func (n clientNS) StatFs(ctx context.Context) (uint64, uint64, error) {
	s, err := n.c.StatFs(ctx)
	if err != nil {
		return 0, 0, err
	}
	return s.TotalBytes, s.FreeBytes, nil
}
