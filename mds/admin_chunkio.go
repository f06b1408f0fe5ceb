package mds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/shoalfs/shoal/internal/erasure"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Chunk I/O of the background workers: calls to OSTs through the
// server's one connection pool (ostpool.go), each bounded by a timeout;
// chunk reads, verified writes and rebuilds from parity.

// chunkDeleter deletes chunks on an OST (the GC's only need).
type chunkDeleter interface {
	deleteChunks(ctx context.Context, info *mdspb.OstInfo, ids []*ostpb.ChunkId) error
}

// chunkMover is what the administration worker does to chunks on OSTs.
type chunkMover interface {
	chunkDeleter
	// readChunk reads n bytes of a chunk, checksums verified by its OST.
	readChunk(ctx context.Context, ost uint32, extent uint64, index uint32, n uint64) ([]byte, error)
	// writeVerified writes a chunk (fsynced by its OST), reads it back
	// and compares.
	writeVerified(ctx context.Context, ost uint32, extent uint64, index uint32, data []byte) error
	// rebuildChunks reconstructs chunks want of e from other chunks,
	// reading none on an OST in avoid.
	rebuildChunks(ctx context.Context, e *mdspb.Extent, want []int, avoid map[uint32]bool) (map[int][]byte, error)
	// scrub starts (req.Start) or polls an OST's scrubber; asked says
	// whether the call reached the OST (on an error, its scrubber's
	// state is then unknown rather than absent).
	scrub(ctx context.Context, ost uint32, req *ostpb.ScrubRequest) (st *ostpb.ScrubStatus, asked bool, err error)
}

// ostChunks is the chunkMover of the MDS: OST clients from the shared
// pool, addresses from the OST table.
type ostChunks struct {
	pool    *ostPool
	osts    ostDirectory
	timeout time.Duration // of each call
}

func newOstChunks(pool *ostPool, osts ostDirectory, timeout time.Duration) *ostChunks {
	return &ostChunks{pool: pool, osts: osts, timeout: timeout}
}

// client returns a client of OST id.
func (c *ostChunks) client(id uint32) (ostpb.OstClient, error) {
	info := c.osts.ostView().infos[id]
	if info == nil {
		return nil, fmt.Errorf("OST %d: %w", id, errs.ErrNotFound)
	}
	return c.pool.client(id, info.Addr)
}

func (c *ostChunks) deleteChunks(ctx context.Context, info *mdspb.OstInfo, ids []*ostpb.ChunkId) error {
	cl, err := c.pool.client(info.Id, info.Addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	_, err = cl.DeleteChunks(ctx, &ostpb.DeleteChunksRequest{Ids: ids})
	if err != nil {
		return fmt.Errorf("delete %d chunks on OST %d: %w", len(ids), info.Id, err)
	}
	return nil
}

func (c *ostChunks) scrub(ctx context.Context, ost uint32, req *ostpb.ScrubRequest) (*ostpb.ScrubStatus, bool, error) {
	cl, err := c.client(ost)
	if err != nil {
		return nil, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	st, err := cl.Scrub(ctx, req)
	if err != nil {
		return nil, true, fmt.Errorf("scrub OST %d: %w", ost, err)
	}
	return st, true, nil
}

// readWholeChunk reads chunk j of e from its OST (checksums verified there).
func readWholeChunk(ctx context.Context, c chunkMover, e *mdspb.Extent, j int) ([]byte, error) {
	return c.readChunk(ctx, e.Osts[j], e.Id, uint32(j), chunkLen(e))
}

func (c *ostChunks) readChunk(ctx context.Context, ost uint32, extent uint64, index uint32, n uint64) ([]byte, error) {
	cl, err := c.client(ost)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r, err := cl.ReadChunk(ctx, &ostpb.ReadChunkRequest{Id: &ostpb.ChunkId{Extent: extent, Index: index}, Offset: 0, Length: n})
	if err != nil {
		return nil, fmt.Errorf("read chunk %d.%d on OST %d: %w", extent, index, ost, err)
	}
	if uint64(len(r.GetData())) != n {
		return nil, fmt.Errorf("read chunk %d.%d on OST %d: %d bytes, want %d: %w", extent, index, ost, len(r.GetData()), n, errs.ErrCorrupt)
	}
	return r.GetData(), nil
}

func (c *ostChunks) writeVerified(ctx context.Context, ost uint32, extent uint64, index uint32, data []byte) error {
	cl, err := c.client(ost)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, c.timeout)
	_, err = cl.WriteChunk(wctx, &ostpb.WriteChunkRequest{Id: &ostpb.ChunkId{Extent: extent, Index: index}, Data: data})
	cancel()
	if err != nil {
		return fmt.Errorf("write chunk %d.%d to OST %d: %w", extent, index, ost, err)
	}
	back, err := c.readChunk(ctx, ost, extent, index, uint64(len(data)))
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if !bytes.Equal(back, data) {
		return fmt.Errorf("verify chunk %d.%d on OST %d: read back differs: %w", extent, index, ost, errs.ErrCorrupt)
	}
	return nil
}

// rebuildChunks reads none on an OST in avoid nor any chunk in want. It
// reads k chunks (data chunks first) and more when some fail.
func (c *ostChunks) rebuildChunks(ctx context.Context, e *mdspb.Extent, want []int, avoid map[uint32]bool) (map[int][]byte, error) {
	lo := layoutOfExtent(e)
	coder, err := erasure.New(lo)
	if err != nil {
		return nil, err
	}
	n := chunkLen(e)
	chunks := make([][]byte, lo.Shards())
	have := 0
	var errsRead []error
	for j := 0; j < lo.Shards() && have < lo.K; j++ {
		if slices.Contains(want, j) || avoid[e.Osts[j]] {
			continue
		}
		b, err := c.readChunk(ctx, e.Osts[j], e.Id, uint32(j), n)
		if err != nil {
			errsRead = append(errsRead, err)
			continue
		}
		chunks[j] = b
		have++
	}
	if have < lo.K {
		return nil, fmt.Errorf("extent %d: %d chunks readable, need %d: %w (%w)", e.Id, have, lo.K, errs.ErrUnavailable, errors.Join(errsRead...))
	}
	g := lo.Geom(int64(e.GetLength()))
	out := make(map[int][]byte, len(want))
	for _, j := range want {
		out[j] = make([]byte, n)
	}
	cells := make([][]byte, lo.Shards())
	for r := int64(0); r < g.Rows(); r++ {
		row := g.Row(r)
		for j := range cells {
			cells[j] = nil
			if chunks[j] != nil {
				cells[j] = chunks[j][row.ChunkOff : row.ChunkOff+row.Cell]
			}
		}
		if err := coder.ReconstructData(cells); err != nil {
			return nil, fmt.Errorf("extent %d row %d: %w", e.Id, r, err)
		}
		// Parity: encode afresh into new cells (the read ones are kept
		// as they are).
		par := make([][]byte, lo.Shards())
		copy(par, cells[:lo.K])
		for j := lo.K; j < lo.Shards(); j++ {
			par[j] = make([]byte, row.Cell)
		}
		if err := coder.Encode(par); err != nil {
			return nil, err
		}
		for _, j := range want {
			copy(out[j][row.ChunkOff:row.ChunkOff+row.Cell], par[j])
		}
	}
	return out, nil
}

// rate spreads the worker's writes to a bandwidth (0: unlimited). Its
// wait is safe for concurrent use.
type rate struct {
	bps   uint64
	start time.Time
	mu    struct {
		sync.Mutex
		bytes uint64 // accounted so far
	}
}

func newRate(bps uint64) *rate { return &rate{bps: bps, start: time.Now()} }

func (r *rate) wait(ctx context.Context, n uint64) {
	if r.bps == 0 {
		return
	}
	r.mu.Lock()
	r.mu.bytes += n
	total := r.mu.bytes
	r.mu.Unlock()
	due := r.start.Add(time.Duration(float64(total) / float64(r.bps) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}
