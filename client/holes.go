package client

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Holes, zeroed ranges and instant copies, all on the extent map: a hole
// is a file range no map entry covers (it reads as zeros), and a copy
// between files of one cluster shares the source's immutable extents
// (mds/clone.go) instead of moving bytes.

// Linux fallocate(2) mode bits (linux/falloc.h).
const (
	FallocKeepSize  = 0x01
	FallocPunchHole = 0x02
	FallocZeroRange = 0x10
)

// Fallocate punches a hole (FallocPunchHole|FallocKeepSize) or zeroes a
// range (FallocZeroRange, with or without FallocKeepSize) of the file: the
// range leaves the extent map and reads as zeros; ZERO_RANGE without
// KEEP_SIZE also grows the file to off+length. Writes buffered before the
// call are committed first, so the hole is not filled by them later.
func (f *File) Fallocate(ctx context.Context, mode uint32, off, length int64) error {
	if off < 0 || length <= 0 {
		return fmt.Errorf("fallocate of %d+%d: %w", off, length, errs.ErrInvalid)
	}
	if off > MaxFileSize-length {
		return fmt.Errorf("fallocate of %d+%d: %w", off, length, errs.ErrTooLarge)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.flushLocked(); err != nil {
		return err
	}
	r, err := f.c.mds.Fallocate(ctx, &mdspb.FallocateRequest{Ino: f.ino, Mode: mode, Offset: uint64(off), Length: uint64(length)})
	if err != nil {
		return fmt.Errorf("fallocate inode %d: %w", f.ino, err)
	}
	f.ext = f.ext.punch(uint64(off), uint64(off+length))
	f.size = max(f.size, int64(r.GetAttr().GetSize()))
	return nil
}

// SeekHole answers lseek's SEEK_DATA (hole false) and SEEK_HOLE (hole true)
// from off over the file as this client sees it: the committed extent map
// and the writes not yet committed are data, every other byte below the
// size a hole, and the end of the file counts as a hole. An offset at or
// past the end is io.EOF (ENXIO for lseek), as is SEEK_DATA with no data
// after off.
func (f *File) SeekHole(off int64, hole bool) (int64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if off < 0 {
		return 0, fmt.Errorf("seek to %d: %w", off, errs.ErrInvalid)
	}
	if off >= f.size {
		return 0, io.EOF
	}
	// The data ranges at or after off, merged.
	type span struct{ s, e int64 }
	var data []span
	for _, r := range f.ext.overlapping(uint64(off), uint64(f.size)) {
		data = append(data, span{int64(r.GetFileOff()), int64(refEnd(r))})
	}
	for _, u := range f.inflight {
		data = append(data, span{u.off, u.off + int64(len(u.data))})
	}
	if len(f.dirty) > 0 {
		data = append(data, span{f.dirtyOff, f.dirtyOff + int64(len(f.dirty))})
	}
	if !hole {
		// The first data at or after off.
		first := f.size
		for _, d := range data {
			if d.e > off {
				first = min(first, max(d.s, off))
			}
		}
		if first >= f.size {
			return 0, io.EOF
		}
		return first, nil
	}
	// The first byte at or after off that no data range covers.
	slices.SortFunc(data, func(a, b span) int { return cmp.Compare(a.s, b.s) })
	pos := off
	for _, d := range data {
		if d.s > pos {
			break
		}
		pos = max(pos, d.e)
	}
	return min(pos, f.size), nil
}

// CopyRange makes length bytes of src at srcOff part of dst at dstOff
// without copying them (copy_file_range(2) between files of one cluster):
// dst's map names src's extents, which are immutable, so later writes to
// either file never show in the other. It is clamped to src's end and
// returns the bytes copied (0 at or past src's end). Both files' buffered
// writes are committed first. src and dst may be the same File.
func (c *Client) CopyRange(ctx context.Context, src *File, srcOff int64, dst *File, dstOff, length int64) (int64, error) {
	if srcOff < 0 || dstOff < 0 || length < 0 {
		return 0, fmt.Errorf("copy of %d bytes from %d to %d: %w", length, srcOff, dstOff, errs.ErrInvalid)
	}
	if dstOff > MaxFileSize-length {
		return 0, fmt.Errorf("copy of %d bytes to %d: %w", length, dstOff, errs.ErrTooLarge)
	}
	if src != dst {
		src.mu.Lock()
		err := src.flushLocked()
		src.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	dst.mu.Lock()
	defer dst.mu.Unlock()
	if err := dst.flushLocked(); err != nil {
		return 0, err
	}
	var size int64
	if src == dst {
		size = dst.size // dst.mu is held: Size would deadlock
	} else {
		size = src.Size()
	}
	if srcOff >= size || length == 0 {
		return 0, nil
	}
	length = min(length, size-srcOff)
	if err := c.CloneRanges(ctx, src.ino, dst.ino, []CloneRange{{SrcOff: srcOff, DstOff: dstOff, Length: length}}); err != nil {
		return 0, err
	}
	// The new entries come with read capabilities for dst.
	r, err := c.mds.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: dst.ino})
	if err != nil {
		return 0, fmt.Errorf("copy inode %d to %d: reload the map: %w", src.ino, dst.ino, err)
	}
	dst.ext = extentMap(r.GetExtents())
	dst.size = max(dst.size, int64(r.GetAttr().GetSize()))
	return length, nil
}

// CloneRange is one range of CloneRanges: Length bytes of the source at
// SrcOff become the destination's bytes at DstOff.
type CloneRange struct{ SrcOff, DstOff, Length int64 }

// CloneRanges makes ranges of file srcIno part of file dstIno without
// copying them, in one MDS transaction, as CopyRange does for one range
// between open Files; unlike CopyRange it neither commits buffered
// writes nor clamps the ranges to the source's size. The checkpoint
// store shares a base step's shards this way.
func (c *Client) CloneRanges(ctx context.Context, srcIno, dstIno uint64, ranges []CloneRange) error {
	rs := make([]*mdspb.CloneRange, len(ranges))
	for i, r := range ranges {
		if r.SrcOff < 0 || r.DstOff < 0 || r.Length < 0 {
			return fmt.Errorf("clone of %d bytes from %d to %d: %w", r.Length, r.SrcOff, r.DstOff, errs.ErrInvalid)
		}
		rs[i] = &mdspb.CloneRange{SrcOff: uint64(r.SrcOff), DstOff: uint64(r.DstOff), Length: uint64(r.Length)}
	}
	if _, err := c.mds.CloneExtents(ctx, &mdspb.CloneExtentsRequest{SrcIno: srcIno, DstIno: dstIno, Ranges: rs}); err != nil {
		return fmt.Errorf("copy inode %d to %d: %w", srcIno, dstIno, err)
	}
	return nil
}
