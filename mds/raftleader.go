package mds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

// reloadForLeader rebuilds the in-memory tables of a member that starts
// serving as leader, from its applied state, as Open does after a
// restart: the OST table from "o" and "s" keys (every OST counted up for
// one heartbeat timeout, as the previous leader saw them, until its own
// heartbeats arrive here), an empty session table with the orphan grace
// of a restart (clients find their session gone and announce their opens
// again), no locks, no directory leases (changes wait out those of the
// earlier leader: dirlease.go). Server.mu is held.
func (s *Server) reloadForLeader() error {
	s.osts.mu.Lock()
	s.osts.m = make(map[uint32]*ostState)
	s.osts.mu.Unlock()
	s.osts.mu.Lock()
	err := s.loadOsts()
	if err == nil {
		err = s.loadOstStates()
	}
	now := s.o.Now()
	for _, o := range s.osts.m {
		if o.admin != ostRemoved {
			o.lastHB = now
		}
	}
	s.osts.mu.Unlock()
	if err != nil {
		return err
	}
	s.sess.mu.Lock()
	s.sess.t = newSessionTable(int64(s.o.SessionLease))
	s.sess.graceUntil = s.now() + int64(s.o.SessionLease)
	s.sess.mu.Unlock()
	marker, err := s.hasLeaseMarker()
	if err != nil {
		return err
	}
	s.leases.start(marker)
	return nil
}

// formatReplicated proposes the format batch of a new group's database
// (version, counters, root) unless the applied state has one. It runs on
// the first leader after it starts serving; a format proposed by an
// earlier leader and committed is applied before any later leader serves,
// so it is never written twice. It runs on a goroutine of the server's
// group (tasks.go) and stops when ctx is done or the replica stops.
func (r *replica) formatReplicated(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.stopCtx(), cancel)()
	for attempt := 0; attempt < 50; attempt++ {
		err := r.propose(ctx, "", func(t *txn) error {
			if _, err := getValue(t.b, versionKey()); err == nil {
				return nil
			} else if !errors.Is(err, errs.ErrNotFound) {
				return err
			}
			return r.sm.format(t)
		})
		if err == nil {
			r.mu.Lock()
			r.mu.formatted = true
			r.mu.Unlock()
			r.log.Info("mds group database ready", "version", formatVersion)
			return
		}
		if errors.Is(err, errs.ErrNotLeader) {
			return // the next leader formats
		}
		r.log.Warn("format replicated database", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// expireRequests deletes request ids past their expiry (GC round).
func (s *Server) expireRequests(now int64) error {
	var keys [][]byte
	err := scanRange(s.db, []byte{prefixReqExp}, u64([]byte{prefixReqExp}, uint64(now)), func(k, _ []byte) (bool, error) {
		keys = append(keys, append([]byte(nil), k...))
		return len(keys) < 10*gcBatch, nil
	})
	if err != nil || len(keys) == 0 {
		return err
	}
	return s.update(func(t *txn) error {
		for _, k := range keys {
			if len(k) < 9 {
				return fmt.Errorf("mds: bad request expiry key %x: %w", k, errs.ErrCorrupt)
			}
			if err := t.b.Delete(k, nil); err != nil {
				return err
			}
			if err := t.b.Delete(reqKey(string(k[9:])), nil); err != nil {
				return err
			}
		}
		return nil
	})
}
