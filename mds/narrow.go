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

	"github.com/prometheus/client_golang/prometheus"

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

// narrowMetrics are the worker's metrics of narrow extents (metrics.go).
type narrowMetrics struct {
	extents prometheus.Gauge   // listed as narrow, as of the last widen round
	widened prometheus.Counter // missing chunks placed
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
func (w *adminWorker) widenRound(ctx context.Context) error {
	var ids []uint64
	err := w.scanKind(prefixNarrow, func(k, v []byte) (bool, error) {
		id, err := decodeNarrowKey(k)
		if err != nil {
			return false, err
		}
		ids = append(ids, id)
		return len(ids) < widenBatch, nil
	})
	if err != nil || len(ids) == 0 {
		w.narrow.extents.Set(float64(len(ids)))
		return err
	}
	ov := w.osts.ostView()
	var dests []candidate
	for _, id := range sortedIDs(ov.dest) {
		i := ov.infos[id]
		dests = append(dests, candidate{id: id, capacity: i.GetCapacity(), free: i.GetFree()})
	}
	var plan []widening
	var done [][]byte // keys of extents gone or no longer narrow
	for _, id := range ids {
		e, err := w.extents.extentOf(id)
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
		wd := widening{e: e, fill: map[int]uint32{}}
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
				if slices.Contains(taken, d.id) || !d.room(n, w.fullRatio) {
					continue
				}
				wd.fill[j] = d.id
				taken[j] = d.id
				d.free -= min(d.free, n)
				wd.bytes += n
				break
			}
		}
		if len(wd.fill) > 0 {
			plan = append(plan, wd)
		}
	}
	if len(done) > 0 {
		if err := w.records.writeRecords(nil, done); err != nil {
			return err
		}
	}
	w.narrow.extents.Set(float64(len(ids) - len(done)))
	if len(plan) == 0 {
		return nil
	}
	planned := make(map[uint64]bool, len(plan))
	for _, wd := range plan {
		planned[wd.e.Id] = true
	}
	keys, err := w.extents.mapKeysOf(planned)
	if err != nil {
		return err
	}
	var all []error
	var extents, chunks int
	for i := 0; i < len(plan); i += w.o.BatchExtents {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		batch := plan[i:min(i+w.o.BatchExtents, len(plan))]
		ok := make([]bool, len(batch))
		var mu sync.Mutex
		inParallel(len(batch), w.o.Concurrency, func(bi int) {
			wd := batch[bi]
			err := w.copyWidening(ctx, wd, ov)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				all = append(all, fmt.Errorf("extent %d: %w", wd.e.Id, err))
				return
			}
			ok[bi] = true
		})
		var sw []placementSwitch
		var copied []widening
		for bi, wd := range batch {
			if ok[bi] {
				sw = append(sw, widenSwitch(wd, keys[wd.e.Id]))
				copied = append(copied, wd)
			}
		}
		extents, chunks = 0, 0
		if len(sw) > 0 {
			switched, err := w.extents.switchPlacements(sw)
			if err != nil {
				return err
			}
			for i, wd := range copied {
				if switched[i] {
					extents++
					chunks += len(wd.fill)
				}
			}
		}
		if chunks > 0 {
			w.narrow.widened.Add(float64(chunks))
			w.log.Info("narrow extents widened", "extents", extents, "chunks", chunks)
		}
	}
	return errors.Join(all...)
}

// copyWidening writes the missing chunks of one narrow extent to their
// planned OSTs, rebuilt from k others, after recording each as a move
// from OST 0; finishMoves deletes a copy whose switch never happened.
func (w *adminWorker) copyWidening(ctx context.Context, wd widening, ov ostView) error {
	var want []int
	for j := range wd.fill {
		want = append(want, j)
	}
	slices.Sort(want)
	recs := make([]*mdspb.MoveRecord, len(want))
	for i, j := range want {
		recs[i] = &mdspb.MoveRecord{Extent: wd.e.Id, Index: uint32(j), From: 0, To: wd.fill[j], Kind: moveKindWiden}
	}
	if err := w.recordMoves(recs); err != nil {
		return err
	}
	avoid := map[uint32]bool{0: true}
	for id := range ov.infos {
		if !ov.up[id] {
			avoid[id] = true
		}
	}
	got, err := w.chunks.rebuildChunks(ctx, wd.e, want, avoid)
	if err != nil {
		return err
	}
	for _, j := range want {
		if err := w.chunks.writeVerified(ctx, wd.fill[j], wd.e.Id, uint32(j), got[j]); err != nil {
			return err
		}
	}
	return nil
}

// widenSwitch is the switch of one widened extent: its MoveRecords
// dropped, and its "w" key too once no slot is left unplaced. It is not
// made when the extent changed since it was planned (it is tried again in
// a later round, and finishMoves deletes the copies).
func widenSwitch(wd widening, keys [][]byte) placementSwitch {
	p := placementSwitch{old: wd.e, keys: keys, to: wd.fill, what: "widening"}
	osts := slices.Clone(wd.e.Osts)
	for j, o := range wd.fill {
		osts[j] = o
		p.del = append(p.del, moveKey(wd.e.Id, uint32(j)))
	}
	if placed(osts) == len(osts) {
		p.del = append(p.del, narrowKey(wd.e.Id))
	}
	return p
}
