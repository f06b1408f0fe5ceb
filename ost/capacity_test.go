package ost

import (
	"errors"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Options.Capacity caps the space an OST reports and holds: a chunk
// write that would pass it fails with ErrNoSpace (ENOSPC through the
// wire), the chunk is not stored, and deleting chunks makes room again.
func TestCapacityLimit(t *testing.T) {
	const limit = 1 << 20
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock, Capacity: limit})
	if inf := to.info(t); inf.GetCapacity() != limit || inf.GetFree() != limit {
		t.Fatalf("empty: capacity %d free %d, want %d %d", inf.GetCapacity(), inf.GetFree(), limit, limit)
	}
	to.write(t, 1, 0, make([]byte, 512<<10))
	to.write(t, 1, 1, make([]byte, 384<<10))
	if inf := to.info(t); inf.GetFree() != 128<<10 {
		t.Fatalf("free %d after 896 KiB, want 128 KiB", inf.GetFree())
	}
	_, err := to.cli.WriteChunk(t.Context(), &ostpb.WriteChunkRequest{Id: cid(2, 0), Data: make([]byte, 256<<10)})
	if !errors.Is(err, errs.ErrNoSpace) {
		t.Fatalf("write past the capacity: %v, want ErrNoSpace", err)
	}
	if _, err := to.read(2, 0, 0, 1); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("refused chunk readable: %v", err)
	}
	// The same bytes again are no new space: accepted.
	to.write(t, 1, 1, make([]byte, 384<<10))
	if _, err := to.cli.DeleteChunks(t.Context(), &ostpb.DeleteChunksRequest{Ids: []*ostpb.ChunkId{cid(1, 0)}}); err != nil {
		t.Fatal(err)
	}
	to.write(t, 2, 0, make([]byte, 256<<10))
	if inf := to.info(t); inf.GetFree() != limit-640<<10 || inf.GetUsed() != 640<<10 {
		t.Fatalf("after delete and write: %+v", inf)
	}
}
