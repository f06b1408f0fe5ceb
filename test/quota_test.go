package test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/test/cluster"
)

// Directory quotas (docs/admin.md, "Quotas") through real servers and a
// real mount.

var quotaLayout = layout.Layout{K: 2, M: 1, Unit: 64 << 10}

// wantQuota fails unless path's quota has used bytes and inodes, and the
// MDS's recomputation agrees with every quota it keeps.
func wantQuota(t *testing.T, c *client.Client, path string, bytes, inodes uint64) {
	t.Helper()
	q, err := c.GetQuota(t.Context(), path)
	if err != nil {
		t.Fatalf("get quota %s: %v", path, err)
	}
	if q.UsedBytes != bytes || q.UsedInodes != inodes {
		t.Fatalf("quota %s: used %d bytes %d inodes, want %d and %d", path, q.UsedBytes, q.UsedInodes, bytes, inodes)
	}
	checkQuotasConsistent(t, c)
}

func checkQuotasConsistent(t *testing.T, c *client.Client) {
	t.Helper()
	cs, err := c.CheckQuotas(t.Context(), false)
	if err != nil {
		t.Fatalf("check quotas: %v", err)
	}
	for _, k := range cs {
		if !k.Consistent {
			t.Fatalf("quota %s drifted: %+v", k.Quota.Path, k)
		}
	}
}

// TestQuotaMount: a large write through the mount into a quota directory
// fails with EDQUOT no later than its close; what fitted reads back and
// no more than the limit is recorded; df in the directory shows the
// quota; renaming the file out frees the quota; the usage is the same
// after an MDS restart.
func TestQuotaMount(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: quotaLayout, Dir: cluster.TmpfsDir(t), Insecure: true})
	mnt := cl.Mount()
	c := cl.Client()
	ctx := t.Context()
	vol := filepath.Join(mnt, "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	const limit = 4 << 20
	if err := c.SetQuota(ctx, "/vol", limit, 100); err != nil {
		t.Fatal(err)
	}

	// df inside the quota directory: the quota's size, nothing used.
	var st syscall.Statfs_t
	if err := syscall.Statfs(vol, &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Blocks * uint64(st.Bsize); got != limit || st.Bfree != st.Blocks || st.Files != 100 || st.Ffree != 100 {
		t.Fatalf("statfs in the quota directory: %d bytes, %d of %d blocks free, %d of %d files free", got, st.Bfree, st.Blocks, st.Ffree, st.Files)
	}

	// A 16 MiB write into a 4 MiB quota.
	data := make([]byte, 16<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	f, err := os.Create(filepath.Join(vol, "big"))
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for off := 0; off < len(data) && werr == nil; off += 1 << 20 {
		_, werr = f.Write(data[off : off+1<<20])
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if !errors.Is(werr, syscall.EDQUOT) {
		t.Fatalf("16 MiB write into a 4 MiB quota: %v, want EDQUOT", werr)
	}
	q, err := c.GetQuota(ctx, "/vol")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(vol, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if q.UsedBytes > limit || q.UsedBytes != uint64(fi.Size()) || q.UsedInodes != 1 {
		t.Fatalf("after the refused write: quota used %d bytes %d inodes, file size %d (limit %d)", q.UsedBytes, q.UsedInodes, fi.Size(), limit)
	}
	got, err := os.ReadFile(filepath.Join(vol, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf("the %d bytes within the quota do not read back", len(got))
	}
	t.Logf("16 MiB write into a 4 MiB quota: %v after %d bytes committed", werr, len(got))
	checkQuotasConsistent(t, c)

	// df: the usage as used.
	if err := syscall.Statfs(vol, &st); err != nil {
		t.Fatal(err)
	}
	if used := (st.Blocks - st.Bfree) * uint64(st.Bsize); used/4096 != q.UsedBytes/4096 && used/4096 != (q.UsedBytes+4095)/4096 {
		t.Fatalf("statfs used %d bytes, quota used %d", used, q.UsedBytes)
	}

	// A new file does not fit either; renamed out, the big file frees
	// its space there.
	if err := os.WriteFile(filepath.Join(vol, "more"), data[:limit], 0o644); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("write into the full quota: %v, want EDQUOT", err)
	}
	if err := os.Rename(filepath.Join(vol, "big"), filepath.Join(mnt, "big")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(vol, "more")); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	wantQuota(t, c, "/vol", 0, 0)
	if err := os.WriteFile(filepath.Join(vol, "more"), data[:2<<20], 0o644); err != nil {
		t.Fatalf("write after the rename out: %v", err)
	}
	wantQuota(t, c, "/vol", 2<<20, 1)

	// Nested: a tighter quota inside refuses first.
	if err := os.Mkdir(filepath.Join(vol, "inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.SetQuota(ctx, "/vol/inner", 0, 2); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		err := os.WriteFile(filepath.Join(vol, "inner", fmt.Sprint(i)), nil, 0o644)
		if i < 2 && err != nil || i == 2 && !errors.Is(err, syscall.EDQUOT) {
			t.Fatalf("create %d in a quota of 2 inodes: %v", i, err)
		}
	}
	wantQuota(t, c, "/vol", 2<<20, 4)

	// Restart: the counters come back as they were.
	cl.RestartMDS()
	wantQuota(t, c, "/vol", 2<<20, 4)
	wantQuota(t, c, "/vol/inner", 0, 2)
	qs, err := c.ListQuotas(ctx)
	if err != nil || len(qs) != 2 {
		t.Fatalf("list quotas: %v %v", qs, err)
	}
}

// TestQuotaRaftLeaderKill: quota counters of a 3-member MDS group are
// exact after the leader is killed mid-way, and the new leader enforces
// the limit.
func TestQuotaRaftLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: quotaLayout, MDSReplicas: 3, Dir: cluster.TmpfsDir(t), Insecure: true})
	c := cl.Client()
	ctx := t.Context()
	if err := c.Mkdir(ctx, "/q", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.SetQuota(ctx, "/q", 1<<20, 0); err != nil {
		t.Fatal(err)
	}
	write := func(name string, n int) error {
		f, err := c.Create(ctx, "/q/"+name, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(ctx, bytes.Repeat([]byte{'x'}, n), 0); err != nil {
			f.Close(ctx)
			return err
		}
		return f.Close(ctx)
	}
	for i := range 4 {
		if err := write(fmt.Sprint("a", i), 100<<10); err != nil {
			t.Fatal(err)
		}
	}
	wantQuota(t, c, "/q", 400<<10, 4)
	lead, err := cl.MDSLeader()
	if err != nil {
		t.Fatal(err)
	}
	cl.KillMDS(lead)
	if _, err := cl.MDSLeaderWithin(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	wantQuota(t, c, "/q", 400<<10, 4)
	for i := range 4 {
		if err := write(fmt.Sprint("b", i), 100<<10); err != nil {
			t.Fatal(err)
		}
	}
	if err := write("over", 300<<10); !errors.Is(err, errs.ErrQuota) {
		t.Fatalf("write past the limit after failover: %v, want ErrQuota", err)
	}
	if err := c.Remove(ctx, "/q/over"); err != nil {
		t.Fatal(err)
	}
	wantQuota(t, c, "/q", 800<<10, 8)
	if err := cl.StartMDS(lead); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitMDSConverged(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	wantQuota(t, c, "/q", 800<<10, 8)
}
