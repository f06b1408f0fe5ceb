package mds

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// SetLayout sets the layout of a directory, inherited by the files and
// directories created in it from then on (existing ones keep theirs), or of
// an empty regular file (no extents yet), as `lfs setstripe` does. A file
// with data keeps its layout: rewriting it into another is a migration.
func (s *Server) handleSetLayout(ctx context.Context, req *mdspb.SetLayoutRequest) (_ *mdspb.AttrReply, err error) {
	l := req.GetLayout()
	if err := validLayout(l); err != nil {
		return nil, err
	}
	// The client's stripe math has tighter bounds than the MDS's shape
	// check: a layout it cannot read is refused here.
	if err := (layout.Layout{K: int(l.K), M: int(l.M), Unit: int64(l.Unit)}).Validate(); err != nil {
		return nil, err
	}
	cl := s.callerOf(ctx)
	var out *mdspb.AttrReply
	err = s.update(func(t *txn) error {
		n, err := t.inode(req.GetIno())
		if err != nil {
			return err
		}
		// Like chmod: the owner or root (lfs setstripe needs the same).
		if !cl.owns(n.Attr) {
			return fmt.Errorf("set layout: uid %d on inode %d owned by %d: %w", cl.uid, n.Attr.Ino, n.Attr.Uid, errs.ErrNotPermitted)
		}
		switch {
		case isDir(n.Attr.Mode):
		case isReg(n.Attr.Mode):
			empty := true
			err := scan(t.b, mapPrefix(n.Attr.Ino), func(_, _ []byte) (bool, error) {
				empty = false
				return false, nil
			})
			if err != nil {
				return err
			}
			if !empty && !sameShape(n.Attr.Layout, l) {
				return fmt.Errorf("inode %d has data; its layout changes only by migration: %w", n.Attr.Ino, errs.ErrNotEmpty)
			}
		default:
			return fmt.Errorf("inode %d is neither a directory nor a regular file: %w", n.Attr.Ino, errs.ErrInvalid)
		}
		n.Attr.Layout = proto.Clone(l).(*mdspb.Layout)
		n.Attr.CtimeNs = t.now
		t.touch(n)
		out = attrReply(n)
		return nil
	})
	return out, err
}
