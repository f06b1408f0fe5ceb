package mds

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Moves (admin_worker.go, steps 1 to 5): the copies of a batch, the
// switch transaction, settling interrupted moves, and retiring old
// copies after their grace.

// extentIDs is the set of extents moves move chunks of.
func extentIDs(moves []chunkMove) map[uint64]bool {
	ids := make(map[uint64]bool, len(moves))
	for _, m := range moves {
		ids[m.extent] = true
	}
	return ids
}

// movedExtent is an extent whose moved chunks are written and verified on
// their destinations, ready to switch.
type movedExtent struct {
	old   *mdspb.Extent
	moves []chunkMove
	bytes uint64
}

// copyChunks does steps 1 to 3 of a move for the chunks of one extent:
// intent records, then each chunk read (or rebuilt) and written to its
// destination, read back and compared.
func (w *adminWorker) copyChunks(ctx context.Context, kind string, e *mdspb.Extent, moves []chunkMove, unreadable map[uint32]bool) (movedExtent, error) {
	recs := make([]*mdspb.MoveRecord, len(moves))
	for i, m := range moves {
		recs[i] = &mdspb.MoveRecord{Extent: m.extent, Index: m.index, From: m.from, To: m.to, Kind: kind}
	}
	if err := w.recordMoves(recs); err != nil {
		return movedExtent{}, err
	}
	data := make(map[uint32][]byte, len(moves))
	var rebuild []int
	for _, m := range moves {
		if !unreadable[m.from] {
			b, err := readWholeChunk(ctx, w.chunks, e, int(m.index))
			if err == nil {
				data[m.index] = b
				continue
			}
			w.log.Info("admin: source chunk unreadable; rebuilding it", "extent", e.Id, "chunk", m.index, "ost", m.from, "err", err)
		}
		rebuild = append(rebuild, int(m.index))
	}
	if len(rebuild) > 0 {
		avoid := map[uint32]bool{}
		for id := range unreadable {
			avoid[id] = true
		}
		got, err := w.chunks.rebuildChunks(ctx, e, rebuild, avoid)
		if err != nil {
			return movedExtent{}, err
		}
		w.met.rebuilt.Add(float64(len(rebuild)))
		for j, b := range got {
			data[uint32(j)] = b
		}
	}
	out := movedExtent{old: e, moves: moves}
	for _, m := range moves {
		b := data[m.index]
		if err := w.chunks.writeVerified(ctx, m.to, e.Id, m.index, b); err != nil {
			return movedExtent{}, err
		}
		out.bytes += uint64(len(b))
	}
	return out, nil
}

// recordMoves writes the MoveRecords of moves about to start (step 1),
// dated now, in one transaction.
func (w *adminWorker) recordMoves(recs []*mdspb.MoveRecord) error {
	now := w.now()
	set := make([]record, len(recs))
	for i, r := range recs {
		r.StartedNs = now
		v, err := proto.Marshal(r)
		if err != nil {
			return err
		}
		set[i] = record{moveKey(r.Extent, r.Index), v}
	}
	return w.records.writeRecords(set, nil)
}

// switchMoved does step 4 for the extents of one batch, in one
// transaction. An extent whose placement or map entries changed since the
// plan is skipped: its MoveRecords stay, and finishMoves undoes them. It
// returns the chunks and bytes switched.
func (w *adminWorker) switchMoved(ready []movedExtent, keys map[uint64][][]byte) (chunks, nbytes uint64, err error) {
	if len(ready) == 0 {
		return 0, 0, nil
	}
	sw := make([]placementSwitch, len(ready))
	for i, me := range ready {
		sw[i] = moveSwitch(me, keys[me.old.Id], w.now()+int64(w.o.RetireGrace))
	}
	ok, err := w.extents.switchPlacements(sw)
	if err != nil {
		return 0, 0, err
	}
	for i, me := range ready {
		if !ok[i] {
			w.log.Info("admin: extent changed during its move; retried later", "extent", me.old.Id)
			continue
		}
		chunks += uint64(len(me.moves))
		nbytes += me.bytes
	}
	return chunks, nbytes, nil
}

// moveSwitch is the switch of one moved extent: its MoveRecords dropped,
// and its old copies queued for deletion at retireAt.
func moveSwitch(me movedExtent, keys [][]byte, retireAt int64) placementSwitch {
	p := placementSwitch{old: me.old, keys: keys, to: map[int]uint32{}, what: "move"}
	for _, m := range me.moves {
		p.to[int(m.index)] = m.to
		p.del = append(p.del, moveKey(me.old.Id, m.index))
		p.set = append(p.set, record{retireKey(retireAt, me.old.Id, m.index), u32(nil, m.from)})
	}
	return p
}

// finishMoves settles MoveRecords left by an interrupted or refused move:
// switched ones are dropped; the others have their destination copy
// deleted first (it is referenced by nothing).
func (w *adminWorker) finishMoves(ctx context.Context) error {
	type rec struct {
		key []byte
		m   *mdspb.MoveRecord
	}
	var recs []rec
	err := w.scanKind(prefixMove, func(k, v []byte) (bool, error) {
		m := &mdspb.MoveRecord{}
		if err := proto.Unmarshal(v, m); err != nil {
			return false, fmt.Errorf("mds: decode move %x: %v: %w", k, err, errs.ErrCorrupt)
		}
		recs = append(recs, rec{append([]byte(nil), k...), m})
		return true, nil
	})
	if err != nil || len(recs) == 0 {
		return err
	}
	ov := w.osts.ostView()
	var firstErr error
	for _, r := range recs {
		e, err := w.extents.extentOf(r.m.Extent)
		if err != nil {
			return err
		}
		live := e != nil && int(r.m.Index) < len(e.Osts) && e.Osts[r.m.Index] == r.m.To
		if !live {
			info, known := ov.infos[r.m.To]
			switch {
			case !known || (ov.state[r.m.To] == ostRemoved && !ov.up[r.m.To]):
			case !ov.up[r.m.To]:
				continue // later, when it is back
			default:
				err := w.chunks.deleteChunks(ctx, info, []*ostpb.ChunkId{{Extent: r.m.Extent, Index: r.m.Index}})
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
			}
		}
		if err := w.records.writeRecords(nil, [][]byte{r.key}); err != nil {
			return err
		}
	}
	return firstErr
}

// retireRound deletes the old copies of moved chunks whose grace is over.
func (w *adminWorker) retireRound(ctx context.Context) error {
	type entry struct {
		key    []byte
		extent uint64
		index  uint32
		ost    uint32
	}
	var due []entry
	err := w.records.scanRecords([]byte{prefixRetire}, retireKey(w.now()+1, 0, 0), func(k, v []byte) (bool, error) {
		_, ext, idx, err := decodeRetireKey(k)
		if err != nil {
			return false, err
		}
		if len(v) != 4 {
			return false, fmt.Errorf("mds: bad retire value %x: %w", v, errs.ErrCorrupt)
		}
		due = append(due, entry{append([]byte(nil), k...), ext, idx, uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])})
		return len(due) < gcBatch, nil
	})
	if err != nil || len(due) == 0 {
		return err
	}
	ov := w.osts.ostView()
	byOst := map[uint32][]entry{}
	var drop [][]byte
	for _, d := range due {
		e, err := w.extents.extentOf(d.extent)
		if err != nil {
			return err
		}
		if e != nil && int(d.index) < len(e.Osts) && e.Osts[d.index] == d.ost {
			drop = append(drop, d.key) // moved back there since: live again
			continue
		}
		if _, known := ov.infos[d.ost]; !known || (ov.state[d.ost] == ostRemoved && !ov.up[d.ost]) {
			drop = append(drop, d.key) // gone for good with its chunks
			continue
		}
		if ov.up[d.ost] {
			byOst[d.ost] = append(byOst[d.ost], d)
		}
	}
	var firstErr error
	for id, ents := range byOst {
		ids := make([]*ostpb.ChunkId, len(ents))
		for i, d := range ents {
			ids[i] = &ostpb.ChunkId{Extent: d.extent, Index: d.index}
		}
		if err := w.chunks.deleteChunks(ctx, ov.infos[id], ids); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		for _, d := range ents {
			drop = append(drop, d.key)
		}
	}
	if len(drop) > 0 {
		if err := w.records.writeRecords(nil, drop); err != nil {
			return err
		}
	}
	return firstErr
}
