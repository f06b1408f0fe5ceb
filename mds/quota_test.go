package mds

import (
	"fmt"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// quota returns directory dir's quota (fatal if it has none).
func (e *env) quota(dir uint64) *mdspb.Quota {
	e.t.Helper()
	q, err := e.c.GetQuota(ctx, &mdspb.QuotaRequest{Ino: dir})
	if err != nil {
		e.t.Fatalf("get quota %d: %v", dir, err)
	}
	return q
}

func (e *env) setQuota(dir, bytes, inodes uint64) {
	e.t.Helper()
	if _, err := e.c.SetQuota(ctx, &mdspb.SetQuotaRequest{Ino: dir, LimitBytes: bytes, LimitInodes: inodes}); err != nil {
		e.t.Fatalf("set quota %d: %v", dir, err)
	}
}

// wantUsage fails unless dir's quota has used bytes and inodes, and a
// check agrees with it.
func (e *env) wantUsage(dir, bytes, inodes uint64) {
	e.t.Helper()
	q := e.quota(dir)
	if q.UsedBytes != bytes || q.UsedInodes != inodes {
		e.t.Fatalf("quota of %s (%d): used %d bytes %d inodes, want %d and %d", q.Path, dir, q.UsedBytes, q.UsedInodes, bytes, inodes)
	}
	e.checkQuotas()
}

// checkQuotas fails unless every quota's kept usage is the recomputed one.
func (e *env) checkQuotas() {
	e.t.Helper()
	r, err := e.c.CheckQuotas(ctx, &mdspb.CheckQuotasRequest{})
	if err != nil {
		e.t.Fatalf("check quotas: %v", err)
	}
	for _, c := range r.Checks {
		q := c.Quota
		if q.UsedBytes != c.RealBytes || q.UsedInodes != c.RealInodes || c.Misplaced != 0 {
			e.t.Fatalf("quota %s: kept %d bytes %d inodes, real %d and %d, %d misplaced", q.Path, q.UsedBytes, q.UsedInodes, c.RealBytes, c.RealInodes, c.Misplaced)
		}
	}
}

func (e *env) setSize(ino, size uint64) error {
	_, err := e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_SIZE), Size: size})
	return err
}

// TestQuotaAccounting: each operation charges the quota directory it
// happens in: create, mkdir, symlink, commit, truncate, fallocate, clone,
// unlink, rmdir; limits refuse creates and commits past them.
func TestQuotaAccounting(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	vol := e.mkdir(rootIno, "vol")
	a := e.mkdir(vol.Ino, "a")
	pre := e.create(a.Ino, "pre")
	e.setQuota(a.Ino, 0, 0)
	e.wantUsage(a.Ino, 0, 1)
	if q := e.quota(a.Ino); q.Path != "/vol/a" {
		t.Fatalf("quota path %q", q.Path)
	}
	f := e.create(a.Ino, "f")
	d := e.mkdir(a.Ino, "d")
	if _, err := e.c.Symlink(ctx, &mdspb.SymlinkRequest{Parent: d.Ino, Name: []byte("l"), Target: []byte("../f")}); err != nil {
		t.Fatal(err)
	}
	e.wantUsage(a.Ino, 0, 4)
	ex := e.alloc(f.Ino, 1)
	e.commit(f.Ino, ref(0, mib, 0, written(ex[0], mib)))
	e.wantUsage(a.Ino, mib, 4)
	wantErr(t, "truncate", e.setSize(f.Ino, 100), nil)
	e.wantUsage(a.Ino, 100, 4)
	if _, err := e.fallocate(f.Ino, fallocZeroRange, 0, 2*mib); err != nil {
		t.Fatal(err)
	}
	e.wantUsage(a.Ino, 2*mib, 4)
	g := e.create(d.Ino, "g")
	e.clone(f.Ino, g.Ino, &mdspb.CloneRange{SrcOff: 0, DstOff: 0, Length: mib})
	e.wantUsage(a.Ino, 3*mib, 5)
	e.unlink(a.Ino, "pre")
	_ = pre
	e.wantUsage(a.Ino, 3*mib, 4)
	e.unlink(d.Ino, "g")
	e.unlink(d.Ino, "l")
	if _, err := e.c.Rmdir(ctx, &mdspb.UnlinkRequest{Parent: a.Ino, Name: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	e.wantUsage(a.Ino, 2*mib, 1)

	// Limits: 3 inodes, 3 MiB.
	e.setQuota(a.Ino, 3*mib, 3)
	e.create(a.Ino, "x")
	e.mkdir(a.Ino, "y")
	_, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: a.Ino, Name: []byte("z"), Mode: sIFREG | 0o644})
	wantErr(t, "create past the inode limit", err, errs.ErrQuota)
	_, err = e.c.Mkdir(ctx, &mdspb.CreateRequest{Parent: a.Ino, Name: []byte("z"), Mode: 0o755})
	wantErr(t, "mkdir past the inode limit", err, errs.ErrQuota)
	ex = e.alloc(f.Ino, 1)
	_, err = e.c.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: f.Ino, Extents: []*mdspb.ExtentRef{ref(2*mib, 2*mib, 0, written(ex[0], 2*mib))}})
	wantErr(t, "commit past the byte limit", err, errs.ErrQuota)
	wantErr(t, "truncate up past the byte limit", e.setSize(f.Ino, 4*mib), errs.ErrQuota)
	e.commit(f.Ino, ref(2*mib, mib, 0, written(ex[0], mib)))
	e.wantUsage(a.Ino, 3*mib, 3)
	// Shrinking is always allowed, also over a lowered limit.
	e.setQuota(a.Ino, mib, 1)
	wantErr(t, "truncate down", e.setSize(f.Ino, 2*mib), nil)
	e.wantUsage(a.Ino, 2*mib, 3)
	e.check()

	// Restart: the usage is in Pebble.
	e = e.reopen()
	e.wantUsage(a.Ino, 2*mib, 3)
	if _, err := e.c.RemoveQuota(ctx, &mdspb.QuotaRequest{Ino: a.Ino}); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.GetQuota(ctx, &mdspb.QuotaRequest{Ino: a.Ino})
	wantErr(t, "quota removed", err, errs.ErrNotFound)
	e.create(a.Ino, "free")
	if n, _ := e.s.snapshotInode(f.Ino); n.Quota != 0 {
		t.Fatalf("file keeps quota %d after removal", n.Quota)
	}
	e.check()
}

func (s *Server) snapshotInode(ino uint64) (*mdspb.Inode, error) {
	return readInode(s.db, ino)
}

// TestQuotaNested: the quotas over an inode are all charged, the
// tightest refuses; renames in, out and between quotas move usage (a
// quota directory takes its usage along); links across quotas are
// refused; set and remove relabel trees with quotas inside.
func TestQuotaNested(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	outer := e.mkdir(rootIno, "outer")
	inner := e.mkdir(outer.Ino, "inner")
	e.setQuota(inner.Ino, 2*mib, 0)
	e.setQuota(outer.Ino, 10*mib, 0)
	f := e.create(inner.Ino, "f")
	ex := e.alloc(f.Ino, 1)
	e.commit(f.Ino, ref(0, mib, 0, written(ex[0], mib)))
	e.wantUsage(inner.Ino, mib, 1)
	e.wantUsage(outer.Ino, mib, 2)
	wantErr(t, "past the inner limit", e.setSize(f.Ino, 3*mib), errs.ErrQuota)
	wantErr(t, "within both", e.setSize(f.Ino, 2*mib), nil)
	e.wantUsage(outer.Ino, 2*mib, 2)

	// Out of inner (full) into outer: inner frees, outer keeps.
	_, err := e.c.Rename(ctx, rn(inner.Ino, "f", outer.Ino, "f", 0))
	wantErr(t, "rename out", err, nil)
	e.wantUsage(inner.Ino, 0, 0)
	e.wantUsage(outer.Ino, 2*mib, 2)
	// Out of both quotas.
	_, err = e.c.Rename(ctx, rn(outer.Ino, "f", rootIno, "f", 0))
	wantErr(t, "rename out of all", err, nil)
	e.wantUsage(outer.Ino, 0, 1)
	// Back in, past inner's limit: refused; into outer: fine.
	wantErr(t, "grow outside", e.setSize(f.Ino, 3*mib), nil)
	_, err = e.c.Rename(ctx, rn(rootIno, "f", inner.Ino, "f", 0))
	wantErr(t, "rename in past the limit", err, errs.ErrQuota)
	_, err = e.c.Rename(ctx, rn(rootIno, "f", outer.Ino, "f", 0))
	wantErr(t, "rename in", err, nil)
	e.wantUsage(outer.Ino, 3*mib, 2)

	// A directory tree moves with its usage; a quota directory inside
	// it takes its own along.
	tree := e.mkdir(rootIno, "tree")
	sub := e.mkdir(tree.Ino, "sub")
	g := e.create(sub.Ino, "g")
	wantErr(t, "size g", e.setSize(g.Ino, 100), nil)
	q := e.mkdir(tree.Ino, "q")
	e.setQuota(q.Ino, 0, 10)
	h := e.create(q.Ino, "h")
	wantErr(t, "size h", e.setSize(h.Ino, 50), nil)
	e.wantUsage(q.Ino, 50, 1)
	_, err = e.c.Rename(ctx, rn(rootIno, "tree", outer.Ino, "tree", 0))
	wantErr(t, "rename tree in", err, nil)
	// outer: inner, f, tree, sub, g, q, h.
	e.wantUsage(outer.Ino, 3*mib+150, 7)
	_, err = e.c.Rename(ctx, rn(tree.Ino, "q", inner.Ino, "q", 0))
	wantErr(t, "rename quota dir into inner", err, nil)
	e.wantUsage(inner.Ino, 50, 2)
	e.wantUsage(outer.Ino, 3*mib+150, 7)
	_, err = e.c.Rename(ctx, rn(inner.Ino, "q", rootIno, "q", 0))
	wantErr(t, "rename quota dir out", err, nil)
	e.wantUsage(inner.Ino, 0, 0)
	e.wantUsage(outer.Ino, 3*mib+100, 5)
	e.wantUsage(q.Ino, 50, 1)

	// Exchange across quotas.
	x := e.create(rootIno, "x")
	wantErr(t, "size x", e.setSize(x.Ino, 7), nil)
	_, err = e.c.Rename(ctx, rn(rootIno, "x", outer.Ino, "f", uint32(mdspb.RenameFlags_RENAME_EXCHANGE)))
	wantErr(t, "exchange", err, nil)
	e.wantUsage(outer.Ino, 100+7, 5)

	// Links stay within one quota.
	_, err = e.c.Link(ctx, &mdspb.LinkRequest{Ino: x.Ino, NewParent: rootIno, NewName: []byte("x2")})
	wantErr(t, "link across quotas", err, errs.ErrCrossDevice)
	_, err = e.c.Link(ctx, &mdspb.LinkRequest{Ino: x.Ino, NewParent: sub.Ino, NewName: []byte("x2")})
	wantErr(t, "link within a quota", err, nil)
	e.wantUsage(outer.Ino, 107, 5)

	// Set and remove over a tree holding a quota.
	e.setQuota(rootIno, 0, 0)
	e.wantUsage(rootIno, 3*mib+107+50, 9) // outer, inner, tree, sub, g, q, h, x (linked twice), the old f
	if _, err := e.c.RemoveQuota(ctx, &mdspb.QuotaRequest{Ino: outer.Ino}); err != nil {
		t.Fatal(err)
	}
	e.wantUsage(rootIno, 3*mib+107+50, 9)
	e.wantUsage(inner.Ino, 0, 0)
	e.check()
}

// TestQuotaCheckRepair: check finds usage broken behind the MDS's back
// and repair writes the recomputed one; an orphan stays charged until
// its last release.
func TestQuotaCheckRepair(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootIno, "d")
	e.setQuota(d.Ino, 0, 0)
	f := e.create(d.Ino, "f")
	wantErr(t, "size", e.setSize(f.Ino, 1000), nil)
	sess := e.session()
	h := e.open(sess, f.Ino)
	e.unlink(d.Ino, "f")
	e.wantUsage(d.Ino, 1000, 1) // an orphan, still open
	e.release(sess, h)
	e.wantUsage(d.Ino, 0, 0)
	e.create(d.Ino, "g")

	// Break the usage.
	if err := e.s.update(func(t *txn) error {
		return t.putQuotaRecord(d.Ino, &mdspb.QuotaRecord{UsedBytes: 5, UsedInodes: 9})
	}); err != nil {
		t.Fatal(err)
	}
	r, err := e.c.CheckQuotas(ctx, &mdspb.CheckQuotasRequest{})
	if err != nil || len(r.Checks) != 1 || r.Checks[0].RealInodes != 1 || r.Checks[0].Quota.UsedInodes != 9 || r.Checks[0].Repaired {
		t.Fatalf("check: %v %v", r, err)
	}
	r, err = e.c.CheckQuotas(ctx, &mdspb.CheckQuotasRequest{Repair: true})
	if err != nil || !r.Checks[0].Repaired {
		t.Fatalf("repair: %v %v", r, err)
	}
	e.wantUsage(d.Ino, 0, 1)
}

// BenchmarkQuotaCreate: creates outside any quota (the no-quota path)
// and inside two nested quotas (both charged and checked).
func BenchmarkQuotaCreate(b *testing.B) {
	e := startEnv(b, testOptions(b), newClock())
	plain := e.mkdirB(b, rootIno, "plain")
	outer := e.mkdirB(b, rootIno, "outer")
	inner := e.mkdirB(b, outer, "inner")
	for _, q := range []uint64{outer, inner} {
		if _, err := e.c.SetQuota(ctx, &mdspb.SetQuotaRequest{Ino: q, LimitBytes: 1 << 40, LimitInodes: 1 << 40}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		dir  uint64
	}{{"none", plain}, {"nested", inner}} {
		b.Run(bc.name, func(b *testing.B) {
			for i := range b.N {
				if _, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: bc.dir, Name: fmt.Appendf(nil, "f%d", i), Mode: 0o644}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			for i := range b.N {
				if _, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: bc.dir, Name: fmt.Appendf(nil, "f%d", i)}); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		})
	}
}

func (e *env) mkdirB(b *testing.B, parent uint64, name string) uint64 {
	r, err := e.c.Mkdir(ctx, &mdspb.CreateRequest{Parent: parent, Name: []byte(name), Mode: 0o755})
	if err != nil {
		b.Fatal(err)
	}
	return r.Attr.Ino
}
