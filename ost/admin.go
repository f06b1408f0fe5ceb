package ost

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Administration calls of the OST service: listing chunks (fsck) and the
// scrubber's control (scrub.go). docs/admin.md.

// Listing limits.
const (
	listDefault = 10000
	listMax     = 100000
)

// listOrder is the order ListChunks returns chunks in: by shard (the low
// byte of the extent id), then extent id, then index, so that a listing
// reads one chunks/<xx> directory at a time.
func listLess(a, b chunkID) bool {
	if sa, sb := byte(a.extent), byte(b.extent); sa != sb {
		return sa < sb
	}
	if a.extent != b.extent {
		return a.extent < b.extent
	}
	return a.index < b.index
}

// chunkEntry is one sealed chunk found by a listing.
type chunkEntry struct {
	id      chunkID
	length  uint64
	mtimeNs int64
}

// listShard returns the sealed chunks (data files) of shard i, in
// listLess order.
func (st *store) listShard(i int) ([]chunkEntry, error) {
	if err := st.clog.flushAll(); err != nil {
		return nil, err
	}
	shard := filepath.Join(st.dir, chunksDir, shardName(uint64(i)))
	ents, err := st.readDir(shard)
	if err != nil {
		return nil, fmt.Errorf("ost: list %s: %w", shard, err)
	}
	var out []chunkEntry
	for _, e := range ents {
		c, sidecar, ok := parseChunkName(e.Name())
		if !ok || sidecar || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // deleted since ReadDir
		}
		out = append(out, chunkEntry{id: c, length: uint64(fi.Size()), mtimeNs: fi.ModTime().UnixNano()})
	}
	sort.Slice(out, func(a, b int) bool { return listLess(out[a].id, out[b].id) })
	return out, nil
}

// list returns up to limit chunks after cursor (nil: from the start), in
// listLess order, and whether the listing is complete.
func (st *store) list(ctx context.Context, after *chunkID, limit int) ([]chunkEntry, bool, error) {
	start := 0
	if after != nil {
		start = int(byte(after.extent))
	}
	var out []chunkEntry
	for i := start; i < fanout; i++ {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		ents, err := st.listShard(i)
		if err != nil {
			return nil, false, err
		}
		for _, e := range ents {
			if after != nil && !listLess(*after, e.id) {
				continue
			}
			out = append(out, e)
			if len(out) == limit {
				return out, false, nil
			}
		}
	}
	return out, true, nil
}

func (v *service) ListChunks(ctx context.Context, req *ostpb.ListChunksRequest) (*ostpb.ListChunksReply, error) {
	if err := v.s.checkCap(ctx, 0, capability.Admin); err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = listDefault
	case limit > listMax:
		return nil, fmt.Errorf("ost: list limit %d (at most %d): %w", limit, listMax, errs.ErrInvalid)
	}
	var after *chunkID
	if req.GetAfter() != nil {
		c := chunkID{extent: req.GetAfter().GetExtent(), index: req.GetAfter().GetIndex()}
		after = &c
	}
	ents, eof, err := v.s.st.list(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	out := &ostpb.ListChunksReply{Eof: eof, Chunks: make([]*ostpb.ChunkStat, len(ents))}
	for i, e := range ents {
		out.Chunks[i] = &ostpb.ChunkStat{Id: &ostpb.ChunkId{Extent: e.id.extent, Index: e.id.index}, Length: e.length, MtimeNs: e.mtimeNs}
	}
	return out, nil
}

func (v *service) Scrub(ctx context.Context, req *ostpb.ScrubRequest) (*ostpb.ScrubStatus, error) {
	if err := v.s.checkCap(ctx, 0, capability.Admin); err != nil {
		return nil, err
	}
	return v.s.scrubControl(req.GetStart(), req.GetRate())
}
