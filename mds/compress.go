package mds

import (
	"fmt"

	"github.com/shoalfs/shoal/internal/compress"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// validCompression checks a layout's compression attribute (nil: none).
func validCompression(c *mdspb.Compression) error {
	if c == nil {
		return nil
	}
	switch {
	case c.Codec != mdspb.Codec_CODEC_NONE && c.Codec != mdspb.Codec_CODEC_S2 && c.Codec != mdspb.Codec_CODEC_ZSTD:
		return fmt.Errorf("layout compression codec %d: %w", c.Codec, errs.ErrInvalid)
	case c.Level < 0 || c.Level > 22:
		return fmt.Errorf("layout compression level %d (zstd: 1..22): %w", c.Level, errs.ErrInvalid)
	case c.MinSavingPct > 99:
		return fmt.Errorf("layout compression minimum saving %d%%: %w", c.MinSavingPct, errs.ErrInvalid)
	case c.ElemSize != 0 && c.ElemSize != 1 && c.ElemSize != 2 && c.ElemSize != 4 && c.ElemSize != 8:
		return fmt.Errorf("layout compression element size %d (0, 1, 2, 4 or 8): %w", c.ElemSize, errs.ErrInvalid)
	}
	return nil
}

// logicalLen is the number of file bytes extent e holds: its stored
// length, or its logical length when it is compressed.
func logicalLen(e *mdspb.Extent) uint64 {
	if l := e.GetLogicalLength(); l != 0 {
		return l
	}
	return e.GetLength()
}

// validCompressedExtent checks the compression fields of an extent a
// client commits: a raw extent has none, a compressed one an index that
// agrees with its stored and logical lengths (the MDS never decodes the
// data, but it refuses an index no reader could use).
func validCompressedExtent(e *mdspb.Extent) error {
	if e.GetLogicalLength() == 0 {
		if len(e.GetCompressIndex()) != 0 {
			return fmt.Errorf("extent %d: a block index without a logical length: %w", e.GetId(), errs.ErrInvalid)
		}
		return nil
	}
	if _, err := compress.ParseIndex(e.GetCompressIndex(), int64(e.GetLength()), int64(e.GetLogicalLength())); err != nil {
		return fmt.Errorf("extent %d: %v: %w", e.GetId(), err, errs.ErrInvalid)
	}
	return nil
}

// sameShape reports whether two layouts differ at most in their
// compression attribute: a file with data may change only that (its
// extents each say how they are stored).
func sameShape(a, b *mdspb.Layout) bool {
	return a.GetK() == b.GetK() && a.GetM() == b.GetM() && a.GetUnit() == b.GetUnit()
}
