package mds

import (
	"context"
	"slices"
	"time"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Inode leases (docs/fuse.md, "Inode leases"): a session that holds one
// on regular file F may open F, look it up and stat it without asking the
// MDS, since F's attributes and extent map cannot change until the lease
// is recalled and released (or has expired). They live in the directory
// lease table (dirlease.go) under contentKey(F), with its Watch stream,
// recalls, terms and restart wait; a change of F recalls them as a change
// of a directory's entries recalls its leases: named by the request
// (intercept.go) or found by the handler as it runs (touchContent). They
// are granted by Open (with OpenRequest.lease) and renewed all at once by
// LeaseDir{renew_inodes}.

// contentBit marks a lease key as a file's contents: inode numbers stay
// below it.
const contentBit = uint64(1) << 63

// contentKey is the lease key of the contents of file ino.
func contentKey(ino uint64) uint64 { return ino | contentBit }

// renewContent extends, to expiry, every inode lease session sid holds
// that is neither recalled nor expired, and returns the gens of the
// recalled ones; ok is false when the session has no stream (nothing is
// renewed). The extension is the session's (contentUntil), so a renewal
// costs the same for ten leases or ten thousand; only the recalled ones
// are looked at.
func (t *leaseTable) renewContent(sid uint64, arrived, expiry time.Time) (recalled []uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := t.sessions[sid]
	if t.closed || ls == nil || ls.w == nil {
		return nil, false
	}
	// A lease that ended before this renewal is not brought back: when
	// the last renewal's extension ran out before this one came, a new
	// chain starts, which extends only the leases running now.
	if !arrived.Before(ls.contentUntil) {
		ls.chainStart = arrived
	}
	ls.contentUntil = expiry
	for key := range ls.recalledContent {
		if h := t.dirs[key].holders[sid]; h != nil && h.recalled {
			recalled = append(recalled, h.gen)
		}
	}
	return recalled, true
}

// expiryOf is when session sid's hold h on key ends: an inode lease
// that is not recalled, and ran when its session's chain of renewals
// began, lasts until the later of its own end and the chain's
// (contentUntil).
func (t *leaseTable) expiryOf(sid, key uint64, h *dirHold) time.Time {
	if key&contentBit == 0 || h.recalled {
		return h.expiry
	}
	if ls := t.sessions[sid]; ls != nil && ls.contentUntil.After(h.expiry) && !h.expiry.Before(ls.chainStart) {
		return ls.contentUntil
	}
	return h.expiry
}

// grantContent grants session sid a content lease on file ino around
// read, which reads what the lease covers (the attributes and extent
// map): it returns the lease's gen, or 0 when refused. An error is
// read's.
func (s *Server) grantContent(ctx context.Context, sid, ino uint64, read func() error) (gen uint64, err error) {
	arrived := time.Now()
	t := s.leases
	key := contentKey(ino)
	if t.lease <= 0 || ino&contentBit != 0 || t.grantable(sid) != "" {
		return 0, read()
	}
	if err := s.ensureLeaseMarker(); err != nil {
		return 0, err
	}
	g, why := t.grantBegin(sid, key)
	if why != "" {
		t.refused.Inc()
		return 0, read()
	}
	err = read()
	gen, why = t.grantEnd(g, sid, arrived.Add(t.lease), err == nil)
	if gen == 0 {
		if err == nil {
			t.refused.Inc()
			s.log.DebugContext(ctx, "content lease refused", "session", sid, "ino", ino, "why", why)
		}
		return 0, err
	}
	t.granted.Inc()
	return gen, nil
}

// handleRenewContent is LeaseDir{renew_inodes}.
func (s *Server) handleRenewContent(sid uint64, arrived time.Time) *mdspb.LeaseDirReply {
	t := s.leases
	recalled, ok := t.renewContent(sid, arrived, arrived.Add(t.lease))
	if !ok {
		t.refused.Inc()
		return &mdspb.LeaseDirReply{}
	}
	return &mdspb.LeaseDirReply{Gen: 1, LeaseMs: uint32(t.lease.Milliseconds()), Recalled: recalled}
}

// leaseWaitError fails a mutation that found, as it ran, leases it must
// recall first (touchContent): serve runs it again after a change of
// keys has recalled them and waited.
type leaseWaitError struct{ keys []uint64 }

func (e *leaseWaitError) Error() string { return "mds: leases to recall first" }

// touchContent readies, from within the transaction of the call in ctx,
// a change of the attributes of inodes inos that the call found as it ran
// (the inode an unlink removes a name of, the inodes a rename moves or
// replaces): see leaseTable.touch. Inodes 0 are ignored. A ctx of no
// call (an internal mutation) changes nothing leased.
func (s *Server) touchContent(ctx context.Context, inos ...uint64) error {
	ci, _ := ctx.Value(callKey{}).(*callInfo)
	if ci == nil {
		return nil
	}
	var keys []uint64
	for _, ino := range inos {
		if k := contentKey(ino); ino != 0 && !slices.Contains(ci.found, k) && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	end, ok := s.leases.touch(ci.session, keys...)
	if !ok {
		return &leaseWaitError{keys: keys}
	}
	ci.ends = append(ci.ends, end)
	return nil
}

// leaseCreated grants session sid an inode lease on the file a Create
// just made (out), with its attributes read again under the grant. A
// failure only costs the lease: the create stands.
func (s *Server) leaseCreated(ctx context.Context, sid uint64, out *mdspb.AttrReply) {
	ino := out.GetAttr().GetIno()
	var attr *mdspb.Attr
	gen, err := s.grantContent(ctx, sid, ino, func() error {
		return s.snapshot(func(r reader) error {
			n, err := readInode(r, ino)
			if err == nil {
				attr = n.Attr
			}
			return err
		})
	})
	if err != nil || gen == 0 {
		if err != nil {
			s.log.DebugContext(ctx, "inode lease of a created file", "ino", ino, "err", err)
		}
		if gen != 0 {
			s.leases.release(sid, []uint64{gen})
		}
		return
	}
	out.Attr, out.LeaseGen, out.LeaseMs = attr, gen, uint32(s.leases.lease.Milliseconds())
}
