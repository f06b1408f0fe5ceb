package mds

import (
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
)

// sessionTable holds the clients' sessions, their open handles and their
// locks. It is a pure state machine (no I/O; the caller passes the time)
// owned by the Server under sess.mu; nothing in it is persisted. A session
// lives until it is closed or until lease nanoseconds pass without a call
// naming it; then its handles and locks go.
type sessionTable struct {
	lease    int64 // ns
	sessions map[uint64]*session
	opens    map[uint64]int // ino -> open handles of every session
	locks    *lockTable
}

type session struct {
	id      uint64
	client  string
	host    string
	pid     uint32
	expires int64             // ns
	handles map[uint64]uint64 // handle -> ino
	inos    map[uint64]int    // ino -> handles of this session
	next    uint64            // last handle id handed out
}

func newSessionTable(lease int64) *sessionTable {
	return &sessionTable{
		lease:    lease,
		sessions: make(map[uint64]*session),
		opens:    make(map[uint64]int),
		locks:    newLockTable(),
	}
}

// add starts session id (the caller picks an unused id).
func (st *sessionTable) add(id uint64, client, host string, pid uint32, now int64) {
	st.sessions[id] = &session{
		id: id, client: client, host: host, pid: pid, expires: now + st.lease,
		handles: make(map[uint64]uint64), inos: make(map[uint64]int),
	}
}

// touch returns live session id with its lease renewed; ErrStale if it is
// unknown or expired (an expired session not yet collected is as good as
// gone: its locks may have been given up by now).
func (st *sessionTable) touch(id uint64, now int64) (*session, error) {
	s, ok := st.sessions[id]
	if !ok || now > s.expires {
		return nil, fmt.Errorf("session %x unknown or expired: %w", id, errs.ErrStale)
	}
	s.expires = now + st.lease
	return s, nil
}

// open records a handle of session id on ino.
func (st *sessionTable) open(id, ino uint64, now int64) (uint64, error) {
	s, err := st.touch(id, now)
	if err != nil {
		return 0, err
	}
	s.next++
	s.handles[s.next] = ino
	s.inos[ino]++
	st.opens[ino]++
	return s.next, nil
}

// release drops handle h of session id. When it was the session's last
// handle of the inode, the session's locks on it go too; unused reports
// that no session has the inode open any more. An unknown handle is not
// an error (a release may be retried).
func (st *sessionTable) release(id, h uint64, now int64) (ino uint64, unused bool, err error) {
	s, err := st.touch(id, now)
	if err != nil {
		return 0, false, err
	}
	ino, ok := s.handles[h]
	if !ok {
		return 0, false, nil
	}
	return ino, st.drop(s, h), nil
}

// drop removes handle h of s and reports whether its inode is now open
// nowhere.
func (st *sessionTable) drop(s *session, h uint64) bool {
	ino := s.handles[h]
	delete(s.handles, h)
	if s.inos[ino]--; s.inos[ino] <= 0 {
		delete(s.inos, ino)
		st.locks.dropSessionIno(s.id, ino)
	}
	if st.opens[ino]--; st.opens[ino] <= 0 {
		delete(st.opens, ino)
		return true
	}
	return false
}

// isOpen reports whether any session has ino open.
func (st *sessionTable) isOpen(ino uint64) bool { return st.opens[ino] > 0 }

// remove ends session id with its handles and locks, and returns the inodes
// that are open nowhere any more.
func (st *sessionTable) remove(id uint64) (unused []uint64) {
	s, ok := st.sessions[id]
	if !ok {
		return nil
	}
	for h := range s.handles {
		if ino := s.handles[h]; st.drop(s, h) {
			unused = append(unused, ino)
		}
	}
	st.locks.dropSession(id)
	delete(st.sessions, id)
	return unused
}

// expire ends every session whose lease ran out before now. It returns the
// sessions ended and the inodes open nowhere any more.
func (st *sessionTable) expire(now int64) (ended []*session, unused []uint64) {
	for id, s := range st.sessions {
		if now > s.expires {
			ended = append(ended, s)
			unused = append(unused, st.remove(id)...)
		}
	}
	return ended, unused
}

// setLock applies a lock request of session id on ino. Taking a lock needs
// an open handle of the inode in the session (locks go with the last one);
// unlocking does not.
func (st *sessionTable) setLock(id, ino uint64, r heldLock, now int64) (heldLock, bool, error) {
	s, err := st.touch(id, now)
	if err != nil {
		return heldLock{}, false, err
	}
	if r.typ != unlockReq && s.inos[ino] == 0 {
		return heldLock{}, false, fmt.Errorf("lock on inode %d, not open in session %x: %w", ino, id, errs.ErrInvalid)
	}
	r.owner.session = id
	c, ok := st.locks.set(ino, r)
	return c, ok, nil
}

// testLock returns a lock that conflicts with request r of session id.
func (st *sessionTable) testLock(id, ino uint64, r heldLock, now int64) (heldLock, bool, error) {
	if _, err := st.touch(id, now); err != nil {
		return heldLock{}, false, err
	}
	r.owner.session = id
	c, ok := st.locks.test(ino, r)
	return c, ok, nil
}
