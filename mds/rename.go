package mds

import (
	"context"
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// isAncestor reports whether directory anc is dir itself or one of its
// ancestors, walking the parent keys up to the root.
func (t *txn) isAncestor(anc, dir uint64) (bool, error) {
	for i := 0; ; i++ {
		if dir == anc {
			return true, nil
		}
		if dir == rootIno {
			return false, nil
		}
		if i > 1<<20 {
			return false, fmt.Errorf("mds: parent chain of %d does not reach the root: %w", dir, errs.ErrCorrupt)
		}
		v, err := getValue(t.b, parentKey(dir))
		if err != nil {
			return false, fmt.Errorf("mds: parent of directory %d: %w", dir, err)
		}
		if dir, err = decodeU64(v); err != nil {
			return false, err
		}
	}
}

// moveDir records that directory d moved from parent from to parent to.
func (t *txn) moveDir(d, from, to *mdspb.Inode) error {
	if from.Attr.Ino == to.Attr.Ino {
		return nil
	}
	if from.Attr.Nlink > 2 {
		from.Attr.Nlink--
	}
	to.Attr.Nlink++
	t.touch(from)
	t.touch(to)
	return t.b.Set(parentKey(d.Attr.Ino), encodeU64(to.Attr.Ino), nil)
}

const renameAll = uint32(mdspb.RenameFlags_RENAME_NOREPLACE | mdspb.RenameFlags_RENAME_EXCHANGE)

// Rename moves old_parent/old_name to new_parent/new_name atomically, with
// POSIX semantics, RENAME_NOREPLACE and RENAME_EXCHANGE.
func (s *Server) handleRename(ctx context.Context, req *mdspb.RenameRequest) (_ *mdspb.RenameReply, err error) {
	if err := validName(req.GetOldName()); err != nil {
		return nil, err
	}
	if err := validName(req.GetNewName()); err != nil {
		return nil, err
	}
	flags := req.GetFlags()
	if flags&^renameAll != 0 || flags == renameAll {
		return nil, fmt.Errorf("rename flags %#x: %w", flags, errs.ErrInvalid)
	}
	exchange := flags&uint32(mdspb.RenameFlags_RENAME_EXCHANGE) != 0
	noReplace := flags&uint32(mdspb.RenameFlags_RENAME_NOREPLACE) != 0
	out := &mdspb.RenameReply{}
	err = s.commitIn(ctx, req.GetOldParent(), func(t *txn, cl caller, op *mdspb.Inode) error {
		np, err := t.dir(req.GetNewParent())
		if err != nil {
			return err
		}
		if err := cl.check(op.Attr, mayWrite|mayExec, "rename"); err != nil {
			return err
		}
		if err := cl.check(np.Attr, mayWrite|mayExec, "rename"); err != nil {
			return err
		}
		oldName, newName := req.GetOldName(), req.GetNewName()
		srcIno, srcMode, ok, err := t.dentry(op.Attr.Ino, oldName)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("rename %q: %w", oldName, errs.ErrNotFound)
		}
		dstIno, dstMode, dstOK, err := t.dentry(np.Attr.Ino, newName)
		if err != nil {
			return err
		}
		if exchange && !dstOK {
			return fmt.Errorf("rename exchange %q: %w", newName, errs.ErrNotFound)
		}
		if dstOK && noReplace {
			return fmt.Errorf("rename %q: %w", newName, errs.ErrExists)
		}
		if dstOK && dstIno == srcIno {
			return nil // same inode (or same entry): nothing to do
		}
		// Both inodes' attributes change (ctime, nlink): their leases go.
		victim := uint64(0)
		if dstOK {
			victim = dstIno
		}
		if err := s.touchContent(ctx, srcIno, victim); err != nil {
			return err
		}
		src, err := t.inode(srcIno)
		if err != nil {
			return err
		}
		if err := cl.checkRename(t, op, np, src, dstIno, dstOK); err != nil {
			return err
		}
		// A directory may not move into its own subtree.
		if isDir(srcMode) {
			if in, err := t.isAncestor(srcIno, np.Attr.Ino); err != nil {
				return err
			} else if in {
				return fmt.Errorf("rename directory %d into its own subtree: %w", srcIno, errs.ErrInvalid)
			}
		}
		if exchange {
			dst, err := t.inode(dstIno)
			if err != nil {
				return err
			}
			if isDir(dstMode) {
				if in, err := t.isAncestor(dstIno, op.Attr.Ino); err != nil {
					return err
				} else if in {
					return fmt.Errorf("rename exchange directory %d into its own subtree: %w", dstIno, errs.ErrInvalid)
				}
			}
			if err := t.renameQuota(src, op, np); err != nil {
				return err
			}
			if err := t.renameQuota(dst, np, op); err != nil {
				return err
			}
			if err := t.setDentry(op.Attr.Ino, oldName, dstIno, dstMode); err != nil {
				return err
			}
			if err := t.setDentry(np.Attr.Ino, newName, srcIno, srcMode); err != nil {
				return err
			}
			if isDir(srcMode) {
				if err := t.moveDir(src, op, np); err != nil {
					return err
				}
			}
			if isDir(dstMode) {
				if err := t.moveDir(dst, np, op); err != nil {
					return err
				}
			}
			src.Attr.CtimeNs, dst.Attr.CtimeNs = t.now, t.now
			t.touch(src)
			t.touch(dst)
			t.dirChanged(op)
			t.dirChanged(np)
			out.OldParent, out.NewParent = cloneAttr(op), cloneAttr(np)
			return nil
		}
		if dstOK {
			dst, err := t.inode(dstIno)
			if err != nil {
				return err
			}
			switch {
			case isDir(srcMode) && !isDir(dstMode):
				return fmt.Errorf("rename directory over %q: %w", newName, errs.ErrNotDir)
			case !isDir(srcMode) && isDir(dstMode):
				return fmt.Errorf("rename over directory %q: %w", newName, errs.ErrIsDir)
			case isDir(dstMode):
				if err := t.removeDir(np, dst); err != nil {
					return err
				}
			default:
				if err := t.dropLink(dst); err != nil {
					return err
				}
			}
		}
		if err := t.renameQuota(src, op, np); err != nil {
			return err
		}
		if err := t.delDentry(op.Attr.Ino, oldName); err != nil {
			return err
		}
		if err := t.setDentry(np.Attr.Ino, newName, srcIno, srcMode); err != nil {
			return err
		}
		if isDir(srcMode) {
			if err := t.moveDir(src, op, np); err != nil {
				return err
			}
		}
		src.Attr.CtimeNs = t.now
		t.touch(src)
		t.dirChanged(op)
		t.dirChanged(np)
		out.OldParent, out.NewParent = cloneAttr(op), cloneAttr(np)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
