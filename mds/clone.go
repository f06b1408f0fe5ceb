package mds

import (
	"context"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Clones share extents between files: CloneExtents copies extent-map
// entries, never data. An entry names any byte range of an extent
// (ExtentRef.extent_off, length), so a clone needs no alignment: a range
// that starts or ends inside an extent becomes an entry naming that part
// of it. Each copied entry counts one more reference to its extent (the
// "r" key), exactly as an entry written by CommitExtents does, so the
// extent is queued for GC only when the last entry naming it, in any file,
// is punched, truncated or unlinked away. The price of sub-extent entries
// is space, not correctness: an extent stays whole while any part of it is
// referenced.

// maxCloneRanges bounds the ranges of one CloneExtents call (one batch).
const maxCloneRanges = 1 << 16

// CloneExtents makes ranges of file src part of file dst in one
// transaction (mdspb.CloneExtentsRequest says how).
func (s *Server) handleCloneExtents(ctx context.Context, req *mdspb.CloneExtentsRequest) (_ *mdspb.CloneExtentsReply, err error) {
	ranges := req.GetRanges()
	if len(ranges) == 0 || len(ranges) > maxCloneRanges {
		return nil, fmt.Errorf("clone of %d ranges (1..%d): %w", len(ranges), maxCloneRanges, errs.ErrInvalid)
	}
	cl := s.callerOf(ctx)
	out := &mdspb.CloneExtentsReply{}
	err = s.update(func(t *txn) error {
		src, err := t.regularFile(req.GetSrcIno())
		if err != nil {
			return fmt.Errorf("clone source: %w", err)
		}
		dst, err := t.regularFile(req.GetDstIno())
		if err != nil {
			return fmt.Errorf("clone destination: %w", err)
		}
		// Read access to the source and write access to the
		// destination, by mode or as owner (the rules of the
		// capabilities for reading and writing their chunks).
		if !cl.mayData(src.Attr, mayRead) {
			return cl.check(src.Attr, mayRead, "clone source")
		}
		if !cl.mayData(dst.Attr, mayWrite) {
			return cl.check(dst.Attr, mayWrite, "clone destination")
		}
		// Read every source range first: with src == dst, a range written
		// earlier in this call must not change what a later one copies.
		type piece struct {
			dstOff, length uint64
			refs           []*mdspb.ExtentRef // already shifted to dst offsets
		}
		pieces := make([]piece, 0, len(ranges))
		for i, r := range ranges {
			length := r.GetLength()
			if length == 0 {
				if r.GetSrcOff() >= src.Attr.Size {
					return fmt.Errorf("clone range %d: offset %d at or past the end of source inode %d (size %d): %w",
						i, r.GetSrcOff(), src.Attr.Ino, src.Attr.Size, errs.ErrInvalid)
				}
				length = src.Attr.Size - r.GetSrcOff()
			}
			if err := validCloneRange(i, r.GetSrcOff(), r.GetDstOff(), length, src.Attr.Size); err != nil {
				return err
			}
			refs, err := t.mapRange(src.Attr.Ino, r.GetSrcOff(), r.GetSrcOff()+length)
			if err != nil {
				return err
			}
			for _, ref := range refs {
				ref.FileOff = ref.FileOff - r.GetSrcOff() + r.GetDstOff()
				out.SharedBytes += ref.Length
			}
			pieces = append(pieces, piece{dstOff: r.GetDstOff(), length: length, refs: refs})
		}
		end := dst.Attr.Size
		for _, p := range pieces {
			if err := t.punch(dst.Attr.Ino, p.dstOff, p.dstOff+p.length); err != nil {
				return err
			}
			for _, ref := range p.refs {
				if err := t.putRef(dst.Attr.Ino, ref); err != nil {
					return err
				}
				out.Entries++
			}
			end = max(end, p.dstOff+p.length)
		}
		dst.Attr.Size = end
		t.dataChanged(dst, req.GetMtimeNs())
		out.Attr = proto.Clone(dst.Attr).(*mdspb.Attr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// validCloneRange checks one range of a clone: within the source file and
// within the largest file.
func validCloneRange(i int, srcOff, dstOff, length, srcSize uint64) error {
	switch {
	case srcOff > maxFileSize || length > maxFileSize-srcOff:
		return fmt.Errorf("clone range %d: source %d+%d too large: %w", i, srcOff, length, errs.ErrInvalid)
	case dstOff > maxFileSize || length > maxFileSize-dstOff:
		return fmt.Errorf("clone range %d: destination %d+%d too large: %w", i, dstOff, length, errs.ErrInvalid)
	case srcOff+length > srcSize:
		return fmt.Errorf("clone range %d: source %d+%d past its size %d: %w", i, srcOff, length, srcSize, errs.ErrInvalid)
	}
	return nil
}

// mapRange returns the extent-map entries of ino that cover [a, b),
// trimmed to it: new entries (copies) with file offsets unchanged, reading
// through the batch, so it sees this transaction's writes.
func (t *txn) mapRange(ino, a, b uint64) ([]*mdspb.ExtentRef, error) {
	if a >= b {
		return nil, nil
	}
	var out []*mdspb.ExtentRef
	add := func(k, v []byte) error {
		r, err := readRef(k, v)
		if err != nil {
			return err
		}
		s, e := r.FileOff, r.FileOff+r.Length
		if e <= a || s >= b {
			return nil
		}
		cs, ce := max(s, a), min(e, b)
		out = append(out, &mdspb.ExtentRef{
			FileOff:   cs,
			Length:    ce - cs,
			ExtentOff: r.ExtentOff + (cs - s),
			Extent:    r.Extent,
		})
		return nil
	}
	// At most one entry starts before a and may reach into the range.
	if a > 0 {
		it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: mapPrefix(ino), UpperBound: mapKey(ino, a)})
		if err != nil {
			return nil, err
		}
		if it.Last() {
			var v []byte
			if v, err = it.ValueAndErr(); err == nil {
				err = add(it.Key(), v)
			}
		}
		if err == nil {
			err = it.Error()
		}
		if cerr := it.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	upper := prefixEnd(mapPrefix(ino))
	if b != math.MaxUint64 {
		upper = mapKey(ino, b)
	}
	err := scanRange(t.b, mapKey(ino, a), upper, func(k, v []byte) (bool, error) {
		return true, add(k, v)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
