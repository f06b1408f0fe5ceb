package mds

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Narrow extents: extents committed with some chunk slots unplaced (0 in
// their placement), because fewer than k+m OSTs could take a chunk when
// they were written (AllocExtents, placement.go) or a chunk write failed
// and the client committed without it (CommitExtents). Each one is listed
// under a "w" key until the administration worker's widen round has
// rebuilt its missing chunks from the others and placed them on OSTs that
// can take them now, with the copy, verify, switch of every move
// (admin_worker.go): a MoveRecord first (from OST 0), then the chunk
// written and read back, then one transaction that checks the placement
// is unchanged and rewrites it in the "r" record and every "m" entry.
// docs/reliability.md, "Writes while OSTs are down or full", has the
// policy and what it promises.
//
// Key, part of format version 1 as admin_keys.go's are (an MDS that
// predates it never writes one, and its absence means "not narrow"):
//
//	key                       value
//	"w" + extent id(8)        empty: a committed extent with unplaced chunk slots
const prefixNarrow = 'w'

// moveKindWiden is the Kind of a widening's MoveRecords.
const moveKindWiden = "widen"

// widenBatch bounds the narrow extents one widen round looks at.
const widenBatch = 256

// refusalLogEvery spaces the MDS's log lines about refused and narrow
// placements.
const refusalLogEvery = 10 * time.Second

func narrowKey(id uint64) []byte { return u64([]byte{prefixNarrow}, id) }

func decodeNarrowKey(k []byte) (uint64, error) {
	if len(k) != 9 || k[0] != prefixNarrow {
		return 0, errCorruptKey("narrow extent", k)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

// markNarrow lists extent id as narrow in t.
func (t *txn) markNarrow(id uint64) error { return t.b.Set(narrowKey(id), nil, nil) }

// narrowCount counts the extents listed as narrow.
func (s *Server) narrowCount() uint64 {
	var n uint64
	scan(s.db, []byte{prefixNarrow}, func(k, v []byte) (bool, error) {
		n++
		return true, nil
	})
	return n
}

// logRefusal logs (at most once per refusalLogEvery) why AllocExtents
// refused a placement; the client gets the same words in its error.
func (s *Server) logRefusal(ctx context.Context, ino uint64, err error) {
	reason := "unavailable"
	if errors.Is(err, errs.ErrNoSpace) {
		reason = "no_space"
	}
	s.m.allocRefused.WithLabelValues(reason).Inc()
	if s.logDue(&s.osts.refusedNs) {
		s.log.WarnContext(ctx, "cannot place extent; write refused", "ino", ino, "err", err)
	}
}

// logNarrow logs (at most once per refusalLogEvery) that extents are
// being placed narrow, with the placement of the last one.
func (s *Server) logNarrow(ctx context.Context, ino uint64, e *mdspb.Extent) {
	s.m.narrowPlaced.Inc()
	if s.logDue(&s.osts.narrowNs) {
		l := e.GetLayout()
		s.log.WarnContext(ctx, "too few OSTs can take chunks: writing narrow extents, widened when OSTs can take their missing chunks",
			"ino", ino, "extent", e.GetId(), "placed", placed(e.GetOsts()), "want", l.GetK()+l.GetM(), "osts", e.GetOsts())
	}
}

// logDue reports whether a rate-limited log line is due, and if so
// records now in last.
func (s *Server) logDue(last *atomic.Int64) bool {
	now := s.o.Now().UnixNano()
	prev := last.Load()
	return now-prev >= int64(refusalLogEvery) && last.CompareAndSwap(prev, now)
}

// widening is one narrow extent's planned widening: slot j to OST fill[j].
type widening struct {
	e     *mdspb.Extent
	fill  map[int]uint32
	bytes uint64
}

// widenRound widens the narrow extents whose missing chunks some OST can
// take now: an OST up and active, not already holding a chunk of the
// extent, with room for the chunk; the emptiest first. An extent with
// fewer than k readable chunks waits. It runs on the administration
// worker's goroutine, as every placement switch does.
func (s *Server) widenRound(ctx context.Context) error {
	var ids []uint64
	err := scan(s.db, []byte{prefixNarrow}, func(k, v []byte) (bool, error) {
		id, err := decodeNarrowKey(k)
		if err != nil {
			return false, err
		}
		ids = append(ids, id)
		return len(ids) < widenBatch, nil
	})
	if err != nil || len(ids) == 0 {
		s.m.narrowExtents.Set(float64(len(ids)))
		return err
	}
	ov := s.ostView()
	var dests []candidate
	for _, id := range sortedIDs(ov.dest) {
		i := ov.infos[id]
		dests = append(dests, candidate{id: id, capacity: i.GetCapacity(), free: i.GetFree()})
	}
	var plan []widening
	var done [][]byte // keys of extents gone or no longer narrow
	for _, id := range ids {
		e, err := s.extentOf(id)
		if err != nil {
			return err
		}
		if e == nil || placed(e.Osts) == len(e.Osts) {
			done = append(done, narrowKey(id))
			continue
		}
		readable := 0
		for _, o := range e.Osts {
			if o != 0 && ov.up[o] {
				readable++
			}
		}
		if readable < int(e.GetLayout().GetK()) {
			continue // later: too few of its chunks can be read now
		}
		w := widening{e: e, fill: map[int]uint32{}}
		n := chunkLen(e)
		taken := slices.Clone(e.Osts)
		for j, o := range e.Osts {
			if o != 0 {
				continue
			}
			// The emptiest destination with room, not in the placement.
			sort.SliceStable(dests, func(a, b int) bool { return dests[a].free > dests[b].free })
			for di := range dests {
				d := &dests[di]
				if slices.Contains(taken, d.id) || !d.room(n, s.o.Placement.FullRatio) {
					continue
				}
				w.fill[j] = d.id
				taken[j] = d.id
				d.free -= min(d.free, n)
				w.bytes += n
				break
			}
		}
		if len(w.fill) > 0 {
			plan = append(plan, w)
		}
	}
	if len(done) > 0 {
		if err := s.update(func(t *txn) error {
			for _, k := range done {
				if err := t.b.Delete(k, nil); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	s.m.narrowExtents.Set(float64(len(ids) - len(done)))
	if len(plan) == 0 {
		return nil
	}
	keys, err := s.mapKeysOfExtents(plan)
	if err != nil {
		return err
	}
	var all []error
	var extents, chunks int
	for i := 0; i < len(plan); i += s.o.Admin.BatchExtents {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		batch := plan[i:min(i+s.o.Admin.BatchExtents, len(plan))]
		ok := make([]bool, len(batch))
		sem := make(chan struct{}, s.o.Admin.Concurrency)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for bi, w := range batch {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				err := s.copyWidening(ctx, w, ov)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					all = append(all, fmt.Errorf("extent %d: %w", w.e.Id, err))
					return
				}
				ok[bi] = true
			})
		}
		wg.Wait()
		err := s.update(func(t *txn) error {
			extents, chunks = 0, 0
			for bi, w := range batch {
				if !ok[bi] {
					continue
				}
				switched, err := t.widen(w, keys[w.e.Id])
				if err != nil {
					return err
				}
				if switched {
					extents++
					chunks += len(w.fill)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if chunks > 0 {
			s.m.widenedChunks.Add(float64(chunks))
			s.log.Info("narrow extents widened", "extents", extents, "chunks", chunks)
		}
	}
	return errors.Join(all...)
}

// copyWidening writes the missing chunks of one narrow extent to their
// planned OSTs, rebuilt from k others, after recording each as a move
// from OST 0; finishMoves deletes a copy whose switch never happened.
func (s *Server) copyWidening(ctx context.Context, w widening, ov ostView) error {
	now := s.now()
	var want []int
	err := s.update(func(t *txn) error {
		want = want[:0]
		for j, to := range w.fill {
			want = append(want, j)
			v, err := proto.Marshal(&mdspb.MoveRecord{Extent: w.e.Id, Index: uint32(j), From: 0, To: to, Kind: moveKindWiden, StartedNs: now})
			if err != nil {
				return err
			}
			if err := t.b.Set(moveKey(w.e.Id, uint32(j)), v, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(want)
	avoid := map[uint32]bool{0: true}
	for id := range ov.infos {
		if !ov.up[id] {
			avoid[id] = true
		}
	}
	got, err := s.rebuildChunks(ctx, w.e, want, avoid)
	if err != nil {
		return err
	}
	for _, j := range want {
		if err := s.writeVerified(ctx, w.fill[j], w.e.Id, uint32(j), got[j]); err != nil {
			return err
		}
	}
	return nil
}

// widen switches one extent's placement to its widened one in t; false
// when the extent changed since it was planned (it is tried again in a
// later round, and finishMoves deletes the copies).
func (t *txn) widen(w widening, keys [][]byte) (bool, error) {
	id := w.e.Id
	var newOsts []uint32
	ok, err := t.replacePlacement(w.e, keys, "widening", func(osts []uint32) {
		for j, o := range w.fill {
			osts[j] = o
		}
		newOsts = osts
	})
	if !ok || err != nil {
		return false, err
	}
	for j := range w.fill {
		if err := t.b.Delete(moveKey(id, uint32(j)), nil); err != nil {
			return false, err
		}
	}
	if placed(newOsts) == len(newOsts) {
		if err := t.b.Delete(narrowKey(id), nil); err != nil {
			return false, err
		}
	}
	return true, nil
}

// mapKeysOfExtents finds the extent-map entries naming the planned
// extents, with one scan of the "m" keys.
func (s *Server) mapKeysOfExtents(plan []widening) (map[uint64][][]byte, error) {
	want := make(map[uint64]bool, len(plan))
	for _, w := range plan {
		want[w.e.Id] = true
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
