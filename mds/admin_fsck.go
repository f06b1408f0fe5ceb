package mds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// fsck and gc (`shoal admin fsck`, `shoal admin gc`). docs/admin.md.

// fsckMaxProblems bounds the problems a reply lists (all are counted).
const fsckMaxProblems = 1000

type chunkKey struct {
	extent uint64
	index  uint32
}

// Fsck checks that every committed extent has each of its chunks, of the
// right length, on the OST its placement names, and that every chunk on
// an OST belongs to a committed extent (or to a write, move, deletion in
// progress, or is younger than the orphan grace); it also checks the
// metadata invariants (docs/mds-keys.md). With repair, missing and
// wrong-length chunks are queued for the worker to rebuild, orphans are
// deleted, and a repair job starts for chunks on removed OSTs.
// Checksums are the scrubber's job, not fsck's.
func (s *Server) handleFsck(ctx context.Context, req *mdspb.FsckRequest) (_ *mdspb.FsckReply, err error) {
	grace := time.Duration(req.GetOrphanGraceNs())
	if grace <= 0 {
		grace = s.o.GCGrace
	}
	out := &mdspb.FsckReply{}
	problem := func(p *mdspb.FsckProblem) {
		out.ProblemCount++
		if len(out.Problems) < fsckMaxProblems {
			out.Problems = append(out.Problems, p)
		}
	}

	// The metadata side, from one snapshot.
	exts := map[uint64]*mdspb.Extent{}
	pending := map[uint64]bool{}
	queued := map[uint64]bool{}
	inMove := map[chunkKey]uint32{}
	retiring := map[chunkKey][]uint32{}
	err = s.snapshot(func(r reader) error {
		if err := checkInvariants(r); err != nil {
			problem(&mdspb.FsckProblem{Kind: "metadata", Detail: err.Error()})
		}
		err := scan(r, []byte{prefixRef}, func(k, v []byte) (bool, error) {
			e, err := decodeExtentValue(k, v)
			if err != nil {
				return false, err
			}
			exts[e.Id] = e
			return true, nil
		})
		if err != nil {
			return err
		}
		err = scan(r, []byte{prefixPending}, func(k, _ []byte) (bool, error) {
			id, err := decodeIDKey(prefixPending, k)
			pending[id] = true
			return err == nil, err
		})
		if err != nil {
			return err
		}
		err = scan(r, []byte{prefixGC}, func(k, _ []byte) (bool, error) {
			_, id, err := decodeGCKey(k)
			queued[id] = true
			return err == nil, err
		})
		if err != nil {
			return err
		}
		err = scan(r, []byte{prefixMove}, func(k, v []byte) (bool, error) {
			m := &mdspb.MoveRecord{}
			if err := proto.Unmarshal(v, m); err != nil {
				return false, fmt.Errorf("mds: decode move %x: %w", k, errs.ErrCorrupt)
			}
			inMove[chunkKey{m.Extent, m.Index}] = m.To
			return true, nil
		})
		if err != nil {
			return err
		}
		return scan(r, []byte{prefixRetire}, func(k, v []byte) (bool, error) {
			_, ext, idx, err := decodeRetireKey(k)
			if err != nil || len(v) != 4 {
				return false, fmt.Errorf("mds: bad retire entry %x: %w", k, errs.ErrCorrupt)
			}
			ck := chunkKey{ext, idx}
			retiring[ck] = append(retiring[ck], uint32(v[0])<<24|uint32(v[1])<<16|uint32(v[2])<<8|uint32(v[3]))
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	out.Extents = uint64(len(exts))

	// The OST side: every chunk of every reachable OST.
	ov := s.ostView()
	type stat struct {
		length  uint64
		mtimeNs int64
	}
	onOst := map[uint32]map[chunkKey]stat{}
	conns := map[uint32]ostpb.OstClient{}
	for _, id := range sortedIDs(mapKeys(ov.infos)) {
		if ov.state[id] == ostRemoved {
			continue
		}
		if !ov.up[id] {
			problem(&mdspb.FsckProblem{Kind: "unreachable", Ost: id, Detail: "OST is down: its chunks were not checked"})
			continue
		}
		c, err := s.ostPool.client(id, ov.infos[id].Addr)
		if err != nil {
			problem(&mdspb.FsckProblem{Kind: "unreachable", Ost: id, Detail: err.Error()})
			continue
		}
		conns[id] = c
		m := map[chunkKey]stat{}
		var after *ostpb.ChunkId
		for {
			cctx, cancel := context.WithTimeout(ctx, s.o.Admin.CallTimeout)
			rep, err := c.ListChunks(cctx, &ostpb.ListChunksRequest{After: after})
			cancel()
			if err != nil {
				problem(&mdspb.FsckProblem{Kind: "unreachable", Ost: id, Detail: err.Error()})
				m = nil
				break
			}
			for _, cs := range rep.GetChunks() {
				m[chunkKey{cs.GetId().GetExtent(), cs.GetId().GetIndex()}] = stat{cs.GetLength(), cs.GetMtimeNs()}
				after = cs.GetId()
			}
			if rep.GetEof() || len(rep.GetChunks()) == 0 {
				break
			}
		}
		if m != nil {
			onOst[id] = m
			out.OstChunks += uint64(len(m))
		}
	}

	// Committed extents: every chunk present.
	var bad []*mdspb.BadChunk
	repairLost := false
	for _, id := range sortedExtentIDs(exts) {
		e := exts[id]
		want := chunkLen(e)
		missing := 0
		for j, o := range e.Osts {
			out.ChunksChecked++
			ck := chunkKey{id, uint32(j)}
			if ov.state[o] == ostRemoved {
				missing++
				problem(&mdspb.FsckProblem{Kind: "missing", Extent: id, Index: uint32(j), Ost: o, Detail: "on a removed OST", Fixed: req.GetRepair()})
				repairLost = true
				continue
			}
			m, ok := onOst[o]
			if !ok {
				missing++ // unreachable: reported once per OST
				continue
			}
			st, ok := m[ck]
			switch {
			case !ok:
				missing++
				if s.stillPlaced(id, j, o) {
					problem(&mdspb.FsckProblem{Kind: "missing", Extent: id, Index: uint32(j), Ost: o, Fixed: req.GetRepair()})
					bad = append(bad, &mdspb.BadChunk{Extent: id, Index: uint32(j), Ost: o, Reason: "fsck: missing"})
				}
			case st.length != want:
				missing++
				if s.stillPlaced(id, j, o) {
					problem(&mdspb.FsckProblem{Kind: "wrong_length", Extent: id, Index: uint32(j), Ost: o,
						Detail: fmt.Sprintf("%d bytes, want %d", st.length, want), Fixed: req.GetRepair()})
					bad = append(bad, &mdspb.BadChunk{Extent: id, Index: uint32(j), Ost: o, Reason: "fsck: wrong length"})
				}
			}
		}
		if missing > int(e.GetLayout().GetM()) {
			problem(&mdspb.FsckProblem{Kind: "unreadable_extent", Extent: id,
				Detail: fmt.Sprintf("%d of %d chunks missing or unreachable, at most %d can be", missing, len(e.Osts), e.GetLayout().GetM())})
		}
	}

	// Chunks on OSTs: every one accounted for.
	now := s.now()
	type orphan struct {
		ost uint32
		id  *ostpb.ChunkId
	}
	var orphans []orphan
	for _, o := range sortedIDs(boolKeys(onOst)) {
		for ck, st := range onOst[o] {
			if e, ok := exts[ck.extent]; ok && int(ck.index) < len(e.Osts) && e.Osts[ck.index] == o {
				continue
			}
			if pending[ck.extent] || queued[ck.extent] || inMove[ck] == o || slices.Contains(retiring[ck], o) {
				continue
			}
			if now-st.mtimeNs < int64(grace) {
				continue // young: a write or move may still commit it
			}
			if e, err := s.extentOf(ck.extent); err != nil {
				return nil, err
			} else if e != nil && int(ck.index) < len(e.Osts) && e.Osts[ck.index] == o {
				continue // placed there since the snapshot
			}
			problem(&mdspb.FsckProblem{Kind: "orphan", Extent: ck.extent, Index: ck.index, Ost: o,
				Detail: fmt.Sprintf("%d bytes, not referenced", st.length), Fixed: req.GetRepair()})
			orphans = append(orphans, orphan{o, &ostpb.ChunkId{Extent: ck.extent, Index: ck.index}})
		}
	}

	if req.GetRepair() {
		if len(bad) > 0 {
			if _, err := s.handleReportCorrupt(ctx, &mdspb.ReportCorruptRequest{Chunks: bad}); err != nil {
				return nil, err
			}
		}
		// Orphans are deleted by the worker, as old copies of moved
		// chunks are: its goroutine is the only one that switches
		// placements, and it checks the placement right before it
		// deletes, so a chunk moved back onto its OST meanwhile is kept.
		if len(orphans) > 0 {
			err := s.update(func(t *txn) error {
				for _, o := range orphans {
					if err := t.b.Set(retireKey(t.now, o.id.Extent, o.id.Index), u32(nil, o.ost), nil); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
			if err := s.admin.waitRound(ctx); err != nil {
				return nil, err
			}
		}
		if repairLost {
			if _, err := s.admin.startJob(&mdspb.StartJobRequest{Kind: JobRepair}); err != nil {
				return nil, err
			}
		}
		for _, p := range out.Problems {
			if p.Fixed {
				out.Fixed++
			}
		}
	}
	out.Clean = out.ProblemCount == 0
	return out, nil
}

// stillPlaced reports whether chunk j of extent id is still placed on OST
// o now (a move since the snapshot explains a difference).
func (s *Server) stillPlaced(id uint64, j int, o uint32) bool {
	e, err := s.extentOf(id)
	return err == nil && e != nil && j < len(e.Osts) && e.Osts[j] == o
}

func sortedExtentIDs(m map[uint64]*mdspb.Extent) []uint64 {
	out := make([]uint64, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func mapKeys[V any](m map[uint32]V) map[uint32]bool {
	out := make(map[uint32]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func boolKeys[V any](m map[uint32]V) map[uint32]bool { return mapKeys(m) }

// RunGC runs a GC round now (expired allocations, due GC-queue entries)
// and a worker round (old copies of moved chunks past their grace), and
// reports what is left waiting.
func (s *Server) handleRunGC(ctx context.Context, req *mdspb.GCRequest) (_ *mdspb.GCReply, err error) {
	before, err := s.gcCounts()
	if err != nil {
		return nil, err
	}
	if err := s.gc.runNow(ctx); err != nil {
		return nil, err
	}
	if err := s.admin.waitRound(ctx); err != nil {
		return nil, err
	}
	after, err := s.gcCounts()
	if err != nil {
		return nil, err
	}
	after.CollectedExtents = before.QueuedExtents + (before.PendingExtents - min(before.PendingExtents, after.PendingExtents)) - min(after.QueuedExtents, before.QueuedExtents+before.PendingExtents)
	after.RetiredChunks = before.RetiringChunks - min(before.RetiringChunks, after.RetiringChunks)
	return after, nil
}

// gcCounts counts the GC queue, pending allocations and retiring chunks.
func (s *Server) gcCounts() (*mdspb.GCReply, error) {
	out := &mdspb.GCReply{}
	count := func(p byte, n *uint64) error {
		return scan(s.db, []byte{p}, func(_, _ []byte) (bool, error) {
			*n++
			return true, nil
		})
	}
	err := errors.Join(count(prefixGC, &out.QueuedExtents), count(prefixPending, &out.PendingExtents), count(prefixRetire, &out.RetiringChunks))
	return out, err
}
