package mds

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// Owners of the lock table tests: A and B are two processes of session 1,
// C a process of session 2 with the same owner id as A (owner ids are
// only unique within a session).
var (
	ownA = lockOwner{session: 1, owner: 10}
	ownB = lockOwner{session: 1, owner: 11}
	ownC = lockOwner{session: 2, owner: 10}
)

const eof = math.MaxUint64

// lk builds a request.
func lk(o lockOwner, k lockKind, t lockType, start, end uint64) heldLock {
	return heldLock{owner: o, kind: k, typ: t, start: start, end: end, pid: uint32(o.session*100 + o.owner)}
}

// dumpLocks renders ino's locks as "kind owner type start-end" items.
func dumpLocks(lt *lockTable, ino uint64) string {
	var b []string
	for _, h := range lt.locks(ino) {
		name := map[lockOwner]string{ownA: "A", ownB: "B", ownC: "C"}[h.owner]
		kind := map[lockKind]string{posixLock: "P", flockLock: "F"}[h.kind]
		typ := map[lockType]string{readLock: "R", writeLock: "W"}[h.typ]
		end := fmt.Sprint(h.end)
		if h.end == eof {
			end = "EOF"
		}
		b = append(b, fmt.Sprintf("%s%s%s %d-%s", kind, name, typ, h.start, end))
	}
	return strings.Join(b, ", ")
}

type lockStep struct {
	req  heldLock
	ok   bool   // granted
	conf string // the conflict reported when not granted, as dumpLocks
}

func TestLockTable(t *testing.T) {
	P, F := posixLock, flockLock
	R, W, U := readLock, writeLock, unlockReq
	for _, tc := range []struct {
		name  string
		steps []lockStep
		want  string
	}{
		{"read locks share", []lockStep{
			{req: lk(ownA, P, R, 0, 99), ok: true},
			{req: lk(ownC, P, R, 50, 149), ok: true},
		}, "PAR 0-99, PCR 50-149"},
		{"write conflicts with read of another owner", []lockStep{
			{req: lk(ownA, P, R, 0, 99), ok: true},
			{req: lk(ownC, P, W, 99, 200), conf: "PAR 0-99"},
		}, "PAR 0-99"},
		{"read conflicts with write", []lockStep{
			{req: lk(ownA, P, W, 10, 19), ok: true},
			{req: lk(ownB, P, R, 0, eof), conf: "PAW 10-19"},
		}, "PAW 10-19"},
		{"disjoint ranges do not conflict", []lockStep{
			{req: lk(ownA, P, W, 0, 99), ok: true},
			{req: lk(ownB, P, W, 100, 199), ok: true},
			{req: lk(ownC, P, W, 200, eof), ok: true},
			{req: lk(ownC, P, R, 150, 150), conf: "PBW 100-199"},
		}, "PAW 0-99, PBW 100-199, PCW 200-EOF"},
		{"same owner id in another session is another owner", []lockStep{
			{req: lk(ownA, P, W, 0, eof), ok: true},
			{req: lk(ownC, P, W, 0, 0), conf: "PAW 0-EOF"},
		}, "PAW 0-EOF"},
		{"own locks never conflict: upgrade", []lockStep{
			{req: lk(ownA, P, R, 0, 99), ok: true},
			{req: lk(ownA, P, W, 0, 99), ok: true},
		}, "PAW 0-99"},
		{"upgrade blocked by another reader changes nothing", []lockStep{
			{req: lk(ownA, P, R, 0, 99), ok: true},
			{req: lk(ownB, P, R, 50, 59), ok: true},
			{req: lk(ownA, P, W, 0, 99), conf: "PBR 50-59"},
		}, "PAR 0-99, PBR 50-59"},
		{"downgrade of a sub-range splits", []lockStep{
			{req: lk(ownA, P, W, 0, 99), ok: true},
			{req: lk(ownA, P, R, 40, 59), ok: true},
			{req: lk(ownB, P, R, 45, 50), ok: true},
			{req: lk(ownB, P, R, 39, 39), conf: "PAW 0-39"},
		}, "PAW 0-39, PAR 40-59, PBR 45-50, PAW 60-99"},
		{"adjacent and overlapping ranges of one type merge", []lockStep{
			{req: lk(ownA, P, R, 0, 9), ok: true},
			{req: lk(ownA, P, R, 20, 29), ok: true},
			{req: lk(ownA, P, R, 10, 19), ok: true},
			{req: lk(ownA, P, R, 25, 40), ok: true},
		}, "PAR 0-40"},
		{"different types do not merge", []lockStep{
			{req: lk(ownA, P, R, 0, 9), ok: true},
			{req: lk(ownA, P, W, 10, 19), ok: true},
		}, "PAR 0-9, PAW 10-19"},
		{"other owners' ranges do not merge", []lockStep{
			{req: lk(ownA, P, R, 0, 9), ok: true},
			{req: lk(ownB, P, R, 10, 19), ok: true},
		}, "PAR 0-9, PBR 10-19"},
		{"unlock of a sub-range splits", []lockStep{
			{req: lk(ownA, P, W, 0, eof), ok: true},
			{req: lk(ownA, P, U, 100, 199), ok: true},
			{req: lk(ownB, P, W, 100, 199), ok: true},
		}, "PAW 0-99, PBW 100-199, PAW 200-EOF"},
		{"unlock across several ranges trims both ends", []lockStep{
			{req: lk(ownA, P, R, 0, 9), ok: true},
			{req: lk(ownA, P, W, 20, 29), ok: true},
			{req: lk(ownA, P, R, 40, 49), ok: true},
			{req: lk(ownA, P, U, 5, 44), ok: true},
		}, "PAR 0-4, PAR 45-49"},
		{"unlock only touches the owner's locks", []lockStep{
			{req: lk(ownA, P, R, 0, 9), ok: true},
			{req: lk(ownB, P, R, 0, 9), ok: true},
			{req: lk(ownB, P, U, 0, eof), ok: true},
		}, "PAR 0-9"},
		{"unlock of nothing is fine", []lockStep{
			{req: lk(ownA, P, U, 0, eof), ok: true},
		}, ""},
		{"unlock never conflicts", []lockStep{
			{req: lk(ownA, P, W, 0, eof), ok: true},
			{req: lk(ownB, P, U, 0, eof), ok: true},
		}, "PAW 0-EOF"},
		{"ranges up to the last byte", []lockStep{
			{req: lk(ownA, P, R, eof, eof), ok: true},
			{req: lk(ownA, P, R, 0, eof-1), ok: true},
			{req: lk(ownB, P, W, eof, eof), conf: "PAR 0-EOF"},
		}, "PAR 0-EOF"},
		{"flock: exclusive excludes", []lockStep{
			{req: lk(ownA, F, W, 0, eof), ok: true},
			{req: lk(ownB, F, R, 0, eof), conf: "FAW 0-EOF"},
			{req: lk(ownC, F, W, 0, eof), conf: "FAW 0-EOF"},
		}, "FAW 0-EOF"},
		{"flock: shared shares, upgrade waits for the others", []lockStep{
			{req: lk(ownA, F, R, 0, eof), ok: true},
			{req: lk(ownC, F, R, 0, eof), ok: true},
			{req: lk(ownA, F, W, 0, eof), conf: "FCR 0-EOF"},
			{req: lk(ownC, F, U, 0, eof), ok: true},
			{req: lk(ownA, F, W, 0, eof), ok: true},
			{req: lk(ownA, F, R, 0, eof), ok: true},
		}, "FAR 0-EOF"},
		{"flock and POSIX locks are independent", []lockStep{
			{req: lk(ownA, F, W, 0, eof), ok: true},
			{req: lk(ownB, P, W, 0, eof), ok: true},
			{req: lk(ownA, P, R, 0, 0), conf: "PBW 0-EOF"},
			{req: lk(ownB, F, R, 0, eof), conf: "FAW 0-EOF"},
			{req: lk(ownA, P, U, 0, eof), ok: true},
		}, "PBW 0-EOF, FAW 0-EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := newLockTable()
			const ino = 7
			for i, s := range tc.steps {
				c, ok := lt.set(ino, s.req)
				if ok != s.ok {
					t.Fatalf("step %d %+v: granted %v, want %v (locks: %s)", i, s.req, ok, s.ok, dumpLocks(lt, ino))
				}
				if !ok {
					tmp := newLockTable()
					tmp.byIno[ino] = []heldLock{c}
					if got := dumpLocks(tmp, ino); got != s.conf {
						t.Errorf("step %d: conflict %s, want %s", i, got, s.conf)
					}
					if tc, tok := lt.test(ino, s.req); !tok || tc != c {
						t.Errorf("step %d: test gives %+v %v, set gave %+v", i, tc, tok, c)
					}
				} else if s.req.typ != unlockReq {
					if c, bad := lt.test(ino, s.req); bad {
						t.Errorf("step %d: granted, but test reports conflict %+v", i, c)
					}
				}
			}
			if got := dumpLocks(lt, ino); got != tc.want {
				t.Errorf("locks = %q\n          want %q", got, tc.want)
			}
			if other := lt.locks(ino + 1); len(other) != 0 {
				t.Errorf("another inode has locks: %v", other)
			}
		})
	}
}

func TestLockTableDrop(t *testing.T) {
	lt := newLockTable()
	for _, r := range []struct {
		ino uint64
		l   heldLock
	}{
		{1, lk(ownA, posixLock, writeLock, 0, 9)},
		{1, lk(ownB, flockLock, readLock, 0, eof)},
		{1, lk(ownC, posixLock, writeLock, 10, 19)},
		{2, lk(ownA, posixLock, readLock, 0, eof)},
		{2, lk(ownC, flockLock, readLock, 0, eof)},
	} {
		if _, ok := lt.set(r.ino, r.l); !ok {
			t.Fatalf("set %+v refused", r.l)
		}
	}
	if n := lt.len(); n != 5 {
		t.Fatalf("len = %d, want 5", n)
	}
	// Session 1 closes its last handle of inode 1: its locks there go.
	lt.dropSessionIno(1, 1)
	if got := dumpLocks(lt, 1); got != "PCW 10-19" {
		t.Errorf("inode 1 after dropping session 1: %q", got)
	}
	if got := dumpLocks(lt, 2); got != "PAR 0-EOF, FCR 0-EOF" {
		t.Errorf("inode 2 after dropping session 1 on inode 1: %q", got)
	}
	// Session 2 ends: all of its locks go.
	lt.dropSession(2)
	if got := dumpLocks(lt, 1) + "|" + dumpLocks(lt, 2); got != "|PAR 0-EOF" {
		t.Errorf("after dropping session 2: %q", got)
	}
	lt.dropSession(1)
	if lt.len() != 0 || len(lt.byIno) != 0 || len(lt.bySession) != 0 {
		t.Errorf("table not empty: %+v", lt)
	}
}

func TestSessionTable(t *testing.T) {
	const lease = 100
	st := newSessionTable(lease)
	st.add(1, "a", "h", 1, 0)
	st.add(2, "b", "h", 2, 0)
	h1, err := st.open(1, 50, 10)
	wantErr(t, "open", err, nil)
	h2, err := st.open(2, 50, 10)
	wantErr(t, "open", err, nil)
	if _, err := st.open(3, 50, 10); err == nil {
		t.Fatal("open in unknown session succeeded")
	}
	if !st.isOpen(50) || st.isOpen(51) {
		t.Fatal("isOpen wrong")
	}
	// Locks need an open handle; unlocks do not.
	if _, _, err := st.setLock(1, 51, lk(ownA, posixLock, writeLock, 0, 0), 10); err == nil {
		t.Error("lock on an inode not open succeeded")
	}
	if _, ok, err := st.setLock(1, 51, lk(ownA, posixLock, unlockReq, 0, eof), 10); err != nil || !ok {
		t.Errorf("unlock on an inode not open: %v %v", ok, err)
	}
	if _, ok, err := st.setLock(1, 50, lk(ownA, posixLock, writeLock, 0, 0), 10); err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	// The last handle of session 1 on inode 50 takes its locks along; the
	// inode is still open in session 2.
	ino, unused, err := st.release(1, h1, 20)
	if err != nil || ino != 50 || unused {
		t.Fatalf("release = %d %v %v", ino, unused, err)
	}
	if st.locks.len() != 0 {
		t.Error("lock survived the last handle")
	}
	if _, _, err := st.release(1, h1, 20); err != nil {
		t.Errorf("second release: %v", err)
	}
	// Session 1 keeps alive, session 2 does not: at 111 session 2 is
	// gone (it last called at 10), and inode 50 with it.
	if _, err := st.touch(1, 60); err != nil {
		t.Fatal(err)
	}
	if ended, unused := st.expire(110); len(ended) != 0 || len(unused) != 0 {
		t.Fatalf("expire(110) = %v %v", ended, unused)
	}
	ended, unused2 := st.expire(111)
	if len(ended) != 1 || ended[0].id != 2 || len(unused2) != 1 || unused2[0] != 50 {
		t.Fatalf("expire(111) = %v %v", ended, unused2)
	}
	if _, _, err := st.release(2, h2, 111); err == nil {
		t.Error("release in an expired session succeeded")
	}
	// An expired session not yet collected is stale too.
	if _, err := st.touch(1, 161); err == nil {
		t.Error("touch after the lease succeeded")
	}
}
