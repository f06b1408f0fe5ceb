package mds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Bad chunks (reported by scrub, fsck or a client's read) rebuilt in
// place on their own OST.

// badRetry holds off a bad chunk whose rebuild failed, or whose client
// report could not be checked, until a time. It applies to the report it
// was made for: a later report of the same chunk (a scrub's or fsck's,
// which need no check) replaces the record and is tried at once.
type badRetry struct {
	until    time.Time
	reported int64 // the record's ReportedNs
}

// damaged reports whether the answer of a whole-chunk read
// (readWholeChunk) says the chunk's bytes are damaged, as opposed to
// unknown now (the OST busy or unreachable). Damage is every kind the
// OSTs' scrubber recognises, seen through a read:
//
//   - ErrCorrupt: a checksum mismatch, a missing or bad checksum sidecar,
//     a data file whose length differs from the one its sidecar covers;
//   - ErrNotFound: the chunk file is gone;
//   - ErrInvalid: the OST refuses the range [0, chunk length) that the
//     extent's layout gives ("range outside its bytes"): the chunk file
//     is shorter than it must be (truncated).
//
// Before ErrInvalid was counted, a truncated chunk that a client reported
// was "tried later" for ever, and the scrub's and fsck's reports of it
// were dropped as queued already.
func damaged(err error) bool {
	return errors.Is(err, errs.ErrCorrupt) || errors.Is(err, errs.ErrNotFound) || errors.Is(err, errs.ErrInvalid)
}

// repairBad rebuilds chunks reported bad (scrub, fsck, clients) in place:
// the bad copy is deleted and the rebuilt one written to the same OST
// (which holds no other chunk of the extent), then read back. Reports
// naming a chunk that is no longer where they say are dropped; a client's
// report is checked first (the chunk read again) and dropped when the
// chunk reads back whole.
func (w *adminWorker) repairBad(ctx context.Context) error {
	type entry struct {
		key []byte
		b   *mdspb.BadChunk
	}
	var ents []entry
	err := w.scanKind(prefixBad, func(k, v []byte) (bool, error) {
		b := &mdspb.BadChunk{}
		if err := proto.Unmarshal(v, b); err != nil {
			return false, fmt.Errorf("mds: decode bad chunk %x: %v: %w", k, err, errs.ErrCorrupt)
		}
		ents = append(ents, entry{append([]byte(nil), k...), b})
		return len(ents) < 256, nil
	})
	if err != nil || len(ents) == 0 {
		return err
	}
	ov := w.osts.ostView()
	now := w.clock()
	later := func(rk string, b *mdspb.BadChunk) {
		w.badRetry[rk] = badRetry{until: now.Add(10 * w.o.Interval), reported: b.ReportedNs}
	}
	var firstErr error
	for _, en := range ents {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b := en.b
		rk := string(en.key)
		if r, ok := w.badRetry[rk]; ok && r.reported == b.ReportedNs && now.Before(r.until) {
			continue
		}
		e, err := w.extents.extentOf(b.Extent)
		if err != nil {
			return err
		}
		drop := e == nil || int(b.Index) >= len(e.Osts) || e.Osts[b.Index] != b.Ost || ov.state[b.Ost] != ostActive
		if drop {
			w.met.badDismissed.Inc()
		} else {
			if !ov.up[b.Ost] {
				continue // the OST is down: later, or repair moves it
			}
			if b.FromClient {
				// A client's report: the OST checks the chunk's
				// checksums again; a chunk that reads back whole was a
				// passing fault (or a wrong report) and is kept.
				_, err := readWholeChunk(ctx, w.chunks, e, int(b.Index))
				switch {
				case err == nil:
					w.log.Info("admin: chunk reported by a client reads back whole; kept", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost)
					w.met.badDismissed.Inc()
					delete(w.badRetry, rk)
					if err := w.records.writeRecords(nil, [][]byte{en.key}); err != nil {
						return err
					}
					continue
				case !damaged(err):
					// Cannot tell now (the OST is busy or unreachable):
					// later, and say so the first time.
					if _, ok := w.badRetry[rk]; !ok {
						w.log.Warn("admin: cannot check a chunk a client reported bad; trying again later", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost, "err", err)
					}
					later(rk, b)
					continue
				}
			}
			if err := w.rebuildInPlace(ctx, e, int(b.Index), ov); err != nil {
				w.log.Warn("admin: rebuild of bad chunk failed", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost, "err", err)
				later(rk, b)
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			w.log.Info("admin: bad chunk rebuilt", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost, "reason", b.Reason)
			w.met.badRepaired.Inc()
		}
		delete(w.badRetry, rk)
		if err := w.records.writeRecords(nil, [][]byte{en.key}); err != nil {
			return err
		}
	}
	return firstErr
}

// rebuildInPlace rebuilds chunk j of e from the others and rewrites it on
// its own OST.
func (w *adminWorker) rebuildInPlace(ctx context.Context, e *mdspb.Extent, j int, ov ostView) error {
	avoid := map[uint32]bool{e.Osts[j]: true}
	for id := range ov.infos {
		if !ov.up[id] {
			avoid[id] = true
		}
	}
	got, err := w.chunks.rebuildChunks(ctx, e, []int{j}, avoid)
	if err != nil {
		return err
	}
	w.met.rebuilt.Add(1)
	info := ov.infos[e.Osts[j]]
	// The extent must still be placed so (this goroutine is the only one
	// that changes placements, so it stays so until the write is done).
	if err := w.chunks.deleteChunks(ctx, info, []*ostpb.ChunkId{{Extent: e.Id, Index: uint32(j)}}); err != nil {
		return err
	}
	return w.chunks.writeVerified(ctx, e.Osts[j], e.Id, uint32(j), got[j])
}
