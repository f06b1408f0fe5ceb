package mds

import (
	"context"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// MigrateCommit swaps a file's extent map for that of a copy written in
// another layout (mdspb.MigrateCommitRequest says how). The extents move
// by reference: tmp's entries become src's (their refcounts are
// unchanged), src's old entries are dropped (their extents go to GC when
// unreferenced), and tmp's name and inode go.
func (s *Server) handleMigrateCommit(ctx context.Context, req *mdspb.MigrateCommitRequest) (_ *mdspb.AttrReply, err error) {
	if err := validName(req.GetTmpName()); err != nil {
		return nil, err
	}
	if req.GetSrcIno() == req.GetTmpIno() {
		return nil, fmt.Errorf("migrate inode %d onto itself: %w", req.GetSrcIno(), errs.ErrInvalid)
	}
	var out *mdspb.AttrReply
	err = s.commit(ctx, func(t *txn) error {
		src, err := t.regularFile(req.GetSrcIno())
		if err != nil {
			return fmt.Errorf("migrate source: %w", err)
		}
		p, err := t.dir(req.GetTmpParent())
		if err != nil {
			return fmt.Errorf("migrate copy's directory: %w", err)
		}
		ino, _, ok, err := t.dentry(p.Attr.Ino, req.GetTmpName())
		if err != nil {
			return err
		}
		if !ok || ino != req.GetTmpIno() {
			return fmt.Errorf("migrate copy %q is not inode %d: %w", req.GetTmpName(), req.GetTmpIno(), errs.ErrNotFound)
		}
		tmp, err := t.regularFile(ino)
		if err != nil {
			return fmt.Errorf("migrate copy: %w", err)
		}
		a := src.Attr
		if a.Size != req.GetExpectSize() || a.MtimeNs != req.GetExpectMtimeNs() || a.CtimeNs != req.GetExpectCtimeNs() {
			return fmt.Errorf("migrate inode %d: it changed while it was copied (size %d mtime %d ctime %d, copied at %d %d %d): %w",
				a.Ino, a.Size, a.MtimeNs, a.CtimeNs, req.GetExpectSize(), req.GetExpectMtimeNs(), req.GetExpectCtimeNs(), errs.ErrStale)
		}
		if tmp.Attr.Size != a.Size {
			return fmt.Errorf("migrate inode %d: the copy has %d bytes, the file %d: %w", a.Ino, tmp.Attr.Size, a.Size, errs.ErrInvalid)
		}
		refs, err := t.mapRange(tmp.Attr.Ino, 0, math.MaxUint64)
		if err != nil {
			return err
		}
		if err := t.truncateMap(a.Ino, 0); err != nil {
			return err
		}
		for _, r := range refs {
			if err := t.putRef(a.Ino, r); err != nil {
				return err
			}
		}
		if err := t.truncateMap(tmp.Attr.Ino, 0); err != nil {
			return err
		}
		a.Layout = proto.Clone(tmp.Attr.Layout).(*mdspb.Layout)
		a.CtimeNs = t.now
		t.touch(src)
		tmp.Attr.Size = 0
		if err := t.delDentry(p.Attr.Ino, req.GetTmpName()); err != nil {
			return err
		}
		if err := t.dropLink(tmp); err != nil {
			return err
		}
		t.dirChanged(p)
		out = attrReply(src)
		return nil
	})
	return out, err
}
