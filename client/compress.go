package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/shoalfs/shoal/internal/compress"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Extent compression (docs/compression.md).
//
// Writes: an upload compresses its extent before erasure coding when the
// file's layout names a codec (or the File was given its own policy with
// SetCompression) and that saves at least the threshold of the bytes the
// extent costs on the OSTs; otherwise it stores the bytes raw. The extent
// record then says which: a compressed extent has a logical_length and a
// block index, and its length (the erasure-coding geometry) counts the
// stored bytes.
//
// Reads: a compressed extent is read block by block. A block's stored
// bytes are fetched with the same chunk reads as any extent range
// (readExact: one read per cell piece, rebuilt from parity on any
// failure), then decoded; the blocks of one read are fetched and decoded
// in parallel, so decoding overlaps fetching. Sequential readers go
// through the file's row cache, whose entries for a compressed extent are
// decoded blocks (readRowPooled hands them over), and read ahead blocks.
// Raw extents never come here.

// compressed reports whether ext's stored bytes are compressed.
func compressed(ext *mdspb.Extent) bool { return ext.GetLogicalLength() != 0 }

// extentLogicalLen is the number of file bytes ext holds.
func extentLogicalLen(ext *mdspb.Extent) int64 {
	if compressed(ext) {
		return int64(ext.GetLogicalLength())
	}
	return int64(ext.GetLength())
}

// CompressionOptions converts a layout's compression attribute (nil:
// none) to the options of internal/compress.
func CompressionOptions(c *mdspb.Compression) compress.Options {
	if c == nil {
		return compress.Options{}
	}
	return compress.Options{Codec: compress.Codec(c.GetCodec()), Level: int(c.GetLevel()),
		MinSavingPct: int(c.GetMinSavingPct()), ElemSize: int(c.GetElemSize())}
}

// SetCompression sets how the extents this File writes from now on are
// compressed, overriding its layout's attribute (nil: back to the
// layout's). Reads do not depend on it: every extent says how it is
// stored. The checkpoint writer uses it to give each tensor's element
// width (Options.Planes).
func (f *File) SetCompression(o *compress.Options) error {
	if o != nil {
		if err := o.Validate(); err != nil {
			return err
		}
		cp := *o
		o = &cp
	}
	f.comp.Store(o)
	return nil
}

// compressPolicy is a File's own compression policy (SetCompression),
// and what its reads of compressed extents need to remember.
type compressPolicy struct {
	p atomic.Pointer[compress.Options]
	// bigReads is set while the file's reads of compressed extents are
	// large (they fetch their blocks themselves): read-ahead of blocks
	// would only fetch them twice.
	bigReads atomic.Bool
}

func (c *compressPolicy) Load() *compress.Options   { return c.p.Load() }
func (c *compressPolicy) Store(o *compress.Options) { c.p.Store(o) }

// packed is an extent's bytes as they are stored.
type packed struct {
	stored  []byte // what the chunks hold
	logical int64
	index   []byte // nil: stored raw
	pooled  []byte // a pool buffer to give back once the chunks are written
}

// pack compresses data (file bytes at fileOff) for an extent of layout l
// when the policy (pol, else the layout's attribute) asks for it and it
// pays; else it keeps data as it is.
func (c *Client) pack(l *mdspb.Layout, pol *compress.Options, fileOff int64, data []byte) *packed {
	p := &packed{stored: data, logical: int64(len(data))}
	o := CompressionOptions(l.GetCompression())
	if pol != nil {
		o = *pol
	}
	if o.Codec == compress.None || len(data) == 0 {
		return p
	}
	lo, err := layoutOf(l)
	if err != nil {
		return p
	}
	o.Base = fileOff
	// The threshold is checked here, on what the OSTs would hold (a
	// partial last row is padded to 4 KiB cells), not in Encode.
	minSaving := o.MinSavingPct
	if minSaving == 0 {
		minSaving = compress.DefaultMinSavingPct
	}
	buf := c.bufs.Get(len(data))
	r, ok, err := compress.Encode(buf[:0], data, o)
	if err != nil || !ok {
		c.bufs.Put(buf)
		c.metrics.compressRaw(len(data))
		return p
	}
	rawCost := lo.Geom(int64(len(data))).ChunkLen()
	cost := lo.Geom(int64(len(r.Stored))).ChunkLen()
	if minSaving < 0 {
		minSaving = 0
	}
	if cost*100 > rawCost*int64(100-minSaving) || cost >= rawCost {
		c.bufs.Put(buf)
		c.metrics.compressRaw(len(data))
		return p
	}
	p.stored, p.index, p.pooled = r.Stored, r.Index.Marshal(), buf
	c.metrics.compressed(len(data), len(r.Stored))
	return p
}

// mark records in ext how its bytes are stored.
func (p *packed) mark(ext *mdspb.Extent) {
	ext.Length = uint64(len(p.stored))
	ext.LogicalLength, ext.CompressIndex = 0, nil
	if p.index != nil {
		ext.LogicalLength, ext.CompressIndex = uint64(p.logical), p.index
	}
}

func (p *packed) release(c *Client) {
	if p != nil && p.pooled != nil {
		c.bufs.Put(p.pooled)
		p.pooled = nil
	}
}

// indexOf parses the block index of compressed extent ext.
func indexOf(ext *mdspb.Extent) (*compress.Index, error) {
	x, err := compress.ParseIndex(ext.GetCompressIndex(), int64(ext.GetLength()), int64(ext.GetLogicalLength()))
	if err != nil {
		return nil, fmt.Errorf("extent %d: %w", ext.GetId(), err)
	}
	return x, nil
}

// readBlock fetches and decodes block b of compressed extent ext into dst
// (the block's logical length).
func (c *Client) readBlock(ctx context.Context, ext *mdspb.Extent, x *compress.Index, b int, dst []byte) error {
	off, n := x.StoredRange(b, b+1)
	src := c.bufs.Get(int(n))
	defer c.bufs.Put(src)
	if err := c.readExact(ctx, ext, off, src); err != nil {
		return err
	}
	if err := x.DecodeBlock(dst, src, b); err != nil {
		c.metrics.chunkErrors.WithLabelValues("decode").Inc()
		return fmt.Errorf("extent %d: %w", ext.GetId(), err)
	}
	return nil
}

// readBlockPooled reads block b of compressed extent ext into a pool
// buffer, which the caller gives back: the row cache's fetch for
// compressed extents, whose "rows" are blocks.
func (c *Client) readBlockPooled(ctx context.Context, ext *mdspb.Extent, b int64) ([]byte, error) {
	x, err := indexOf(ext)
	if err != nil {
		return nil, err
	}
	if b < 0 || b >= int64(len(x.Blocks)) {
		return nil, fmt.Errorf("extent %d: block %d of %d: %w", ext.GetId(), b, len(x.Blocks), errs.ErrInvalid)
	}
	out := c.bufs.Get(int(x.BlockLen(int(b))))
	if err := c.readBlock(ctx, ext, x, int(b), out); err != nil {
		c.bufs.Put(out)
		return nil, err
	}
	return out, nil
}

// blocksInFlight bounds the blocks one read of a compressed extent
// fetches and decodes at once.
const blocksInFlight = 8

// readCompressed reads logical bytes [eoff, eoff+len(dst)) of compressed
// extent ext: every block it touches is fetched and decoded in its own
// goroutine (up to blocksInFlight at once), whole blocks straight into
// dst, so that the decoding of one block overlaps the fetches of others.
func (c *Client) readCompressed(ctx context.Context, ext *mdspb.Extent, eoff int64, dst []byte) error {
	x, err := indexOf(ext)
	if err != nil {
		return err
	}
	b0, b1, err := x.BlockRange(eoff, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("extent %d: %w", ext.GetId(), err)
	}
	end := eoff + int64(len(dst))
	errsByBlock := make([]error, b1-b0)
	var wg sync.WaitGroup
	sem := make(chan struct{}, blocksInFlight)
	for b := b0; b < b1; b++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			bs := int64(b) * x.BlockSize
			blen := x.BlockLen(b)
			s, e := max(bs, eoff), min(bs+blen, end)
			if s == bs && e == bs+blen {
				errsByBlock[b-b0] = c.readBlock(ctx, ext, x, b, dst[s-eoff:e-eoff])
				return
			}
			tmp := c.bufs.Get(int(blen))
			defer c.bufs.Put(tmp)
			if err := c.readBlock(ctx, ext, x, b, tmp); err != nil {
				errsByBlock[b-b0] = err
				return
			}
			copy(dst[s-eoff:e-eoff], tmp[s-bs:e-bs])
		})
	}
	wg.Wait()
	for _, err := range errsByBlock {
		if err != nil {
			return err
		}
	}
	return nil
}

// readCompressedCached reads logical bytes of compressed extent ext
// through the file's row cache (entries are decoded blocks): the fetches
// of every block of the read start first, then the copies follow them in
// order.
func (f *File) readCompressedCached(ctx context.Context, ext *mdspb.Extent, eoff int64, dst []byte) error {
	x, err := indexOf(ext)
	if err != nil {
		return err
	}
	b0, b1, err := x.BlockRange(eoff, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("extent %d: %w", ext.GetId(), err)
	}
	// Keep up to half the cache's worth of blocks in flight ahead of the
	// copy, so that fetches and decodes overlap without evicting blocks
	// before they are copied.
	window := max(1, f.c.opts.ReadCacheRows/2)
	next := b0 + 1
	end := eoff + int64(len(dst))
	for b := b0; b < b1; b++ {
		for ; next < b1 && next <= b+window; next++ {
			f.rows.prefetch(context.WithoutCancel(ctx), f.c, ext, int64(next))
		}
		data, release, err := f.rows.get(ctx, f.c, ext, int64(b))
		if err != nil {
			return err
		}
		bs := int64(b) * x.BlockSize
		s, e := max(bs, eoff), min(bs+int64(len(data)), end)
		copy(dst[s-eoff:e-eoff], data[s-bs:e-bs])
		release()
	}
	return nil
}

// bigRead is the read size from which a read of a compressed extent
// fetches its blocks itself rather than through the row cache: a large
// read has blocks enough in flight of its own, and several of them at
// once (a checkpoint restore has 4 per file) would overflow the cache.
const bigRead = 4 * compress.DefaultBlockSize

// readCompressed is File.ReadAt's read of a compressed extent: small
// sequential reads go through the row cache and read ahead, random and
// large reads fetch and decode their blocks themselves.
func (f *File) readCompressed(ctx context.Context, ext *mdspb.Extent, eoff int64, dst []byte, seq bool) error {
	big := len(dst) >= bigRead
	f.comp.bigReads.Store(big)
	if seq && !big {
		return f.readCompressedCached(ctx, ext, eoff, dst)
	}
	return f.c.readCompressed(ctx, ext, eoff, dst)
}

// prefetchCompressed starts fetching the blocks of compressed extent ext
// that hold logical bytes [eoff, eoff+n), at most half the row cache.
func (f *File) prefetchCompressed(ext *mdspb.Extent, eoff, n int64) {
	if f.comp.bigReads.Load() {
		return
	}
	x, err := indexOf(ext)
	if err != nil || n <= 0 {
		return
	}
	b0, b1, err := x.BlockRange(eoff, n)
	if err != nil {
		return
	}
	b1 = min(b1, b0+max(1, f.c.opts.ReadCacheRows/2))
	for b := b0; b < b1; b++ {
		f.rows.prefetch(f.ctx, f.c, ext, int64(b))
	}
}

// StoredBytes returns the number of file bytes of [off, off+n) that lie
// in extents and the bytes they take in the extents as stored (for a
// compressed extent, each block in proportion to the part of it in the
// range): the compression ratio of a range, from the committed extent map
// only. Holes count in neither.
func (f *File) StoredBytes(off, n int64) (logical int64, stored float64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, r := range f.ext.overlapping(uint64(off), uint64(off+n)) {
		s := max(off, int64(r.GetFileOff()))
		e := min(off+n, int64(refEnd(r)))
		logical += e - s
		ext := r.GetExtent()
		if !compressed(ext) {
			stored += float64(e - s)
			continue
		}
		x, err := indexOf(ext)
		if err != nil {
			stored += float64(e - s)
			continue
		}
		stored += x.StoredOf(int64(r.GetExtentOff())+s-int64(r.GetFileOff()), e-s)
	}
	return logical, stored
}

// sameCompression reports whether two compression attributes are the
// same (nil and CODEC_NONE alike: none).
func sameCompression(a, b *mdspb.Compression) bool {
	if a.GetCodec() == mdspb.Codec_CODEC_NONE || b.GetCodec() == mdspb.Codec_CODEC_NONE {
		return a.GetCodec() == b.GetCodec()
	}
	return a.GetCodec() == b.GetCodec() && a.GetLevel() == b.GetLevel() && a.GetMinSavingPct() == b.GetMinSavingPct() && a.GetElemSize() == b.GetElemSize()
}
