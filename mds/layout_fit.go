package mds

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Layouts the cluster cannot hold (issue 18): a layout of k+m cells
// needs k+m distinct OSTs for a full placement, and k + min(MinParity, m)
// for a write to be placed at all (narrow). Two things follow from the
// count of registered OSTs:
//
//   - a first MDS's root layout fits the OSTs that register (fitRoot);
//   - Health names the directories whose layout does not (wideLayouts),
//     which `shoal admin status` reports as HEALTH_WARN.

// standardLayouts are the shapes a root layout falls back to, widest
// first, when the configured default does not fit the OSTs: RS 4+2,
// RS 2+1, 2-way replication, one copy.
var standardLayouts = [][2]uint32{{4, 2}, {2, 1}, {1, 1}, {1, 0}}

// FitLayout is the layout the root of a new file system gets when osts
// OSTs are registered: def when its k+m fit, else the widest standard
// layout no wider than def that fits (RS 2+1 on 3 OSTs, 2-way
// replication on 2, one copy on 1). def's unit and compression are kept.
// osts 0 is def (nothing is known yet).
func FitLayout(def *mdspb.Layout, osts int) *mdspb.Layout { return fitLayout(def, osts) }

func fitLayout(def *mdspb.Layout, osts int) *mdspb.Layout {
	w := int(def.GetK() + def.GetM())
	if osts <= 0 || w <= osts {
		return def
	}
	for _, s := range standardLayouts {
		if int(s[0]+s[1]) <= osts && s[0]+s[1] <= uint32(w) {
			l := proto.Clone(def).(*mdspb.Layout)
			l.K, l.M = s[0], s[1]
			return l
		}
	}
	return def // unreachable: {1, 0} fits any osts >= 1
}

// autoLayout reports whether l is a layout fitRoot could have chosen
// from def: def itself or one of its fallbacks. An administrator's other
// choice is never replaced.
func autoLayout(def, l *mdspb.Layout) bool {
	if l == nil {
		return true
	}
	if l.GetUnit() != def.GetUnit() {
		return false
	}
	for n := 1; n <= int(def.GetK()+def.GetM()); n++ {
		if sameShape(fitLayout(def, n), l) {
			return true
		}
	}
	return false
}

// fitRoot sets the root's layout to fitLayout(def, osts) while the root
// is empty and its layout is one fitRoot could have chosen: a first MDS
// with three OSTs writes RS 2+1 instead of refusing every write of RS
// 4+2, and widens again as more OSTs register, until the first entry is
// made in the root. Called when an OST registers for the first time.
func fitRoot(t *txn, def *mdspb.Layout, osts int) error {
	n, err := t.inode(rootIno)
	if err != nil {
		return err
	}
	if !autoLayout(def, n.Attr.Layout) {
		return nil
	}
	empty := true
	if err := scan(t.b, dentryPrefix(rootIno), func(_, _ []byte) (bool, error) {
		empty = false
		return false, nil
	}); err != nil || !empty {
		return err
	}
	to := fitLayout(def, osts)
	if n.Attr.Layout != nil && sameShape(n.Attr.Layout, to) {
		return nil
	}
	l := proto.Clone(to).(*mdspb.Layout)
	if n.Attr.Layout != nil {
		l.Compression = n.Attr.Layout.Compression
	}
	n.Attr.Layout = l
	t.touch(n)
	return nil
}

// registeredOsts counts the OSTs registered in r, removed ones aside.
func registeredOsts(r reader) (int, error) {
	n := 0
	err := scan(r, []byte{prefixOst}, func(k, _ []byte) (bool, error) {
		id, err := decodeOstKey(k)
		if err != nil {
			return false, err
		}
		v, err := getValue(r, ostStateKey(id))
		switch {
		case errors.Is(err, errs.ErrNotFound):
		case err != nil:
			return false, err
		case len(v) == 4 && binary.BigEndian.Uint32(v) == ostRemoved:
			return true, nil
		}
		n++
		return true, nil
	})
	return n, err
}

// maxWideLayouts bounds the directories one Health call names.
const maxWideLayouts = 1000

// wideLayouts finds the directories whose layout needs more than osts
// OSTs (a directory without a layout has def), and names them.
func wideLayouts(ctx context.Context, r reader, def *mdspb.Layout, p *PlacementOptions, osts int) ([]*mdspb.WideLayout, error) {
	found := map[uint64]*mdspb.WideLayout{}
	err := scan(r, []byte{prefixInode}, func(k, v []byte) (bool, error) {
		ino, err := decodeInodeKey(k)
		if err != nil {
			return false, err
		}
		n := &mdspb.Inode{}
		if err := proto.Unmarshal(v, n); err != nil {
			return false, errCorruptKey("inode", k)
		}
		if !isDir(n.GetAttr().GetMode()) {
			return true, ctx.Err()
		}
		l := n.GetAttr().GetLayout()
		if l == nil {
			l = def
		}
		if int(l.GetK()+l.GetM()) <= osts {
			return true, ctx.Err()
		}
		need := p.minChunks(l)
		found[ino] = &mdspb.WideLayout{Ino: ino, K: l.GetK(), M: l.GetM(), Need: uint32(need), Unplaceable: need > osts}
		return len(found) < maxWideLayouts, ctx.Err()
	})
	if err != nil || len(found) == 0 {
		return nil, err
	}
	inos := make(map[uint64]bool, len(found))
	for ino := range found {
		inos[ino] = true
	}
	paths, err := pathsOf(ctx, r, inos)
	if err != nil {
		return nil, err
	}
	out := make([]*mdspb.WideLayout, 0, len(found))
	for ino, w := range found {
		w.Path = paths[ino]
		out = append(out, w)
	}
	sortWide(out)
	return out, nil
}

// sortWide orders the directories unplaceable first, then by path.
func sortWide(w []*mdspb.WideLayout) {
	slices.SortFunc(w, func(a, b *mdspb.WideLayout) int {
		if a.Unplaceable != b.Unplaceable {
			if a.Unplaceable {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return cmp.Compare(a.Ino, b.Ino)
	})
}
