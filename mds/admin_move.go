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

// Moves (admin_worker.go, steps 1 to 5): the copies of a batch, the
// switch transaction, settling interrupted moves, and retiring old
// copies after their grace.

// mapKeysOf finds the extent-map entries naming the moved extents, with
// one scan of the "m" keys.
func (s *Server) mapKeysOf(moves []chunkMove) (map[uint64][][]byte, error) {
	want := make(map[uint64]bool, len(moves))
	for _, m := range moves {
		want[m.extent] = true
	}
	out := make(map[uint64][][]byte)
	err := scan(s.db, []byte{prefixMap}, func(k, v []byte) (bool, error) {
		r, err := readRef(k, v)
		if err != nil {
			return false, err
		}
		if id := r.GetExtent().GetId(); want[id] {
			out[id] = append(out[id], append([]byte(nil), k...))
		}
		return true, nil
	})
	return out, err
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
func (s *Server) copyChunks(ctx context.Context, kind string, e *mdspb.Extent, moves []chunkMove, unreadable map[uint32]bool) (movedExtent, error) {
	now := s.now()
	err := s.update(func(t *txn) error {
		for _, m := range moves {
			v, err := proto.Marshal(&mdspb.MoveRecord{Extent: m.extent, Index: m.index, From: m.from, To: m.to, Kind: kind, StartedNs: now})
			if err != nil {
				return err
			}
			if err := t.b.Set(moveKey(m.extent, m.index), v, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return movedExtent{}, err
	}
	data := make(map[uint32][]byte, len(moves))
	var rebuild []int
	for _, m := range moves {
		if !unreadable[m.from] {
			b, err := s.readWholeChunk(ctx, e, int(m.index))
			if err == nil {
				data[m.index] = b
				continue
			}
			s.log.Info("admin: source chunk unreadable; rebuilding it", "extent", e.Id, "chunk", m.index, "ost", m.from, "err", err)
		}
		rebuild = append(rebuild, int(m.index))
	}
	if len(rebuild) > 0 {
		avoid := map[uint32]bool{}
		for id := range unreadable {
			avoid[id] = true
		}
		got, err := s.rebuildChunks(ctx, e, rebuild, avoid)
		if err != nil {
			return movedExtent{}, err
		}
		s.admin.met.rebuilt.Add(float64(len(rebuild)))
		for j, b := range got {
			data[uint32(j)] = b
		}
	}
	out := movedExtent{old: e, moves: moves}
	for _, m := range moves {
		b := data[m.index]
		if err := s.writeVerified(ctx, m.to, e.Id, m.index, b); err != nil {
			return movedExtent{}, err
		}
		out.bytes += uint64(len(b))
	}
	return out, nil
}

// switchPlacements does step 4 for the extents of one batch, in one
// transaction. An extent whose placement or map entries changed since the
// plan is skipped: its MoveRecords stay, and finishMoves undoes them. It
// returns the chunks and bytes switched.
func (s *Server) switchPlacements(ready []movedExtent, keys map[uint64][][]byte) (chunks, nbytes uint64, err error) {
	if len(ready) == 0 {
		return 0, 0, nil
	}
	err = s.update(func(t *txn) error {
		chunks, nbytes = 0, 0
		for _, me := range ready {
			ok, err := t.switchPlacement(me, keys[me.old.Id], s.o.Admin.RetireGrace)
			if err != nil {
				return err
			}
			if !ok {
				s.log.Info("admin: extent changed during its move; retried later", "extent", me.old.Id)
				continue
			}
			chunks += uint64(len(me.moves))
			nbytes += me.bytes
		}
		return nil
	})
	return chunks, nbytes, err
}

// switchPlacement switches one extent in t; false if it changed.
func (t *txn) switchPlacement(me movedExtent, keys [][]byte, grace time.Duration) (bool, error) {
	id := me.old.Id
	ok, err := t.replacePlacement(me.old, keys, "move", func(osts []uint32) {
		for _, m := range me.moves {
			osts[m.index] = m.to
		}
	})
	if !ok || err != nil {
		return false, err
	}
	for _, m := range me.moves {
		if err := t.b.Delete(moveKey(id, m.index), nil); err != nil {
			return false, err
		}
		if err := t.b.Set(retireKey(t.now+int64(grace), id, m.index), u32(nil, m.from), nil); err != nil {
			return false, err
		}
	}
	return true, nil
}

// replacePlacement gives extent old the placement change makes of a copy
// of its own, in t: its "r" record and every extent-map entry naming it,
// which must all be among keys. It reports false, changing nothing, when
// the extent is no longer referenced, its placement is no longer old's,
// or an entry naming it is not among keys (added since they were found):
// the caller tries again later. what names the change in errors.
func (t *txn) replacePlacement(old *mdspb.Extent, keys [][]byte, what string, change func(osts []uint32)) (bool, error) {
	id := old.Id
	v, err := getValue(t.b, refKey(id))
	if errors.Is(err, errs.ErrNotFound) {
		return false, nil // no longer referenced: GC has it
	}
	if err != nil {
		return false, err
	}
	count, body, err := decodePrefixed(v)
	if err != nil {
		return false, err
	}
	cur := &mdspb.Extent{}
	if err := proto.Unmarshal(body, cur); err != nil {
		return false, fmt.Errorf("mds: decode extent %d: %v: %w", id, err, errs.ErrCorrupt)
	}
	if !slices.Equal(cur.Osts, old.Osts) {
		return false, nil
	}
	newOsts := slices.Clone(cur.Osts)
	change(newOsts)
	seen := map[uint32]bool{}
	for _, o := range newOsts {
		if o != 0 && seen[o] { // 0: a narrow extent's unplaced slot (narrow.go)
			return false, fmt.Errorf("mds: %s of extent %d would put two chunks on OST %d: %w", what, id, o, errs.ErrInvalid)
		}
		seen[o] = true
	}
	type hit struct {
		key []byte
		ref *mdspb.ExtentRef
	}
	var hits []hit
	for _, k := range keys {
		v, err := getValue(t.b, k)
		if errors.Is(err, errs.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		r, err := readRef(k, v)
		if err != nil {
			return false, err
		}
		if r.Extent.GetId() == id {
			hits = append(hits, hit{k, r})
		}
	}
	if uint64(len(hits)) != count {
		return false, nil
	}
	cur.Osts = newOsts
	for _, h := range hits {
		h.ref.Extent = cur
		v, err := proto.Marshal(h.ref)
		if err != nil {
			return false, err
		}
		if err := t.b.Set(h.key, v, nil); err != nil {
			return false, err
		}
	}
	nv, err := proto.Marshal(cur)
	if err != nil {
		return false, err
	}
	return true, t.b.Set(refKey(id), encodePrefixed(count, nv), nil)
}

// finishMoves settles MoveRecords left by an interrupted or refused move:
// switched ones are dropped; the others have their destination copy
// deleted first (it is referenced by nothing).
func (s *Server) finishMoves(ctx context.Context) error {
	type rec struct {
		key []byte
		m   *mdspb.MoveRecord
	}
	var recs []rec
	err := scan(s.db, []byte{prefixMove}, func(k, v []byte) (bool, error) {
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
	ov := s.ostView()
	var firstErr error
	for _, r := range recs {
		e, err := s.extentOf(r.m.Extent)
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
				err := s.ostDelete(ctx, info, []*ostpb.ChunkId{{Extent: r.m.Extent, Index: r.m.Index}})
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
			}
		}
		if err := s.update(func(t *txn) error { return t.b.Delete(r.key, nil) }); err != nil {
			return err
		}
	}
	return firstErr
}

// extentOf returns committed extent id, or nil when it is not committed.
func (s *Server) extentOf(id uint64) (*mdspb.Extent, error) {
	v, err := getValue(s.db, refKey(id))
	if errors.Is(err, errs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeExtentValue(refKey(id), v)
}

// retireRound deletes the old copies of moved chunks whose grace is over.
func (s *Server) retireRound(ctx context.Context) error {
	type entry struct {
		key    []byte
		extent uint64
		index  uint32
		ost    uint32
	}
	var due []entry
	err := scanRange(s.db, []byte{prefixRetire}, retireKey(s.now()+1, 0, 0), func(k, v []byte) (bool, error) {
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
	ov := s.ostView()
	byOst := map[uint32][]entry{}
	var drop [][]byte
	for _, d := range due {
		e, err := s.extentOf(d.extent)
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
		if err := s.ostDelete(ctx, ov.infos[id], ids); err != nil {
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
		err := s.update(func(t *txn) error {
			for _, k := range drop {
				if err := t.b.Delete(k, nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return firstErr
}
