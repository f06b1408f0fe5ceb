package test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoalfs/shoal/test/cluster"
)

// TestCloseToOpenTwoMounts: after close on mount A, open on mount B sees the
// new data and size, even where B's kernel cached the old pages and
// attributes; renames and removals on A are seen by B.
func TestCloseToOpenTwoMounts(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	a, b := cl.Mount(), cl.Mount()
	pa, pb := filepath.Join(a, "f"), filepath.Join(b, "f")

	v1 := randBytes(1, 300_000)
	if err := os.WriteFile(pa, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(pb) // B caches v1's pages and size
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "B reads v1", got, v1)

	for i, n := range []int{500_000, 100_000, 300_000} { // grow, shrink, same size
		v := randBytes(uint64(10+i), n)
		if err := os.WriteFile(pa, v, 0o644); err != nil { // open, truncate, write, close on A
			t.Fatal(err)
		}
		f, err := os.Open(pb)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(n) {
			t.Errorf("version %d: B's fstat after open says %d bytes, want %d", i, fi.Size(), n)
		}
		buf := make([]byte, n+1000)
		m, _ := f.ReadAt(buf, 0)
		f.Close()
		if !bytes.Equal(buf[:m], v) {
			t.Errorf("version %d: B read %d bytes that differ from A's %d", i, m, n)
		}
	}

	// Namespace changes on A are visible on B once B's entry cache expires
	// (1 s entry timeout).
	if err := os.Rename(pa, filepath.Join(a, "g")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(a, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, errF := os.Stat(pb)
		_, errG := os.Stat(filepath.Join(b, "g"))
		_, errD := os.Stat(filepath.Join(b, "dir"))
		if os.IsNotExist(errF) && errG == nil && errD == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B does not see A's rename and mkdir: f=%v g=%v dir=%v", errF, errG, errD)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ents, err := os.ReadDir(b)
	if err != nil || len(ents) != 2 {
		t.Fatalf("B's listing: %v %v", ents, err)
	}
}

// TestRelatime: a read updates atime when atime is not newer than mtime (Linux
// relatime); a second read right after does not.
func TestRelatime(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	mnt := cl.Mount()
	p := filepath.Join(mnt, "f")
	if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(p, old, time.Now()); err != nil { // atime older than mtime
		t.Fatal(err)
	}
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	a1 := atime(t, cl, "/f")
	if a1.Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("atime after a read is %v, want now", a1)
	}
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	if a2 := atime(t, cl, "/f"); !a2.Equal(a1) {
		t.Fatalf("a second read moved atime from %v to %v (relatime keeps it)", a1, a2)
	}
}

func atime(t *testing.T, cl *cluster.Cluster, path string) time.Time {
	t.Helper()
	a, err := cl.Client().Stat(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(0, a.AtimeNs)
}
