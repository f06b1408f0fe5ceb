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
func (s *Server) repairBad(ctx context.Context) error {
	type entry struct {
		key []byte
		b   *mdspb.BadChunk
	}
	var ents []entry
	err := scan(s.db, []byte{prefixBad}, func(k, v []byte) (bool, error) {
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
	ov := s.ostView()
	now := s.o.Now()
	later := func(rk string, b *mdspb.BadChunk) {
		s.admin.badRetry[rk] = badRetry{until: now.Add(10 * s.o.Admin.Interval), reported: b.ReportedNs}
	}
	var firstErr error
	for _, en := range ents {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b := en.b
		rk := string(en.key)
		if r, ok := s.admin.badRetry[rk]; ok && r.reported == b.ReportedNs && now.Before(r.until) {
			continue
		}
		e, err := s.extentOf(b.Extent)
		if err != nil {
			return err
		}
		drop := e == nil || int(b.Index) >= len(e.Osts) || e.Osts[b.Index] != b.Ost || ov.state[b.Ost] != ostActive
		if drop {
			s.admin.met.badDismissed.Inc()
		} else {
			if !ov.up[b.Ost] {
				continue // the OST is down: later, or repair moves it
			}
			if b.FromClient {
				// A client's report: the OST checks the chunk's
				// checksums again; a chunk that reads back whole was a
				// passing fault (or a wrong report) and is kept.
				_, err := s.readWholeChunk(ctx, e, int(b.Index))
				switch {
				case err == nil:
					s.log.Info("admin: chunk reported by a client reads back whole; kept", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost)
					s.admin.met.badDismissed.Inc()
					delete(s.admin.badRetry, rk)
					if err := s.update(func(t *txn) error { return t.b.Delete(en.key, nil) }); err != nil {
						return err
					}
					continue
				case !damaged(err):
					// Cannot tell now (the OST is busy or unreachable):
					// later, and say so the first time.
					if _, ok := s.admin.badRetry[rk]; !ok {
						s.log.Warn("admin: cannot check a chunk a client reported bad; trying again later", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost, "err", err)
					}
					later(rk, b)
					continue
				}
			}
			if err := s.rebuildInPlace(ctx, e, int(b.Index), ov); err != nil {
				s.log.Warn("admin: rebuild of bad chunk failed", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost, "err", err)
				later(rk, b)
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			s.log.Info("admin: bad chunk rebuilt", "extent", b.Extent, "chunk", b.Index, "ost", b.Ost, "reason", b.Reason)
			s.admin.met.badRepaired.Inc()
		}
		delete(s.admin.badRetry, rk)
		if err := s.update(func(t *txn) error { return t.b.Delete(en.key, nil) }); err != nil {
			return err
		}
	}
	return firstErr
}

// rebuildInPlace rebuilds chunk j of e from the others and rewrites it on
// its own OST.
func (s *Server) rebuildInPlace(ctx context.Context, e *mdspb.Extent, j int, ov ostView) error {
	avoid := map[uint32]bool{e.Osts[j]: true}
	for id := range ov.infos {
		if !ov.up[id] {
			avoid[id] = true
		}
	}
	got, err := s.rebuildChunks(ctx, e, []int{j}, avoid)
	if err != nil {
		return err
	}
	s.admin.met.rebuilt.Add(1)
	info := ov.infos[e.Osts[j]]
	// The extent must still be placed so (this goroutine is the only one
	// that changes placements, so it stays so until the write is done).
	if err := s.ostDelete(ctx, info, []*ostpb.ChunkId{{Extent: e.Id, Index: uint32(j)}}); err != nil {
		return err
	}
	return s.writeVerified(ctx, e.Osts[j], e.Id, uint32(j), got[j])
}
