package mds

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Sessions, open handles, orphans and locks.
//
// Every client opens a session (OpenSession) and renews it (KeepAlive, or
// any call naming it) within SessionLease. It announces each file it opens
// (Open) and closes (Release), and takes flock and POSIX locks through the
// MDS (SetLock, GetLock), so that locks work between clients. All of this
// lives in memory only, in a sessionTable under sess.mu: a session that
// misses its lease, or an MDS restart, ends it with its handles and locks.
//
// When unlink or rename removes the last name of an inode that some
// session has open, the inode stays, with nlink 0, and an orphan key ("n")
// records it in the same batch; reads, writes and truncates through the
// open handles keep working. The last Release (or the end of the last
// session holding it) deletes the inode and queues its extents for GC.
// After a restart no handle is known: clients re-announce their opens when
// they find their session gone (STALE), and orphans still unopened one
// lease after Open are deleted by the session loop, which also expires
// sessions.

// Limits of the session API.
const (
	maxSessionName = 255
	sessionTickMin = 10 * time.Millisecond
	sessionTickMax = time.Second
)

// startSessions sets up the session table and starts the session loop
// (stopped by Close).
func (s *Server) startSessions() {
	s.sess.graceUntil = s.now() + int64(s.o.SessionLease)
	s.tasks.Go(s.sessionLoop)
}

func (s *Server) sessionLoop(ctx context.Context) {
	tick := time.NewTicker(min(max(s.o.SessionLease/4, sessionTickMin), sessionTickMax))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !s.leading() {
			continue
		}
		if err := s.sessionRound(); err != nil && ctx.Err() == nil {
			s.log.Warn("session round failed", "err", err)
		}
	}
}

// sessionRound ends the sessions whose lease ran out and, once the restart
// grace is over, deletes the orphans that no session has open. It runs on
// the session loop; tests call it directly.
func (s *Server) sessionRound() error {
	return s.update(func(t *txn) error {
		s.sess.mu.Lock()
		ended, _ := s.sess.t.expire(t.now)
		s.sess.mu.Unlock()
		for _, se := range ended {
			s.log.Info("session expired: its opens and locks are released",
				"session", se.id, "client", se.client, "host", se.host, "pid", se.pid)
			s.leases.dropSession(se.id)
		}
		s.leases.sweep()
		if t.now < s.sess.graceUntil {
			return nil
		}
		return t.collectOrphans()
	})
}

// inodeOpen reports whether any session has ino open. Caller holds mu, so
// that no Open or Release runs meanwhile.
func (s *Server) inodeOpen(ino uint64) bool {
	s.sess.mu.Lock()
	defer s.sess.mu.Unlock()
	return s.sess.t.isOpen(ino)
}

// collectOrphans deletes up to gcBatch orphans that no session has open.
func (t *txn) collectOrphans() error {
	var inos []uint64
	err := scan(t.b, []byte{prefixOrphan}, func(k, _ []byte) (bool, error) {
		ino, err := decodeIDKey(prefixOrphan, k)
		if err != nil {
			return false, err
		}
		if !t.env.open(ino) {
			inos = append(inos, ino)
		}
		return len(inos) < gcBatch, nil
	})
	if err != nil {
		return err
	}
	for _, ino := range inos {
		if err := t.reapOrphan(ino); err != nil {
			return err
		}
		t.env.log.Debug("orphan deleted", "ino", ino)
	}
	return nil
}

// reapOrphan deletes inode ino and its extent map when it is an orphan
// (no name left); otherwise it does nothing. The caller checked that no
// session has it open.
func (t *txn) reapOrphan(ino uint64) error {
	if _, err := getValue(t.b, orphanKey(ino)); errors.Is(err, errs.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if err := t.b.Delete(orphanKey(ino), nil); err != nil {
		return err
	}
	n, err := t.inode(ino)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return nil
	case err != nil:
		return err
	case n.Attr.Nlink > 0:
		return nil
	}
	if err := t.truncateMap(ino, 0); err != nil {
		return err
	}
	t.remove(ino)
	return nil
}

// OpenSession starts a client session.
func (s *Server) handleOpenSession(ctx context.Context, req *mdspb.OpenSessionRequest) (_ *mdspb.OpenSessionReply, err error) {
	if len(req.GetClient()) > maxSessionName || len(req.GetHost()) > maxSessionName {
		return nil, fmt.Errorf("session client or host name longer than %d bytes: %w", maxSessionName, errs.ErrInvalid)
	}
	s.sess.mu.Lock()
	// Random ids, so that a session of an earlier run of the MDS is
	// never mistaken for a new one.
	id := rand.Uint64()
	for id == 0 || s.sess.t.sessions[id] != nil {
		id = rand.Uint64()
	}
	s.sess.t.add(id, req.GetClient(), req.GetHost(), req.GetPid(), s.now())
	s.sess.mu.Unlock()
	s.log.DebugContext(ctx, "session opened", "session", id, "client", req.GetClient(), "host", req.GetHost(), "pid", req.GetPid())
	return &mdspb.OpenSessionReply{Session: id, LeaseMs: s.o.SessionLease.Milliseconds()}, nil
}

// KeepAlive renews a session's lease; STALE if it is gone.
func (s *Server) handleKeepAlive(ctx context.Context, req *mdspb.SessionRequest) (_ *mdspb.KeepAliveReply, err error) {
	s.sess.mu.Lock()
	_, err = s.sess.t.touch(req.GetSession(), s.now())
	s.sess.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &mdspb.KeepAliveReply{LeaseMs: s.o.SessionLease.Milliseconds()}, nil
}

// CloseSession ends a session, releasing its handles and locks. Closing an
// unknown session does nothing.
func (s *Server) handleCloseSession(ctx context.Context, req *mdspb.SessionRequest) (_ *mdspb.Empty, err error) {
	err = s.update(func(t *txn) error {
		s.sess.mu.Lock()
		unused := s.sess.t.remove(req.GetSession())
		s.sess.mu.Unlock()
		s.leases.dropSession(req.GetSession())
		for _, ino := range unused {
			if err := t.reapOrphan(ino); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &mdspb.Empty{}, nil
}

// Open records that the session opened regular file ino (or still has it
// open, after an MDS restart) and returns the handle to release.
func (s *Server) handleOpen(ctx context.Context, req *mdspb.OpenRequest) (_ *mdspb.OpenReply, err error) {
	var h uint64
	err = s.update(func(t *txn) error {
		if _, err := t.regularFile(req.GetIno()); err != nil {
			return err
		}
		s.sess.mu.Lock()
		defer s.sess.mu.Unlock()
		var oerr error
		h, oerr = s.sess.t.open(req.GetSession(), req.GetIno(), t.now)
		return oerr
	})
	if err != nil {
		return nil, err
	}
	out := &mdspb.OpenReply{Handle: h}
	if req.GetExtents() {
		cl := s.callerOf(ctx)
		defer func() {
			if err == nil {
				out.Caps, err = s.refCaps(cl, out.Attr, out.Extents)
			}
		}()
		// Read after the handle exists: what a later commit changes is
		// seen at the next open, as close-to-open promises.
		read := func() error {
			return s.snapshot(func(r reader) error {
				var err error
				out.Attr, out.Extents, err = readExtents(r, req.GetIno())
				return err
			})
		}
		if req.GetLease() {
			out.LeaseGen, err = s.grantContent(ctx, req.GetSession(), req.GetIno(), read)
			if out.LeaseGen != 0 {
				out.LeaseMs = uint32(s.leases.lease.Milliseconds())
			}
		} else {
			err = read()
		}
		if err != nil {
			if rerr := s.releaseHandle(req.GetSession(), h); rerr != nil {
				s.log.WarnContext(ctx, "release handle after a failed open", "ino", req.GetIno(), "err", rerr)
			}
			return nil, err
		}
	}
	return out, nil
}

// Release drops an open handle. The session's locks on the inode go with
// its last handle of it, and an orphan with its last handle anywhere.
func (s *Server) handleRelease(ctx context.Context, req *mdspb.ReleaseRequest) (_ *mdspb.Empty, err error) {
	if err := s.releaseHandle(req.GetSession(), req.GetHandle()); err != nil {
		return nil, err
	}
	return &mdspb.Empty{}, nil
}

// releaseHandle drops handle h of session id, and reaps the orphan it
// kept.
func (s *Server) releaseHandle(id, h uint64) error {
	return s.update(func(t *txn) error {
		s.sess.mu.Lock()
		ino, unused, err := s.sess.t.release(id, h, t.now)
		s.sess.mu.Unlock()
		if err != nil || !unused {
			return err
		}
		return t.reapOrphan(ino)
	})
}

// lockOf checks a lock from the wire and converts it; flock locks always
// cover the whole file.
func lockOf(req *mdspb.LockRequest, unlockOK bool) (heldLock, error) {
	l := req.GetLock()
	h := heldLock{owner: lockOwner{owner: req.GetOwner()}, start: l.GetStart(), end: l.GetEnd(), pid: l.GetPid()}
	switch l.GetKind() {
	case mdspb.LockKind_LOCK_KIND_POSIX:
		h.kind = posixLock
	case mdspb.LockKind_LOCK_KIND_FLOCK:
		h.kind = flockLock
		h.start, h.end = 0, math.MaxUint64
	default:
		return h, fmt.Errorf("lock kind %v: %w", l.GetKind(), errs.ErrInvalid)
	}
	switch l.GetType() {
	case mdspb.LockType_LOCK_TYPE_READ:
		h.typ = readLock
	case mdspb.LockType_LOCK_TYPE_WRITE:
		h.typ = writeLock
	case mdspb.LockType_LOCK_TYPE_UNLOCK:
		if !unlockOK {
			return h, fmt.Errorf("lock test of type unlock: %w", errs.ErrInvalid)
		}
		h.typ = unlockReq
	default:
		return h, fmt.Errorf("lock type %v: %w", l.GetType(), errs.ErrInvalid)
	}
	if h.start > h.end {
		return h, fmt.Errorf("lock range [%d, %d]: %w", h.start, h.end, errs.ErrInvalid)
	}
	return h, nil
}

// wireLock converts a held lock for the wire.
func wireLock(h heldLock) *mdspb.FileLock {
	l := &mdspb.FileLock{Start: h.start, End: h.end, Pid: h.pid, Kind: mdspb.LockKind_LOCK_KIND_POSIX, Type: mdspb.LockType_LOCK_TYPE_READ}
	if h.kind == flockLock {
		l.Kind = mdspb.LockKind_LOCK_KIND_FLOCK
	}
	if h.typ == writeLock {
		l.Type = mdspb.LockType_LOCK_TYPE_WRITE
	}
	return l
}

// SetLock takes, changes or releases a lock; it never waits. A lock of
// another owner in the way is reported with granted false.
func (s *Server) handleSetLock(ctx context.Context, req *mdspb.LockRequest) (_ *mdspb.SetLockReply, err error) {
	r, err := lockOf(req, true)
	if err != nil {
		return nil, err
	}
	s.sess.mu.Lock()
	c, ok, err := s.sess.t.setLock(req.GetSession(), req.GetIno(), r, s.now())
	s.sess.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !ok {
		return &mdspb.SetLockReply{Conflict: wireLock(c)}, nil
	}
	return &mdspb.SetLockReply{Granted: true}, nil
}

// GetLock returns a lock of another owner that would stand in the way of
// the one described (F_GETLK), or none.
func (s *Server) handleGetLock(ctx context.Context, req *mdspb.LockRequest) (_ *mdspb.GetLockReply, err error) {
	r, err := lockOf(req, false)
	if err != nil {
		return nil, err
	}
	s.sess.mu.Lock()
	c, ok, err := s.sess.t.testLock(req.GetSession(), req.GetIno(), r, s.now())
	s.sess.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !ok {
		return &mdspb.GetLockReply{}, nil
	}
	return &mdspb.GetLockReply{Conflict: wireLock(c)}, nil
}
