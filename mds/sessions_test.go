package mds

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

const testLease = 10 * time.Second

func newSessionEnv(t *testing.T) *env {
	t.Helper()
	o := testOptions(t)
	o.SessionLease = testLease
	return startEnv(t, o, newClock())
}

func (e *env) session() uint64 {
	e.t.Helper()
	r, err := e.c.OpenSession(ctx, &mdspb.OpenSessionRequest{Client: "test", Host: "here", Pid: 1})
	if err != nil {
		e.t.Fatalf("open session: %v", err)
	}
	if r.LeaseMs != testLease.Milliseconds() {
		e.t.Fatalf("lease %d ms, want %d", r.LeaseMs, testLease.Milliseconds())
	}
	return r.Session
}

func (e *env) open(sess, ino uint64) uint64 {
	e.t.Helper()
	r, err := e.c.Open(ctx, &mdspb.OpenRequest{Session: sess, Ino: ino})
	if err != nil {
		e.t.Fatalf("open %d: %v", ino, err)
	}
	return r.Handle
}

func (e *env) release(sess, h uint64) {
	e.t.Helper()
	if _, err := e.c.Release(ctx, &mdspb.ReleaseRequest{Session: sess, Handle: h}); err != nil {
		e.t.Fatalf("release: %v", err)
	}
}

func (e *env) unlink(parent uint64, name string) *mdspb.Attr {
	e.t.Helper()
	r, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: parent, Name: []byte(name)})
	if err != nil {
		e.t.Fatalf("unlink %q: %v", name, err)
	}
	return r.Attr
}

// orphans returns the inodes with an orphan key.
func (e *env) orphans() []uint64 {
	e.t.Helper()
	var inos []uint64
	err := scan(e.s.db, []byte{prefixOrphan}, func(k, _ []byte) (bool, error) {
		ino, err := decodeIDKey(prefixOrphan, k)
		inos = append(inos, ino)
		return true, err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return inos
}

// fileWithData creates name in the root with one committed 3 MiB extent.
func (e *env) fileWithData(name string) (*mdspb.Attr, *mdspb.Extent) {
	e.t.Helper()
	f := e.create(rootIno, name)
	x := written(e.alloc(f.Ino, 1)[0], 3*mib)
	e.commit(f.Ino, ref(0, 3*mib, 0, x))
	return f, x
}

func gone(t *testing.T, e *env, ino uint64) {
	t.Helper()
	if _, err := e.c.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: ino}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("inode %d: getattr = %v, want not found", ino, err)
	}
}

// An inode unlinked while open stays readable and writable, with nlink 0,
// until its last release; then it goes and its extents are queued for GC.
func TestOrphanLifecycle(t *testing.T) {
	e := newSessionEnv(t)
	e.registerOsts(6)
	s1 := e.session()
	f, x := e.fileWithData("f")
	h := e.open(s1, f.Ino)

	if a := e.unlink(rootIno, "f"); a.Nlink != 0 {
		t.Fatalf("unlink reply nlink %d", a.Nlink)
	}
	e.check()
	if a := e.getattr(f.Ino); a.Nlink != 0 || a.Size != 3*mib {
		t.Fatalf("orphan attr: nlink %d size %d", a.Nlink, a.Size)
	}
	if got := e.orphans(); !slices.Equal(got, []uint64{f.Ino}) {
		t.Fatalf("orphans = %v", got)
	}
	if _, err := e.lookup(rootIno, "f"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("lookup of the removed name: %v", err)
	}
	if got := e.gcQueue(); len(got) != 0 {
		t.Fatalf("gc queue while open: %v", got)
	}
	// Still readable, writable, truncatable.
	if got := e.mapOf(f.Ino); got != "0+3@1:0 " {
		t.Fatalf("map = %q", got)
	}
	y := written(e.alloc(f.Ino, 1)[0], mib)
	if a := e.commit(f.Ino, ref(3*mib, mib, 0, y)); a.Size != 4*mib || a.Nlink != 0 {
		t.Fatalf("commit to orphan: size %d nlink %d", a.Size, a.Nlink)
	}
	if _, err := e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: f.Ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_SIZE), Size: 3 * mib}); err != nil {
		t.Fatalf("truncate orphan: %v", err)
	}
	if got := e.gcQueue(); !slices.Equal(got, []uint64{y.Id}) {
		t.Fatalf("gc queue after truncating the orphan = %v, want [%d]", got, y.Id)
	}
	// No new name for it.
	if _, err := e.c.Link(ctx, &mdspb.LinkRequest{Ino: f.Ino, NewParent: rootIno, NewName: []byte("back")}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("link to orphan: %v", err)
	}
	e.check()

	e.release(s1, h)
	gone(t, e, f.Ino)
	if got := e.orphans(); len(got) != 0 {
		t.Fatalf("orphans after release = %v", got)
	}
	if got := e.gcQueue(); !slices.Contains(got, x.Id) {
		t.Fatalf("gc queue after the last release = %v, want %d in it", got, x.Id)
	}
	e.release(s1, h) // a repeated release does nothing
	e.check()
}

// Without an open handle, unlink deletes at once, as before; a closed file
// is not kept by other sessions' opens of other files.
func TestUnlinkNotOpen(t *testing.T) {
	e := newSessionEnv(t)
	e.registerOsts(6)
	s1 := e.session()
	f, x := e.fileWithData("f")
	g, _ := e.fileWithData("g")
	e.release(s1, e.open(s1, f.Ino))
	e.open(s1, g.Ino)
	e.unlink(rootIno, "f")
	gone(t, e, f.Ino)
	if got := e.gcQueue(); !slices.Equal(got, []uint64{x.Id}) {
		t.Fatalf("gc queue = %v", got)
	}
	if len(e.orphans()) != 0 {
		t.Fatal("orphan of a closed file")
	}
	e.check()
}

// Rename over an open file keeps it; it goes when the last of two sessions
// holding it ends.
func TestOrphanRenameOverTwoSessions(t *testing.T) {
	e := newSessionEnv(t)
	e.registerOsts(6)
	s1, s2 := e.session(), e.session()
	if s1 == s2 {
		t.Fatal("two sessions with one id")
	}
	dst, _ := e.fileWithData("dst")
	e.create(rootIno, "src")
	e.open(s1, dst.Ino)
	h2 := e.open(s2, dst.Ino)
	e.open(s2, dst.Ino)
	if _, err := e.c.Rename(ctx, rn(rootIno, "src", rootIno, "dst", 0)); err != nil {
		t.Fatal(err)
	}
	e.check()
	if a := e.getattr(dst.Ino); a.Nlink != 0 {
		t.Fatalf("renamed-over inode nlink %d", a.Nlink)
	}
	if _, err := e.c.CloseSession(ctx, &mdspb.SessionRequest{Session: s1}); err != nil {
		t.Fatal(err)
	}
	e.release(s2, h2)
	e.getattr(dst.Ino) // s2 holds a second handle
	if _, err := e.c.CloseSession(ctx, &mdspb.SessionRequest{Session: s2}); err != nil {
		t.Fatal(err)
	}
	gone(t, e, dst.Ino)
	if _, err := e.c.CloseSession(ctx, &mdspb.SessionRequest{Session: s2}); err != nil {
		t.Fatalf("closing a closed session: %v", err)
	}
	if _, err := e.c.Open(ctx, &mdspb.OpenRequest{Session: s2, Ino: rootIno}); !errors.Is(err, errs.ErrIsDir) && !errors.Is(err, errs.ErrStale) {
		t.Fatalf("open in a closed session: %v", err)
	}
	e.check()
}

// A session that stops renewing expires after its lease; its orphans go.
func TestSessionExpiry(t *testing.T) {
	e := newSessionEnv(t)
	e.registerOsts(6)
	live, dead := e.session(), e.session()
	f, _ := e.fileWithData("f")
	g, _ := e.fileWithData("g")
	e.open(live, f.Ino)
	e.open(dead, g.Ino)
	e.unlink(rootIno, "f")
	e.unlink(rootIno, "g")
	for range 3 {
		e.clock.Advance(testLease / 2)
		if _, err := e.c.KeepAlive(ctx, &mdspb.SessionRequest{Session: live}); err != nil {
			t.Fatalf("keepalive: %v", err)
		}
		if err := e.s.sessionRound(); err != nil {
			t.Fatal(err)
		}
	}
	// 15 s without a call: dead is gone, and g with it.
	e.getattr(f.Ino)
	gone(t, e, g.Ino)
	if _, err := e.c.KeepAlive(ctx, &mdspb.SessionRequest{Session: dead}); !errors.Is(err, errs.ErrStale) {
		t.Fatalf("keepalive of an expired session: %v", err)
	}
	if _, err := e.c.Open(ctx, &mdspb.OpenRequest{Session: dead, Ino: f.Ino}); !errors.Is(err, errs.ErrStale) {
		t.Fatalf("open in an expired session: %v", err)
	}
	// Any call renews: an Open keeps live alive.
	e.clock.Advance(testLease / 2)
	e.open(live, f.Ino)
	e.clock.Advance(testLease / 2)
	if err := e.s.sessionRound(); err != nil {
		t.Fatal(err)
	}
	e.getattr(f.Ino)
	e.check()
}

// After a restart no session is known: the orphans stay for one lease, so
// that clients can announce their opens again, and then the ones nobody
// announced go.
func TestOrphanRestart(t *testing.T) {
	e := newSessionEnv(t)
	osts := e.registerOsts(6)
	s1 := e.session()
	f, _ := e.fileWithData("f")
	g, gx := e.fileWithData("g")
	e.open(s1, f.Ino)
	e.open(s1, g.Ino)
	e.unlink(rootIno, "f")
	e.unlink(rootIno, "g")

	e = e.reopen()
	e.check()
	if got := e.orphans(); !slices.Equal(got, []uint64{f.Ino, g.Ino}) {
		t.Fatalf("orphans after restart = %v", got)
	}
	if _, err := e.c.KeepAlive(ctx, &mdspb.SessionRequest{Session: s1}); !errors.Is(err, errs.ErrStale) {
		t.Fatalf("keepalive of a session of the last run: %v", err)
	}
	// The client notices and announces f again (not g).
	s2 := e.session()
	hf := e.open(s2, f.Ino)
	e.clock.Advance(testLease / 2)
	if err := e.s.sessionRound(); err != nil {
		t.Fatal(err)
	}
	e.getattr(g.Ino) // within the grace
	if _, err := e.c.KeepAlive(ctx, &mdspb.SessionRequest{Session: s2}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(testLease/2 + time.Millisecond)
	if err := e.s.sessionRound(); err != nil {
		t.Fatal(err)
	}
	gone(t, e, g.Ino)
	if got := e.gcQueue(); !slices.Contains(got, gx.Id) {
		t.Fatalf("gc queue = %v, want %d in it", got, gx.Id)
	}
	e.getattr(f.Ino)
	e.check()
	e.release(s2, hf)
	gone(t, e, f.Ino)
	e.check()

	// A restart with no client coming back: everything goes after one lease.
	e.heartbeatAll(osts)
	s3 := e.session()
	h, _ := e.fileWithData("h")
	e.open(s3, h.Ino)
	e.unlink(rootIno, "h")
	e = e.reopen()
	e.clock.Advance(testLease + time.Millisecond)
	if err := e.s.sessionRound(); err != nil {
		t.Fatal(err)
	}
	gone(t, e, h.Ino)
	e.check()
}

func posixReq(sess, ino, owner uint64, typ mdspb.LockType, start, end uint64) *mdspb.LockRequest {
	return &mdspb.LockRequest{Session: sess, Ino: ino, Owner: owner, Lock: &mdspb.FileLock{
		Kind: mdspb.LockKind_LOCK_KIND_POSIX, Type: typ, Start: start, End: end, Pid: uint32(owner),
	}}
}

func (e *env) setLock(req *mdspb.LockRequest) (bool, *mdspb.FileLock) {
	e.t.Helper()
	r, err := e.c.SetLock(ctx, req)
	if err != nil {
		e.t.Fatalf("setlock: %v", err)
	}
	return r.Granted, r.Conflict
}

// Locks between sessions over gRPC: conflicts, F_GETLK, flock beside POSIX
// locks, and release with the last handle and with the session.
func TestLocksBetweenSessions(t *testing.T) {
	e := newSessionEnv(t)
	s1, s2 := e.session(), e.session()
	f := e.create(rootIno, "f")
	g := e.create(rootIno, "g")
	h1 := e.open(s1, f.Ino)
	e.open(s2, f.Ino)
	R, W, U := mdspb.LockType_LOCK_TYPE_READ, mdspb.LockType_LOCK_TYPE_WRITE, mdspb.LockType_LOCK_TYPE_UNLOCK

	if ok, _ := e.setLock(posixReq(s1, f.Ino, 7, W, 0, 99)); !ok {
		t.Fatal("first lock refused")
	}
	ok, c := e.setLock(posixReq(s2, f.Ino, 7, R, 50, 60))
	if ok || c.GetType() != W || c.GetStart() != 0 || c.GetEnd() != 99 || c.GetPid() != 7 {
		t.Fatalf("conflicting lock: granted %v conflict %v", ok, c)
	}
	r, err := e.c.GetLock(ctx, posixReq(s2, f.Ino, 7, R, 99, 200))
	if err != nil || r.GetConflict().GetEnd() != 99 {
		t.Fatalf("getlock: %v %v", r, err)
	}
	if r, err := e.c.GetLock(ctx, posixReq(s2, f.Ino, 7, R, 100, 200)); err != nil || r.Conflict != nil {
		t.Fatalf("getlock without conflict: %v %v", r, err)
	}
	if r, err := e.c.GetLock(ctx, posixReq(s1, f.Ino, 7, W, 0, 200)); err != nil || r.Conflict != nil {
		t.Fatalf("getlock of the holder itself: %v %v", r, err)
	}
	flock := posixReq(s2, f.Ino, 8, W, 5, 6)
	flock.Lock.Kind = mdspb.LockKind_LOCK_KIND_FLOCK
	if ok, _ := e.setLock(flock); !ok {
		t.Fatal("flock refused beside a POSIX lock")
	}
	flock.Session = s1
	if ok, c := e.setLock(flock); ok || c.GetKind() != mdspb.LockKind_LOCK_KIND_FLOCK || c.GetStart() != 0 || c.GetEnd() != ^uint64(0) {
		t.Fatalf("second flock: %v %v", ok, c)
	}

	// Bad requests.
	for name, req := range map[string]*mdspb.LockRequest{
		"no kind":     {Session: s1, Ino: f.Ino, Lock: &mdspb.FileLock{Type: R}},
		"no type":     {Session: s1, Ino: f.Ino, Lock: &mdspb.FileLock{Kind: mdspb.LockKind_LOCK_KIND_POSIX}},
		"bad range":   posixReq(s1, f.Ino, 7, R, 10, 9),
		"not open":    posixReq(s1, g.Ino, 7, R, 0, 9),
		"unlock test": posixReq(s1, f.Ino, 7, U, 0, 9),
	} {
		call := e.c.SetLock
		if name == "unlock test" {
			_, err := e.c.GetLock(ctx, req)
			wantErr(t, name, err, errs.ErrInvalid)
			continue
		}
		_, err := call(ctx, req)
		wantErr(t, name, err, errs.ErrInvalid)
	}
	_, err = e.c.SetLock(ctx, posixReq(12345, f.Ino, 7, R, 0, 9))
	wantErr(t, "unknown session", err, errs.ErrStale)

	// Unlocking a sub-range lets the other session in there only.
	if ok, _ := e.setLock(posixReq(s1, f.Ino, 7, U, 40, 59)); !ok {
		t.Fatal("unlock refused")
	}
	if ok, _ := e.setLock(posixReq(s2, f.Ino, 7, W, 40, 59)); !ok {
		t.Fatal("lock in the unlocked hole refused")
	}
	if ok, _ := e.setLock(posixReq(s2, f.Ino, 7, W, 30, 59)); ok {
		t.Fatal("lock over the rest granted")
	}
	// s1's last handle goes: its locks go.
	e.release(s1, h1)
	if ok, _ := e.setLock(posixReq(s2, f.Ino, 7, W, 0, 99)); !ok {
		t.Fatal("lock after the holder's release refused")
	}
	// s2's session expires: its locks go.
	e.open(s1, f.Ino)
	e.clock.Advance(testLease + time.Millisecond)
	if _, err := e.c.KeepAlive(ctx, &mdspb.SessionRequest{Session: s1}); !errors.Is(err, errs.ErrStale) {
		t.Fatalf("keepalive: %v", err)
	}
	s3 := e.session()
	e.open(s3, f.Ino)
	if ok, _ := e.setLock(posixReq(s3, f.Ino, 7, W, 0, 99)); ok {
		t.Fatal("lock granted before the session loop collected the expired holder")
	}
	if err := e.s.sessionRound(); err != nil {
		t.Fatal(err)
	}
	if ok, c := e.setLock(posixReq(s3, f.Ino, 7, W, 0, 99)); !ok {
		t.Fatalf("lock after the holder expired refused: %v", c)
	}
	if n := e.s.sess.t.locks.len(); n != 1 {
		t.Fatalf("%d locks held, want 1", n)
	}
}

// Open can return the extent map with the handle, and Create can open the
// file it makes in the same transaction: the handle keeps an unlinked
// file as an orphan like any other, and a create that finds an existing
// file says so.
func TestCreateOpenAndOpenExtents(t *testing.T) {
	e := newSessionEnv(t)
	e.registerOsts(6)
	s1 := e.session()
	f, x := e.fileWithData("f")
	r, err := e.c.Open(ctx, &mdspb.OpenRequest{Session: s1, Ino: f.Ino, Extents: true})
	if err != nil {
		t.Fatalf("open with extents: %v", err)
	}
	if r.Attr.GetSize() != 3*mib || len(r.Extents) != 1 || r.Extents[0].GetExtent().GetId() != x.Id {
		t.Fatalf("open reply: attr %v extents %v", r.Attr, r.Extents)
	}
	e.release(s1, r.Handle)
	if _, err := e.c.Open(ctx, &mdspb.OpenRequest{Session: s1, Ino: rootIno, Extents: true}); !errors.Is(err, errs.ErrIsDir) {
		t.Fatalf("open of a directory: %v", err)
	}

	c, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("g"), Mode: 0o644, Exclusive: true, OpenSession: s1})
	if err != nil {
		t.Fatalf("create and open: %v", err)
	}
	if !c.Created || c.Handle == 0 {
		t.Fatalf("create reply: created %v handle %d", c.Created, c.Handle)
	}
	e.unlink(rootIno, "g")
	if got := e.orphans(); !slices.Equal(got, []uint64{c.Attr.Ino}) {
		t.Fatalf("orphans = %v, want the created file kept by its handle", got)
	}
	e.release(s1, c.Handle)
	gone(t, e, c.Attr.Ino)

	c, err = e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("f"), Mode: 0o644, OpenSession: s1})
	if err != nil {
		t.Fatalf("create of an existing file: %v", err)
	}
	if c.Created || c.Handle == 0 || c.Attr.Ino != f.Ino {
		t.Fatalf("create of an existing file: created %v handle %d ino %d", c.Created, c.Handle, c.Attr.Ino)
	}
	e.release(s1, c.Handle)
	if _, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("h"), Mode: 0o644, OpenSession: 12345}); !errors.Is(err, errs.ErrStale) {
		t.Fatalf("create with an unknown session: %v", err)
	}
	if _, err := e.lookup(rootIno, "h"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("a create refused for its session left a name: %v", err)
	}
	e.check()
}

// A namespace change acknowledged early is visible at once, Sync returns
// once it is durable, and it survives a restart.
func TestEarlyReplyAndSync(t *testing.T) {
	e := newEnv(t)
	early := metadata.AppendToOutgoingContext(ctx, mdspb.CommitHeader, mdspb.CommitEarly)
	for i := range 50 {
		if _, err := e.c.Create(early, &mdspb.CreateRequest{Parent: rootIno, Name: fmt.Appendf(nil, "f%d", i), Mode: 0o644, Exclusive: true}); err != nil {
			t.Fatalf("early create: %v", err)
		}
		if _, err := e.lookup(rootIno, fmt.Sprintf("f%d", i)); err != nil {
			t.Fatalf("lookup right after an early create: %v", err)
		}
	}
	if _, err := e.c.Unlink(early, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("f0")}); err != nil {
		t.Fatalf("early unlink: %v", err)
	}
	if _, err := e.c.Sync(ctx, &mdspb.Empty{}); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if _, err := e.c.Sync(ctx, &mdspb.Empty{}); err != nil {
		t.Fatalf("sync with nothing pending: %v", err)
	}
	e = e.reopen()
	if _, err := e.lookup(rootIno, "f0"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("f0 after restart: %v", err)
	}
	for i := 1; i < 50; i++ {
		if _, err := e.lookup(rootIno, fmt.Sprintf("f%d", i)); err != nil {
			t.Fatalf("f%d after restart: %v", i, err)
		}
	}
	e.check()
}
