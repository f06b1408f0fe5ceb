package test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/test/cluster"
)

// TestPosixHolesAndCopies checks, on a real mount, what issue 16 asked of
// the last POSIX cases: punched holes and zeroed ranges on the extent map
// (and their space freed by GC), SEEK_DATA/SEEK_HOLE, copy_file_range as
// an extent clone (cp's instant copies), and device nodes. The GC grace
// is short so that freed space shows within the test.
func TestPosixHolesAndCopies(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t), GCGrace: time.Second, AllowOther: true})
	mnt := cl.Mount()
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, e posixEnv)
	}{
		{"PunchHole", posixPunchHole},
		{"ZeroRange", posixZeroRange},
		{"SeekDataHole", posixSeekDataHole},
		{"CopyFileRange", posixCopyFileRange},
		{"CpIsInstant", posixCpIsInstant},
		{"DeviceNodes", posixDeviceNodes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(mnt, tc.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.f(t, posixEnv{cl: cl, mnt: mnt, dir: dir, local: t.TempDir()})
		})
	}
}

// waitOSTBytes waits until the OSTs' stored bytes are at most want.
func waitOSTBytes(t *testing.T, e posixEnv, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := ostBytes(t, e.cl, 6)
		if got <= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the OSTs hold %d bytes 30 s later, want at most %d", what, got, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// posixPunchHole: a punched range reads as zeros at once, after a reopen
// and from a second mount, keeps the size, and the space of extents no
// longer named is freed; a punch over writes not yet committed wins over
// them; PUNCH_HOLE without KEEP_SIZE is refused as on Linux.
func posixPunchHole(t *testing.T, e posixEnv) {
	p := e.in("f")
	const size = 40 << 20
	want := randBytes(1, size)
	before := ostBytes(t, e.cl, 6)
	must(t, os.WriteFile(p, want, 0o644))
	written := ostBytes(t, e.cl, 6) - before
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	fd := int(f.Fd())
	punch := func(off, n int64) {
		t.Helper()
		must(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n))
		clear(want[off:min(off+n, int64(len(want)))])
	}
	punch(1<<20+100, 2<<20+5) // unaligned, inside the first extent
	punch(size-10, 1<<20)     // across the end: the size stays
	if st := fstatOf(t, f); st.Size != size {
		t.Fatalf("size after punching %d, want %d", st.Size, size)
	}
	mustEqual(t, "read after punching", pread(t, f, size, 0), want)
	wantErrno(t, "PUNCH_HOLE without KEEP_SIZE", unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE, 0, 4096), syscall.EOPNOTSUPP)
	wantErrno(t, "COLLAPSE_RANGE", unix.Fallocate(fd, unix.FALLOC_FL_COLLAPSE_RANGE, 0, 1<<20), syscall.EOPNOTSUPP)

	// A punch over buffered writes: the hole wins, then and after close.
	_, err = f.WriteAt(bytes.Repeat([]byte("w"), 8192), 30<<20)
	must(t, err)
	copy(want[30<<20:], bytes.Repeat([]byte("w"), 8192))
	punch(30<<20+1000, 4000)
	mustEqual(t, "read of a punch over buffered writes", pread(t, f, 8192, 30<<20), want[30<<20:30<<20+8192])
	must(t, f.Close())
	mustEqual(t, "read after reopening", readAll(t, p), want)
	second := e.cl.Mount()
	mustEqual(t, "read from a second mount", readAll(t, filepath.Join(second, "PunchHole", "f")), want)

	// Punching everything frees the file's space once GC has run.
	f, err = os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	fd = int(f.Fd())
	punch(0, size)
	mustEqual(t, "read of an all-hole file", pread(t, f, 1<<20, 5<<20), zeros(1<<20))
	waitOSTBytes(t, e, before+written/10, "after punching a whole 40 MiB file")
}

// posixZeroRange: ZERO_RANGE zeroes like a punch, and without KEEP_SIZE
// grows the file.
func posixZeroRange(t *testing.T, e posixEnv) {
	p := e.in("f")
	want := randBytes(2, 3<<20)
	must(t, os.WriteFile(p, want, 0o644))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	fd := int(f.Fd())
	must(t, unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 4097, 8191))
	clear(want[4097 : 4097+8191])
	must(t, unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE, 3<<20-5, 1<<20))
	clear(want[3<<20-5:])
	want = append(want, zeros(1<<20-5)...)
	if st := fstatOf(t, f); st.Size != int64(len(want)) {
		t.Fatalf("size after ZERO_RANGE past the end %d, want %d", st.Size, len(want))
	}
	mustEqual(t, "read after ZERO_RANGE", pread(t, f, len(want), 0), want)
	must(t, f.Close())
	mustEqual(t, "read after reopening", readAll(t, p), want)
}

// posixSeekDataHole: SEEK_DATA and SEEK_HOLE find the data and holes of a
// sparse file, punched holes, and writes not yet committed; offsets at or
// past the end are ENXIO. The same calls on the local disk agree where a
// local file system answers at byte granularity (it may round holes to
// blocks, so the file is laid out on 1 MiB boundaries).
func posixSeekDataHole(t *testing.T, e posixEnv) {
	const mib = 1 << 20
	p := e.in("sparse")
	f, err := os.Create(p)
	must(t, err)
	defer f.Close()
	fd := int(f.Fd())
	_, err = f.WriteAt(randBytes(3, mib), 0)
	must(t, err)
	_, err = f.WriteAt(randBytes(4, 2*mib), 10*mib)
	must(t, err)
	must(t, f.Sync())
	seek := func(off int64, whence int) (int64, error) { return unix.Seek(fd, off, whence) }
	check := func(what string, off int64, whence int, want int64) {
		t.Helper()
		got, err := seek(off, whence)
		if err != nil || got != want {
			t.Fatalf("%s: lseek(%d, %d) = %d, %v; want %d", what, off, whence, got, err, want)
		}
	}
	const end = 12 * mib
	check("data at 0", 0, unix.SEEK_DATA, 0)
	check("hole after the first MiB", 0, unix.SEEK_HOLE, mib)
	check("data after the hole", mib+5, unix.SEEK_DATA, 10*mib)
	check("hole inside the hole", 3*mib, unix.SEEK_HOLE, 3*mib)
	check("the end is a hole", 10*mib, unix.SEEK_HOLE, end)
	_, err = seek(end, unix.SEEK_DATA)
	wantErrno(t, "SEEK_DATA at the end", err, syscall.ENXIO)
	_, err = seek(end+5, unix.SEEK_HOLE)
	wantErrno(t, "SEEK_HOLE past the end", err, syscall.ENXIO)

	// A punched hole in the second run of data.
	must(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 11*mib, mib/2))
	check("punched hole", 10*mib, unix.SEEK_HOLE, 11*mib)
	check("data after the punched hole", 11*mib, unix.SEEK_DATA, 11*mib+mib/2)

	// Writes not yet committed are data.
	_, err = f.WriteAt([]byte("buffered"), 5*mib)
	must(t, err)
	check("buffered write is data", mib, unix.SEEK_DATA, 5*mib)
	check("hole after the buffered write", 5*mib, unix.SEEK_HOLE, 5*mib+8)
	// A file with no data at all: SEEK_DATA is ENXIO, SEEK_HOLE 0.
	g, err := os.Create(e.in("empty-sparse"))
	must(t, err)
	defer g.Close()
	must(t, g.Truncate(4*mib))
	_, err = unix.Seek(int(g.Fd()), 0, unix.SEEK_DATA)
	wantErrno(t, "SEEK_DATA in an all-hole file", err, syscall.ENXIO)
	if got, err := unix.Seek(int(g.Fd()), mib, unix.SEEK_HOLE); err != nil || got != mib {
		t.Fatalf("SEEK_HOLE in an all-hole file: %d, %v", got, err)
	}
}

// posixCopyFileRange: copy_file_range between files of the mount clones
// extents: the copy reads back equal, takes no new space, and later
// writes to either file do not show in the other; unaligned ranges over
// existing data, copies within one file, and copies past the source's end
// (short, then 0) behave as on a local file system.
func posixCopyFileRange(t *testing.T, e posixEnv) {
	const size = 48 << 20
	src := e.in("src")
	want := randBytes(5, size)
	must(t, os.WriteFile(src, want, 0o644))
	before := ostBytes(t, e.cl, 6)
	in, err := os.Open(src)
	must(t, err)
	defer in.Close()
	out, err := os.Create(e.in("dst"))
	must(t, err)
	defer out.Close()
	start := time.Now()
	var total int64
	for total < size {
		n, err := unix.CopyFileRange(int(in.Fd()), nil, int(out.Fd()), nil, size, 0)
		must(t, err)
		if n == 0 {
			break
		}
		total += int64(n)
	}
	took := time.Since(start)
	if total != size {
		t.Fatalf("copy_file_range copied %d bytes, want %d", total, size)
	}
	if used := ostBytes(t, e.cl, 6) - before; used > 1<<20 {
		t.Errorf("a copy of %d bytes took %d new bytes on the OSTs: it was not a clone", size, used)
	}
	t.Logf("copy_file_range of %d MiB: %v", size>>20, took)
	mustEqual(t, "the copy", readAll(t, e.in("dst")), want)

	// Writes to the copy do not show in the source, and back.
	_, err = out.WriteAt([]byte("dst!"), 100)
	must(t, err)
	must(t, out.Sync())
	mustEqual(t, "the source after writing the copy", readAll(t, src), want)
	w, err := os.OpenFile(src, os.O_RDWR, 0)
	must(t, err)
	_, err = w.WriteAt([]byte("src!"), 200)
	must(t, err)
	must(t, w.Close())
	dstWant := bytes.Clone(want)
	copy(dstWant[100:], "dst!")
	copy(want[200:], "src!")
	mustEqual(t, "the copy after writing the source", readAll(t, e.in("dst")), dstWant)

	// An unaligned range over existing data, and past the source's end.
	off := int64(777)
	n, err := unix.CopyFileRange(int(in.Fd()), ptr(12345), int(out.Fd()), &off, 3<<20+1, 0)
	if err != nil || n != 3<<20+1 {
		t.Fatalf("unaligned copy: %d, %v", n, err)
	}
	copy(dstWant[777:], want[12345:12345+3<<20+1])
	off = size + 100
	n, err = unix.CopyFileRange(int(in.Fd()), ptr(size-10), int(out.Fd()), &off, 1<<20, 0)
	if err != nil || n != 10 {
		t.Fatalf("copy across the source's end: %d, %v; want 10", n, err)
	}
	dstWant = append(dstWant, zeros(100)...)
	dstWant = append(dstWant, want[size-10:]...)
	n, err = unix.CopyFileRange(int(in.Fd()), ptr(size+5), int(out.Fd()), nil, 100, 0)
	if err != nil || n != 0 {
		t.Fatalf("copy from past the source's end: %d, %v; want 0", n, err)
	}
	mustEqual(t, "the copy after unaligned ranges", readAll(t, e.in("dst")), dstWant)

	// Within one file, overlapping: Linux refuses overlapping ranges of
	// one file with EINVAL; a disjoint one works.
	rw, err := os.OpenFile(e.in("dst"), os.O_RDWR, 0)
	must(t, err)
	defer rw.Close()
	_, err = unix.CopyFileRange(int(rw.Fd()), ptr(0), int(rw.Fd()), ptr(100), 1000, 0)
	wantErrno(t, "overlapping copy within one file", err, syscall.EINVAL)
	n, err = unix.CopyFileRange(int(rw.Fd()), ptr(0), int(rw.Fd()), ptr(40<<20), 5000, 0)
	if err != nil || n != 5000 {
		t.Fatalf("copy within one file: %d, %v", n, err)
	}
	copy(dstWant[40<<20:], dstWant[:5000])
	mustEqual(t, "the file after a copy within it", readAll(t, e.in("dst")), dstWant)
}

func ptr(v int64) *int64 { return &v }

// posixCpIsInstant: cp (coreutils uses copy_file_range) of a large file
// within the mount stores nothing new and gives an equal file.
func posixCpIsInstant(t *testing.T, e posixEnv) {
	const size = 64 << 20
	src := e.in("big")
	want := randBytes(6, size)
	must(t, os.WriteFile(src, want, 0o644))
	before := ostBytes(t, e.cl, 6)
	start := time.Now()
	if out, err := exec.Command("cp", src, e.in("big.copy")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	t.Logf("cp of %d MiB within the mount: %v", size>>20, time.Since(start))
	if used := ostBytes(t, e.cl, 6) - before; used > 1<<20 {
		t.Errorf("cp of %d bytes stored %d new bytes on the OSTs: not a clone", size, used)
	}
	if sha256.Sum256(readAll(t, e.in("big.copy"))) != sha256.Sum256(want) {
		t.Fatal("cp's copy differs from the source")
	}
}

// posixDeviceNodes: root makes block and character devices whose type
// and device numbers show in stat from this and another mount; chmod,
// chown, utimensat, link, rename and unlink treat them as other files;
// an unprivileged user may not make one (EPERM) and the sticky rule
// applies to them; opening a character device node opens the device.
func posixDeviceNodes(t *testing.T, e posixEnv) {
	requireRoot(t)
	blk, chr := e.in("blk"), e.in("chr")
	must(t, unix.Mknod(blk, unix.S_IFBLK|0o640, int(unix.Mkdev(1, 2))))
	must(t, unix.Mknod(chr, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))) // /dev/null's numbers
	checkDev := func(p string, typ uint32, major, minor uint32) {
		t.Helper()
		st := lstatOf(t, p)
		if st.Mode&unix.S_IFMT != typ || unix.Major(st.Rdev) != major || unix.Minor(st.Rdev) != minor {
			t.Fatalf("%s: mode %o rdev %d:%d, want type %o and %d:%d", p, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), typ, major, minor)
		}
	}
	checkDev(blk, unix.S_IFBLK, 1, 2)
	checkDev(chr, unix.S_IFCHR, 1, 3)
	second := e.cl.Mount()
	checkDev(filepath.Join(second, "DeviceNodes", "blk"), unix.S_IFBLK, 1, 2)

	// Writing to the node writes to the device (/dev/null), not the file.
	if f, err := os.OpenFile(chr, os.O_RDWR, 0); err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) || errno != syscall.EACCES {
			t.Fatalf("open of a character device node: %v", err)
		}
		t.Logf("the mount has nodev: opening a device node is refused (%v)", err)
	} else {
		_, err = f.Write([]byte("into the null device"))
		must(t, err)
		n, err := f.Read(make([]byte, 10))
		if n != 0 || err != io.EOF {
			t.Fatalf("read of the null device node: %d, %v", n, err)
		}
		must(t, f.Close())
		if st := lstatOf(t, chr); st.Size != 0 {
			t.Fatalf("the device node's size %d after a write to the device", st.Size)
		}
	}

	must(t, os.Chmod(blk, 0o600))
	must(t, os.Chown(blk, 1000, 1000))
	old := time.Unix(1_000_000_000, 0)
	must(t, os.Chtimes(blk, old, old))
	st := lstatOf(t, blk)
	if st.Mode != unix.S_IFBLK|0o600 || st.Uid != 1000 || st.Gid != 1000 || st.Mtim.Sec != old.Unix() {
		t.Fatalf("after chmod, chown, utimes: mode %o uid %d gid %d mtime %d", st.Mode, st.Uid, st.Gid, st.Mtim.Sec)
	}
	must(t, os.Link(blk, e.in("blk.link")))
	if st := lstatOf(t, blk); st.Nlink != 2 {
		t.Fatalf("nlink after link %d, want 2", st.Nlink)
	}
	must(t, os.Rename(e.in("blk.link"), e.in("blk.renamed")))
	checkDev(e.in("blk.renamed"), unix.S_IFBLK, 1, 2)
	must(t, os.Remove(e.in("blk.renamed")))
	if st := lstatOf(t, blk); st.Nlink != 1 {
		t.Fatalf("nlink after unlink %d, want 1", st.Nlink)
	}
	// Rename over a device node replaces it.
	must(t, os.WriteFile(e.in("file"), []byte("x"), 0o644))
	must(t, os.Rename(e.in("file"), chr))
	if st := lstatOf(t, chr); st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("rename over a device node left mode %o", st.Mode)
	}

	// An unprivileged user: no mknod of devices (a FIFO is fine), and in
	// a sticky directory, no removing root's device node. Temporary
	// directories are 0700: let the user reach the mount.
	for _, d := range []string{e.cl.Dir, filepath.Dir(e.cl.Dir), e.mnt} {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm() == 0o700 {
			must(t, os.Chmod(d, 0o755))
		}
	}
	must(t, os.Mkdir(e.in("tmp"), 0o777))
	must(t, unix.Chmod(e.in("tmp"), 0o1777))
	must(t, unix.Mknod(e.in("tmp/rootdev"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	if out, ok := as(t, 1000, 1000, "", "mknod "+e.in("tmp/mine")+" c 1 3"); ok || !bytes.Contains([]byte(out), []byte("Operation not permitted")) {
		t.Fatalf("mknod of a device by uid 1000: ok=%v %q; want EPERM", ok, out)
	}
	if out, ok := as(t, 1000, 1000, "", "mknod "+e.in("tmp/fifo")+" p"); !ok {
		t.Fatalf("mknod of a FIFO by uid 1000: %s", out)
	}
	if out, ok := as(t, 1000, 1000, "", "rm -f "+e.in("tmp/rootdev")); ok || !bytes.Contains([]byte(out), []byte("Operation not permitted")) {
		t.Fatalf("removing root's device node from a sticky directory as uid 1000: ok=%v %q; want EPERM", ok, out)
	}
	checkDev(e.in("tmp/rootdev"), unix.S_IFCHR, 1, 3)
	must(t, os.Remove(e.in("tmp/rootdev")))
}
