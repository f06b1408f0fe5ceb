package test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/test/cluster"
)

// gcGrace is the GC grace of these tests: short, so that they can wait
// past it, but longer than an upload (with -race too), as an allocation
// not committed within the grace expires.
const gcGrace = 2 * time.Second

// chunks returns the number of chunks the OSTs reported in their last
// heartbeats.
func chunks(t *testing.T, cl *cluster.Cluster, c *client.Client) uint64 {
	t.Helper()
	r, err := cl.MDSStub(c).ListOsts(t.Context(), &mdspb.ListOstsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, o := range r.GetOsts() {
		n += o.GetChunks()
	}
	return n
}

// readIno reads the whole of inode ino through a fresh client: no cache
// of the mount can answer for the OSTs.
func readIno(t *testing.T, cl *cluster.Cluster, ino uint64) []byte {
	t.Helper()
	c := cl.Client()
	f, err := c.OpenIno(t.Context(), ino)
	if err != nil {
		t.Fatalf("open inode %d: %v", ino, err)
	}
	defer f.Close(t.Context())
	buf := make([]byte, f.Size())
	if n, err := f.ReadAt(t.Context(), buf, 0); n != len(buf) {
		t.Fatalf("read inode %d: %d of %d bytes: %v", ino, n, len(buf), err)
	}
	return buf
}

func inoOf(t *testing.T, f *os.File) uint64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestUnlinkWhileOpen: a file removed while open stays readable and
// writable through the open descriptor, past the GC grace; its space is
// freed after the last close.
func TestUnlinkWhileOpen(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{GCGrace: gcGrace, SessionLease: 2 * time.Second})
	a := cl.Mount()
	c := cl.Client()
	p := filepath.Join(a, "f")
	data := randBytes(7, 9<<20+1234)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "chunks reported", func() bool { return chunks(t, cl, c) > 0 })

	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino := inoOf(t, f)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat after remove: %v", err)
	}
	fi, err := f.Stat()
	if err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 0 || fi.Size() != int64(len(data)) {
		t.Fatalf("fstat after remove: %v, %v", fi, err)
	}

	// Read and write through the descriptor, and wait past the GC grace.
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read after remove", got, data)
	patch := randBytes(8, 1<<20)
	if _, err := f.WriteAt(patch, 2<<20); err != nil {
		t.Fatal(err)
	}
	copy(data[2<<20:], patch)
	tail := []byte("appended after the remove")
	if _, err := f.WriteAt(tail, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	data = append(data, tail...)
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after remove: %v", err)
	}
	time.Sleep(gcGrace + time.Second) // past the GC grace, and a few GC rounds
	a2, err := c.GetAttr(t.Context(), ino)
	if err != nil || a2.Nlink != 0 || a2.Size != uint64(len(data)) {
		t.Fatalf("MDS attributes of the removed open file: %v, %v", a2, err)
	}
	mustEqual(t, "removed file read by another client after the GC grace", readIno(t, cl, ino), data)
	got = make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read through the descriptor", got, data)

	// The last close frees everything.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "inode deleted after close", func() bool {
		_, err := c.GetAttr(t.Context(), ino)
		return errors.Is(err, errs.ErrNotFound)
	})
	eventually(t, 20*time.Second, "chunks deleted after close", func() bool { return chunks(t, cl, c) == 0 })
}

// TestUnlinkOpenOnOtherMount: a file open on mount A and removed on mount
// B stays readable and writable on A until A closes it.
func TestUnlinkOpenOnOtherMount(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{GCGrace: gcGrace})
	a, b := cl.Mount(), cl.Mount()
	data := randBytes(9, 3<<20+5)
	if err := os.WriteFile(filepath.Join(a, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(a, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino := inoOf(t, f)
	if err := os.Remove(filepath.Join(b, "f")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(gcGrace + time.Second)
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "A reads after B removed", got, data)
	if _, err := f.WriteAt([]byte("more"), 10); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	copy(data[10:], "more")
	mustEqual(t, "another client reads A's write", readIno(t, cl, ino), data)
	if fi, err := f.Stat(); err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 0 {
		t.Fatalf("fstat on A: %v, %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(b, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat on B: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	c := cl.Client()
	eventually(t, 10*time.Second, "inode deleted after A's close", func() bool {
		_, err := c.GetAttr(t.Context(), ino)
		return errors.Is(err, errs.ErrNotFound)
	})
}

// TestUnlinkedOpenSurvivesMDSRestart: the MDS forgets its sessions in a
// restart; the mount announces its open files again, so an open file
// removed before the restart keeps its data past the restart grace, and
// goes when it is closed.
func TestUnlinkedOpenSurvivesMDSRestart(t *testing.T) {
	cluster.RequireFUSE(t)
	const lease = 3 * time.Second
	cl := cluster.Start(t, cluster.Options{GCGrace: gcGrace, SessionLease: lease})
	a := cl.Mount()
	data := randBytes(10, 2<<20+77)
	p := filepath.Join(a, "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino := inoOf(t, f)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	cl.RestartMDS()
	time.Sleep(2*lease + time.Second) // past the grace and a few GC rounds
	mustEqual(t, "removed open file after an MDS restart", readIno(t, cl, ino), data)
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read through the descriptor after the restart differs")
	}
	// Locks work in the new session.
	if _, err := fcntlLock(f, unix.F_SETLK, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("lock after the restart: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	c := cl.Client()
	eventually(t, 10*time.Second, "inode deleted after close", func() bool {
		_, err := c.GetAttr(t.Context(), ino)
		return errors.Is(err, errs.ErrNotFound)
	})
}

// TestUnlinkLeasedOpenOnOtherMount: a file opened for reading on mount A
// under an inode lease (without an MDS handle: docs/fuse.md, "Inode
// leases") and removed on mount B stays readable on A until A closes it:
// the recall of A's lease gives A's open file a handle first.
func TestUnlinkLeasedOpenOnOtherMount(t *testing.T) { unlinkLeasedOpen(t, false) }

// TestUnlinkLeasedOpenSameMount: a file opened for reading under an inode
// lease and removed through the same mount stays readable through the
// open descriptor: the mount gives its open file an MDS handle before
// the unlink goes.
func TestUnlinkLeasedOpenSameMount(t *testing.T) { unlinkLeasedOpen(t, true) }

// unlinkLeasedOpen opens a file on a mount under an inode lease, removes
// it through the same mount or another, and reads it through the open
// descriptor once the kernel's caches are dropped and the GC's grace is
// over.
func unlinkLeasedOpen(t *testing.T, sameMount bool) {
	cluster.RequireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root to drop the kernel's caches (the reads must reach the daemon)")
	}
	cl := cluster.Start(t, cluster.Options{GCGrace: gcGrace, DirLeaseTime: 10 * time.Second})
	a := cl.Mount()
	b := a // the mount that removes it
	if !sameMount {
		b = cl.Mount()
	}
	data := randBytes(10, 3<<20+5)
	if err := os.WriteFile(filepath.Join(b, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "A's first read (its open gets a lease)", readFileT(t, filepath.Join(a, "f")), data)
	f, err := os.Open(filepath.Join(a, "f")) // under the lease
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino := inoOf(t, f)
	if err := os.Remove(filepath.Join(b, "f")); err != nil {
		t.Fatal(err)
	}
	// The MDS keeps the inode, an orphan, for A's open file.
	if a, err := cl.Client().GetAttr(t.Context(), ino); err != nil || a.Nlink != 0 {
		t.Fatalf("the removed file open on A, at the MDS: %v, %v", a, err)
	}
	time.Sleep(gcGrace + time.Second)
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "A reads after the removal", got, data)
	if fi, err := f.Stat(); err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 0 {
		t.Fatalf("fstat on A: %v, %v", fi, err)
	}
}
