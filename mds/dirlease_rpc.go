package mds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"google.golang.org/grpc"
)

// The Server's side of directory leases (docs/fuse.md, "Directory
// leases"): the changes' hook, the marker, LeaseDir and the Watch stream.
// The table itself is dirlease.go.

// leaseChange readies a change of the entries of dirs by the call in ctx
// (leaseTable.change, with the call's session). The caller ends it with
// done and the mutation's error once the mutation is visible or failed.
// A replica's mutation whose call ended first may still be applied: the
// change stays in flight until it is, or the term ends.
func (s *Server) leaseChange(ctx context.Context, dirs ...uint64) (done func(error), err error) {
	return s.leaseChangeAs(ctx, true, dirs...)
}

// leaseChangeAs is leaseChange; keepOwn as leaseTable.beginLocked's.
func (s *Server) leaseChangeAs(ctx context.Context, keepOwn bool, dirs ...uint64) (done func(error), err error) {
	end, err := s.leases.changeAs(ctx, callFrom(ctx).session, keepOwn, dirs...)
	if err != nil {
		return nil, err
	}
	return func(err error) {
		if err != nil && ctx.Err() != nil && s.raft != nil {
			s.raft.settle()
		}
		end()
	}, nil
}

// ensureLeaseMarker commits the marker that leases may be held
// (leaseMarkerKey) once per term, before its first grant.
func (s *Server) ensureLeaseMarker() error {
	t := s.leases
	t.markerMu.Lock()
	defer t.markerMu.Unlock()
	t.mu.Lock()
	done, epoch := t.markerDone, t.epoch
	t.mu.Unlock()
	if done {
		return nil
	}
	err := s.update(func(tx *txn) error { return tx.b.Set(leaseMarkerKey(), encodeU64(uint64(tx.now)), nil) })
	if err != nil {
		return fmt.Errorf("mds: directory lease marker: %w", err)
	}
	t.mu.Lock()
	if t.epoch == epoch {
		t.markerDone = true
	}
	t.mu.Unlock()
	return nil
}

// hasLeaseMarker says whether the state holds the marker.
func (s *Server) hasLeaseMarker() (bool, error) {
	_, err := getValue(s.db, leaseMarkerKey())
	if errors.Is(err, errs.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// LeaseDir grants a lease on a directory, with its entries, or refuses
// one (gen 0).
// Drain ends the Watch streams of directory leases and refuses new
// ones: call it before a graceful stop of the gRPC server, which would
// otherwise wait for them.
func (s *Server) Drain() { s.leases.drain() }

func (s *Server) handleLeaseDir(ctx context.Context, req *mdspb.LeaseDirRequest) (_ *mdspb.LeaseDirReply, err error) {
	arrived := time.Now()
	t := s.leases
	sid, dir := req.GetSession(), req.GetDir()
	refuse := func(why string) (*mdspb.LeaseDirReply, error) {
		t.refused.Inc()
		s.log.DebugContext(ctx, "directory lease refused", "session", sid, "dir", dir, "why", why)
		return &mdspb.LeaseDirReply{}, nil
	}
	if t.lease <= 0 {
		return refuse("leases off")
	}
	s.sess.mu.Lock()
	_, serr := s.sess.t.touch(sid, s.now())
	s.sess.mu.Unlock()
	if serr != nil {
		return refuse("session unknown")
	}
	if req.GetRenewInodes() {
		return s.handleRenewContent(sid, arrived), nil
	}
	if gen := req.GetRenew(); gen != 0 {
		if !t.renew(sid, dir, gen, arrived.Add(t.lease)) {
			return refuse("not held")
		}
		return &mdspb.LeaseDirReply{Gen: gen, LeaseMs: uint32(t.lease.Milliseconds())}, nil
	}
	if why := t.grantable(sid); why != "" {
		return refuse(why) // before the marker: it is for grants that may happen
	}
	if err := s.ensureLeaseMarker(); err != nil {
		return nil, err
	}
	g, why := t.grantBegin(sid, dir)
	if why != "" {
		return refuse(why)
	}
	cl := s.callerOf(ctx)
	out := &mdspb.LeaseDirReply{}
	why = ""
	err = s.snapshot(func(r reader) error {
		d, err := readInode(r, dir)
		if err != nil {
			return err
		}
		if !isDir(d.Attr.Mode) {
			return fmt.Errorf("lease of inode %d: %w", dir, errs.ErrNotDir)
		}
		if cl.check(d.Attr, mayRead|mayExec, "lease") != nil {
			why = "permission"
			return nil
		}
		return scan(r, dentryPrefix(dir), func(k, v []byte) (bool, error) {
			if len(out.Entries) == maxLeaseEntries {
				why = "too many entries"
				return false, nil
			}
			_, name, err := decodeDentryKey(k)
			if err != nil {
				return false, err
			}
			if !utf8.Valid(name) {
				// The reply's names are proto strings.
				why = "a name not in UTF-8"
				return false, nil
			}
			ino, mode, err := decodeDentry(v)
			if err != nil {
				return false, err
			}
			out.Entries = append(out.Entries, &mdspb.LeaseEntry{Name: string(name), Ino: ino, Mode: mode & sIFMT})
			return true, nil
		})
	})
	gen, why2 := t.grantEnd(g, sid, arrived.Add(t.lease), err == nil && why == "")
	switch {
	case err != nil:
		return nil, err
	case why != "":
		return refuse(why)
	case gen == 0:
		return refuse(why2)
	}
	t.granted.Inc()
	out.Gen, out.LeaseMs = gen, uint32(t.lease.Milliseconds())
	return out, nil
}

// Watch is the stream of a session's recalls (mdspb.WatchUp and
// WatchDown say how).
func (s *Server) Watch(st grpc.BidiStreamingServer[mdspb.WatchUp, mdspb.WatchDown]) error {
	return wire.ToStatus(s.watch(st))
}

func (s *Server) watch(st grpc.BidiStreamingServer[mdspb.WatchUp, mdspb.WatchDown]) error {
	if err := s.serving("watch"); err != nil {
		return err
	}
	first, err := st.Recv()
	if errors.Is(err, io.EOF) {
		return nil
	} else if err != nil {
		return err
	}
	sid := first.GetSession()
	s.sess.mu.Lock()
	_, err = s.sess.t.touch(sid, s.now())
	s.sess.mu.Unlock()
	if err != nil {
		return err
	}
	t := s.leases
	w, err := t.watch(sid)
	if err != nil {
		return err
	}
	defer t.unwatch(w)
	// The receiver: it ends when the stream does, at once when the
	// client ends it (waited for below), or when gRPC ends it after this
	// handler returns (Close waits for it: recvs).
	recvd := make(chan error, 1)
	go func() {
		defer t.recvs.Done()
		for {
			up, err := st.Recv()
			if err != nil {
				recvd <- err
				return
			}
			t.release(sid, up.GetReleased())
		}
	}()
	t.release(sid, first.GetReleased())
	// A member that stopped leading since the first check has reset the
	// table, or resets it after this registration.
	if err := s.serving("watch"); err != nil {
		return err
	}
	s.log.DebugContext(st.Context(), "watch stream open", "session", sid)
	for {
		select {
		case <-w.wake:
			for _, m := range t.take(w) {
				if err := st.Send(m); err != nil {
					return err
				}
			}
		case <-w.done:
			return t.endErr(w)
		case err := <-recvd:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-st.Context().Done():
			<-recvd
			return st.Context().Err()
		}
	}
}

// serving is serve's check for a stream: nil when this MDS takes calls.
func (s *Server) serving(op string) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return fmt.Errorf("mds: server closed: %w", errs.ErrUnavailable)
	}
	if err := s.commits.check(); err != nil {
		return fmt.Errorf("mds %s: %w", op, err)
	}
	return nil
}
