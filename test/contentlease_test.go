package test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestContentLeases: a mount with a cache opens files it holds a content
// lease on without the MDS (docs/fuse.md, "Inode leases"), and still
// never reads a copy another client has changed: each change recalls the
// lease before it commits, so the very next open here sees it, with no
// wait. A write or a lock through such an open reaches the MDS as with
// any other open.
func TestContentLeases(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{DirLeaseTime: 10 * time.Second})
	cm := mountCached(t, cl, t.TempDir(), 64<<20)
	other := cl.Mount()
	pa, po := filepath.Join(cm.dir, "f"), filepath.Join(other, "f")

	v := randBytes(1, 1<<20+777)
	if err := os.WriteFile(po, v, 0o644); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "first read", readFileT(t, pa), v)
	settled(t, cm, "shoal_client_cache_fills_total")
	leased := cm.metric(t, "shoal_client_leased_opens_total")
	for i := range 3 {
		mustEqual(t, "read under the lease", readFileT(t, pa), v)
		if got := cm.metric(t, "shoal_client_leased_opens_total"); got <= leased {
			t.Fatalf("read %d: leased opens %v, want more than %v", i, got, leased)
		}
		leased = cm.metric(t, "shoal_client_leased_opens_total")
	}

	// Attributes: answered from the lease, and every change by the other
	// client seen at once (the kernel's own attribute cache aside).
	ino := statIno(t, pa)
	attrs := func() *client.Attr {
		t.Helper()
		a, err := cm.cl.GetAttr(context.Background(), ino)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	before := cm.metric(t, "shoal_client_leased_attrs_total")
	if a := attrs(); a.Mode&0o777 != 0o644 || a.Nlink != 1 {
		t.Fatalf("attributes: mode %o nlink %d", a.Mode, a.Nlink)
	}
	if cm.metric(t, "shoal_client_leased_attrs_total") <= before {
		t.Errorf("getattr under an inode lease asked the MDS")
	}
	if err := os.Chmod(po, 0o600); err != nil {
		t.Fatal(err)
	}
	if a := attrs(); a.Mode&0o777 != 0o600 {
		t.Errorf("mode right after another client's chmod: %o", a.Mode&0o777)
	}
	mustEqual(t, "read after a chmod", readFileT(t, pa), v)
	if err := os.Link(po, po+"2"); err != nil {
		t.Fatal(err)
	}
	if a := attrs(); a.Nlink != 2 {
		t.Errorf("nlink right after another client's link: %d", a.Nlink)
	}
	mustEqual(t, "read after a link", readFileT(t, pa), v)
	if err := os.Remove(po + "2"); err != nil {
		t.Fatal(err)
	}
	if a := attrs(); a.Nlink != 1 {
		t.Errorf("nlink right after another client's unlink of the second name: %d", a.Nlink)
	}

	// Changes by the other client, each read here at once.
	for i, n := range []int{len(v), 3000, 2<<20 + 5} {
		w := randBytes(uint64(100+i), n)
		if err := os.WriteFile(po, w, 0o644); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "read right after another client's rewrite", readFileT(t, pa), w)
		mustEqual(t, "and again", readFileT(t, pa), w)
		v = w
	}
	if err := os.Truncate(po, 100); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read right after another client's truncate", readFileT(t, pa), v[:100])
	f, err := os.OpenFile(po, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	v = append(v[:100:100], "tail"...)
	mustEqual(t, "read right after another client's append", readFileT(t, pa), v)
	mustEqual(t, "and again", readFileT(t, pa), v)

	// A lock through a read-only open under the lease is seen by the
	// other client.
	ro, err := os.Open(pa)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: 0, Len: 10}
	if err := unix.FcntlFlock(ro.Fd(), unix.F_SETLK, &lk); err != nil {
		t.Fatalf("read lock through a leased open: %v", err)
	}
	rw, err := os.OpenFile(po, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	wl := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 10}
	if err := unix.FcntlFlock(rw.Fd(), unix.F_SETLK, &wl); err == nil {
		t.Errorf("the other client took a write lock over a read lock held through a leased open")
	} else if err != syscall.EAGAIN && err != syscall.EACCES {
		t.Errorf("conflicting lock: %v, want EAGAIN", err)
	}
	rw.Close()
	// A write here (with passthrough, not while a reader has it open
	// here: docs/fuse.md) reaches the other client.
	ro.Close()
	w, err := os.OpenFile(pa, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("HEAD"), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	copy(v, "HEAD")
	mustEqual(t, "the other client reads the write", readFileT(t, po), v)
	mustEqual(t, "read here after the write", readFileT(t, pa), v)
}

// statIno returns the inode number of p.
func statIno(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
