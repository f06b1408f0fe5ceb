package mds

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Garbage collection of chunks.
//
// Two kinds of extents lose their chunks: extents whose refcount fell to
// zero (queued in "g" by the mutation that dropped the last reference, due
// GCGrace later, so a reader holding the old map can finish), and
// allocations never committed ("p" keys older than GCGrace: the client
// died or gave up). Each round first moves expired allocations into the
// queue, due at once, in one batch: from then on a late commit of such an
// extent fails with ErrStale instead of racing the deletion. Then it sends
// DeleteChunks for every due entry to each OST of its placement and removes
// an entry once every OST confirmed. An OST that is down or fails keeps the
// entry, moved back by gcRetryDelay, and the OSTs that did confirm are
// remembered (in memory) and not asked again; an OST no longer registered
// counts as done.

// gcEntry is one due GC-queue entry.
type gcEntry struct {
	key []byte
	ext *mdspb.Extent
}

func (s *Server) gcLoop(ctx context.Context) {
	tick := time.NewTicker(s.o.GCInterval)
	defer tick.Stop()
	for {
		var reply chan error
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case reply = <-s.gc.kick:
		}
		if !s.leading() {
			if reply != nil {
				reply <- s.raft.check()
			}
			continue
		}
		err := s.gcRound(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("gc round failed", "err", err)
		}
		if reply != nil {
			reply <- err
		}
	}
}

// gcRound runs one round of GC. It uses s.gc.confirmed unlocked, so it runs
// only on the GC goroutine (tests call it directly with a GCInterval long
// enough that the loop never fires).
func (s *Server) gcRound(ctx context.Context) error {
	now := s.now()
	if err := s.expirePending(now); err != nil {
		return err
	}
	if err := s.expireRequests(now); err != nil {
		return err
	}
	due, err := s.dueGC(now)
	if err != nil || len(due) == 0 {
		return err
	}
	// Group the chunks by OST, leaving out those an OST already confirmed
	// in an earlier round.
	byOst := make(map[uint32][]*ostpb.ChunkId)
	for _, e := range due {
		for j, id := range e.ext.GetOsts() {
			if !s.gc.confirmed[e.ext.Id][id] {
				byOst[id] = append(byOst[id], &ostpb.ChunkId{Extent: e.ext.Id, Index: uint32(j)})
			}
		}
	}
	infos := make(map[uint32]*mdspb.OstInfo)
	for _, o := range s.listOsts() {
		infos[o.Id] = o
	}
	// done[id] is true once OST id confirmed this round (or is not
	// registered).
	done := make(map[uint32]bool, len(byOst))
	for id, chunks := range byOst {
		info, ok := infos[id]
		if !ok || (info.State == StateRemoved && !info.Up) { // a removed OST's chunks are gone
			done[id] = true
			continue
		}
		if !info.Up {
			continue
		}
		if err := s.deleteChunks(ctx, info, chunks); err != nil {
			s.log.Warn("gc: delete chunks failed", "ost", id, "chunks", len(chunks), "err", err)
			continue
		}
		s.m.gcChunksDeleted.Add(float64(len(chunks)))
		done[id] = true
	}
	// Finished entries leave the queue; the others move back by
	// gcRetryDelay so that they do not hold up the entries behind them.
	var finished int
	err = s.update(func(t *txn) error {
		for _, e := range due {
			conf := s.gc.confirmed[e.ext.Id]
			complete := true
			for _, id := range e.ext.GetOsts() {
				if done[id] {
					if conf == nil {
						conf = make(map[uint32]bool)
						s.gc.confirmed[e.ext.Id] = conf
					}
					conf[id] = true
				}
				complete = complete && conf[id]
			}
			if err := t.b.Delete(e.key, nil); err != nil {
				return err
			}
			if complete {
				delete(s.gc.confirmed, e.ext.Id)
				finished++
				continue
			}
			v, err := proto.Marshal(e.ext)
			if err != nil {
				return err
			}
			if err := t.b.Set(gcKey(now+int64(gcRetryDelay), e.ext.Id), v, nil); err != nil {
				return err
			}
			s.log.Debug("gc: extent kept for retry", "extent", e.ext.Id)
		}
		return nil
	})
	if err == nil && finished > 0 {
		s.m.gcExtentsDone.Add(float64(finished))
		s.log.Debug("gc: extents collected", "count", finished)
	}
	return err
}

// expirePending moves allocations older than GCGrace into the GC queue.
// Pending keys are ordered by extent id, not age, so this scans them all;
// there are only as many as writes in flight.
func (s *Server) expirePending(now int64) error {
	return s.update(func(t *txn) error {
		var expired []gcEntry
		err := scan(t.b, []byte{prefixPending}, func(k, v []byte) (bool, error) {
			at, body, err := decodePrefixed(v)
			if err != nil {
				return false, err
			}
			if int64(at)+int64(s.o.GCGrace) > now {
				return true, nil
			}
			e := &mdspb.Extent{}
			if err := proto.Unmarshal(body, e); err != nil {
				return false, fmt.Errorf("mds: decode pending %x: %v: %w", k, err, errs.ErrCorrupt)
			}
			expired = append(expired, gcEntry{key: append([]byte(nil), k...), ext: e})
			return len(expired) < gcBatch, nil
		})
		if err != nil {
			return err
		}
		for _, e := range expired {
			v, err := proto.Marshal(e.ext)
			if err != nil {
				return err
			}
			if err := t.b.Delete(e.key, nil); err != nil {
				return err
			}
			if err := t.b.Set(gcKey(now, e.ext.Id), v, nil); err != nil {
				return err
			}
			s.log.Info("gc: allocation expired uncommitted", "extent", e.ext.Id)
		}
		return nil
	})
}

// dueGC returns up to gcBatch queue entries due at or before now.
func (s *Server) dueGC(now int64) ([]gcEntry, error) {
	var out []gcEntry
	upper := gcKey(now+1, 0)
	err := scanRange(s.db, []byte{prefixGC}, upper, func(k, v []byte) (bool, error) {
		if _, _, err := decodeGCKey(k); err != nil {
			return false, err
		}
		e := &mdspb.Extent{}
		if err := proto.Unmarshal(v, e); err != nil {
			return false, fmt.Errorf("mds: decode gc entry %x: %v: %w", k, err, errs.ErrCorrupt)
		}
		out = append(out, gcEntry{key: append([]byte(nil), k...), ext: e})
		return len(out) < gcBatch, nil
	})
	return out, err
}

// deleteChunks asks one OST to delete chunks (its connection from the
// server's pool, ostpool.go).
func (s *Server) deleteChunks(ctx context.Context, info *mdspb.OstInfo, chunks []*ostpb.ChunkId) error {
	c, err := s.ostPool.client(info.Id, info.Addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, gcCallTimeout)
	defer cancel()
	_, err = c.DeleteChunks(ctx, &ostpb.DeleteChunksRequest{Ids: chunks})
	return err
}
