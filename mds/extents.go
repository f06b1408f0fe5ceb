package mds

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// maxFileSize bounds file offsets so that off+len never overflows.
const maxFileSize = math.MaxInt64

// readRef decodes one extent-map value.
func readRef(k, v []byte) (*mdspb.ExtentRef, error) {
	_, off, err := decodeMapKey(k)
	if err != nil {
		return nil, err
	}
	r := &mdspb.ExtentRef{}
	if err := proto.Unmarshal(v, r); err != nil {
		return nil, fmt.Errorf("mds: decode extent map entry %x: %v: %w", k, err, errs.ErrCorrupt)
	}
	if r.Extent == nil || r.FileOff != off {
		return nil, fmt.Errorf("mds: inconsistent extent map entry %x: %w", k, errs.ErrCorrupt)
	}
	return r, nil
}

// putRef writes one extent-map entry and counts a reference to its extent.
func (t *txn) putRef(ino uint64, r *mdspb.ExtentRef) error {
	v, err := proto.Marshal(r)
	if err != nil {
		return err
	}
	t.addRef(r.Extent, +1)
	return t.b.Set(mapKey(ino, r.FileOff), v, nil)
}

// punch removes the file range [a, b) from ino's extent map: entries inside
// it go, entries crossing an end are trimmed (an entry spanning the whole
// range splits in two). b == math.MaxUint64 means "to the end". Refcounts
// follow; extents left unreferenced are queued for GC at flush.
func (t *txn) punch(ino, a, b uint64) error {
	if a >= b {
		return nil
	}
	upper := prefixEnd(mapPrefix(ino))
	if b != math.MaxUint64 {
		upper = mapKey(ino, b)
	}
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: mapPrefix(ino), UpperBound: upper})
	if err != nil {
		return err
	}
	var hits []*mdspb.ExtentRef
	collect := func() error {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		r, err := readRef(it.Key(), v)
		if err != nil {
			return err
		}
		if r.FileOff+r.Length > a {
			hits = append(hits, r)
		}
		return nil
	}
	// At most one entry starts before a and may reach into the range.
	if it.SeekLT(mapKey(ino, a)) {
		err = collect()
	}
	for ok := it.SeekGE(mapKey(ino, a)); ok && err == nil; ok = it.Next() {
		err = collect()
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for _, r := range hits {
		s, e := r.FileOff, r.FileOff+r.Length
		if err := t.b.Delete(mapKey(ino, s), nil); err != nil {
			return err
		}
		t.addRef(r.Extent, -1)
		if s < a {
			left := &mdspb.ExtentRef{FileOff: s, Length: a - s, ExtentOff: r.ExtentOff, Extent: r.Extent}
			if err := t.putRef(ino, left); err != nil {
				return err
			}
		}
		if e > b {
			right := &mdspb.ExtentRef{FileOff: b, Length: e - b, ExtentOff: r.ExtentOff + (b - s), Extent: r.Extent}
			if err := t.putRef(ino, right); err != nil {
				return err
			}
		}
	}
	return nil
}

// truncateMap drops every byte at or beyond size from ino's extent map.
func (t *txn) truncateMap(ino, size uint64) error { return t.punch(ino, size, math.MaxUint64) }

// GetExtents returns a file's attributes and its whole extent map.
func (s *Server) handleGetExtents(ctx context.Context, req *mdspb.GetExtentsRequest) (_ *mdspb.GetExtentsReply, err error) {
	cl := s.callerOf(ctx)
	out := &mdspb.GetExtentsReply{}
	err = s.snapshot(func(r reader) error {
		var err error
		out.Attr, out.Extents, err = readExtents(r, req.GetIno())
		return err
	})
	if err != nil {
		return nil, err
	}
	if out.Caps, err = s.refCaps(cl, out.Attr, out.Extents); err != nil {
		return nil, err
	}
	return out, nil
}

// readExtents returns the attributes and the extent map of file ino.
func readExtents(r reader, ino uint64) (*mdspb.Attr, []*mdspb.ExtentRef, error) {
	n, err := readInode(r, ino)
	if err != nil {
		return nil, nil, err
	}
	if isDir(n.Attr.Mode) {
		return nil, nil, fmt.Errorf("extents of inode %d: %w", n.Attr.Ino, errs.ErrIsDir)
	}
	var refs []*mdspb.ExtentRef
	err = scan(r, mapPrefix(n.Attr.Ino), func(k, v []byte) (bool, error) {
		ref, err := readRef(k, v)
		if err != nil {
			return false, err
		}
		refs = append(refs, ref)
		return true, nil
	})
	return n.Attr, refs, err
}

// regularFile returns inode ino, which must be a regular file.
func (t *txn) regularFile(ino uint64) (*mdspb.Inode, error) {
	n, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	switch {
	case isDir(n.Attr.Mode):
		return nil, fmt.Errorf("inode %d: %w", ino, errs.ErrIsDir)
	case !isReg(n.Attr.Mode):
		return nil, fmt.Errorf("inode %d (mode %o) is not a regular file: %w", ino, n.Attr.Mode, errs.ErrInvalid)
	}
	return n, nil
}

// dataChanged sets a file's mtime to mtimeNs (0: now) and its ctime to
// now after a change of its data.
func (t *txn) dataChanged(n *mdspb.Inode, mtimeNs int64) {
	n.Attr.MtimeNs = mtimeNs
	if n.Attr.MtimeNs == 0 {
		n.Attr.MtimeNs = t.now
	}
	n.Attr.CtimeNs = t.now
	t.touch(n)
}

// fileData returns regular file ino for cl to read or write its data
// (want: mayRead or mayWrite), by mode or as its owner: the rule of the
// capabilities for its chunks; op names the call in a refusal.
func (t *txn) fileData(cl caller, ino uint64, want uint32, op string) (*mdspb.Inode, error) {
	n, err := t.regularFile(ino)
	if err != nil {
		return nil, err
	}
	if !cl.mayData(n.Attr, want) {
		return nil, cl.check(n.Attr, want, op)
	}
	return n, nil
}

// AllocExtents hands out count new extents for file ino, each with the
// file's layout (with k = 1 for extents of at most Placement.MirrorBelow
// bytes) and a placement on distinct live OSTs not in
// exclude_osts that have room for its chunks: k+m of them, or as few as
// Placement.minChunks when no more can take a chunk (the other parity
// slots are 0, unplaced: a narrow extent, widened later by the MDS).
// Each is recorded as pending until committed; one never committed is
// collected after GCGrace. A refusal says why, here and in the log.
func (s *Server) handleAllocExtents(ctx context.Context, req *mdspb.AllocExtentsRequest) (_ *mdspb.AllocExtentsReply, err error) {
	count := req.GetCount()
	if count == 0 || count > maxAllocCount {
		return nil, fmt.Errorf("alloc of %d extents (1..%d): %w", count, maxAllocCount, errs.ErrInvalid)
	}
	cl := s.callerOf(ctx)
	out := &mdspb.AllocExtentsReply{}
	var placedBytes map[uint32]uint64
	narrow := 0
	err = s.update(func(t *txn) error {
		out.Extents, placedBytes, narrow = nil, map[uint32]uint64{}, 0 // the function may run again
		n, err := t.fileData(cl, req.GetIno(), mayWrite, "alloc extents")
		if err != nil {
			return err
		}
		layout := n.Attr.Layout
		if layout == nil {
			layout = s.o.DefaultLayout
		}
		layout = s.o.Placement.extentLayout(layout, req.GetLength())
		cands, excluded := s.candidates(req.GetExcludeOsts())
		pr := placeRequest{layout: layout, chunk: chunkBytes(layout, req.GetLength()),
			minChunks: s.o.Placement.minChunks(layout), fullRatio: s.o.Placement.FullRatio, excluded: excluded}
		out.MinChunks = uint32(pr.minChunks)
		for range count {
			pr.rot = s.mu.rot
			osts, err := place(cands, pr)
			if err != nil {
				return err
			}
			s.mu.rot++
			// The next extent of this call sees the space this one takes.
			for i := range cands {
				if contains(osts, cands[i].id) {
					cands[i].free -= min(cands[i].free, pr.chunk)
					placedBytes[cands[i].id] += pr.chunk
				}
			}
			if placed(osts) < len(osts) {
				narrow++
			}
			id, err := t.nextID(counterNextExtent)
			if err != nil {
				return err
			}
			e := &mdspb.Extent{Id: id, Layout: proto.Clone(layout).(*mdspb.Layout), Osts: osts}
			v, err := proto.Marshal(e)
			if err != nil {
				return err
			}
			if err := t.b.Set(pendingKey(id), encodePrefixed(uint64(t.now), v), nil); err != nil {
				return err
			}
			out.Extents = append(out.Extents, e)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, errs.ErrUnavailable) || errors.Is(err, errs.ErrNoSpace) {
			s.logRefusal(ctx, req.GetIno(), err)
		}
		return nil, err
	}
	s.notePlaced(placedBytes)
	s.m.extentsAllocated.Add(float64(len(out.Extents)))
	if narrow > 0 {
		s.logNarrow(ctx, req.GetIno(), out.Extents[len(out.Extents)-1])
	}
	ids := make([]uint64, len(out.Extents))
	for i, e := range out.Extents {
		ids[i] = e.GetId()
	}
	if out.Caps, err = s.extentCaps(ids, capability.Write); err != nil {
		return nil, err
	}
	return out, nil
}

// narrowedFrom reports whether placement got is placement alloc with
// some slots set to 0 (chunks the client could not write), and returns
// those slots.
func narrowedFrom(alloc, got []uint32) (dropped []int, ok bool) {
	if len(alloc) != len(got) {
		return nil, false
	}
	for j := range alloc {
		switch got[j] {
		case alloc[j]:
		case 0:
			dropped = append(dropped, j)
		default:
			return nil, false
		}
	}
	return dropped, true
}

// validRef checks the shape of one committed extent-map entry.
func validRef(r *mdspb.ExtentRef) error {
	e := r.GetExtent()
	switch {
	case r == nil || e == nil:
		return fmt.Errorf("extent ref without extent: %w", errs.ErrInvalid)
	case e.Id == 0:
		return fmt.Errorf("extent id 0: %w", errs.ErrInvalid)
	case r.Length == 0:
		return fmt.Errorf("extent %d: empty ref: %w", e.Id, errs.ErrInvalid)
	case r.FileOff > maxFileSize || r.Length > maxFileSize-r.FileOff:
		return fmt.Errorf("extent %d: file range %d+%d too large: %w", e.Id, r.FileOff, r.Length, errs.ErrInvalid)
	case r.ExtentOff > logicalLen(e) || r.Length > logicalLen(e)-r.ExtentOff:
		return fmt.Errorf("extent %d: range %d+%d beyond extent length %d: %w", e.Id, r.ExtentOff, r.Length, logicalLen(e), errs.ErrInvalid)
	case validCompressedExtent(e) != nil:
		return validCompressedExtent(e)
	case validLayout(e.Layout) != nil:
		return fmt.Errorf("extent %d: %w", e.Id, validLayout(e.Layout))
	case int(e.Layout.K+e.Layout.M) != len(e.Osts):
		return fmt.Errorf("extent %d: layout %d+%d with %d OSTs: %w", e.Id, e.Layout.K, e.Layout.M, len(e.Osts), errs.ErrInvalid)
	}
	return nil
}

// CommitExtents adds written extents to a file's map, in order (later
// wins), and extends its size. Each extent must be a pending allocation or
// an extent already referenced somewhere; an allocation that expired (or
// never existed) is ErrStale: the client allocates and writes again.
func (s *Server) handleCommitExtents(ctx context.Context, req *mdspb.CommitExtentsRequest) (_ *mdspb.AttrReply, err error) {
	for _, r := range req.GetExtents() {
		if err := validRef(r); err != nil {
			return nil, err
		}
	}
	cl := s.callerOf(ctx)
	var out *mdspb.AttrReply
	err = s.commit(ctx, func(t *txn) error {
		// The rule of AllocExtents: write permission, or the owner (who
		// may write through a descriptor opened before a chmod, or a
		// file it created 0444). The client commits with the identity
		// of the file's opener, whom the kernel checked at open.
		n, err := t.fileData(cl, req.GetIno(), mayWrite, "commit extents")
		if err != nil {
			return err
		}
		if len(req.GetExtents()) == 0 {
			out = attrReply(n)
			return nil
		}
		if !cl.root() {
			if err := t.checkOwnExtents(n.Attr.Ino, req.GetExtents()); err != nil {
				return err
			}
		}
		end := n.Attr.Size
		for _, r := range req.GetExtents() {
			e, err := t.claimExtent(r.Extent)
			if err != nil {
				return err
			}
			if err := t.punch(n.Attr.Ino, r.FileOff, r.FileOff+r.Length); err != nil {
				return err
			}
			ref := &mdspb.ExtentRef{FileOff: r.FileOff, Length: r.Length, ExtentOff: r.ExtentOff, Extent: e}
			if err := t.putRef(n.Attr.Ino, ref); err != nil {
				return err
			}
			end = max(end, r.FileOff+r.Length)
		}
		n.Attr.Size = end
		t.dataChanged(n, req.GetMtimeNs())
		out = attrReply(n)
		return t.setReply(out)
	})
	if err != nil {
		return nil, err
	}
	s.m.extentsCommitted.Add(float64(len(req.GetExtents())))
	return out, nil
}

// checkOwnExtents refuses, for a caller other than root, to commit into
// file ino an extent that is neither a pending allocation nor already in
// ino's map: the extent of another file would give the caller read
// capabilities for data it may not read (CloneExtents checks that).
func (t *txn) checkOwnExtents(ino uint64, refs []*mdspb.ExtentRef) error {
	foreign := map[uint64]bool{}
	for _, r := range refs {
		id := r.GetExtent().GetId()
		if _, err := getValue(t.b, pendingKey(id)); err == nil {
			continue
		} else if !errors.Is(err, errs.ErrNotFound) {
			return err
		}
		// An extent neither pending nor referenced is stale, which
		// claimExtent reports (the client writes it again).
		if _, _, ok, err := t.refCount(id); err != nil {
			return err
		} else if ok {
			foreign[id] = true
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	err := scan(t.b, mapPrefix(ino), func(k, v []byte) (bool, error) {
		r, err := readRef(k, v)
		if err != nil {
			return false, err
		}
		delete(foreign, r.Extent.GetId())
		return len(foreign) > 0, nil
	})
	if err != nil {
		return err
	}
	for id := range foreign {
		return fmt.Errorf("commit extents: extent %d is not a pending allocation nor part of inode %d (clone with CloneExtents): %w", id, ino, errs.ErrPermission)
	}
	return nil
}

// claimExtent checks that e (as sent by a client) is a pending allocation,
// which it then consumes, or an extent already referenced, and returns the
// definition to store.
func (t *txn) claimExtent(e *mdspb.Extent) (*mdspb.Extent, error) {
	v, err := getValue(t.b, pendingKey(e.Id))
	switch {
	case err == nil:
		_, body, err := decodePrefixed(v)
		if err != nil {
			return nil, err
		}
		pend := &mdspb.Extent{}
		if err := proto.Unmarshal(body, pend); err != nil {
			return nil, fmt.Errorf("mds: decode pending extent %d: %v: %w", e.Id, err, errs.ErrCorrupt)
		}
		dropped, ok := narrowedFrom(pend.GetOsts(), e.GetOsts())
		if !ok || !proto.Equal(pend.GetLayout(), e.GetLayout()) {
			return nil, fmt.Errorf("extent %d: layout or placement differs from its allocation: %w", e.Id, errs.ErrInvalid)
		}
		if have, need := placed(e.GetOsts()), t.env.placement.minChunks(e.GetLayout()); have < need {
			return nil, fmt.Errorf("extent %d: %d chunks written, need %d for RS %d+%d: %w",
				e.Id, have, need, e.GetLayout().GetK(), e.GetLayout().GetM(), errs.ErrInvalid)
		}
		if err := t.b.Delete(pendingKey(e.Id), nil); err != nil {
			return nil, err
		}
		// A chunk the client gave up on may yet have landed, whole (the
		// OST writes chunks atomically): delete it after the grace,
		// unless the extent is widened onto that OST again by then.
		for _, j := range dropped {
			k := retireKey(t.now+int64(t.env.retireGrace), e.Id, uint32(j))
			if err := t.b.Set(k, u32(nil, pend.Osts[j]), nil); err != nil {
				return nil, err
			}
		}
		if placed(e.GetOsts()) < len(e.GetOsts()) {
			if err := t.markNarrow(e.Id); err != nil {
				return nil, err
			}
		}
		return proto.Clone(e).(*mdspb.Extent), nil
	case !errors.Is(err, errs.ErrNotFound):
		return nil, err
	}
	_, stored, ok, err := t.refCount(e.Id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("extent %d was not allocated or its allocation expired: %w", e.Id, errs.ErrStale)
	}
	// The placement may have changed since the client read it (moves,
	// widening): the stored one is kept, so only the rest must agree.
	if !proto.Equal(stored.GetLayout(), e.GetLayout()) || stored.GetLength() != e.GetLength() || stored.GetLogicalLength() != e.GetLogicalLength() {
		return nil, fmt.Errorf("extent %d: differs from the committed extent: %w", e.Id, errs.ErrInvalid)
	}
	return stored, nil
}
