package mds

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// openLeased opens file ino for session sid asking for a content lease.
func (e *env) openLeased(sid, ino uint64) *mdspb.OpenReply {
	e.t.Helper()
	r, err := e.c.Open(ctx, &mdspb.OpenRequest{Session: sid, Ino: ino, Extents: true, Lease: true})
	if err != nil {
		e.t.Fatalf("open %d: %v", ino, err)
	}
	return r
}

// An Open asked with a lease grants one (to a session with a stream);
// every change of the file's attributes or contents recalls it and waits
// for its release, also the changes that find the file as they run (an
// unlink of one of its names, a rename of it or over it), even by the
// holder's session; the holder's own changes that name the file do not
// (its client drops the lease before it sends them).
func TestContentLeaseRecall(t *testing.T) {
	e := newLeaseEnv(t, 5*time.Second)
	e.registerOsts(6)
	holder, other := e.session(), e.session()
	f, _ := e.fileWithData("f")
	if r := e.openLeased(holder, f.Ino); r.LeaseGen != 0 {
		t.Fatalf("lease granted to a session without a stream: %v", r.LeaseGen)
	}
	w := e.watch(holder)
	r := e.openLeased(holder, f.Ino)
	if r.LeaseGen == 0 || r.LeaseMs != 5000 || r.Attr.GetSize() != 3*mib || len(r.Extents) != 1 {
		t.Fatalf("open with a lease: gen %d ms %d attr %v extents %d", r.LeaseGen, r.LeaseMs, r.Attr, len(r.Extents))
	}
	// Reads recall nothing; the holder's own relatime update neither.
	e.getattr(f.Ino)
	if _, err := e.lookup(rootIno, "f"); err != nil {
		t.Fatal(err)
	}
	atime := func(sid uint64) error {
		_, err := e.c.SetAttr(as(sid), &mdspb.SetAttrRequest{Ino: f.Ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_ATIME_READ)})
		return err
	}
	if err := atime(holder); err != nil {
		t.Fatal(err)
	}
	// Nor does a change the holder's session names the inode in: its
	// client drops its lease before it sends one.
	if _, err := e.c.SetAttr(as(holder), &mdspb.SetAttrRequest{Ino: f.Ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_MODE), Mode: 0o640}); err != nil {
		t.Fatal(err)
	}
	w.noRecall(t)
	// A change that finds the inode (a rename of it) by the holder's
	// session, sent with the release of its lease (wire.ReleaseHeader),
	// neither recalls nor waits.
	gen := e.openLeased(holder, f.Ino).LeaseGen
	rel := metadata.AppendToOutgoingContext(as(holder), wire.ReleaseHeader, strconv.FormatUint(gen, 10))
	if _, err := e.c.Rename(rel, &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte("f"), NewParent: rootIno, NewName: []byte("f0")}); err != nil {
		t.Fatal(err)
	}
	w.noRecall(t)
	name := "f0"
	for i, change := range []func() error{
		func() error { return e.setSize(f.Ino, mib) },
		func() error {
			x := written(e.alloc(f.Ino, 1)[0], 2*mib)
			_, err := e.c.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: f.Ino, Extents: []*mdspb.ExtentRef{ref(0, 2*mib, 0, x)}})
			return err
		},
		func() error { _, err := e.fallocate(f.Ino, fallocPunchHole|fallocKeepSize, 0, mib); return err },
		func() error {
			_, err := e.c.SetAttr(as(other), &mdspb.SetAttrRequest{Ino: f.Ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_MODE), Mode: 0o600})
			return err
		},
		func() error { return atime(other) },
		func() error { _, err := e.setx(f.Ino, "user.a", []byte("1"), 0); return err },
		func() error {
			_, err := e.c.RemoveXattr(as(other), &mdspb.RemoveXattrRequest{Ino: f.Ino, Name: []byte("user.a")})
			return err
		},
		func() error {
			_, err := e.c.Link(as(other), &mdspb.LinkRequest{Ino: f.Ino, NewParent: rootIno, NewName: []byte("f2")})
			return err
		},
		func() error {
			_, err := e.c.Unlink(as(other), &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("f2")})
			return err
		},
		func() error {
			_, err := e.c.Rename(as(other), &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte(name), NewParent: rootIno, NewName: []byte("g")})
			name = "g"
			return err
		},
		func() error {
			_, err := e.c.Rename(as(holder), &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte(name), NewParent: rootIno, NewName: []byte("g2")})
			name = "g2"
			return err
		},
		func() error {
			e.create(rootIno, "h")
			_, err := e.c.Rename(as(other), &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte("h"), NewParent: rootIno, NewName: []byte(name)})
			return err
		},
	} {
		gen := e.openLeased(holder, f.Ino).LeaseGen
		if gen == 0 {
			t.Fatalf("change %d: lease refused", i)
		}
		res := async(change)
		m := w.recall(t)
		if m.Dir != contentKey(f.Ino) || m.Gen != gen {
			t.Fatalf("change %d: recall %v, want key %x gen %d", i, m, contentKey(f.Ino), gen)
		}
		time.Sleep(30 * time.Millisecond)
		select {
		case err := <-res:
			t.Fatalf("change %d went through before the release: %v", i, err)
		default:
		}
		w.release(t, gen)
		if err := <-res; err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	e.check()
}

// LeaseDir{renew_inodes} extends every content lease of the session that
// is not recalled, and lists the recalled ones; an expired lease is not
// brought back.
func TestContentLeaseRenew(t *testing.T) {
	e := newLeaseEnv(t, testDirLease)
	e.registerOsts(6)
	holder := e.session()
	w := e.watch(holder)
	f, _ := e.fileWithData("f")
	g, _ := e.fileWithData("g")
	gf := e.openLeased(holder, f.Ino).LeaseGen
	gg := e.openLeased(holder, g.Ino).LeaseGen
	if gf == 0 || gg == 0 {
		t.Fatal("lease refused")
	}
	renew := func() *mdspb.LeaseDirReply {
		t.Helper()
		r, err := e.c.LeaseDir(ctx, &mdspb.LeaseDirRequest{Session: holder, RenewInodes: true})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for range 3 { // well past one lease time
		time.Sleep(testDirLease / 2)
		if r := renew(); r.Gen != 1 || len(r.Recalled) != 0 {
			t.Fatalf("renewal: %v", r)
		}
	}
	res := async(func() error { return e.setSize(g.Ino, 0) })
	if m := w.recall(t); m.Gen != gg {
		t.Fatalf("recall %v, want gen %d", m, gg)
	}
	if r := renew(); len(r.Recalled) != 1 || r.Recalled[0] != gg {
		t.Fatalf("renewal after a recall: %v, want recalled [%d]", r, gg)
	}
	w.release(t, gg)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	// f's lease still runs: a change waits for its release.
	res = async(func() error { return e.setSize(f.Ino, 0) })
	if m := w.recall(t); m.Gen != gf {
		t.Fatalf("recall %v, want gen %d", m, gf)
	}
	w.release(t, gf)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	// Not renewed, a lease lapses after its length: a change then
	// neither recalls nor waits, and a later renewal does not bring it
	// back.
	h, _ := e.fileWithData("h")
	if e.openLeased(holder, h.Ino).LeaseGen == 0 {
		t.Fatal("lease refused")
	}
	time.Sleep(testDirLease * 3 / 2)
	if r := renew(); r.Gen != 1 {
		t.Fatalf("renewal: %v", r)
	}
	t0 := time.Now()
	if err := e.setSize(h.Ino, 0); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > testDirLease/2 {
		t.Fatalf("a change of a lapsed lease's file waited %v", d)
	}
	w.noRecall(t)
	// A session without a stream renews nothing.
	if r, err := e.c.LeaseDir(ctx, &mdspb.LeaseDirRequest{Session: e.session(), RenewInodes: true}); err != nil || r.Gen != 0 {
		t.Fatalf("renewal without a stream: %v, %v", r, err)
	}
}
