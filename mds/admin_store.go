package mds

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// The *Server side of the background workers' interfaces
// (admin_worker.go, gc.go): small adapters over Pebble and the server's
// commit function, and the wiring that makes the workers in Open.

var (
	_ extentStore  = (*Server)(nil)
	_ recordStore  = (*Server)(nil)
	_ jobStore     = (*Server)(nil)
	_ ostDirectory = (*Server)(nil)
	_ gcStore      = (*Server)(nil)
)

// startWorkers makes the GC and the administration worker, both with
// connections from the server's one OST pool, and starts them on its
// goroutine group, which Close stops and waits for.
func (s *Server) startWorkers() {
	s.gc = newGC(gcConfig{
		Interval: s.o.GCInterval, Grace: s.o.GCGrace, Now: s.o.Now, Log: s.log,
		ChunksDeleted: s.m.gcChunksDeleted, ExtentsDone: s.m.gcExtentsDone,
		Store: s, Osts: s, Chunks: newOstChunks(s.ostPool, s, gcCallTimeout), Lead: s.commits,
	})
	s.tasks.Go(s.gc.loop)
	s.admin = newAdminWorker(adminConfig{
		Options: s.o.Admin, Heartbeat: s.o.HeartbeatTimeout, FullRatio: s.o.Placement.FullRatio,
		Now: s.o.Now, Log: s.log, Metrics: s.m.admin,
		Narrow:  narrowMetrics{extents: s.m.narrowExtents, widened: s.m.widenedChunks},
		Extents: s, Records: s, Jobs: s, Osts: s, Chunks: newOstChunks(s.ostPool, s, s.o.Admin.CallTimeout), Lead: s.commits,
	})
	s.tasks.Go(s.admin.loop)
}

// ostDirectory.

func (s *Server) ostView() ostView {
	v := ostView{infos: map[uint32]*mdspb.OstInfo{}, up: map[uint32]bool{}, dest: map[uint32]bool{}, state: s.ostAdmin()}
	for _, o := range s.listOsts() {
		v.infos[o.Id] = o
		v.up[o.Id] = o.Up
		v.dest[o.Id] = o.State == StateUp
	}
	return v
}

// jobStore.

func (s *Server) loadJob(kind string) (*mdspb.AdminJob, error) {
	j := &mdspb.AdminJob{}
	err := getProto(s.db, jobKey(kind), j)
	if errors.Is(err, errs.ErrNotFound) {
		return &mdspb.AdminJob{Kind: kind, State: JobIdle}, nil
	}
	return j, err
}

// saveJob writes a job in t.
func (t *txn) saveJob(j *mdspb.AdminJob) error {
	j.UpdatedNs = t.now
	v, err := proto.Marshal(j)
	if err != nil {
		return err
	}
	return t.b.Set(jobKey(j.Kind), v, nil)
}

// updateJob applies fn to the stored job of kind, in one transaction. A
// job stopped meanwhile stays stopped (fn sees its state).
func (s *Server) updateJob(kind string, fn func(j *mdspb.AdminJob)) (*mdspb.AdminJob, error) {
	var out *mdspb.AdminJob
	err := s.update(func(t *txn) error {
		j := &mdspb.AdminJob{}
		err := getProto(t.b, jobKey(kind), j)
		if errors.Is(err, errs.ErrNotFound) {
			j = &mdspb.AdminJob{Kind: kind, State: JobIdle}
		} else if err != nil {
			return err
		}
		fn(j)
		out = j
		return t.saveJob(j)
	})
	return out, err
}

// recordStore.

func (s *Server) scanRecords(lower, upper []byte, fn func(k, v []byte) (bool, error)) error {
	return scanRange(s.db, lower, upper, fn)
}

func (s *Server) writeRecords(set []record, del [][]byte) error {
	return s.update(func(t *txn) error { return t.writeRecords(set, del) })
}

func (t *txn) writeRecords(set []record, del [][]byte) error {
	for _, r := range set {
		if err := t.b.Set(r.key, r.value, nil); err != nil {
			return err
		}
	}
	for _, k := range del {
		if err := t.b.Delete(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// extentStore.

func (s *Server) eachExtent(fn func(e *mdspb.Extent) (bool, error)) error {
	return scan(s.db, []byte{prefixRef}, func(k, v []byte) (bool, error) {
		e, err := decodeExtentValue(k, v)
		if err != nil {
			return false, err
		}
		return fn(e)
	})
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

func (s *Server) mapKeysOf(ids map[uint64]bool) (map[uint64][][]byte, error) {
	out := make(map[uint64][][]byte)
	err := scan(s.db, []byte{prefixMap}, func(k, v []byte) (bool, error) {
		r, err := readRef(k, v)
		if err != nil {
			return false, err
		}
		if id := r.GetExtent().GetId(); ids[id] {
			out[id] = append(out[id], append([]byte(nil), k...))
		}
		return true, nil
	})
	return out, err
}

func (s *Server) pendingOn(id uint32) (int, error) {
	return extentsWithChunkOn(s.db, prefixPending, id)
}

func (s *Server) extentsOn(id uint32) (int, error) {
	n := 0
	err := s.snapshot(func(r reader) error {
		for _, p := range []byte{prefixRef, prefixPending} {
			c, err := extentsWithChunkOn(r, p, id)
			if err != nil {
				return err
			}
			n += c
		}
		return nil
	})
	return n, err
}

// extentsWithChunkOn counts the extents under prefix ("r" or "p") with a
// chunk on OST id.
func extentsWithChunkOn(r reader, prefix byte, id uint32) (int, error) {
	n := 0
	err := scan(r, []byte{prefix}, func(k, v []byte) (bool, error) {
		e, err := decodeExtentValue(k, v)
		if err != nil {
			return false, err
		}
		if contains(e.GetOsts(), id) {
			n++
		}
		return true, nil
	})
	return n, err
}

func (s *Server) switchPlacements(sw []placementSwitch) ([]bool, error) {
	var ok []bool
	err := s.update(func(t *txn) error {
		ok = make([]bool, len(sw)) // the function may run again
		for i, p := range sw {
			done, err := t.replacePlacement(p.old, p.keys, p.what, func(osts []uint32) {
				for j, o := range p.to {
					osts[j] = o
				}
			})
			if err != nil {
				return err
			}
			if !done {
				continue
			}
			if err := t.writeRecords(p.set, p.del); err != nil {
				return err
			}
			ok[i] = true
		}
		return nil
	})
	return ok, err
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

// gcStore.

// expirePending moves allocations older than grace into the GC queue, due
// at once. Pending keys are ordered by extent id, not age, so this scans
// them all; there are only as many as writes in flight.
func (s *Server) expirePending(now int64, grace time.Duration) error {
	return s.update(func(t *txn) error {
		var expired []gcEntry
		err := scan(t.b, []byte{prefixPending}, func(k, v []byte) (bool, error) {
			at, body, err := decodePrefixed(v)
			if err != nil {
				return false, err
			}
			if int64(at)+int64(grace) > now {
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

func (s *Server) requeueGC(due []gcEntry, finished []bool, retryAt int64) error {
	return s.update(func(t *txn) error {
		for i, e := range due {
			if err := t.b.Delete(e.key, nil); err != nil {
				return err
			}
			if finished[i] {
				continue
			}
			v, err := proto.Marshal(e.ext)
			if err != nil {
				return err
			}
			if err := t.b.Set(gcKey(retryAt, e.ext.Id), v, nil); err != nil {
				return err
			}
		}
		return nil
	})
}
