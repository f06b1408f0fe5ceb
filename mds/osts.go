package mds

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// ostTable is the in-memory OST registry: the persisted records ("o" keys)
// plus the volatile heartbeat state.
type ostTable struct {
	mu sync.Mutex // guards m, graceUntil and every *ostState in it
	m  map[uint32]*ostState
	// graceUntil ends the restart grace: until then an OST registered
	// before this MDS opened and not heard from since counts as up (up).
	graceUntil time.Time

	// refusedNs and narrowNs are when AllocExtents last logged a refusal
	// or a narrow placement (narrow.go): one line per refusalLogEvery.
	refusedNs, narrowNs atomic.Int64
}

type ostState struct {
	info   *mdspb.OstInfo // id, uuid, addr persisted; the rest volatile
	lastHB time.Time      // zero until the first heartbeat or registration
	admin  uint32         // administrative state ("s" key; admin_osts.go)
	// placed is the chunk bytes placed on the OST since its last report
	// of free space, which placement takes off that report.
	placed uint64
}

// loadOsts fills the table from the "o" keys at Open. The OSTs count as up
// for one heartbeat timeout (the restart grace, up), by which time those
// that are up have heartbeated: a restarted MDS does not refuse
// placements while their first heartbeats are on the way.
func (s *Server) loadOsts() error {
	s.osts.graceUntil = s.o.Now().Add(s.o.HeartbeatTimeout)
	return scan(s.db, []byte{prefixOst}, func(k, v []byte) (bool, error) {
		id, err := decodeOstKey(k)
		if err != nil {
			return false, err
		}
		info := &mdspb.OstInfo{}
		if err := proto.Unmarshal(v, info); err != nil || info.Id != id {
			return false, fmt.Errorf("mds: bad OST record %x: %w", k, errs.ErrCorrupt)
		}
		s.osts.m[id] = &ostState{info: info}
		return true, nil
	})
}

// up reports whether an OST heartbeated within the timeout, or, not heard
// from since this MDS opened, whether the restart grace lasts (a removed
// OST gets none). Caller holds osts.mu.
func (s *Server) up(o *ostState, now time.Time) bool {
	if o.lastHB.IsZero() {
		return o.admin != ostRemoved && now.Before(s.osts.graceUntil)
	}
	return now.Sub(o.lastHB) <= s.o.HeartbeatTimeout
}

// listOsts returns a copy of every OST's info, with up set, ordered by id.
func (s *Server) listOsts() []*mdspb.OstInfo {
	now := s.o.Now()
	s.osts.mu.Lock()
	defer s.osts.mu.Unlock()
	out := make([]*mdspb.OstInfo, 0, len(s.osts.m))
	for _, o := range s.osts.m {
		i := proto.Clone(o.info).(*mdspb.OstInfo)
		i.Up = s.up(o, now)
		i.State = stateName(o.admin, i.Up)
		if !o.lastHB.IsZero() {
			i.LastHeartbeatNs = o.lastHB.UnixNano()
		}
		i.Nearfull, i.Full = s.o.Placement.fullness(i.Capacity, i.Free, uint64(s.o.DefaultLayout.GetUnit()))
		out = append(out, i)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// candidates returns the live OSTs not in exclude, for placement, with
// their free space less what was placed on them since they reported it,
// and how many live OSTs exclude left out.
func (s *Server) candidates(exclude []uint32) (out []candidate, excluded int) {
	s.osts.mu.Lock()
	placed := make(map[uint32]uint64, len(s.osts.m))
	for id, o := range s.osts.m {
		placed[id] = o.placed
	}
	s.osts.mu.Unlock()
	for _, o := range s.listOsts() {
		if o.State != StateUp { // up, neither draining nor removed
			continue
		}
		if contains(exclude, o.Id) {
			excluded++
			continue
		}
		out = append(out, candidate{id: o.Id, capacity: o.Capacity, free: o.Free - min(o.Free, placed[o.Id])})
	}
	return out, excluded
}

// notePlaced records chunk bytes placed on OSTs, until their next report.
func (s *Server) notePlaced(bytes map[uint32]uint64) {
	s.osts.mu.Lock()
	defer s.osts.mu.Unlock()
	for id, n := range bytes {
		if o, ok := s.osts.m[id]; ok {
			o.placed += n
		}
	}
}

func contains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// persistOst writes an OST's persisted fields in t.
func (t *txn) persistOst(info *mdspb.OstInfo) error {
	rec := &mdspb.OstInfo{Id: info.Id, Uuid: info.Uuid, Addr: info.Addr, Capacity: info.Capacity, Free: info.Free}
	v, err := proto.Marshal(rec)
	if err != nil {
		return err
	}
	return t.b.Set(ostKey(info.Id), v, nil)
}

// RegisterOst returns the stable id of the OST with this uuid, assigning
// the next id (from 1) on first registration. Registering counts as a
// heartbeat.
func (s *Server) handleRegisterOst(ctx context.Context, req *mdspb.RegisterOstRequest) (_ *mdspb.RegisterOstReply, err error) {
	uuid, addr := req.GetUuid(), req.GetAddr()
	switch {
	case uuid == "" || len(uuid) > maxUUIDLen:
		return nil, fmt.Errorf("register OST: uuid of %d bytes (1..%d): %w", len(uuid), maxUUIDLen, errs.ErrInvalid)
	case addr == "" || len(addr) > maxAddrLen:
		return nil, fmt.Errorf("register OST: addr of %d bytes (1..%d): %w", len(addr), maxAddrLen, errs.ErrInvalid)
	}
	var id uint32
	var secret []byte
	err = s.update(func(t *txn) error {
		var err error
		if secret, err = t.ensureCapSecret(); err != nil {
			return err
		}
		v, err := getValue(t.b, ostUUIDKey(uuid))
		switch {
		case err == nil:
			if len(v) != 4 {
				return fmt.Errorf("mds: bad OST uuid index for %q: %w", uuid, errs.ErrCorrupt)
			}
			id = uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])
		case errors.Is(err, errs.ErrNotFound):
			n, err := t.nextID(counterNextOst)
			if err != nil {
				return err
			}
			if n > 1<<32-1 {
				return fmt.Errorf("mds: OST ids exhausted: %w", errs.ErrNoSpace)
			}
			id = uint32(n)
			if err := t.b.Set(ostUUIDKey(uuid), u32(nil, id), nil); err != nil {
				return err
			}
			// A first MDS's root layout fits the OSTs registered
			// (layout_fit.go): this one, and those before it.
			before, err := registeredOsts(t.b)
			if err != nil {
				return err
			}
			if err := fitRoot(t, s.o.DefaultLayout, before+1); err != nil {
				return err
			}
		default:
			return err
		}
		info := &mdspb.OstInfo{Id: id, Uuid: uuid, Addr: addr, Capacity: req.GetCapacity(), Free: req.GetFree()}
		return t.persistOst(info)
	})
	if err != nil {
		return nil, err
	}
	// The in-memory table changes only after the batch committed.
	s.osts.mu.Lock()
	o, ok := s.osts.m[id]
	if !ok {
		o = &ostState{info: &mdspb.OstInfo{Id: id, Uuid: uuid}}
		s.osts.m[id] = o
	}
	o.info.Addr, o.info.Capacity, o.info.Free = addr, req.GetCapacity(), req.GetFree()
	o.info.FsId = req.GetFsId()
	o.lastHB = s.o.Now()
	o.placed = 0
	s.osts.mu.Unlock()
	s.log.InfoContext(ctx, "ost registered", "ost", id, "uuid", uuid, "addr", addr)
	return &mdspb.RegisterOstReply{Id: id, CapSecret: secret}, nil
}

// Heartbeat records that an OST is alive, with its current space. Only an
// address change is persisted. An unknown id is ErrNotFound: the OST then
// registers again.
func (s *Server) handleHeartbeat(ctx context.Context, req *mdspb.HeartbeatRequest) (_ *mdspb.Empty, err error) {
	id := req.GetId()
	if id == 0 {
		return nil, fmt.Errorf("heartbeat without an OST id: %w", errs.ErrInvalid)
	}
	if len(req.GetAddr()) > maxAddrLen {
		return nil, fmt.Errorf("heartbeat: addr of %d bytes: %w", len(req.GetAddr()), errs.ErrInvalid)
	}
	s.osts.mu.Lock()
	o, ok := s.osts.m[id]
	var moved *mdspb.OstInfo
	if ok {
		o.info.Capacity, o.info.Free = req.GetCapacity(), req.GetFree()
		o.info.Used, o.info.Chunks = req.GetUsed(), req.GetChunks()
		o.info.FsId = req.GetFsId()
		o.lastHB = s.o.Now()
		o.placed = 0
		if a := req.GetAddr(); a != "" && a != o.info.Addr {
			o.info.Addr = a
			moved = proto.Clone(o.info).(*mdspb.OstInfo)
		}
	}
	s.osts.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("heartbeat from OST %d: %w", id, errs.ErrNotFound)
	}
	if moved != nil {
		s.log.InfoContext(ctx, "ost address changed", "ost", id, "addr", moved.Addr)
		if err := s.update(func(t *txn) error { return t.persistOst(moved) }); err != nil {
			return nil, err
		}
	}
	return &mdspb.Empty{}, nil
}

// ListOsts returns every registered OST, up or not.
func (s *Server) handleListOsts(ctx context.Context, req *mdspb.ListOstsRequest) (_ *mdspb.ListOstsReply, err error) {
	return &mdspb.ListOstsReply{Osts: s.listOsts(), NarrowExtents: s.narrowCount(), MinParity: uint32(s.o.Placement.MinParity)}, nil
}
