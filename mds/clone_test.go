package mds

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

func (e *env) clone(src, dst uint64, ranges ...*mdspb.CloneRange) *mdspb.CloneExtentsReply {
	e.t.Helper()
	r, err := e.c.CloneExtents(ctx, &mdspb.CloneExtentsRequest{SrcIno: src, DstIno: dst, Ranges: ranges})
	if err != nil {
		e.t.Fatalf("clone: %v", err)
	}
	return r
}

func cr(srcOff, dstOff, length uint64) *mdspb.CloneRange {
	return &mdspb.CloneRange{SrcOff: srcOff, DstOff: dstOff, Length: length}
}

func TestCloneWholeAndRanges(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	a := e.create(rootIno, "a")
	ex := e.alloc(a.Ino, 2)
	A, B := written(ex[0], 8*mib), written(ex[1], 4*mib)
	// a: [0,8) = A, hole [8,10), [10,14) = B.
	e.commit(a.Ino, ref(0, 8*mib, 0, A), ref(10*mib, 4*mib, 0, B))

	// Whole file (length 0: to the end): the same map, refcounts 2.
	b := e.create(rootIno, "b")
	r := e.clone(a.Ino, b.Ino, cr(0, 0, 0))
	if r.Attr.Size != 14*mib || r.SharedBytes != 12*mib || r.Entries != 2 {
		t.Fatalf("whole clone: size %d shared %d entries %d", r.Attr.Size, r.SharedBytes, r.Entries)
	}
	if got, want := e.mapOf(b.Ino), e.mapOf(a.Ino); got != want {
		t.Fatalf("clone map %s, want %s", got, want)
	}
	if e.refcount(A.Id) != 2 || e.refcount(B.Id) != 2 {
		t.Fatalf("refcounts A=%d B=%d, want 2 2", e.refcount(A.Id), e.refcount(B.Id))
	}
	e.check()

	// Unaligned ranges: sub-extent entries, shifted, in one call; the
	// hole stays a hole; later ranges see the source as it was.
	c := e.create(rootIno, "c")
	r = e.clone(a.Ino, c.Ino, cr(3*mib, 1*mib, 2*mib), cr(7*mib, 20*mib, 5*mib))
	if got, want := e.mapOf(c.Ino), fmt.Sprintf("1+2@%d:3 20+1@%d:7 23+2@%d:0 ", A.Id, A.Id, B.Id); got != want {
		t.Fatalf("range clone map %s, want %s", got, want)
	}
	if r.Attr.Size != 25*mib || r.SharedBytes != 5*mib || r.Entries != 3 {
		t.Fatalf("range clone: size %d shared %d entries %d", r.Attr.Size, r.SharedBytes, r.Entries)
	}
	if e.refcount(A.Id) != 4 || e.refcount(B.Id) != 3 {
		t.Fatalf("refcounts A=%d B=%d, want 4 3", e.refcount(A.Id), e.refcount(B.Id))
	}
	e.check()

	// A clone over existing data replaces it (punch), here within one
	// file: a's [10,12) (B) becomes a copy of a's [0,2) (A).
	e.clone(a.Ino, a.Ino, cr(0, 10*mib, 2*mib))
	if got, want := e.mapOf(a.Ino), fmt.Sprintf("0+8@%d:0 10+2@%d:0 12+2@%d:2 ", A.Id, A.Id, B.Id); got != want {
		t.Fatalf("self clone map %s, want %s", got, want)
	}
	e.check()

	// Overlapping self-clone ranges read the source as it was before the
	// call: [0,4) -> [2,6) and [2,4) -> [8,10) copy the original [2,4).
	d := e.create(rootIno, "d")
	e.clone(a.Ino, d.Ino, cr(0, 0, 8*mib))
	e.clone(d.Ino, d.Ino, cr(0, 2*mib, 4*mib), cr(2*mib, 8*mib, 2*mib))
	if got, want := e.mapOf(d.Ino), fmt.Sprintf("0+2@%d:0 2+4@%d:0 6+2@%d:6 8+2@%d:2 ", A.Id, A.Id, A.Id, A.Id); got != want {
		t.Fatalf("overlapping self clone map %s, want %s", got, want)
	}
	e.check()
}

func TestCloneErrors(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	a := e.create(rootIno, "a")
	A := written(e.alloc(a.Ino, 1)[0], 4*mib)
	e.commit(a.Ino, ref(0, 4*mib, 0, A))
	b := e.create(rootIno, "b")
	dir := e.mkdir(rootIno, "dir")
	for _, tc := range []struct {
		name     string
		src, dst uint64
		ranges   []*mdspb.CloneRange
		want     error
	}{
		{"no ranges", a.Ino, b.Ino, nil, errs.ErrInvalid},
		{"past source end", a.Ino, b.Ino, []*mdspb.CloneRange{cr(3*mib, 0, 2*mib)}, errs.ErrInvalid},
		{"to end from past end", a.Ino, b.Ino, []*mdspb.CloneRange{cr(4*mib, 0, 0)}, errs.ErrInvalid},
		{"huge destination", a.Ino, b.Ino, []*mdspb.CloneRange{cr(0, 1<<63, mib)}, errs.ErrInvalid},
		{"huge length", a.Ino, b.Ino, []*mdspb.CloneRange{cr(1, 0, 1<<64-1)}, errs.ErrInvalid},
		{"source is a directory", dir.Ino, b.Ino, []*mdspb.CloneRange{cr(0, 0, 1)}, errs.ErrIsDir},
		{"destination is a directory", a.Ino, dir.Ino, []*mdspb.CloneRange{cr(0, 0, 1)}, errs.ErrIsDir},
		{"missing source", 999, b.Ino, []*mdspb.CloneRange{cr(0, 0, 1)}, errs.ErrNotFound},
		{"missing destination", a.Ino, 999, []*mdspb.CloneRange{cr(0, 0, 1)}, errs.ErrNotFound},
	} {
		_, err := e.c.CloneExtents(ctx, &mdspb.CloneExtentsRequest{SrcIno: tc.src, DstIno: tc.dst, Ranges: tc.ranges})
		wantErr(t, tc.name, err, tc.want)
	}
	// A failed call changed nothing.
	if e.refcount(A.Id) != 1 || e.getattr(b.Ino).Size != 0 {
		t.Fatalf("failed clones changed state: refcount %d, size %d", e.refcount(A.Id), e.getattr(b.Ino).Size)
	}
	e.check()
}

// TestCloneGC: an extent shared by clones is queued for GC only when its
// last reference goes, whichever file goes first, and a partial reference
// keeps the whole extent.
func TestCloneGC(t *testing.T) {
	fakes := startFakeOsts(t, 6)
	var addrs []string
	for _, f := range fakes {
		addrs = append(addrs, f.addr)
	}
	e := newEnv(t)
	ids := e.registerOsts(6, addrs...)
	deleted := func() []string {
		var all []string
		for _, f := range fakes {
			all = append(all, f.take()...)
		}
		slices.Sort(all)
		return all
	}
	a := e.create(rootIno, "a")
	ex := e.alloc(a.Ino, 2)
	A, B := written(ex[0], 8*mib), written(ex[1], 8*mib)
	e.commit(a.Ino, ref(0, 8*mib, 0, A), ref(8*mib, 8*mib, 0, B))
	b := e.create(rootIno, "b")
	e.clone(a.Ino, b.Ino, cr(0, 0, 0))
	c := e.create(rootIno, "c")
	e.clone(a.Ino, c.Ino, cr(7*mib, 0, 2*mib)) // the last MiB of A, the first of B

	// The original goes: nothing is queued.
	e.unlink(rootIno, "a")
	if q := e.gcQueue(); len(q) != 0 {
		t.Fatalf("gc queue %v after unlinking the original", q)
	}
	if e.refcount(A.Id) != 2 || e.refcount(B.Id) != 2 {
		t.Fatalf("refcounts A=%d B=%d", e.refcount(A.Id), e.refcount(B.Id))
	}
	// The whole clone goes: c still holds a MiB of each, so both stay.
	e.unlink(rootIno, "b")
	if q := e.gcQueue(); len(q) != 0 {
		t.Fatalf("gc queue %v while c references both", q)
	}
	e.clock.Advance(2 * time.Minute)
	e.heartbeatAll(ids)
	e.gc()
	if d := deleted(); len(d) != 0 {
		t.Fatalf("chunks deleted while referenced: %v", d)
	}
	e.check()
	// Truncating c drops B's part: B goes, A stays.
	if _, err := e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: c.Ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_SIZE), Size: mib}); err != nil {
		t.Fatal(err)
	}
	if q := e.gcQueue(); !slices.Equal(q, []uint64{B.Id}) {
		t.Fatalf("gc queue %v, want [%d]", q, B.Id)
	}
	e.clock.Advance(2 * time.Minute)
	e.heartbeatAll(ids)
	e.gc()
	if d := deleted(); len(d) != 6 || d[0] != fmt.Sprintf("%d/0", B.Id) {
		t.Fatalf("deleted %v, want B's 6 chunks", d)
	}
	// The last reference goes: A is collected.
	e.unlink(rootIno, "c")
	e.clock.Advance(2 * time.Minute)
	e.heartbeatAll(ids)
	e.gc()
	if d := deleted(); len(d) != 6 || d[0] != fmt.Sprintf("%d/0", A.Id) {
		t.Fatalf("deleted %v, want A's 6 chunks", d)
	}
	if e.refcount(A.Id) != 0 || len(e.gcQueue()) != 0 {
		t.Fatalf("A refcount %d, queue %v", e.refcount(A.Id), e.gcQueue())
	}
	e.check()
}

// TestCloneSurvivesReopen: clones and their refcounts are durable.
func TestCloneSurvivesReopen(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	a := e.create(rootIno, "a")
	A := written(e.alloc(a.Ino, 1)[0], 4*mib)
	e.commit(a.Ino, ref(0, 4*mib, 0, A))
	b := e.create(rootIno, "b")
	e.clone(a.Ino, b.Ino, cr(mib, 0, 2*mib))
	want := e.mapOf(b.Ino)
	e = e.reopen()
	if got := e.mapOf(b.Ino); got != want {
		t.Fatalf("after reopen %s, want %s", got, want)
	}
	if e.refcount(A.Id) != 2 {
		t.Fatalf("refcount %d after reopen", e.refcount(A.Id))
	}
	e.check()
}
