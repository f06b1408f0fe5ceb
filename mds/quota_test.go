package mds

import (
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
