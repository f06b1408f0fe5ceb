package mds

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/mds/peerpb"
)

// testDirLease is the lease time of these tests.
const testDirLease = 300 * time.Millisecond

func newLeaseEnv(t *testing.T, lease time.Duration) *env {
	t.Helper()
	o := testOptions(t)
	o.SessionLease = testLease
	o.DirLeaseTime = lease
	o.Registry = prometheus.NewRegistry()
	return startEnv(t, o, newClock())
}

// as is ctx for calls made by session sid (wire.SessionHeader).
func as(sid uint64) context.Context {
	return metadata.AppendToOutgoingContext(ctx, wire.SessionHeader, strconv.FormatUint(sid, 10))
}

// testWatch is a session's Watch stream: recalls arrive on recalls, the
// stream's end on ended.
type testWatch struct {
	st      mdspb.Mds_WatchClient
	recalls chan *mdspb.WatchDown
	ended   chan error
	cancel  context.CancelFunc
}

// watch opens session sid's Watch stream and waits until the MDS has it.
func (e *env) watch(sid uint64) *testWatch {
	e.t.Helper()
	w := e.watchNoWait(sid)
	deadline := time.Now().Add(5 * time.Second)
	for !e.watching(sid) {
		select {
		case err := <-w.ended:
			e.t.Fatalf("watch of session %x ended: %v", sid, err)
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("watch of session %x not registered", sid)
		}
		time.Sleep(time.Millisecond)
	}
	return w
}

func (e *env) watchNoWait(sid uint64) *testWatch {
	e.t.Helper()
	c, cancel := context.WithCancel(ctx)
	st, err := e.c.Watch(c)
	if err != nil {
		cancel()
		e.t.Fatalf("watch: %v", err)
	}
	if err := st.Send(&mdspb.WatchUp{Session: sid}); err != nil {
		cancel()
		e.t.Fatalf("watch: first message: %v", err)
	}
	w := &testWatch{st: st, recalls: make(chan *mdspb.WatchDown, 16), ended: make(chan error, 1), cancel: cancel}
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				w.ended <- wire.FromStatus(err)
				return
			}
			w.recalls <- m
		}
	}()
	e.t.Cleanup(cancel)
	return w
}

func (e *env) watching(sid uint64) bool {
	t := e.s.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := t.sessions[sid]
	return ls != nil && ls.w != nil
}

func (w *testWatch) release(t *testing.T, gens ...uint64) {
	t.Helper()
	if err := w.st.Send(&mdspb.WatchUp{Released: gens}); err != nil {
		t.Fatalf("release %v: %v", gens, err)
	}
}

// recall returns the next recall, failing after a second without one.
func (w *testWatch) recall(t *testing.T) *mdspb.WatchDown {
	t.Helper()
	select {
	case m := <-w.recalls:
		return m
	case err := <-w.ended:
		t.Fatalf("watch ended waiting for a recall: %v", err)
	case <-time.After(time.Second):
		t.Fatal("no recall")
	}
	return nil
}

func (w *testWatch) noRecall(t *testing.T) {
	t.Helper()
	select {
	case m := <-w.recalls:
		t.Fatalf("unexpected recall %v", m)
	default:
	}
}

func (e *env) leaseDir(sid, dir uint64) *mdspb.LeaseDirReply {
	e.t.Helper()
	r, err := e.c.LeaseDir(ctx, &mdspb.LeaseDirRequest{Session: sid, Dir: dir})
	if err != nil {
		e.t.Fatalf("lease dir %d: %v", dir, err)
	}
	return r
}

func (e *env) grant(sid, dir uint64) uint64 {
	e.t.Helper()
	r := e.leaseDir(sid, dir)
	if r.Gen == 0 {
		e.t.Fatalf("lease of dir %d for session %x refused", dir, sid)
	}
	return r.Gen
}

// async runs fn on a goroutine; the channel gets its error.
func async(fn func() error) chan error {
	c := make(chan error, 1)
	go func() { c <- fn() }()
	return c
}

func (e *env) createAs(sid, parent uint64, name string) error {
	_, err := e.c.Create(as(sid), &mdspb.CreateRequest{Parent: parent, Name: []byte(name), Mode: sIFREG | 0o644, Exclusive: true})
	return err
}

// A session with a Watch stream gets a lease with every entry of the
// directory; a file is ENOTDIR, a missing inode ENOENT.
func TestDirLeaseGrant(t *testing.T) {
	e := newLeaseEnv(t, testDirLease)
	d := e.mkdir(rootIno, "d")
	a := e.create(d.Ino, "a")
	sub := e.mkdir(d.Ino, "sub")
	if _, err := e.c.Symlink(ctx, &mdspb.SymlinkRequest{Parent: d.Ino, Name: []byte("l"), Target: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	sid := e.session()
	e.watch(sid)
	r := e.leaseDir(sid, d.Ino)
	if r.Gen == 0 || r.LeaseMs != uint32(testDirLease.Milliseconds()) {
		t.Fatalf("lease: gen %d, %d ms", r.Gen, r.LeaseMs)
	}
	got := map[string][2]uint64{}
	for _, en := range r.Entries {
		got[en.Name] = [2]uint64{en.Ino, uint64(en.Mode)}
	}
	want := map[string][2]uint64{"a": {a.Ino, sIFREG}, "sub": {sub.Ino, sIFDIR}}
	if len(got) != 3 || got["a"] != want["a"] || got["sub"] != want["sub"] || got["l"][1] != sIFLNK {
		t.Fatalf("entries %v", got)
	}
	if r2 := e.leaseDir(sid, d.Ino); r2.Gen <= r.Gen {
		t.Fatalf("second lease gen %d after %d", r2.Gen, r.Gen)
	}
	if empty := e.leaseDir(sid, sub.Ino); empty.Gen == 0 || len(empty.Entries) != 0 {
		t.Fatalf("lease of an empty directory: %v", empty)
	}
	_, err := e.c.LeaseDir(ctx, &mdspb.LeaseDirRequest{Session: sid, Dir: a.Ino})
	wantErr(t, "lease of a file", err, errs.ErrNotDir)
	_, err = e.c.LeaseDir(ctx, &mdspb.LeaseDirRequest{Session: sid, Dir: 999})
	wantErr(t, "lease of no inode", err, errs.ErrNotFound)
	if n := testutil.ToFloat64(e.s.leases.granted); n != 3 {
		t.Fatalf("granted %v, want 3", n)
	}
	if n := testutil.ToFloat64(e.s.leases.held); n != 2 {
		t.Fatalf("held %v, want 2 (one per directory)", n)
	}
	e.check()
}

// No lease without a Watch stream, for an unknown session, or for a
// directory bigger than a lease lists.
func TestDirLeaseRefused(t *testing.T) {
	e := newLeaseEnv(t, testDirLease)
	sid := e.session()
	if r := e.leaseDir(sid, rootIno); r.Gen != 0 || len(r.Entries) != 0 {
		t.Fatalf("lease without a stream: %v", r)
	}
	if r := e.leaseDir(12345, rootIno); r.Gen != 0 {
		t.Fatalf("lease for an unknown session: %v", r)
	}
	w := e.watchNoWait(12345)
	select {
	case err := <-w.ended:
		wantErr(t, "watch of an unknown session", err, errs.ErrStale)
	case <-time.After(5 * time.Second):
		t.Fatal("watch of an unknown session not ended")
	}
	e.watch(sid)
	d := e.mkdir(rootIno, "big")
	// Entries written straight into the store: quicker than creates.
	err := e.s.update(func(t *txn) error {
		for i := range maxLeaseEntries + 1 {
			if err := t.setDentry(d.Ino, []byte("f"+strconv.Itoa(i)), rootIno, sIFREG); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := e.leaseDir(sid, d.Ino); r.Gen != 0 {
		t.Fatalf("lease of %d entries granted", maxLeaseEntries+1)
	}
	if n := testutil.ToFloat64(e.s.leases.refused); n != 3 {
		t.Fatalf("refused %v, want 3", n)
	}
}

// A change by another session recalls the lease and waits for it; the
// holder's release lets it through at once. A change naming no session
// recalls too.
func TestDirLeaseRecall(t *testing.T) {
	e := newLeaseEnv(t, 5*time.Second)
	holder, other := e.session(), e.session()
	w := e.watch(holder)
	gen := e.grant(holder, rootIno)
	t0 := time.Now()
	res := async(func() error { return e.createAs(other, rootIno, "new") })
	m := w.recall(t)
	if m.Dir != rootIno || m.Gen != gen {
		t.Fatalf("recall %v, want dir %d gen %d", m, rootIno, gen)
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-res:
		t.Fatalf("create went through before the release: %v", err)
	default:
	}
	w.release(t, gen)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("create took %v after the release", d)
	}
	if n := testutil.ToFloat64(e.s.leases.recalls); n != 1 {
		t.Fatalf("recalls %v, want 1", n)
	}
	// A change without a session header recalls the holder's lease too.
	gen = e.grant(holder, rootIno)
	res = async(func() error {
		_, err := e.c.Mkdir(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("d"), Mode: 0o755})
		return err
	})
	if m := w.recall(t); m.Gen != gen {
		t.Fatalf("recall %v, want gen %d", m, gen)
	}
	w.release(t, gen)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	// A rename between two leased directories recalls both, once each.
	d := e.getattr(e.mkdir(rootIno, "d2").Ino)
	g1, g2 := e.grant(holder, rootIno), e.grant(holder, d.Ino)
	res = async(func() error {
		_, err := e.c.Rename(as(other), &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte("new"), NewParent: d.Ino, NewName: []byte("moved")})
		return err
	})
	got := []uint64{w.recall(t).Gen, w.recall(t).Gen}
	slices.Sort(got)
	if got[0] != g1 || got[1] != g2 {
		t.Fatalf("recalls %v, want %d and %d", got, g1, g2)
	}
	w.release(t, g1, g2)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	e.check()
}

// A change by the holder's own session neither recalls nor waits: its
// lease stays, and a later change by another session recalls it.
func TestDirLeaseOwnChange(t *testing.T) {
	e := newLeaseEnv(t, 5*time.Second)
	holder, other := e.session(), e.session()
	w := e.watch(holder)
	gen := e.grant(holder, rootIno)
	t0 := time.Now()
	if err := e.createAs(holder, rootIno, "mine"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Unlink(as(holder), &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("mine")}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("own changes took %v", d)
	}
	w.noRecall(t)
	res := async(func() error { return e.createAs(other, rootIno, "theirs") })
	if m := w.recall(t); m.Gen != gen {
		t.Fatalf("recall %v, want gen %d", m, gen)
	}
	w.release(t, gen)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// A holder that never releases holds a change up for its lease's time,
// and no longer; a recall is sent once.
func TestDirLeaseHolderSilent(t *testing.T) {
	e := newLeaseEnv(t, testDirLease)
	holder, other := e.session(), e.session()
	w := e.watch(holder)
	e.create(rootIno, "f")
	t0 := time.Now()
	e.grant(holder, rootIno)
	if _, err := e.c.Unlink(as(other), &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("f")}); err != nil {
		t.Fatal(err)
	}
	d := time.Since(t0)
	if d < testDirLease || d > testDirLease+time.Second {
		t.Fatalf("unlink took %v from the grant, want about %v", d, testDirLease)
	}
	w.recall(t)
	// The lease expired: the next change does not wait.
	t0 = time.Now()
	if err := e.createAs(other, rootIno, "g"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > testDirLease/2 {
		t.Fatalf("create after the expiry took %v", d)
	}
	w.noRecall(t)
}

// A change's ctx ending first fails the change; the lease stays recalled
// and holds up the next change as well.
func TestDirLeaseChangeCanceled(t *testing.T) {
	e := newLeaseEnv(t, 2*time.Second)
	holder := e.session()
	w := e.watch(holder)
	gen := e.grant(holder, rootIno)
	c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := e.c.Mkdir(c, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("x"), Mode: 0o755})
	if err == nil {
		t.Fatal("mkdir went through with a lease held")
	}
	w.recall(t)
	if _, err := e.lookup(rootIno, "x"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("lookup after the failed mkdir: %v", err)
	}
	res := async(func() error { return e.createAs(0, rootIno, "y") })
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-res:
		t.Fatalf("create went through with the recalled lease held: %v", err)
	default:
	}
	w.noRecall(t) // recalled once
	w.release(t, gen)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// A grant racing a change is refused: while the change is in flight, and
// when the change began between the grant's two looks.
func TestDirLeaseGrantRacesChange(t *testing.T) {
	e := newLeaseEnv(t, testDirLease)
	sid := e.session()
	e.watch(sid)
	lt := e.s.leases
	done, err := lt.change(ctx, 0, rootIno)
	if err != nil {
		t.Fatal(err)
	}
	if r := e.leaseDir(sid, rootIno); r.Gen != 0 {
		t.Fatalf("lease granted with a change in flight: %v", r)
	}
	done()
	done() // once only
	e.grant(sid, rootIno)

	// A change by another session that begins and ends between the two
	// looks (the holder's lease recalled and released meanwhile).
	other := e.session()
	g, why := lt.grantBegin(sid, rootIno)
	if why != "" {
		t.Fatal(why)
	}
	lt.release(sid, []uint64{lt.nextGen})
	done, err = lt.change(as(other), other, rootIno)
	if err != nil {
		t.Fatal(err)
	}
	done()
	if gen, why := lt.grantEnd(g, sid, time.Now().Add(time.Second), true); gen != 0 || why == "" {
		t.Fatalf("grant after another session's change between its looks: gen %d", gen)
	}
	// The session's own change between the looks does not refuse it:
	// its client replays the change on the listing.
	g, why = lt.grantBegin(sid, rootIno)
	if why != "" {
		t.Fatal(why)
	}
	done, err = lt.change(as(sid), sid, rootIno) // the session's own: no wait
	if err != nil {
		t.Fatal(err)
	}
	done()
	if gen, why := lt.grantEnd(g, sid, time.Now().Add(time.Second), true); gen == 0 {
		t.Fatalf("grant after the session's own change between its looks refused: %s", why)
	}
	// And none: granted.
	g, _ = lt.grantBegin(sid, rootIno)
	if gen, why := lt.grantEnd(g, sid, time.Now().Add(time.Second), true); gen == 0 {
		t.Fatal(why)
	}
	lt.mu.Lock()
	d := lt.dirs[rootIno]
	lt.mu.Unlock()
	if d == nil || d.changing != 0 || d.granting != 0 {
		t.Fatalf("directory state after the races: %+v", d)
	}
}

// An MDS reopened on a store where a lease was granted refuses leases
// and holds changes of entries for a lease's time; a fresh store does
// not.
func TestDirLeaseMarkerRestart(t *testing.T) {
	e := newLeaseEnv(t, testDirLease)
	t0 := time.Now()
	e.mkdir(rootIno, "d")
	if d := time.Since(t0); d > testDirLease/2 {
		t.Fatalf("mkdir on a fresh store took %v", d)
	}
	e = e.reopen() // no lease was ever granted: no marker
	t0 = time.Now()
	e.mkdir(rootIno, "d2")
	if d := time.Since(t0); d > testDirLease/2 {
		t.Fatalf("mkdir after a restart without leases took %v", d)
	}
	sid := e.session()
	e.watch(sid)
	e.grant(sid, rootIno)
	t0 = time.Now()
	e = e.reopen()
	sid = e.session()
	e.watch(sid)
	if r := e.leaseDir(sid, rootIno); r.Gen != 0 {
		t.Fatalf("lease granted right after a restart: %v", r)
	}
	e.mkdir(rootIno, "d3")
	if d := time.Since(t0); d < testDirLease || d > testDirLease+time.Second {
		t.Fatalf("mkdir after the restart done %v after it, want about %v", d, testDirLease)
	}
	e.grant(sid, rootIno)
}

// Leases off: never granted, changes never wait.
func TestDirLeaseOff(t *testing.T) {
	e := newLeaseEnv(t, -1)
	sid := e.session()
	e.watch(sid)
	if r := e.leaseDir(sid, rootIno); r.Gen != 0 {
		t.Fatalf("lease granted with leases off: %v", r)
	}
	e.mkdir(rootIno, "d")
	if _, err := getValue(e.s.db, leaseMarkerKey()); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("marker with leases off: %v", err)
	}
}

// Closing the session drops its leases and ends its stream; a newer
// stream of a session replaces the older, which ends.
func TestDirLeaseSessionEnd(t *testing.T) {
	e := newLeaseEnv(t, 5*time.Second)
	holder := e.session()
	w1 := e.watch(holder)
	w2 := e.watchNoWait(holder)
	select {
	case err := <-w1.ended:
		wantErr(t, "replaced stream", err, errs.ErrUnavailable)
	case <-time.After(5 * time.Second):
		t.Fatal("replaced stream did not end")
	}
	e.grant(holder, rootIno)
	if _, err := e.c.CloseSession(ctx, &mdspb.SessionRequest{Session: holder}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w2.ended:
		wantErr(t, "stream of a closed session", err, errs.ErrStale)
	case <-time.After(5 * time.Second):
		t.Fatal("stream of a closed session did not end")
	}
	t0 := time.Now()
	e.mkdir(rootIno, "d")
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("mkdir after the holder's session closed took %v", d)
	}
}

// A recall sent while the holder had no stream is sent again on its next
// one.
func TestDirLeaseRecallResent(t *testing.T) {
	e := newLeaseEnv(t, 5*time.Second)
	holder := e.session()
	w := e.watch(holder)
	gen := e.grant(holder, rootIno)
	w.cancel()
	for e.watching(holder) {
		time.Sleep(time.Millisecond)
	}
	res := async(func() error { return e.createAs(0, rootIno, "f") })
	for testutil.ToFloat64(e.s.leases.recalls) == 0 {
		time.Sleep(time.Millisecond)
	}
	w = e.watch(holder)
	if m := w.recall(t); m.Gen != gen {
		t.Fatalf("recall %v, want gen %d", m, gen)
	}
	w.release(t, gen)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// Close ends the open streams, and Watch after Close fails with
// ErrUnavailable, as every unary method does (TestEveryMethodIntercepted).
func TestWatchAfterClose(t *testing.T) {
	e := newLeaseEnv(t, testDirLease)
	sid := e.session()
	w := e.watch(sid)
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.ended:
		wantErr(t, "stream open at Close", err, errs.ErrUnavailable)
	case <-time.After(5 * time.Second):
		t.Fatal("stream open at Close did not end")
	}
	w = e.watchNoWait(sid)
	select {
	case err := <-w.ended:
		wantErr(t, "watch after Close", err, errs.ErrUnavailable)
	case <-time.After(5 * time.Second):
		t.Fatal("watch after Close did not end")
	}
	_, err := e.c.LeaseDir(ctx, &mdspb.LeaseDirRequest{Session: sid, Dir: rootIno})
	wantErr(t, "lease after Close", err, errs.ErrUnavailable)
}

// A member that stops leading ends its Watch streams (NotLeader); the
// new leader, which finds the marker in the replicated state, holds
// changes of entries for a lease's time (the default, 1 s).
func TestDirLeaseRaftLeaderChange(t *testing.T) {
	gr := startGroup(t, 3)
	lead := gr.leader()
	cc, err := wire.Dial(gr.addrs[lead])
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	e := &env{t: t, s: gr.srv[lead], c: mdspb.NewMdsClient(cc)}
	sid := e.session()
	w := e.watch(sid)
	e.grant(sid, rootIno)
	to := lead%3 + 1
	t0 := time.Now()
	if _, err := (&peerService{s: gr.srv[lead]}).TransferLeader(ctx, &peerpb.TransferLeaderRequest{To: to}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.ended:
		wantErr(t, "stream at the old leader", err, errs.ErrNotLeader)
	case <-time.After(5 * time.Second):
		t.Fatal("stream at the old leader did not end")
	}
	lead2 := gr.leader()
	if _, err := gr.srv[lead2].Mkdir(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("d"), Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < defaultDirLeaseTime {
		t.Fatalf("mkdir at the new leader %v after the change, want at least %v", d, defaultDirLeaseTime)
	}
}

// A renewal extends a held lease without a listing, so that a change
// after the first expiry still recalls it; a recalled lease, or another
// session's, is not renewed.
func TestDirLeaseRenew(t *testing.T) {
	e := newLeaseEnv(t, testDirLease)
	holder, other := e.session(), e.session()
	w := e.watch(holder)
	e.create(rootIno, "f")
	gen := e.grant(holder, rootIno)
	renew := func(sid uint64) *mdspb.LeaseDirReply {
		t.Helper()
		r, err := e.c.LeaseDir(ctx, &mdspb.LeaseDirRequest{Session: sid, Dir: rootIno, Renew: gen})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	time.Sleep(testDirLease / 2)
	if r := renew(holder); r.Gen != gen || len(r.Entries) != 0 {
		t.Fatalf("renewal: %v, want gen %d and no entries", r, gen)
	}
	if r := renew(other); r.Gen != 0 {
		t.Fatalf("another session renewed the holder's lease: %v", r)
	}
	time.Sleep(testDirLease * 3 / 4) // past the first expiry
	res := async(func() error { return e.createAs(other, rootIno, "g") })
	if m := w.recall(t); m.Gen != gen {
		t.Fatalf("recall %v, want gen %d", m, gen)
	}
	if r := renew(holder); r.Gen != 0 {
		t.Fatalf("a recalled lease renewed: %v", r)
	}
	w.release(t, gen)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// Drain (a graceful stop) ends the Watch streams at once and refuses new
// ones and new grants, but keeps the holds: a change still waits out a
// lease its holder may not have dropped yet.
func TestDirLeaseDrain(t *testing.T) {
	e := newLeaseEnv(t, testDirLease)
	holder, other := e.session(), e.session()
	w := e.watch(holder)
	e.grant(holder, rootIno)
	t0 := time.Now()
	e.s.Drain()
	select {
	case err := <-w.ended:
		if !errors.Is(err, errs.ErrUnavailable) {
			t.Fatalf("stream ended with %v, want ErrUnavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream not ended by Drain")
	}
	if err := e.createAs(other, rootIno, "x"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < testDirLease*3/4 {
		t.Fatalf("a change after Drain took %v from the grant: the lease (%v) was not waited out", d, testDirLease)
	}
	if r := e.leaseDir(holder, rootIno); r.Gen != 0 {
		t.Fatalf("a grant after Drain: %v", r)
	}
}

// A session's own change in flight does not keep it from a grant (its
// client replays the change on the listing), but it refuses everyone
// else's.
func TestDirLeaseGrantDuringOwnChange(t *testing.T) {
	e := newLeaseEnv(t, 5*time.Second)
	holder, changer, third := e.session(), e.session(), e.session()
	hw := e.watch(holder)
	e.watch(changer)
	e.watch(third)
	gen := e.grant(holder, rootIno)
	// The changer's create waits for the holder's release.
	res := async(func() error { return e.createAs(changer, rootIno, "x") })
	if m := hw.recall(t); m.Gen != gen {
		t.Fatalf("recall %v, want gen %d", m, gen)
	}
	if r := e.leaseDir(changer, rootIno); r.Gen == 0 {
		t.Fatal("the changing session was refused a grant for its own change in flight")
	}
	if r := e.leaseDir(third, rootIno); r.Gen != 0 {
		t.Fatalf("another session granted a lease during a change in flight: %v", r)
	}
	hw.release(t, gen)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}
