package mds

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

// Halt stops this member's part in its group at once, as the death of its
// process would: the Raft loop stops between two Ready batches (what a
// Ready persisted stays persisted, nothing more is applied or sent), the
// transport closes its streams, calls in flight fail with NOT_LEADER. The
// server answers nothing but NOT_LEADER afterwards and must still be
// closed. For tests that kill members (test/cluster KillMDS); a no-op
// for a single MDS.
func (s *Server) Halt() error {
	if s.raft == nil {
		return nil
	}
	return s.raft.close()
}

// MemberStatus is a replicated MDS member's view of itself.
type MemberStatus struct {
	ID      uint64
	Role    string // leader, follower, candidate, pre-candidate
	Term    uint64
	Leader  uint64 // 0: none known
	Applied uint64 // last entry applied to the state machine
	Commit  uint64
	// Serving: this member leads and takes calls (it applied every entry
	// before its term).
	Serving bool
	// ServingSince is when this member last began to serve as leader;
	// LeaseUntil is when its read lease ends (or ended) unless renewed.
	ServingSince, LeaseUntil time.Time
	Members                  map[uint64]string // id -> address, as of Applied
}

// MemberStatus returns this member's status; ok is false for a single MDS.
func (s *Server) MemberStatus() (st MemberStatus, ok bool) {
	r := s.raft
	if r == nil {
		return st, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st = MemberStatus{ID: r.o.ID, Role: roleName(r.mu.role), Term: r.mu.term, Leader: r.mu.leader,
		Applied: r.mu.applied, Commit: r.mu.commit, Serving: r.mu.serving && r.mu.formatted,
		ServingSince: r.mu.servingAt, LeaseUntil: r.mu.leaseUntil,
		Members: make(map[uint64]string, len(r.mu.members))}
	for id, a := range r.mu.members {
		st.Members[id] = a
	}
	return st, true
}

// StateDigest hashes every key and value of the state machine, from one
// Pebble snapshot, and returns it with the applied index it is at: two
// members at the same applied index must have the same digest (tests
// compare them after a run).
func (s *Server) StateDigest() (applied uint64, digest [32]byte, err error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return 0, digest, fmt.Errorf("mds: closed: %w", errs.ErrUnavailable)
	}
	h := sha256.New()
	err = s.snapshot(func(r reader) error {
		if v, err := getValue(r, appliedKey()); err == nil {
			applied, _, _ = decodeApplied(v)
		}
		return scanRange(r, []byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, func(k, v []byte) (bool, error) {
			var n [8]byte
			binary.BigEndian.PutUint64(n[:], uint64(len(k)))
			h.Write(n[:])
			h.Write(k)
			binary.BigEndian.PutUint64(n[:], uint64(len(v)))
			h.Write(n[:])
			h.Write(v)
			return true, nil
		})
	})
	copy(digest[:], h.Sum(nil))
	return applied, digest, err
}

// errDuplicate: a mutation with this request id was applied already.
var errDuplicate = errors.New("mds: request already applied")
