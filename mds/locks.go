package mds

import (
	"math"
	"sort"
)

// lockTable arbitrates file locks between clients: flock(2) locks (whole
// file, one per open file description) and POSIX fcntl(2) record locks
// (byte ranges, per process). It is a pure state machine, driven by the
// session table under Server.sess.mu, with no I/O and no clock; locks live
// in memory only and die with their session.
//
// A lock belongs to an owner: the session (one per client) and the id the
// client gives (FUSE's lock owner: the process for POSIX locks, the open
// file for flock). Two locks conflict when they are on the same inode, of
// the same kind (flock and POSIX locks ignore each other, as on Linux),
// of different owners, their ranges overlap and one of them is a write
// lock. An owner's own locks never conflict with each other: setting a
// lock over them replaces the overlap (upgrade, downgrade), unlocking a
// sub-range splits them, and adjacent or overlapping ranges of one type
// merge, so an owner holds at most one lock per byte.
type lockTable struct {
	byIno map[uint64][]heldLock // ordered by (kind, start)
	// bySession is where each session holds locks: ino -> number of locks.
	bySession map[uint64]map[uint64]int
}

// lockOwner identifies the holder of a lock.
type lockOwner struct {
	session uint64
	owner   uint64
}

type lockKind uint8

const (
	posixLock lockKind = iota + 1
	flockLock
)

type lockType uint8

const (
	readLock lockType = iota + 1
	writeLock
	unlockReq // in requests only: release the range
)

// heldLock is a lock held (or requested) on the bytes [start, end] of one
// inode, end inclusive.
type heldLock struct {
	owner      lockOwner
	kind       lockKind
	typ        lockType
	start, end uint64
	pid        uint32 // reported by F_GETLK
}

func newLockTable() *lockTable {
	return &lockTable{byIno: make(map[uint64][]heldLock), bySession: make(map[uint64]map[uint64]int)}
}

func (l heldLock) overlaps(o heldLock) bool { return l.start <= o.end && o.start <= l.end }

// conflicts reports whether held lock h stands in the way of request r.
func (h heldLock) conflicts(r heldLock) bool {
	return h.kind == r.kind && h.owner != r.owner && h.overlaps(r) && (h.typ == writeLock || r.typ == writeLock)
}

// test returns the first lock (lowest start) that conflicts with r.
func (lt *lockTable) test(ino uint64, r heldLock) (heldLock, bool) {
	for _, h := range lt.byIno[ino] {
		if h.conflicts(r) {
			return h, true
		}
	}
	return heldLock{}, false
}

// set applies request r (a read or write lock, or an unlock) on ino. It
// returns the conflicting lock when another owner's lock is in the way, in
// which case nothing changes. An unlock never conflicts.
func (lt *lockTable) set(ino uint64, r heldLock) (heldLock, bool) {
	if r.typ != unlockReq {
		if c, ok := lt.test(ino, r); ok {
			return c, false
		}
	}
	old := lt.byIno[ino]
	out := make([]heldLock, 0, len(old)+2)
	// Punch [r.start, r.end] out of the owner's locks of this kind,
	// keeping what lies outside it.
	for _, h := range old {
		if h.owner != r.owner || h.kind != r.kind || !h.overlaps(r) {
			out = append(out, h)
			continue
		}
		if h.start < r.start {
			left := h
			left.end = r.start - 1
			out = append(out, left)
		}
		if h.end > r.end {
			right := h
			right.start = r.end + 1
			out = append(out, right)
		}
	}
	if r.typ != unlockReq {
		// Merge with the owner's adjacent locks of the same type (none
		// overlaps any more).
		n := r
		kept := out[:0]
		for _, h := range out {
			if h.owner == r.owner && h.kind == r.kind && h.typ == r.typ &&
				((h.end != math.MaxUint64 && h.end+1 == n.start) || (n.end != math.MaxUint64 && n.end+1 == h.start)) {
				n.start, n.end = min(n.start, h.start), max(n.end, h.end)
				continue
			}
			kept = append(kept, h)
		}
		out = append(kept, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].kind != out[j].kind {
			return out[i].kind < out[j].kind
		}
		return out[i].start < out[j].start
	})
	lt.store(ino, old, out)
	return heldLock{}, true
}

// store replaces ino's locks and keeps bySession in step.
func (lt *lockTable) store(ino uint64, old, locks []heldLock) {
	for _, h := range old {
		lt.count(h.owner.session, ino, -1)
	}
	for _, h := range locks {
		lt.count(h.owner.session, ino, +1)
	}
	if len(locks) == 0 {
		delete(lt.byIno, ino)
	} else {
		lt.byIno[ino] = locks
	}
}

func (lt *lockTable) count(session, ino uint64, d int) {
	m := lt.bySession[session]
	if m == nil {
		m = make(map[uint64]int)
		lt.bySession[session] = m
	}
	if m[ino] += d; m[ino] <= 0 {
		delete(m, ino)
	}
	if len(m) == 0 {
		delete(lt.bySession, session)
	}
}

// dropSessionIno releases every lock session holds on ino (the session
// closed its last handle of the inode).
func (lt *lockTable) dropSessionIno(session, ino uint64) {
	if lt.bySession[session][ino] == 0 {
		return
	}
	old := lt.byIno[ino]
	out := make([]heldLock, 0, len(old))
	for _, h := range old {
		if h.owner.session != session {
			out = append(out, h)
		}
	}
	lt.store(ino, old, out)
}

// dropSession releases every lock of session (it closed or expired).
func (lt *lockTable) dropSession(session uint64) {
	inos := make([]uint64, 0, len(lt.bySession[session]))
	for ino := range lt.bySession[session] {
		inos = append(inos, ino)
	}
	for _, ino := range inos {
		lt.dropSessionIno(session, ino)
	}
}

// locks returns the locks held on ino, ordered by kind and start.
func (lt *lockTable) locks(ino uint64) []heldLock { return lt.byIno[ino] }

// len returns the number of locks held on every inode.
func (lt *lockTable) len() int {
	n := 0
	for _, ls := range lt.byIno {
		n += len(ls)
	}
	return n
}
