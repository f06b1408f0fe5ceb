package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/internal/erasure"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// writeAttempts is how many placements a write tries before it fails.
const writeAttempts = 3

// uploadExtent stores data as a new extent of file ino: it allocates an
// extent id and placement, encodes the rows, and writes the k+m chunks in
// parallel, each fsynced by its OST before it answers. On a failed chunk it
// retries the whole extent on a new placement that avoids the failed OSTs.
// It returns the reference to commit; nothing is committed here.
func (c *Client) uploadExtent(ctx context.Context, ino uint64, fileOff int64, data []byte) (*mdspb.ExtentRef, error) {
	var exclude []uint32
	var lastErr error
	for attempt := 0; attempt < writeAttempts; attempt++ {
		r, err := c.mds.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: ino, Count: 1, ExcludeOsts: exclude})
		if err != nil {
			if lastErr != nil {
				return nil, fmt.Errorf("write extent at %d: %w (after: %v)", fileOff, err, lastErr)
			}
			return nil, fmt.Errorf("write extent at %d: %w", fileOff, err)
		}
		if len(r.GetExtents()) != 1 {
			return nil, fmt.Errorf("write extent: MDS allocated %d extents: %w", len(r.GetExtents()), errs.ErrInvalid)
		}
		ext := r.GetExtents()[0]
		ext.Length = uint64(len(data))
		failed, err := c.writeChunks(ctx, ext, data)
		if err == nil {
			return &mdspb.ExtentRef{FileOff: uint64(fileOff), Length: uint64(len(data)), Extent: ext}, nil
		}
		if ctx.Err() != nil || len(failed) == 0 {
			return nil, err
		}
		lastErr = err
		c.log.Warn("extent write failed; retrying on another placement", "ino", ino, "extent", ext.GetId(), "failed_osts", failed, "err", err)
		exclude = append(exclude, failed...)
	}
	return nil, fmt.Errorf("write extent at %d: %d attempts failed: %w", fileOff, writeAttempts, lastErr)
}

// encodeChunks lays data out as the k+m chunks of an extent.
func encodeChunks(lo layout.Layout, data []byte) ([][]byte, error) {
	coder, err := erasure.New(lo)
	if err != nil {
		return nil, err
	}
	g := lo.Geom(int64(len(data)))
	chunkLen := g.ChunkLen()
	chunks := make([][]byte, lo.Shards())
	for j := range chunks {
		chunks[j] = make([]byte, chunkLen)
	}
	cells := make([][]byte, lo.Shards())
	for r := int64(0); r < g.Rows(); r++ {
		row := g.Row(r)
		for j := range cells {
			cells[j] = chunks[j][row.ChunkOff : row.ChunkOff+row.Cell]
		}
		src := data[row.DataOff : row.DataOff+row.DataLen]
		for j := 0; j < lo.K && len(src) > 0; j++ {
			n := copy(cells[j], src)
			src = src[n:]
		}
		if err := coder.Encode(cells); err != nil {
			return nil, err
		}
	}
	return chunks, nil
}

// writeChunks encodes and writes every chunk of ext. It returns the OSTs
// whose write failed.
func (c *Client) writeChunks(ctx context.Context, ext *mdspb.Extent, data []byte) ([]uint32, error) {
	g, err := extentGeom(ext)
	if err != nil {
		return nil, err
	}
	chunks, err := encodeChunks(g.Layout, data)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var failed []uint32
	var firstErr error
	var wg sync.WaitGroup
	for j, ostID := range ext.GetOsts() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.writeChunk(ctx, ostID, &ostpb.ChunkId{Extent: ext.GetId(), Index: uint32(j)}, chunks[j])
			if err != nil {
				c.metrics.chunkErrors.WithLabelValues("write").Inc()
				mu.Lock()
				failed = append(failed, ostID)
				if firstErr == nil {
					firstErr = fmt.Errorf("extent %d chunk %d on OST %d: %w", ext.GetId(), j, ostID, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed, firstErr
}

func (c *Client) writeChunk(ctx context.Context, ostID uint32, id *ostpb.ChunkId, data []byte) error {
	for try := 0; ; try++ {
		o, err := c.ost(ctx, ostID, try > 0)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, c.opts.ChunkTimeout)
		_, err = o.WriteChunk(cctx, &ostpb.WriteChunkRequest{Id: id, Data: data})
		cancel()
		// An unreachable OST may have moved: retry once with a fresh address.
		if err != nil && try == 0 && errors.Is(err, errs.ErrUnavailable) && ctx.Err() == nil {
			continue
		}
		return err
	}
}

// readChunk reads [off, off+n) of chunk j of ext.
func (c *Client) readChunk(ctx context.Context, ext *mdspb.Extent, j int, off, n int64) ([]byte, error) {
	ostID := ext.GetOsts()[j]
	for try := 0; ; try++ {
		o, err := c.ost(ctx, ostID, try > 0)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, c.opts.ChunkTimeout)
		r, err := o.ReadChunk(cctx, &ostpb.ReadChunkRequest{Id: &ostpb.ChunkId{Extent: ext.GetId(), Index: uint32(j)}, Offset: uint64(off), Length: uint64(n)})
		cancel()
		if err != nil && try == 0 && errors.Is(err, errs.ErrUnavailable) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			c.metrics.chunkErrors.WithLabelValues("read").Inc()
			return nil, fmt.Errorf("extent %d chunk %d on OST %d: %w", ext.GetId(), j, ostID, err)
		}
		if int64(len(r.GetData())) != n {
			return nil, fmt.Errorf("extent %d chunk %d on OST %d: short read %d of %d: %w", ext.GetId(), j, ostID, len(r.GetData()), n, errs.ErrCorrupt)
		}
		return r.GetData(), nil
	}
}

// readRows reads rows [r0, r1) of ext and returns their data bytes, in
// extent order. It reads the data chunks first; when any fails it reads the
// others and rebuilds the rows from any k chunks.
func (c *Client) readRows(ctx context.Context, ext *mdspb.Extent, r0, r1 int64) ([]byte, error) {
	g, err := extentGeom(ext)
	if err != nil {
		return nil, err
	}
	lo := g.Layout
	first, last := g.Row(r0), g.Row(r1-1)
	cOff := first.ChunkOff
	cLen := last.ChunkOff + last.Cell - cOff
	chunks := make([][]byte, lo.Shards())
	errsByChunk := make([]error, lo.Shards())

	fetch := func(js []int) {
		var wg sync.WaitGroup
		for _, j := range js {
			wg.Add(1)
			go func() {
				defer wg.Done()
				chunks[j], errsByChunk[j] = c.readChunk(ctx, ext, j, cOff, cLen)
			}()
		}
		wg.Wait()
	}
	data := make([]int, lo.K)
	for j := range data {
		data[j] = j
	}
	fetch(data)
	var bad []int
	for j := 0; j < lo.K; j++ {
		if errsByChunk[j] != nil {
			bad = append(bad, j)
		}
	}
	if len(bad) > 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for _, j := range bad {
			c.log.Warn("chunk read failed; reconstructing", "extent", ext.GetId(), "chunk", j, "ost", ext.GetOsts()[j], "err", errsByChunk[j])
		}
		c.metrics.degradedReads.Inc()
		var parity []int
		for j := lo.K; j < lo.Shards(); j++ {
			parity = append(parity, j)
		}
		fetch(parity)
		present := 0
		for j := range chunks {
			if errsByChunk[j] != nil {
				chunks[j] = nil
			} else {
				present++
			}
		}
		if present < lo.K {
			var all []error
			for _, e := range errsByChunk {
				if e != nil {
					all = append(all, e)
				}
			}
			return nil, fmt.Errorf("extent %d: %d of %d chunks readable, need %d: %w (%w)", ext.GetId(), present, lo.Shards(), lo.K, errs.ErrUnavailable, errors.Join(all...))
		}
	}
	coder, err := erasure.New(lo)
	if err != nil {
		return nil, err
	}
	out := make([]byte, last.DataOff+last.DataLen-first.DataOff)
	cells := make([][]byte, lo.Shards())
	for r := r0; r < r1; r++ {
		row := g.Row(r)
		rel := row.ChunkOff - cOff
		for j := range cells {
			cells[j] = nil
			if chunks[j] != nil {
				cells[j] = chunks[j][rel : rel+row.Cell]
			}
		}
		if len(bad) > 0 {
			if err := coder.ReconstructData(cells); err != nil {
				return nil, fmt.Errorf("extent %d row %d: %w", ext.GetId(), r, err)
			}
		}
		dst := out[row.DataOff-first.DataOff : row.DataOff-first.DataOff+row.DataLen]
		for j := 0; j < lo.K && len(dst) > 0; j++ {
			n := copy(dst, cells[j])
			dst = dst[n:]
		}
	}
	return out, nil
}

// readExact reads extent bytes [off, off+len(buf)) into buf with one chunk
// read per piece; any failure falls back to whole-row reads, which rebuild
// from parity.
func (c *Client) readExact(ctx context.Context, ext *mdspb.Extent, off int64, buf []byte) error {
	g, err := extentGeom(ext)
	if err != nil {
		return err
	}
	pieces, err := g.Pieces(off, int64(len(buf)))
	if err != nil {
		return err
	}
	var eg errgroup.Group
	for _, p := range pieces {
		eg.Go(func() error {
			b, err := c.readChunk(ctx, ext, p.Chunk, p.ChunkOff, p.Len)
			if err != nil {
				return err
			}
			copy(buf[p.BufOff:], b)
			return nil
		})
	}
	if err := eg.Wait(); err == nil || ctx.Err() != nil {
		return err
	}
	r0 := g.RowOf(off).Index
	r1 := g.RowOf(off+int64(len(buf))-1).Index + 1
	rows, err := c.readRows(ctx, ext, r0, r1)
	if err != nil {
		return err
	}
	copy(buf, rows[off-g.Row(r0).DataOff:])
	return nil
}

// extentGeom validates an extent's layout and placement and returns its
// geometry.
func extentGeom(ext *mdspb.Extent) (layout.Geometry, error) {
	lo, err := layoutOf(ext.GetLayout())
	if err != nil {
		return layout.Geometry{}, err
	}
	if len(ext.GetOsts()) != lo.Shards() {
		return layout.Geometry{}, fmt.Errorf("extent %d: placement has %d OSTs for %v: %w", ext.GetId(), len(ext.GetOsts()), lo, errs.ErrInvalid)
	}
	return lo.Geom(int64(ext.GetLength())), nil
}
