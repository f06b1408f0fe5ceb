package mds

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// OST administrative states. The state an OstInfo reports combines them
// with liveness: "removed", "draining", else "up" or "down".
const (
	ostActive   uint32 = 0 // placement may use it (no key)
	ostDraining uint32 = 1 // no new extents; the drain job empties it
	ostRemoved  uint32 = 2 // gone for good: its chunks count as lost
)

// OstInfo.State values.
const (
	StateUp       = "up"
	StateDown     = "down"
	StateDraining = "draining"
	StateRemoved  = "removed"
)

// stateName is what OstInfo.State reports for an OST.
func stateName(admin uint32, up bool) string {
	switch {
	case admin == ostRemoved:
		return StateRemoved
	case admin == ostDraining:
		return StateDraining
	case up:
		return StateUp
	}
	return StateDown
}

// loadOstStates reads the "s" keys into the OST table at Open.
func (s *Server) loadOstStates() error {
	return scan(s.db, []byte{prefixOstState}, func(k, v []byte) (bool, error) {
		id, err := decodeOstStateKey(k)
		if err != nil {
			return false, err
		}
		if len(v) != 4 {
			return false, fmt.Errorf("mds: bad OST state %x: %w", k, errs.ErrCorrupt)
		}
		st := uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])
		if o, ok := s.osts.m[id]; ok {
			o.admin = st
		}
		return true, nil
	})
}

// ostAdmin returns the admin state of every registered OST.
func (s *Server) ostAdmin() map[uint32]uint32 {
	s.osts.mu.Lock()
	defer s.osts.mu.Unlock()
	out := make(map[uint32]uint32, len(s.osts.m))
	for id, o := range s.osts.m {
		out[id] = o.admin
	}
	return out
}

// SetOstState changes an OST's administrative state. Removing is refused
// while any committed or pending extent still has a chunk on the OST
// (drain or repair first), unless force: then its chunks count as lost and
// repair rebuilds them elsewhere.
func (s *Server) handleSetOstState(ctx context.Context, req *mdspb.SetOstStateRequest) (_ *mdspb.OstInfo, err error) {
	var st uint32
	switch req.GetState() {
	case "active", StateUp:
		st = ostActive
	case StateDraining, "drain":
		st = ostDraining
	case StateRemoved, "remove":
		st = ostRemoved
	default:
		return nil, fmt.Errorf("OST state %q (active, draining, removed): %w", req.GetState(), errs.ErrInvalid)
	}
	id := req.GetId()
	s.osts.mu.Lock()
	_, known := s.osts.m[id]
	s.osts.mu.Unlock()
	if !known {
		return nil, fmt.Errorf("OST %d: %w", id, errs.ErrNotFound)
	}
	if st == ostRemoved && !req.GetForce() {
		n, err := s.extentsOn(id)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return nil, fmt.Errorf("OST %d still holds chunks of %d extents: drain it first (or force): %w", id, n, errs.ErrNotEmpty)
		}
	}
	err = s.update(func(t *txn) error {
		if st == ostActive {
			return t.b.Delete(ostStateKey(id), nil)
		}
		return t.b.Set(ostStateKey(id), u32(nil, st), nil)
	})
	if err != nil {
		return nil, err
	}
	s.osts.mu.Lock()
	if o, ok := s.osts.m[id]; ok {
		o.admin = st
	}
	s.osts.mu.Unlock()
	s.log.InfoContext(ctx, "ost state changed", "ost", id, "state", req.GetState())
	if st == ostDraining {
		if _, err := s.admin.startJob(&mdspb.StartJobRequest{Kind: JobDrain}); err != nil {
			return nil, err
		}
	}
	s.admin.kickRound()
	for _, o := range s.listOsts() {
		if o.Id == id {
			return o, nil
		}
	}
	return nil, fmt.Errorf("OST %d: %w", id, errs.ErrNotFound)
}

// decodeExtentValue decodes the value of an "r" or "p" key.
func decodeExtentValue(k, v []byte) (*mdspb.Extent, error) {
	_, body, err := decodePrefixed(v)
	if err != nil {
		return nil, err
	}
	e := &mdspb.Extent{}
	if err := proto.Unmarshal(body, e); err != nil {
		return nil, fmt.Errorf("mds: decode extent %x: %v: %w", k, err, errs.ErrCorrupt)
	}
	return e, nil
}
