package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/compress"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// writeAttempts is how many placements a write tries before it fails.
const writeAttempts = 3

// uploadExtent stores data as a new extent of file ino: it allocates an
// extent id and placement, encodes the rows, and writes the placed
// chunks in parallel, each fsynced by its OST before it answers. The MDS
// may place an extent narrow (some parity slots 0) when fewer than k+m
// OSTs can take a chunk. When chunk writes fail, the extent is committed
// without them (their slots set to 0, narrow, for the MDS to widen) if
// only parity chunks failed and at least the MDS's min_chunks were
// written, or, on the last attempt, whichever failed; otherwise the whole
// extent is written again on a new placement that avoids the failed OSTs.
// It returns the reference to commit; nothing is committed here. The
// extent is compressed first when pol (else its layout) says so and that
// pays (compress.go). A write that fails for good is logged with its
// reason ("need 4 OSTs up for RS 4+2, have 3"), which its error carries
// too: ErrNoSpace (ENOSPC) when too few OSTs have room, ErrUnavailable
// (EIO) when too few are up. The first attempt uses the allocation sp
// (spare.go) when it can serve.
func (c *Client) uploadExtent(ctx context.Context, ino uint64, fileOff int64, data []byte, pol *compress.Options, sp *spareAlloc) (_ *mdspb.ExtentRef, err error) {
	var exclude []uint32
	var lastErr error
	var z *packed // the bytes to store: compress.go
	defer func() { z.release(c) }()
	defer func() {
		if err != nil && ctx.Err() == nil {
			c.log.Warn("extent write failed", "ino", ino, "off", fileOff, "len", len(data), "err", err)
		}
	}()
	for attempt := 0; attempt < writeAttempts; attempt++ {
		var r *mdspb.AllocExtentsReply
		if attempt == 0 {
			r = sp.take(ctx, c.metrics)
		}
		if r == nil {
			r, err = c.mds.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: ino, Count: 1, ExcludeOsts: exclude, Length: uint64(len(data))})
		}
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
		if z == nil {
			z = c.pack(ext.GetLayout(), pol, fileOff, data)
		}
		z.mark(ext) // sets ext.Length to the stored length
		failed, err := c.writeChunks(ctx, ext, z.stored)
		if err == nil {
			return &mdspb.ExtentRef{FileOff: uint64(fileOff), Length: uint64(len(data)), Extent: ext}, nil
		}
		if ctx.Err() != nil || len(failed) == 0 {
			return nil, err
		}
		lastErr = err
		if narrowOK(ext, failed, r.GetMinChunks(), attempt == writeAttempts-1) {
			var lost []uint32
			for _, j := range failed {
				lost = append(lost, ext.Osts[j])
				ext.Osts[j] = 0
			}
			c.log.Warn("chunk writes failed; committing the extent without them (the MDS rebuilds them)", "ino", ino, "extent", ext.GetId(),
				"failed_osts", lost, "written", placedSlots(ext.GetOsts()), "of", len(ext.GetOsts()), "err", err)
			return &mdspb.ExtentRef{FileOff: uint64(fileOff), Length: uint64(len(data)), Extent: ext}, nil
		}
		for _, j := range failed {
			exclude = append(exclude, ext.GetOsts()[j])
		}
		c.log.Warn("extent write failed; retrying on another placement", "ino", ino, "extent", ext.GetId(), "exclude_osts", exclude, "err", err)
	}
	return nil, fmt.Errorf("write extent at %d: %d attempts failed: %w", fileOff, writeAttempts, lastErr)
}

// narrowOK reports whether an extent whose chunk writes failed in slots
// failed may be committed without them: at least minChunks written (0,
// from an MDS that predates narrow extents: never), and only parity
// chunks missing, unless this was the last attempt (data chunks missing
// make every read of the extent rebuild them until the MDS widens it).
func narrowOK(ext *mdspb.Extent, failed []int, minChunks uint32, last bool) bool {
	if minChunks == 0 || placedSlots(ext.GetOsts())-len(failed) < int(minChunks) {
		return false
	}
	if last {
		return true
	}
	k := int(ext.GetLayout().GetK())
	for _, j := range failed {
		if j < k {
			return false
		}
	}
	return true
}

// placedSlots counts the slots of a placement that name an OST (0: a
// chunk not placed, in a narrow extent).
func placedSlots(osts []uint32) int {
	n := 0
	for _, o := range osts {
		if o != 0 {
			n++
		}
	}
	return n
}

// encodeChunks lays data out as the k+m chunks of an extent, each a list
// of byte slices to be sent back to back. The data chunks are slices of
// data itself (cell j of every row), so their bytes reach the socket
// without a copy; the parity chunks are pooled buffers. A last, partial
// row is first copied into a pooled row padded with zeros. release gives
// the pooled buffers back; the chunks must not be used after it.
func (c *Client) encodeChunks(lo layout.Layout, data []byte) (chunks [][][]byte, release func(), err error) {
	coder, err := c.coder(lo)
	if err != nil {
		return nil, nil, err
	}
	var pooled [][]byte
	release = func() {
		for _, b := range pooled {
			c.bufs.Put(b)
		}
	}
	g := lo.Geom(int64(len(data)))
	chunkLen := g.ChunkLen()
	parity := make([][]byte, lo.M)
	for i := range parity {
		parity[i] = c.bufs.Get(int(chunkLen))
		pooled = append(pooled, parity[i])
	}
	chunks = make([][][]byte, lo.Shards())
	cells := make([][]byte, lo.Shards())
	for r := int64(0); r < g.Rows(); r++ {
		row := g.Row(r)
		src := data[row.DataOff : row.DataOff+row.DataLen]
		if full := int64(lo.K) * row.Cell; row.DataLen < full {
			pad := c.bufs.Get(int(full))
			pooled = append(pooled, pad)
			clear(pad[copy(pad, src):])
			src = pad
		}
		for j := 0; j < lo.K; j++ {
			cells[j] = src[int64(j)*row.Cell : int64(j+1)*row.Cell]
			chunks[j] = append(chunks[j], cells[j])
		}
		for i := range parity {
			cells[lo.K+i] = parity[i][row.ChunkOff : row.ChunkOff+row.Cell]
		}
		if err := coder.Encode(cells); err != nil {
			release()
			return nil, nil, err
		}
	}
	for i := range parity {
		chunks[lo.K+i] = [][]byte{parity[i]}
	}
	return chunks, release, nil
}

// writeChunks encodes ext and writes its placed chunks (slots that name
// an OST). It returns the slots whose write failed.
func (c *Client) writeChunks(ctx context.Context, ext *mdspb.Extent, data []byte) ([]int, error) {
	g, err := extentGeom(ext)
	if err != nil {
		return nil, err
	}
	chunks, release, err := c.encodeChunks(g.Layout, data)
	if err != nil {
		return nil, err
	}
	defer release()
	var mu sync.Mutex
	var failed []int
	var firstErr error
	var wg sync.WaitGroup
	for j, ostID := range ext.GetOsts() {
		if ostID == 0 {
			continue // not placed: a narrow extent
		}
		wg.Go(func() {
			err := c.writeChunk(ctx, ostID, ext.GetId(), uint32(j), chunks[j])
			if err != nil {
				c.metrics.chunkErrors.WithLabelValues("write").Inc()
				mu.Lock()
				failed = append(failed, j)
				if firstErr == nil {
					firstErr = fmt.Errorf("extent %d chunk %d on OST %d: %w", ext.GetId(), j, ostID, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(failed)
	return failed, firstErr
}

// writeChunk writes chunk index of extent, the concatenation of data, to
// OST ostID: over its data path, or over gRPC when it has none. Either
// carries the extent's write capability (caps.go). An OST that cannot be
// reached is waited for while the MDS counts it up (chunkIO, retry.go).
func (c *Client) writeChunk(ctx context.Context, ostID uint32, extent uint64, index uint32, data [][]byte) error {
	return c.chunkIO(ctx, ostID, true, func(cctx context.Context, o ostpb.OstClient, daddr string) error {
		if daddr != "" {
			return c.data.Write(cctx, daddr, extent, index, c.ChunkCapability(cctx, extent, capability.Write), data)
		}
		return c.writeChunkGRPC(cctx, o, extent, index, data)
	})
}

func (c *Client) writeChunkGRPC(ctx context.Context, o ostpb.OstClient, extent uint64, index uint32, data [][]byte) error {
	var b []byte
	if len(data) == 1 {
		b = data[0]
	} else {
		n := 0
		for _, d := range data {
			n += len(d)
		}
		b = c.bufs.Get(n)
		defer c.bufs.Put(b)
		b = b[:0]
		for _, d := range data {
			b = append(b, d...)
		}
	}
	_, err := o.WriteChunk(ctx, &ostpb.WriteChunkRequest{Id: &ostpb.ChunkId{Extent: extent, Index: index}, Data: b})
	return err
}

// readChunk reads bytes [off, off+n) of chunk j of ext into dst, in order,
// where n is the total length of dst's slices, with the extent's read
// capability (caps.go). Over the plaintext data path the bytes go from the
// socket straight into dst. On an error dst holds garbage.
func (c *Client) readChunk(ctx context.Context, ext *mdspb.Extent, j int, off int64, dst [][]byte) error {
	ostID := ext.GetOsts()[j]
	if ostID == 0 { // a narrow extent's chunk not placed: nothing to read or report
		return fmt.Errorf("extent %d chunk %d: not placed (narrow extent): %w", ext.GetId(), j, errs.ErrUnavailable)
	}
	// No wait for an OST that cannot be reached: parity stands in
	// (readRows waits when it cannot).
	err := c.chunkIO(ctx, ostID, false, func(cctx context.Context, o ostpb.OstClient, daddr string) error {
		if daddr == "" || !c.data.Local(daddr) {
			c.load.add(ostID, 1) // balance.go
			defer c.load.add(ostID, -1)
		}
		if daddr != "" {
			return c.data.Read(cctx, daddr, ext.GetId(), uint32(j), c.ChunkCapability(cctx, ext.GetId(), capability.Read), uint64(off), dst)
		}
		return readChunkGRPC(cctx, o, ext.GetId(), uint32(j), off, dst)
	})
	if err != nil {
		c.metrics.chunkErrors.WithLabelValues("read").Inc()
		c.noteChunkError(ext.GetId(), uint32(j), ostID, err) // report.go
		return fmt.Errorf("extent %d chunk %d on OST %d: %w", ext.GetId(), j, ostID, err)
	}
	return nil
}

func readChunkGRPC(ctx context.Context, o ostpb.OstClient, extent uint64, index uint32, off int64, dst [][]byte) error {
	n := 0
	for _, d := range dst {
		n += len(d)
	}
	r, err := o.ReadChunk(ctx, &ostpb.ReadChunkRequest{Id: &ostpb.ChunkId{Extent: extent, Index: index}, Offset: uint64(off), Length: uint64(n)})
	if err != nil {
		return err
	}
	data := r.GetData()
	if len(data) != n {
		return fmt.Errorf("short read %d of %d: %w", len(data), n, errs.ErrCorrupt)
	}
	for _, d := range dst {
		data = data[copy(d, data):]
	}
	return nil
}

// rowsLen is the number of data bytes in rows [r0, r1) of an extent.
func rowsLen(g layout.Geometry, r0, r1 int64) int64 {
	last := g.Row(r1 - 1)
	return last.DataOff + last.DataLen - g.Row(r0).DataOff
}

// readRows reads rows [r0, r1) of ext into out, which holds exactly their
// data bytes, in extent order. The data chunks are read first, straight
// into their places in out (padding past the data of a partial row is not
// read); a data chunk whose OST is much busier than a parity chunk's may
// be read from that parity chunk instead (balance.go). When any fails, the
// parity chunks are read too and the missing cells are rebuilt from any k
// chunks. When fewer than k chunks can be reached it tries again, with
// backoff, while at least k of the extent's OSTs are counted up and for up
// to Options.OSTRetry (OSTs restarting; retry.go).
func (c *Client) readRows(ctx context.Context, ext *mdspb.Extent, r0, r1 int64, out []byte) error {
	if c.readBalanced(ctx, ext, r0, r1, out) { // balance.go
		return nil
	}
	var deadline time.Time
	final := c.opts.OSTRetry <= 0
	for backoff := retryMinBackoff; ; backoff = min(2*backoff, retryMaxBackoff) {
		err := c.readRowsOnce(ctx, ext, r0, r1, out, final)
		if err == nil || !errors.Is(err, errs.ErrUnavailable) || ctx.Err() != nil || final {
			return err
		}
		if !c.mayRecover(ext) {
			// Too few of its OSTs are up, not restarting: a last try,
			// which logs the failure.
			final = true
			continue
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(c.opts.OSTRetry)
			if ok, n := c.rep.logs.Allow("read waits"); ok { // readlog.go
				c.log.Warn("too few chunks reachable: the read waits for OSTs", "extent", ext.GetId(), "wait", c.opts.OSTRetry, "err", err, "suppressed", n)
			}
		}
		if err := sleepCtx(ctx, min(backoff, deadline.Sub(now))); err != nil {
			return err
		}
		final = !time.Now().Before(deadline)
	}
}

// rowSpan is where rows [r0, r1) of an extent lie: in its chunks (the
// range [cOff, cOff+cLen) of every chunk) and in a buffer holding their
// data bytes.
type rowSpan struct {
	g          layout.Geometry
	r0, r1     int64
	first      layout.Row
	cOff, cLen int64
}

func spanOf(ext *mdspb.Extent, r0, r1 int64, out []byte) (rowSpan, error) {
	g, err := extentGeom(ext)
	if err != nil {
		return rowSpan{}, err
	}
	if want := rowsLen(g, r0, r1); int64(len(out)) != want {
		return rowSpan{}, fmt.Errorf("extent %d rows [%d, %d): buffer of %d bytes for %d: %w", ext.GetId(), r0, r1, len(out), want, errs.ErrInvalid)
	}
	first, last := g.Row(r0), g.Row(r1-1)
	return rowSpan{g: g, r0: r0, r1: r1, first: first, cOff: first.ChunkOff, cLen: last.ChunkOff + last.Cell - first.ChunkOff}, nil
}

// cellIn returns where cell j of row lies in the buffer, and how many of
// its bytes are data (the rest of a partial row's cell is padding).
func (sp rowSpan) cellIn(row layout.Row, j int) (start, n int64) {
	start = row.DataOff - sp.first.DataOff + int64(j)*row.Cell
	n = min(max(row.DataLen-int64(j)*row.Cell, 0), row.Cell)
	return start, n
}

// dataDst is where data chunk j's bytes of the span go in out. Only the
// last row can be partial, so they are a prefix of its range.
func (sp rowSpan) dataDst(out []byte, j int) [][]byte {
	var dst [][]byte
	for r := sp.r0; r < sp.r1; r++ {
		if s, n := sp.cellIn(sp.g.Row(r), j); n > 0 {
			dst = append(dst, out[s:s+n])
		}
	}
	return dst
}

// readRowsOnce is one try of readRows; only the final one logs a failure
// for too few chunks.
func (c *Client) readRowsOnce(ctx context.Context, ext *mdspb.Extent, r0, r1 int64, out []byte, final bool) error {
	sp, err := spanOf(ext, r0, r1, out)
	if err != nil {
		return err
	}
	lo := sp.g.Layout
	errsByChunk := make([]error, lo.Shards())
	var wg sync.WaitGroup
	for j := 0; j < lo.K; j++ {
		dst := sp.dataDst(out, j)
		if len(dst) == 0 {
			continue
		}
		wg.Go(func() { errsByChunk[j] = c.readChunk(ctx, ext, j, sp.cOff, dst) })
	}
	wg.Wait()
	var bad []int
	for j := 0; j < lo.K; j++ {
		if errsByChunk[j] != nil {
			bad = append(bad, j)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.logDegraded(ext, bad, errsByChunk) // readlog.go: rate-limited
	c.metrics.degradedReads.Inc()
	parity := make([][]byte, lo.M)
	for i := range parity {
		parity[i] = c.bufs.Get(int(sp.cLen))
		defer c.bufs.Put(parity[i])
		wg.Go(func() { errsByChunk[lo.K+i] = c.readChunk(ctx, ext, lo.K+i, sp.cOff, [][]byte{parity[i]}) })
	}
	wg.Wait()
	present := 0
	for _, e := range errsByChunk {
		if e == nil {
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
		err := fmt.Errorf("extent %d: %d of %d chunks readable, need %d: %w (%w)", ext.GetId(), present, lo.Shards(), lo.K, errs.ErrUnavailable, errors.Join(all...))
		if final {
			c.logUnreadable(ext, present, errsByChunk, err) // readlog.go
		}
		return err
	}
	have := make([]bool, lo.Shards())
	for j, e := range errsByChunk {
		have[j] = e == nil
	}
	return c.rebuildRows(ext, sp, out, parity, have, bad)
}

// rebuildRows fills the cells of the data chunks missing (in out, as
// readRows lays it out) from the chunks that have (data in out, parity
// j in parity[j-k]), at least k of them.
func (c *Client) rebuildRows(ext *mdspb.Extent, sp rowSpan, out []byte, parity [][]byte, have []bool, missing []int) error {
	lo := sp.g.Layout
	coder, err := c.coder(lo)
	if err != nil {
		return err
	}
	cells := make([][]byte, lo.Shards())
	for r := sp.r0; r < sp.r1; r++ {
		row := sp.g.Row(r)
		rel := row.ChunkOff - sp.cOff
		for j := range cells {
			cells[j] = nil
			switch {
			case !have[j]:
			case j >= lo.K:
				cells[j] = parity[j-lo.K][rel : rel+row.Cell]
			default:
				s, n := sp.cellIn(row, j)
				if n == row.Cell {
					cells[j] = out[s : s+n]
					break
				}
				// A partial row's cell: its data, then the zero padding
				// it was encoded with.
				tmp := c.bufs.Get(int(row.Cell))
				defer c.bufs.Put(tmp)
				m := 0
				if n > 0 {
					m = copy(tmp, out[s:s+n])
				}
				clear(tmp[m:])
				cells[j] = tmp
			}
		}
		if err := coder.ReconstructData(cells); err != nil {
			return fmt.Errorf("extent %d row %d: %w", ext.GetId(), r, err)
		}
		for _, j := range missing {
			if s, n := sp.cellIn(row, j); n > 0 {
				copy(out[s:s+n], cells[j])
			}
		}
	}
	return nil
}

// readRowPooled reads row r of ext into a buffer of the client's pool,
// which the caller gives back (c.bufs.Put) when done with it.
func (c *Client) readRowPooled(ctx context.Context, ext *mdspb.Extent, r int64) ([]byte, error) {
	if compressed(ext) { // compress.go: the cache's rows are decoded blocks
		return c.readBlockPooled(ctx, ext, r)
	}
	g, err := extentGeom(ext)
	if err != nil {
		return nil, err
	}
	out := c.bufs.Get(int(rowsLen(g, r, r+1)))
	if err := c.readRows(ctx, ext, r, r+1, out); err != nil {
		c.bufs.Put(out)
		return nil, err
	}
	return out, nil
}

// readExact reads extent bytes [off, off+len(buf)) into buf with one chunk
// read per piece, straight into buf; any failure falls back to whole-row
// reads, which rebuild from parity.
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
			return c.readChunk(ctx, ext, p.Chunk, p.ChunkOff, [][]byte{buf[p.BufOff : p.BufOff+p.Len]})
		})
	}
	if err := eg.Wait(); err == nil || ctx.Err() != nil {
		return err
	}
	r0 := g.RowOf(off).Index
	r1 := g.RowOf(off+int64(len(buf))-1).Index + 1
	rows := c.bufs.Get(int(rowsLen(g, r0, r1)))
	defer c.bufs.Put(rows)
	if err := c.readRows(ctx, ext, r0, r1, rows); err != nil {
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
