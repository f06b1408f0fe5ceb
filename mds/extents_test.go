package mds

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

const mib = 1 << 20

// registerOsts registers n OSTs (uuid ost-1.., addr addrs[i] or a dummy)
// with 1 TiB free each and returns their ids.
func (e *env) registerOsts(n int, addrs ...string) []uint32 {
	e.t.Helper()
	var ids []uint32
	for i := range n {
		addr := fmt.Sprintf("127.0.0.1:%d", 1+i)
		if i < len(addrs) {
			addr = addrs[i]
		}
		r, err := e.c.RegisterOst(ctx, &mdspb.RegisterOstRequest{Uuid: fmt.Sprintf("ost-%d", i+1), Addr: addr, Capacity: 1 << 40, Free: 1 << 40})
		if err != nil {
			e.t.Fatalf("register: %v", err)
		}
		ids = append(ids, r.Id)
	}
	return ids
}

// heartbeatAll keeps the OSTs up after the clock moved.
func (e *env) heartbeatAll(ids []uint32) {
	e.t.Helper()
	for _, id := range ids {
		if _, err := e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: id, Capacity: 1 << 40, Free: 1 << 40}); err != nil {
			e.t.Fatalf("heartbeat %d: %v", id, err)
		}
	}
}

func (e *env) alloc(ino uint64, count uint32) []*mdspb.Extent {
	e.t.Helper()
	r, err := e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: ino, Count: count})
	if err != nil {
		e.t.Fatalf("alloc: %v", err)
	}
	return r.Extents
}

// written returns ext as a client sends it after writing length bytes.
func written(ext *mdspb.Extent, length uint64) *mdspb.Extent {
	w := proto.Clone(ext).(*mdspb.Extent)
	w.Length = length
	return w
}

func ref(fileOff, length, extOff uint64, ext *mdspb.Extent) *mdspb.ExtentRef {
	return &mdspb.ExtentRef{FileOff: fileOff, Length: length, ExtentOff: extOff, Extent: ext}
}

func (e *env) commit(ino uint64, refs ...*mdspb.ExtentRef) *mdspb.Attr {
	e.t.Helper()
	r, err := e.c.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: ino, Extents: refs})
	if err != nil {
		e.t.Fatalf("commit: %v", err)
	}
	return r.Attr
}

// mapOf renders a file's extent map as "off+len@ext:extoff ...".
func (e *env) mapOf(ino uint64) string {
	e.t.Helper()
	r, err := e.c.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: ino})
	if err != nil {
		e.t.Fatalf("getextents: %v", err)
	}
	s := ""
	for _, x := range r.Extents {
		s += fmt.Sprintf("%d+%d@%d:%d ", x.FileOff/mib, x.Length/mib, x.Extent.Id, x.ExtentOff/mib)
	}
	return s
}

// refcount reads extent id's refcount (0 when absent).
func (e *env) refcount(id uint64) uint64 {
	e.t.Helper()
	v, err := getValue(e.s.db, refKey(id))
	if errors.Is(err, errs.ErrNotFound) {
		return 0
	}
	if err != nil {
		e.t.Fatal(err)
	}
	n, _, err := decodePrefixed(v)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// gcQueue returns the extent ids in the GC queue, in due order, and checks
// every due time is now+grace.
func (e *env) gcQueue() []uint64 {
	e.t.Helper()
	var ids []uint64
	err := scan(e.s.db, []byte{prefixGC}, func(k, _ []byte) (bool, error) {
		_, id, err := decodeGCKey(k)
		ids = append(ids, id)
		return true, err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func (e *env) pending() []uint64 {
	e.t.Helper()
	var ids []uint64
	err := scan(e.s.db, []byte{prefixPending}, func(k, _ []byte) (bool, error) {
		id, err := decodeIDKey(prefixPending, k)
		ids = append(ids, id)
		return true, err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func TestCommitOverlap(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	f := e.create(rootIno, "f")
	ex := e.alloc(f.Ino, 3)
	if len(e.pending()) != 3 {
		t.Fatalf("pending %v", e.pending())
	}
	A, B, C := written(ex[0], 10*mib), written(ex[1], 2*mib), written(ex[2], 4*mib)

	e.clock.Advance(time.Second)
	a := e.commit(f.Ino, ref(0, 10*mib, 0, A))
	if a.Size != 10*mib || a.MtimeNs != e.clock.Now().UnixNano() {
		t.Fatalf("attr after commit %v", a)
	}
	if got := e.mapOf(f.Ino); got != fmt.Sprintf("0+10@%d:0 ", A.Id) {
		t.Fatalf("map %s", got)
	}
	e.check()

	// B over [2, 4) splits A in two: A is referenced twice.
	e.commit(f.Ino, ref(2*mib, 2*mib, 0, B))
	if got, want := e.mapOf(f.Ino), fmt.Sprintf("0+2@%d:0 2+2@%d:0 4+6@%d:4 ", A.Id, B.Id, A.Id); got != want {
		t.Fatalf("map %s, want %s", got, want)
	}
	if e.refcount(A.Id) != 2 || e.refcount(B.Id) != 1 || len(e.gcQueue()) != 0 {
		t.Fatalf("refcounts A=%d B=%d gc=%v", e.refcount(A.Id), e.refcount(B.Id), e.gcQueue())
	}
	e.check()

	// C (extent bytes [1, 4)) over [1, 4): trims A's head piece, covers B.
	e.commit(f.Ino, ref(1*mib, 3*mib, 1*mib, C))
	if got, want := e.mapOf(f.Ino), fmt.Sprintf("0+1@%d:0 1+3@%d:1 4+6@%d:4 ", A.Id, C.Id, A.Id); got != want {
		t.Fatalf("map %s, want %s", got, want)
	}
	if q := e.gcQueue(); len(q) != 1 || q[0] != B.Id {
		t.Fatalf("gc queue %v, want [%d]", q, B.Id)
	}
	if e.refcount(B.Id) != 0 || e.refcount(A.Id) != 2 {
		t.Fatalf("refcounts A=%d B=%d", e.refcount(A.Id), e.refcount(B.Id))
	}
	e.check()

	// A later ref in the same commit wins; C stays referenced by its
	// second piece; A goes.
	D := e.alloc(f.Ino, 1)[0]
	D = written(D, 12*mib)
	e.clock.Advance(time.Second) // queue order is by due time
	a = e.commit(f.Ino, ref(0, 12*mib, 0, D), ref(11*mib, 2*mib, 0, C))
	if got, want := e.mapOf(f.Ino), fmt.Sprintf("0+11@%d:0 11+2@%d:0 ", D.Id, C.Id); got != want {
		t.Fatalf("map %s, want %s", got, want)
	}
	if a.Size != 13*mib {
		t.Fatalf("size %d", a.Size)
	}
	if q := e.gcQueue(); len(q) != 2 || q[1] != A.Id {
		t.Fatalf("gc queue %v", q)
	}
	if len(e.pending()) != 0 {
		t.Fatalf("pending left %v", e.pending())
	}
	e.check()

	// A committed extent may be referenced again (a clone): not GC'd
	// while any reference remains.
	g := e.create(rootIno, "g")
	e.commit(g.Ino, ref(0, 2*mib, 0, C))
	if e.refcount(C.Id) != 2 {
		t.Fatalf("clone refcount %d", e.refcount(C.Id))
	}
	e.clock.Advance(time.Second)
	if _, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("f")}); err != nil {
		t.Fatal(err)
	}
	if q := e.gcQueue(); len(q) != 3 || q[2] != D.Id || e.refcount(C.Id) != 1 {
		t.Fatalf("after unlink: gc %v, C refcount %d", q, e.refcount(C.Id))
	}
	e.check()
	// The GC'd extent A cannot be committed again.
	_, err := e.c.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: g.Ino, Extents: []*mdspb.ExtentRef{ref(0, mib, 0, A)}})
	wantErr(t, "commit collected extent", err, errs.ErrStale)
}

func TestTruncate(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	f := e.create(rootIno, "f")
	ex := e.alloc(f.Ino, 2)
	A, B := written(ex[0], 4*mib), written(ex[1], 4*mib)
	e.commit(f.Ino, ref(0, 4*mib, 0, A), ref(4*mib, 4*mib, 0, B))
	size := func(n uint64) *mdspb.Attr {
		r, err := e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: f.Ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_SIZE), Size: n})
		if err != nil {
			t.Fatal(err)
		}
		return r.Attr
	}
	// Shrink into A: B goes, A is shortened.
	if a := size(3 * mib); a.Size != 3*mib {
		t.Fatalf("size %d", a.Size)
	}
	if got, want := e.mapOf(f.Ino), fmt.Sprintf("0+3@%d:0 ", A.Id); got != want {
		t.Fatalf("map %s, want %s", got, want)
	}
	if q := e.gcQueue(); len(q) != 1 || q[0] != B.Id {
		t.Fatalf("gc %v", q)
	}
	e.check()
	// Growing leaves a hole.
	size(100 * mib)
	if got, want := e.mapOf(f.Ino), fmt.Sprintf("0+3@%d:0 ", A.Id); got != want {
		t.Fatalf("map %s, want %s", got, want)
	}
	size(0)
	if got := e.mapOf(f.Ino); got != "" || len(e.gcQueue()) != 2 {
		t.Fatalf("map %q gc %v", got, e.gcQueue())
	}
	e.check()
}

func TestCommitErrors(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	f := e.create(rootIno, "f")
	ex := e.alloc(f.Ino, 1)[0]
	W := written(ex, 4*mib)
	other := written(ex, 4*mib)
	other.Osts[0], other.Osts[1] = other.Osts[1], other.Osts[0]
	unknown := written(ex, 4*mib)
	unknown.Id = 999
	short := written(ex, 4*mib)
	short.Osts = short.Osts[:5]
	for _, tc := range []struct {
		what string
		ino  uint64
		r    *mdspb.ExtentRef
		want error
	}{
		{"unknown extent", f.Ino, ref(0, mib, 0, unknown), errs.ErrStale},
		{"empty ref", f.Ino, ref(0, 0, 0, W), errs.ErrInvalid},
		{"beyond the extent", f.Ino, ref(0, 2*mib, 3*mib, W), errs.ErrInvalid},
		{"placement differs", f.Ino, ref(0, mib, 0, other), errs.ErrInvalid},
		{"osts != k+m", f.Ino, ref(0, mib, 0, short), errs.ErrInvalid},
		{"no extent", f.Ino, ref(0, mib, 0, nil), errs.ErrInvalid},
		{"huge offset", f.Ino, ref(1<<63, mib, 0, W), errs.ErrInvalid},
		{"directory", rootIno, ref(0, mib, 0, W), errs.ErrIsDir},
		{"missing inode", 999, ref(0, mib, 0, W), errs.ErrNotFound},
	} {
		_, err := e.c.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: tc.ino, Extents: []*mdspb.ExtentRef{tc.r}})
		wantErr(t, tc.what, err, tc.want)
	}
	// A failed commit changes nothing: the allocation is still pending.
	if p := e.pending(); len(p) != 1 || p[0] != ex.Id {
		t.Fatalf("pending %v", p)
	}
	// Once committed with a length, the extent's length is fixed.
	e.commit(f.Ino, ref(0, 4*mib, 0, W))
	longer := written(ex, 8*mib)
	_, err := e.c.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: f.Ino, Extents: []*mdspb.ExtentRef{ref(4*mib, 8*mib, 0, longer)}})
	wantErr(t, "length changed", err, errs.ErrInvalid)

	_, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: rootIno, Count: 1})
	wantErr(t, "alloc on dir", err, errs.ErrIsDir)
	_, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino})
	wantErr(t, "alloc 0", err, errs.ErrInvalid)
	_, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: 999, Count: 1})
	wantErr(t, "alloc missing", err, errs.ErrNotFound)
	_, err = e.c.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: rootIno})
	wantErr(t, "extents of dir", err, errs.ErrIsDir)
	e.check()
}

// The invariant checker itself must catch a broken database.
func TestCheckInvariantsDetects(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootIno, "f")
	e.check()
	err := e.s.update(func(tx *txn) error {
		n, err := tx.inode(f.Ino)
		if err != nil {
			return err
		}
		n.Attr.Nlink = 3
		tx.touch(n)
		return tx.b.Set(refKey(77), encodePrefixed(1, nil), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = e.s.snapshot(checkInvariants)
	if !errors.Is(err, errs.ErrCorrupt) {
		t.Fatalf("checkInvariants = %v, want ErrCorrupt", err)
	}
	t.Log(err)
}

// TestMirrorSmallExtents: an extent AllocExtents is told is small (at most
// Placement.MirrorBelow) is coded k=1 with the layout's m, on 1+m OSTs;
// longer ones, and those of unknown length, keep the file's layout; a
// negative MirrorBelow turns it off.
func TestMirrorSmallExtents(t *testing.T) {
	for _, tc := range []struct {
		below  int64
		length uint64
		k      uint32
	}{
		{0, 4096, 1},
		{0, DefaultMirrorBelow, 1},
		{0, DefaultMirrorBelow + 1, 4},
		{0, 0, 4},
		{0, 16 * mib, 4},
		{-1, 4096, 4},
		{1 * mib, 1 * mib, 1},
	} {
		t.Run(fmt.Sprintf("below=%d/len=%d", tc.below, tc.length), func(t *testing.T) {
			o := testOptions(t)
			o.Placement.MirrorBelow = tc.below
			e := startEnv(t, o, newClock())
			e.registerOsts(6)
			f := e.create(rootIno, "f")
			r, err := e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 2, Length: tc.length})
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range r.GetExtents() {
				l := x.GetLayout()
				if l.GetK() != tc.k || l.GetM() != 2 || len(x.GetOsts()) != int(tc.k+2) {
					t.Fatalf("extent %v: layout %v on %d OSTs, want k=%d m=2 on %d", x.GetId(), l, len(x.GetOsts()), tc.k, tc.k+2)
				}
			}
			if want := uint32(tc.k); r.GetMinChunks() != want {
				t.Fatalf("min chunks %d, want %d", r.GetMinChunks(), want)
			}
			// The file keeps its own layout.
			if l := e.getattr(f.Ino).GetLayout(); l.GetK() != 4 {
				t.Fatalf("file layout %v changed", l)
			}
		})
	}
}
