package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// A Client holds one session at the MDS, opened by New, renewed in the
// background every lease/3 and ended by Close. Through it the client
// announces the files it opens (so that a file removed while open keeps its
// data until closed) and holds its flock and POSIX locks (so that locks
// work between clients). The MDS keeps sessions in memory only: when a
// call finds the session gone (STALE: the MDS restarted, or this client
// missed its lease), the client opens a new session and announces its open
// files again. Its locks are lost then; the MDS gave them up.

// session is a Client's MDS session.
//
// Lock order: File.mu (File.Close releases its handle holding it), then
// session.reopen, then session.mu. session.mu is never held across an RPC.
type session struct {
	// reopen serialises the replacement of a lost session.
	reopen sync.Mutex
	mu     struct {
		sync.Mutex
		id    uint64
		lease time.Duration
		opens map[*handle]struct{} // announced open files
	}
	cancel    context.CancelFunc // stops the keepalive and watch loops
	done      chan struct{}      // closed when the keepalive loop stopped
	watchDone chan struct{}      // closed when the watch loop stopped
}

// handle is one open file announced to the MDS. Its fields are guarded by
// session.mu; id 0 means the MDS has no handle for it (lost in a restart
// and not announced again because the inode is gone).
type handle struct {
	ino     uint64
	session uint64
	id      uint64
}

// Session timeouts.
const (
	sessionCallTimeout = 10 * time.Second // OpenSession, CloseSession
	minKeepAlive       = 10 * time.Millisecond
)

// startSession opens the client's session and starts its keepalive loop.
func (c *Client) startSession(ctx context.Context) error {
	c.sess.mu.opens = make(map[*handle]struct{})
	if err := c.openSession(ctx); err != nil {
		return err
	}
	kctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.sess.cancel = cancel
	c.sess.done = make(chan struct{})
	c.sess.watchDone = make(chan struct{})
	go c.keepAlive(kctx)
	go func() {
		defer close(c.sess.watchDone)
		if !c.leases.off {
			c.watch(kctx) // dirlease.go
		}
	}()
	return nil
}

// openSession asks the MDS for a new session and makes it the client's.
func (c *Client) openSession(ctx context.Context) error {
	host, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(ctx, sessionCallTimeout)
	defer cancel()
	r, err := c.mds.OpenSession(ctx, &mdspb.OpenSessionRequest{Client: c.opts.Name, Host: host, Pid: uint32(os.Getpid())})
	if err != nil {
		return fmt.Errorf("open MDS session: %w", err)
	}
	lease := time.Duration(r.GetLeaseMs()) * time.Millisecond
	if r.GetSession() == 0 || lease <= 0 {
		return fmt.Errorf("open MDS session: got session %x, lease %v: %w", r.GetSession(), lease, errs.ErrCorrupt)
	}
	c.sess.mu.Lock()
	c.sess.mu.id, c.sess.mu.lease = r.GetSession(), lease
	c.sess.mu.Unlock()
	return nil
}

// sessionID returns the current session.
func (c *Client) sessionID() uint64 {
	c.sess.mu.Lock()
	defer c.sess.mu.Unlock()
	return c.sess.mu.id
}

// keepAlive renews the session every lease/3 until ctx is cancelled. A
// STALE answer replaces the session; an unreachable MDS is retried at the
// next tick, with gRPC's reconnection backoff reset so that a restarted MDS
// is found within the lease.
func (c *Client) keepAlive(ctx context.Context) {
	defer close(c.sess.done)
	for {
		c.sess.mu.Lock()
		id, every := c.sess.mu.id, max(c.sess.mu.lease/3, minKeepAlive)
		c.sess.mu.Unlock()
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		_, err := c.mds.KeepAlive(cctx, &mdspb.SessionRequest{Session: id})
		cancel()
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, errs.ErrStale):
			if err := c.replaceSession(ctx, id); err != nil && ctx.Err() == nil {
				c.log.Warn("MDS session lost and not replaced yet", "err", err)
			}
		default:
			c.log.Debug("MDS keepalive failed", "err", err)
			c.mdsConn.ResetConnectBackoff()
		}
	}
}

// replaceSession opens a new session in place of stale (unless another
// caller did already) and announces every open file again. The locks of
// the old session are gone.
func (c *Client) replaceSession(ctx context.Context, stale uint64) error {
	c.sess.reopen.Lock()
	defer c.sess.reopen.Unlock()
	if c.sessionID() != stale {
		return nil
	}
	if err := c.openSession(ctx); err != nil {
		return err
	}
	c.sess.mu.Lock()
	id := c.sess.mu.id
	opens := make([]*handle, 0, len(c.sess.mu.opens))
	for h := range c.sess.mu.opens {
		opens = append(opens, h)
	}
	c.sess.mu.Unlock()
	c.log.Warn("MDS session lost (MDS restart or missed lease): opened a new one; locks held by this client were released",
		"session", id, "open_files", len(opens))
	var firstErr error
	for _, h := range opens {
		r, err := c.mds.Open(ctx, &mdspb.OpenRequest{Session: id, Ino: h.ino})
		if err != nil {
			// Gone (an orphan collected meanwhile) or an error: the file
			// stays open here without an MDS handle.
			c.log.Warn("announce open file to the MDS", "ino", h.ino, "err", err)
			if firstErr == nil && !errors.Is(err, errs.ErrNotFound) {
				firstErr = err
			}
			c.sess.mu.Lock()
			h.session, h.id = 0, 0
			c.sess.mu.Unlock()
			continue
		}
		c.sess.mu.Lock()
		_, open := c.sess.mu.opens[h]
		if open {
			h.session, h.id = id, r.GetHandle()
		}
		c.sess.mu.Unlock()
		if !open { // closed meanwhile
			c.mds.Release(ctx, &mdspb.ReleaseRequest{Session: id, Handle: r.GetHandle()})
		}
	}
	return firstErr
}

// withSession runs call with the current session and, when the MDS answers
// STALE, again with a new one.
func (c *Client) withSession(ctx context.Context, call func(id uint64) error) error {
	var err error
	for range 3 {
		id := c.sessionID()
		if err = call(id); !errors.Is(err, errs.ErrStale) {
			return err
		}
		if rerr := c.replaceSession(ctx, id); rerr != nil {
			return errors.Join(err, rerr)
		}
	}
	return err
}

// openHandleWith announces the open req (its session is set here) to the
// MDS.
func (c *Client) openHandleWith(ctx context.Context, req *mdspb.OpenRequest) (*handle, *mdspb.OpenReply, error) {
	ino := req.GetIno()
	h := &handle{ino: ino}
	var reply *mdspb.OpenReply
	err := c.withSession(ctx, func(id uint64) error {
		r, err := c.mds.Open(ctx, &mdspb.OpenRequest{Session: id, Ino: ino, Extents: req.GetExtents(), Lease: req.GetLease()})
		if err != nil {
			return err
		}
		reply = r
		c.sess.mu.Lock()
		defer c.sess.mu.Unlock()
		if c.sess.mu.id != id {
			// The session was replaced during the call, before this
			// file was in the table: announce it to the new one.
			return fmt.Errorf("session replaced during open: %w", errs.ErrStale)
		}
		h.session, h.id = id, r.GetHandle()
		c.sess.mu.opens[h] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return h, reply, nil
}

// releaseHandle tells the MDS that h is closed. A session that is gone
// (or a client closed, which ended it) took its handles along: nothing to
// do then.
func (c *Client) releaseHandle(ctx context.Context, h *handle) error {
	c.sess.mu.Lock()
	delete(c.sess.mu.opens, h)
	sess, id := h.session, h.id
	c.sess.mu.Unlock()
	if id == 0 || c.closed.Load() {
		return nil
	}
	_, err := c.mds.Release(ctx, &mdspb.ReleaseRequest{Session: sess, Handle: id})
	if errors.Is(err, errs.ErrStale) {
		return nil
	}
	return err
}

// closeSession stops the keepalive loop and ends the session at the MDS,
// which releases its open handles and locks.
func (c *Client) closeSession() error {
	c.stopSessionLoops()
	ctx, cancel := context.WithTimeout(context.Background(), sessionCallTimeout)
	defer cancel()
	_, err := c.mds.CloseSession(ctx, &mdspb.SessionRequest{Session: c.sessionID()})
	return err
}

// stopSessionLoops stops the keepalive and watch loops and waits for
// them and for the lease requests in flight; every directory lease is
// dropped.
func (c *Client) stopSessionLoops() {
	c.sess.cancel()
	<-c.sess.done
	<-c.sess.watchDone
	c.leases.mu.Lock()
	c.leases.renew = nil
	c.leases.dropAllLocked()
	c.leases.mu.Unlock()
	c.leases.wg.Wait()
}

// Abandon stops renewing the session and closes every connection without
// ending the session, as a client that crashes would: the MDS releases its
// open files and locks when the lease runs out. It is for fault tests;
// use Close otherwise.
func (c *Client) Abandon() {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.stopSessionLoops()
		c.closeErr = c.closeConns()
	})
}

// SetLock sets, changes or releases (type LockUnlock) a lock of owner (an
// id the caller chooses: FUSE's lock owner) on the bytes [l.Start, l.End]
// of ino, which this client must have open (unlocking needs no open
// file). It never waits: when another owner's lock is in the way it
// returns false and that lock.
func (c *Client) SetLock(ctx context.Context, ino, owner uint64, l *FileLock) (bool, *FileLock, error) {
	var r *mdspb.SetLockReply
	err := c.withSession(ctx, func(id uint64) error {
		var err error
		r, err = c.mds.SetLock(ctx, &mdspb.LockRequest{Session: id, Ino: ino, Owner: owner, Lock: l.wire()})
		return err
	})
	if err != nil {
		return false, nil, fmt.Errorf("lock inode %d: %w", ino, err)
	}
	return r.GetGranted(), fileLockOf(r.GetConflict()), nil
}

// GetLock returns a lock of another owner that stands in the way of l
// (F_GETLK), or nil.
func (c *Client) GetLock(ctx context.Context, ino, owner uint64, l *FileLock) (*FileLock, error) {
	var r *mdspb.GetLockReply
	err := c.withSession(ctx, func(id uint64) error {
		var err error
		r, err = c.mds.GetLock(ctx, &mdspb.LockRequest{Session: id, Ino: ino, Owner: owner, Lock: l.wire()})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("test lock on inode %d: %w", ino, err)
	}
	return fileLockOf(r.GetConflict()), nil
}
