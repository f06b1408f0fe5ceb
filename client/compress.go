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

// compressionOptions converts a layout's compression attribute (nil:
// none) to the options of internal/compress.
func compressionOptions(c *mdspb.Compression) compress.Options {
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
	o := compressionOptions(l.GetCompression())
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

// Large reads of a compressed extent fetch their blocks in runs: the
// stored bytes of consecutive blocks, up to runBytes, in one readExact
// (one chunk read per cell piece), then decoded block by block; up to
// runsInFlight runs of one read are fetched and decoded at once, so that
// the fetch of one run overlaps the decoding of another. Fetching block
// by block cost one or two chunk reads of well under a cell per block.
// A run is at least minRunBytes (unless the read is smaller): each run
// costs its own chunk requests, and cutting a 4 MiB tensor read into
// four runs of under a cell each cost a checkpoint restore of F32
// tensors 0.13 cpu-s per 256 MiB, where runs of 2 MiB cost 0.05-0.07
// (BenchmarkRestore; the default cell is 1 MiB). Restores and large reads
// have other reads in flight beside them to overlap with.
const (
	runBytes     = 4 << 20
	minRunBytes  = 2 << 20
	runsInFlight = 4
)

// run is a run of blocks [b0, b1) of one read, fetched together.
type run struct{ b0, b1 int }

// runsOf cuts blocks [b0, b1) of x into runs: up to runsInFlight of them
// for a pipeline, each at least minRunBytes and at most runBytes stored
// (or one block). cached reports blocks the caller takes from elsewhere:
// they end a run and are left out.
func runsOf(x *compress.Index, b0, b1 int, cached func(b int) bool) []run {
	_, total := x.StoredRange(b0, b1)
	limit := min(int64(runBytes), max(total/runsInFlight, minRunBytes))
	var out []run
	cur := run{b0, b0}
	var n int64
	flush := func() {
		if cur.b1 > cur.b0 {
			out = append(out, cur)
		}
	}
	for b := b0; b < b1; b++ {
		if cached(b) {
			flush()
			cur, n = run{b + 1, b + 1}, 0
			continue
		}
		l := x.Blocks[b].Len
		if cur.b1 > cur.b0 && n+l > limit {
			flush()
			cur, n = run{b, b}, 0
		}
		cur.b1, n = b+1, n+l
	}
	flush()
	return out
}

// readCompressed reads logical bytes [eoff, eoff+len(dst)) of compressed
// extent ext: its blocks are fetched in runs (runsOf), up to runsInFlight
// at once, and decoded as each run arrives, whole blocks straight into
// dst. With the file's row cache (rc; nil for reads without a File),
// blocks that the cache holds or is fetching (read-ahead after a small
// read, or another read) are copied from there instead of being fetched
// and decoded twice, and the blocks this read needs only part of (the
// first and last, which the neighbouring reads of a sequential reader
// need the rest of) are decoded into the cache for them.
func (c *Client) readCompressed(ctx context.Context, ext *mdspb.Extent, eoff int64, dst []byte, rc *rowCache) error {
	x, err := indexOf(ext)
	if err != nil {
		return err
	}
	b0, b1, err := x.BlockRange(eoff, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("extent %d: %w", ext.GetId(), err)
	}
	end := eoff + int64(len(dst))
	// part returns the part of dst that block b fills and where it lies
	// in the block.
	part := func(b int) (d []byte, s, e int64, whole bool) {
		bs := int64(b) * x.BlockSize
		blen := x.BlockLen(b)
		s, e = max(bs, eoff), min(bs+blen, end)
		return dst[s-eoff : e-eoff], s - bs, e - bs, s == bs && e == bs+blen
	}
	var cached, owned map[int]*rowEntry
	if rc != nil {
		cached, owned = map[int]*rowEntry{}, map[int]*rowEntry{}
		for b := b0; b < b1; b++ {
			_, _, _, whole := part(b)
			if e, mine := rc.lookupOrClaim(c, ext, int64(b), !whole); mine {
				owned[b] = e
			} else if e != nil {
				cached[b] = e
			}
		}
	}
	runs := runsOf(x, b0, b1, func(b int) bool { return cached[b] != nil })
	errsByRun := make([]error, len(runs)+1)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runsInFlight)
	for i, r := range runs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errsByRun[i] = c.readRun(ctx, ext, x, r, part, rc, owned)
		})
	}
	// Cached blocks: wait for each and copy, while the runs proceed. A
	// cached fetch that failed is read again here.
	var cachedErr error
	for b, ce := range cached {
		data, err := rc.wait(ctx, ce)
		d, s, e, whole := part(b)
		switch {
		case err == nil && int64(len(data)) == x.BlockLen(b):
			copy(d, data[s:e])
		case ctx.Err() != nil:
			err = ctx.Err()
		case whole:
			err = c.readBlock(ctx, ext, x, b, d)
		default:
			tmp := c.bufs.Get(int(x.BlockLen(b)))
			if err = c.readBlock(ctx, ext, x, b, tmp); err == nil {
				copy(d, tmp[s:e])
			}
			c.bufs.Put(tmp)
		}
		if err != nil && cachedErr == nil {
			cachedErr = err
		}
		rc.release(ce)
	}
	wg.Wait()
	errsByRun[len(runs)] = cachedErr
	for _, err := range errsByRun {
		if err != nil {
			return err
		}
	}
	return nil
}

// readRun fetches the stored bytes of blocks [r.b0, r.b1) of ext in one
// read and decodes them into their parts of the read (part). Blocks in
// owned are decoded into pool buffers and published to the row cache rc
// (every one of them, with the error when the run fails).
func (c *Client) readRun(ctx context.Context, ext *mdspb.Extent, x *compress.Index, r run,
	part func(b int) (d []byte, s, e int64, whole bool), rc *rowCache, owned map[int]*rowEntry) (err error) {
	next := r.b0 // the first block not yet done
	defer func() {
		for b := next; b < r.b1; b++ {
			if e := owned[b]; e != nil {
				rc.publish(ext, int64(b), e, nil, fmt.Errorf("extent %d block %d: the read that fetched it failed: %w", ext.GetId(), b, cmpOr(err, errs.ErrUnavailable)))
			}
		}
	}()
	base, n := x.StoredRange(r.b0, r.b1)
	src := c.bufs.Get(int(n))
	defer c.bufs.Put(src)
	if err := c.readExact(ctx, ext, base, src); err != nil {
		return err
	}
	var tmp []byte
	defer func() {
		if tmp != nil {
			c.bufs.Put(tmp)
		}
	}()
	for ; next < r.b1; next++ {
		b := next
		if err := ctx.Err(); err != nil {
			return err
		}
		k := x.Blocks[b]
		in := src[k.Off-base : k.Off-base+k.Len]
		d, s, e, whole := part(b)
		if oe := owned[b]; oe != nil {
			out := c.bufs.Get(int(x.BlockLen(b)))
			err := x.DecodeBlock(out, in, b)
			if err == nil {
				copy(d, out[s:e])
			} else {
				c.bufs.Put(out)
				out = nil
				c.metrics.chunkErrors.WithLabelValues("decode").Inc()
				err = fmt.Errorf("extent %d: %w", ext.GetId(), err)
			}
			rc.publish(ext, int64(b), oe, out, err)
			if err != nil {
				next++
				return err
			}
			continue
		}
		out := d
		if !whole {
			if tmp == nil {
				tmp = c.bufs.Get(int(x.BlockSize))
			}
			out = tmp[:x.BlockLen(b)]
		}
		if err := x.DecodeBlock(out, in, b); err != nil {
			c.metrics.chunkErrors.WithLabelValues("decode").Inc()
			return fmt.Errorf("extent %d: %w", ext.GetId(), err)
		}
		if !whole {
			copy(d, out[s:e])
		}
	}
	return nil
}

func cmpOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
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

// readCompressed is File.ReadAt's read of a compressed extent (dst: the
// part of a read of n bytes in all that lies in ext): small sequential
// reads go through the row cache and read ahead, random and large reads
// fetch and decode their blocks themselves. The size that decides is the
// whole read's, so that the part of a large read on either side of an
// extent boundary is large too.
func (f *File) readCompressed(ctx context.Context, ext *mdspb.Extent, eoff int64, dst []byte, seq bool, n int) error {
	big := n >= bigRead
	f.comp.bigReads.Store(big)
	if seq && !big {
		return f.readCompressedCached(ctx, ext, eoff, dst)
	}
	return f.c.readCompressed(ctx, ext, eoff, dst, &f.rows)
}

// lookupOrClaim returns the entry of block (row) b of ext with a
// reference for the caller (give it back with release), or nil when the
// cache neither holds nor fetches it. With claim, an absent block gets an
// entry in flight that the caller owns instead (mine): it must publish
// it, and others wait for that.
func (rc *rowCache) lookupOrClaim(c *Client, ext *mdspb.Extent, b int64, claim bool) (e *rowEntry, mine bool) {
	k := rowKey{ext.GetId(), b}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.mu.tick++
	if e, ok := rc.mu.m[k]; ok {
		e.used = rc.mu.tick
		e.refs++
		return e, false
	}
	if !claim {
		return nil, false
	}
	e = &rowEntry{done: make(chan struct{}), used: rc.mu.tick, refs: 2, pool: c.bufs} // the cache's and the owner's
	rc.mu.m[k] = e
	rc.evictLocked()
	return e, true
}

// publish completes an entry that lookupOrClaim gave its caller to own:
// data (a buffer of the client's pool, nil on error) or err. It drops the
// owner's reference.
func (rc *rowCache) publish(ext *mdspb.Extent, b int64, e *rowEntry, data []byte, err error) {
	k := rowKey{ext.GetId(), b}
	rc.mu.Lock()
	e.data, e.err = data, err
	if err != nil && rc.mu.m[k] == e {
		delete(rc.mu.m, k)
		rc.unrefLocked(e)
	}
	rc.unrefLocked(e)
	rc.mu.Unlock()
	close(e.done)
}

// wait waits for e's fetch and returns its data (valid until release).
func (rc *rowCache) wait(ctx context.Context, e *rowEntry) ([]byte, error) {
	select {
	case <-e.done:
		return e.data, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// release gives back a reference taken by lookup.
func (rc *rowCache) release(e *rowEntry) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.unrefLocked(e)
}

// prefetchCompressed starts fetching the blocks of compressed extent ext
// that hold logical bytes [eoff, eoff+n), up to half the row cache in
// flight: read-ahead is called once per extent of the range ahead, and
// blocks fetched beyond what the cache keeps would be evicted unread,
// fetched and decoded for nothing.
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
	b1 = min(b1, b0+max(1, f.c.opts.ReadCacheRows/2)-f.rows.inFlight())
	for b := b0; b < b1; b++ {
		f.rows.prefetch(f.ctx, f.c, ext, int64(b))
	}
}

// inFlight is the number of entries of the cache still being fetched.
func (rc *rowCache) inFlight() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, e := range rc.mu.m {
		select {
		case <-e.done:
		default:
			n++
		}
	}
	return n
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
