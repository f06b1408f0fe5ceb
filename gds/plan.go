package gds

import (
	"fmt"
	"path/filepath"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
)

// Align is the alignment of a direct read: its chunk offset, its length
// and its destination address. Cells are Align-aligned in their chunks
// (internal/layout), so whole cells read into an Align-aligned buffer
// position are direct.
const Align = layout.Align

// maxMerge bounds a span made of several contiguous pieces (layouts with
// k = 1 keep consecutive rows contiguous in one chunk).
const maxMerge = 16 << 20

// span is a piece of a read: a contiguous run of file bytes inside one
// cell, and where it goes in the destination.
type span struct {
	ext      *client.Extent
	extOff   int64 // offset in the extent's data
	n        int64
	dstOff   int64 // offset in the destination buffer
	chunk    int   // data chunk index (< k)
	chunkOff int64 // offset in the chunk
	// local is the chunk file when the chunk is on an OST of this node.
	local string
	// direct: local, and chunkOff, n and the destination address are
	// Align-aligned, so the bytes can go storage -> device as they are.
	direct bool
}

// hole is a destination range that reads as zeros (a hole in the file).
type hole struct{ dstOff, n int64 }

// localFunc returns the directory of OST id when it is on this node.
type localFunc func(id uint32) (dir string, ok bool)

// chunkPath is the data file of chunk index of extent id under an OST
// directory (docs/ost-format.md: chunks/<xx>/<extent16hex>.<index>, xx the
// low byte of the id).
func chunkPath(dir string, id uint64, index int) string {
	return filepath.Join(dir, "chunks", fmt.Sprintf("%02x", id&0xff), fmt.Sprintf("%016x.%d", id, index))
}

// plan cuts the file range [off, off+n) into spans and holes. refs is the
// file's extent map (ordered, non-overlapping); the bytes go to the
// destination at dstOff, whose buffer starts at device address base.
func plan(refs []client.ExtentRef, off, n int64, base uintptr, dstOff int64, local localFunc) ([]span, []hole, error) {
	if off < 0 || n < 0 {
		return nil, nil, fmt.Errorf("gds: read [%d,+%d): %w", off, n, errs.ErrInvalid)
	}
	end := off + n
	var spans []span
	var holes []hole
	pos := off // next file byte not yet planned
	addHole := func(to int64) {
		if to > pos {
			holes = append(holes, hole{dstOff: dstOff + pos - off, n: to - pos})
			pos = to
		}
	}
	for _, r := range refs {
		rs, re := r.FileOff, r.FileOff+r.Length
		if re <= off || rs >= end {
			continue
		}
		s, e := max(off, rs), min(end, re)
		addHole(s)
		ext := r.Extent
		if ext.LogicalLength != 0 {
			// A compressed extent (docs/compression.md): its chunks hold
			// encoded blocks, so its bytes come decoded through the
			// client, never straight from a chunk file. chunk -1 keeps
			// the span apart from chunk pieces; chunkOff counts logical
			// bytes so that pieces of one extent merge.
			eoff := r.ExtentOff + s - rs
			spans = merge(spans, span{ext: ext, extOff: eoff, n: e - s, dstOff: dstOff + s - off, chunk: -1, chunkOff: eoff})
			pos = e
			continue
		}
		g, err := geometry(ext)
		if err != nil {
			return nil, nil, err
		}
		eoff := r.ExtentOff + s - rs
		pieces, err := g.Pieces(eoff, e-s)
		if err != nil {
			return nil, nil, fmt.Errorf("gds: extent %d: %w", ext.ID, err)
		}
		dir, isLocal := "", false
		for _, p := range pieces {
			if local != nil {
				dir, isLocal = local(ext.OSTs[p.Chunk])
			}
			sp := span{ext: ext, extOff: eoff + p.BufOff, n: p.Len, dstOff: dstOff + s - off + p.BufOff, chunk: p.Chunk, chunkOff: p.ChunkOff}
			if isLocal {
				sp.local = chunkPath(dir, ext.ID, p.Chunk)
			}
			spans = appendAligned(spans, sp, base)
		}
		pos = e
	}
	addHole(end)
	return spans, holes, nil
}

// appendAligned appends sp, split so that its Align-aligned middle is
// direct when sp is local and its chunk offset and destination address
// agree modulo Align; the unaligned head and tail go by bounce. It merges
// sp into the previous span when both are contiguous in the same chunk and
// in the destination and take the same path.
func appendAligned(spans []span, sp span, base uintptr) []span {
	if sp.local == "" {
		return merge(spans, sp)
	}
	addr := int64(base%Align) + sp.dstOff
	if (sp.chunkOff-addr)%Align != 0 {
		return merge(spans, sp) // can never line up: bounce
	}
	head := min((Align-sp.chunkOff%Align)%Align, sp.n)
	tail := (sp.chunkOff + sp.n) % Align
	if head+tail >= sp.n {
		return merge(spans, sp)
	}
	cut := func(from, n int64, direct bool) span {
		c := sp
		c.extOff += from
		c.dstOff += from
		c.chunkOff += from
		c.n = n
		c.direct = direct
		return c
	}
	if head > 0 {
		spans = merge(spans, cut(0, head, false))
	}
	spans = merge(spans, cut(head, sp.n-head-tail, true))
	if tail > 0 {
		spans = merge(spans, cut(sp.n-tail, tail, false))
	}
	return spans
}

func merge(spans []span, sp span) []span {
	if k := len(spans); k > 0 {
		p := &spans[k-1]
		if p.ext == sp.ext && p.chunk == sp.chunk && p.local == sp.local && p.direct == sp.direct &&
			p.chunkOff+p.n == sp.chunkOff && p.dstOff+p.n == sp.dstOff && p.extOff+p.n == sp.extOff &&
			p.n+sp.n <= maxMerge {
			p.n += sp.n
			return spans
		}
	}
	return append(spans, sp)
}

// geometry validates an extent's layout and placement.
func geometry(ext *client.Extent) (layout.Geometry, error) {
	l := ext.Layout
	if l == (client.Layout{}) {
		return layout.Geometry{}, fmt.Errorf("gds: extent %d has no layout: %w", ext.ID, errs.ErrCorrupt)
	}
	lo := layout.Layout{K: int(l.K), M: int(l.M), Unit: int64(l.Unit)}
	if err := lo.Validate(); err != nil {
		return layout.Geometry{}, fmt.Errorf("gds: extent %d: %w", ext.ID, err)
	}
	if len(ext.OSTs) != lo.Shards() {
		return layout.Geometry{}, fmt.Errorf("gds: extent %d: placement of %d OSTs for %v: %w", ext.ID, len(ext.OSTs), lo, errs.ErrCorrupt)
	}
	return lo.Geom(ext.Length), nil
}
