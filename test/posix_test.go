package test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/test/cluster"
	"github.com/shoalfs/shoal/test/fsx"
)

// posixEnv is what a POSIX subtest works in: its own directory on a
// mount, a directory on the real disk for differential checks, and the
// cluster.
type posixEnv struct {
	cl    *cluster.Cluster
	mnt   string // the mount's root
	dir   string // the subtest's directory on the mount
	local string // the subtest's directory on the local disk
}

func (e posixEnv) in(name string) string { return filepath.Join(e.dir, name) }

// TestPosix checks file semantics on a mount, one subtest per area. The
// servers keep their state on tmpfs; no subtest here is about durability.
func TestPosix(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	mnt := cl.Mount()
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, e posixEnv)
	}{
		{"OAppendAtomic", posixAppendAtomic},
		{"OTrunc", posixOTrunc},
		{"OExcl", posixOExcl},
		{"CreateModes", posixCreateModes},
		{"FtruncateHoles", posixFtruncateHoles},
		{"SparseFile", posixSparse},
		{"Fallocate", posixFallocate},
		{"FileOver4GiB", posixOver4GiB},
		{"ReadPastEOF", posixReadPastEOF},
		{"WriteFarBeyondEOF", posixWriteFarBeyondEOF},
		{"NamesAnyByte", posixNamesAnyByte},
		{"NameLengths", posixNameLengths},
		{"Symlinks", posixSymlinks},
		{"Rename", posixRename},
		{"HardLinks", posixHardLinks},
		{"TimesUpdatedBy", posixTimesUpdatedBy},
		{"Utimensat", posixUtimensat},
		{"TimesSetBeforeClose", posixTimesSetBeforeClose},
		{"MmapWriteWithAppendHandle", posixMmapWriteWithAppendHandle},
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

// wantErrno fails unless err is the errno want.
func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func statOf(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return st
}

func lstatOf(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

func fstatOf(t *testing.T, f *os.File) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatalf("fstat %s: %v", f.Name(), err)
	}
	return st
}

func readAll(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return b
}

// pread reads n bytes at off with one pread(2).
func pread(t *testing.T, f *os.File, n int, off int64) []byte {
	t.Helper()
	b := make([]byte, n)
	r, err := unix.Pread(int(f.Fd()), b, off)
	if err != nil {
		t.Fatalf("pread %d at %d: %v", n, off, err)
	}
	return b[:r]
}

func zeros(n int) []byte { return make([]byte, n) }

// ostBytes is the bytes stored in the OSTs' directories.
func ostBytes(t *testing.T, cl *cluster.Cluster, n int) int64 {
	t.Helper()
	var total int64
	for i := 0; i < n; i++ {
		filepath.WalkDir(cl.OST(i).Dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					total += fi.Size()
				}
			}
			return nil
		})
	}
	return total
}

// posixAppendAtomic: writers on separate O_APPEND descriptors of one mount
// append fixed-size records concurrently; every record must come out whole,
// once, and each writer's records in its order.
func posixAppendAtomic(t *testing.T, e posixEnv) {
	const writers = 8
	for _, size := range []int{100, 4099, 70_000, 1<<20 + 3} {
		records := min(200, (8<<20)/(writers*size)+1)
		p := e.in(fmt.Sprintf("log-%d", size))
		must(t, os.WriteFile(p, nil, 0o644))
		record := func(w, r int) []byte {
			b := make([]byte, size)
			hdr := fmt.Sprintf("w=%02d r=%05d ", w, r)
			copy(b, hdr)
			for i := len(hdr); i < size-1; i++ {
				b[i] = byte('a' + (w*7+r+i)%26)
			}
			b[size-1] = '\n'
			return b
		}
		var wg sync.WaitGroup
		errc := make(chan error, writers)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					errc <- err
					return
				}
				for r := 0; r < records; r++ {
					// One write(2) per record.
					n, err := unix.Write(int(f.Fd()), record(w, r))
					if err != nil || n != size {
						f.Close()
						errc <- fmt.Errorf("writer %d record %d: wrote %d of %d: %v", w, r, n, size, err)
						return
					}
				}
				errc <- f.Close()
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			if err != nil {
				t.Fatal(err)
			}
		}
		check := func(stage, p string) {
			b := readAll(t, p)
			if len(b) != writers*records*size {
				t.Fatalf("records of %d bytes, %s: file has %d bytes, want %d", size, stage, len(b), writers*records*size)
			}
			next := make([]int, writers)
			for off := 0; off < len(b); off += size {
				var w, r int
				if _, err := fmt.Sscanf(string(b[off:off+14]), "w=%02d r=%05d", &w, &r); err != nil || w >= writers {
					t.Fatalf("records of %d bytes, %s: no record header at %d: %q", size, stage, off, b[off:off+14])
				}
				if !bytes.Equal(b[off:off+size], record(w, r)) {
					t.Fatalf("records of %d bytes, %s: record w=%d r=%d at %d is torn", size, stage, w, r, off)
				}
				if r != next[w] {
					t.Fatalf("records of %d bytes, %s: writer %d: record %d at %d, want %d", size, stage, w, r, off, next[w])
				}
				next[w]++
			}
		}
		check("same mount", p)
		check("another mount", filepath.Join(e.cl.Mount(), e.dir[len(e.mnt):], filepath.Base(p)))
	}
}

// posixOTrunc: O_TRUNC empties a file, also under another descriptor's
// unflushed writes, and keeps its mode.
func posixOTrunc(t *testing.T, e posixEnv) {
	p := e.in("f")
	must(t, os.WriteFile(p, []byte("hello world"), 0o640))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	if st := fstatOf(t, f); st.Size != 0 {
		t.Errorf("size after O_TRUNC open: %d", st.Size)
	}
	_, err = f.Write([]byte("abc"))
	must(t, err)
	must(t, f.Close())
	if b := readAll(t, p); string(b) != "abc" {
		t.Errorf("after O_TRUNC and a write: %q", b)
	}
	if st := statOf(t, p); st.Mode&0o7777 != 0o640 {
		t.Errorf("mode after O_TRUNC: %#o", st.Mode&0o7777)
	}

	// A writer's unflushed bytes go with the truncate.
	w, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer w.Close()
	_, err = w.WriteAt(randBytes(7, 100_000), 0)
	must(t, err)
	tr, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC|os.O_CREATE, 0o600)
	must(t, err)
	if st := fstatOf(t, w); st.Size != 0 {
		t.Errorf("size seen by the writer after another O_TRUNC open: %d", st.Size)
	}
	if b := pread(t, w, 10, 0); len(b) != 0 {
		t.Errorf("read after O_TRUNC: %d bytes", len(b))
	}
	must(t, tr.Close())
	must(t, w.Close())
	if st := statOf(t, p); st.Size != 0 || st.Mode&0o7777 != 0o640 {
		t.Errorf("after O_TRUNC|O_CREAT of an existing file: size %d mode %#o, want 0 and 0640", st.Size, st.Mode&0o7777)
	}

	// O_RDONLY|O_TRUNC truncates on Linux, as on the local disk.
	for _, d := range []string{e.dir, e.local} {
		q := filepath.Join(d, "ro")
		must(t, os.WriteFile(q, []byte("data"), 0o644))
		r, err := os.OpenFile(q, os.O_RDONLY|os.O_TRUNC, 0)
		must(t, err)
		r.Close()
		if st := statOf(t, q); st.Size != 0 {
			t.Errorf("%s: O_RDONLY|O_TRUNC left %d bytes", d, st.Size)
		}
	}
}

// posixOExcl: O_CREAT|O_EXCL fails with EEXIST on any existing name, even a
// dangling symlink, and creates nothing through it.
func posixOExcl(t *testing.T, e posixEnv) {
	excl := func(p string) error {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			f.Close()
		}
		return err
	}
	must(t, excl(e.in("new")))
	wantErrno(t, "O_EXCL on a file", excl(e.in("new")), syscall.EEXIST)
	must(t, os.Mkdir(e.in("dir"), 0o755))
	wantErrno(t, "O_EXCL on a directory", excl(e.in("dir")), syscall.EEXIST)
	must(t, os.Symlink("nowhere", e.in("dangling")))
	wantErrno(t, "O_EXCL on a dangling symlink", excl(e.in("dangling")), syscall.EEXIST)
	if _, err := os.Lstat(e.in("nowhere")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("O_EXCL through a dangling symlink created its target: %v", err)
	}
	must(t, os.Symlink("new", e.in("good")))
	wantErrno(t, "O_EXCL on a symlink to a file", excl(e.in("good")), syscall.EEXIST)
	// Without O_EXCL, O_CREAT follows a dangling symlink and creates the target.
	f, err := os.OpenFile(e.in("dangling"), os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err)
	f.Close()
	if _, err := os.Lstat(e.in("nowhere")); err != nil {
		t.Errorf("O_CREAT through a dangling symlink: target not created: %v", err)
	}
}

// posixCreateModes: the kernel applies the umask once; the mount must
// give the same modes as the local disk for files and directories,
// setuid, setgid and sticky bits included.
func posixCreateModes(t *testing.T, e posixEnv) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	type res struct {
		name string
		mode uint32
	}
	run := func(root string) []res {
		var out []res
		for _, um := range []int{0o022, 0, 0o077, 0o027, 0o002} {
			syscall.Umask(um)
			for _, m := range []uint32{0o666, 0o620, 0o644, 0o4755, 0o2755, 0o6777, 0o1777, 0o777, 0o400, 0} {
				name := fmt.Sprintf("f-%03o-%04o", um, m)
				fd, err := syscall.Open(filepath.Join(root, name), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, m)
				must(t, err)
				syscall.Close(fd)
				out = append(out, res{name, lstatOf(t, filepath.Join(root, name)).Mode})
			}
			for _, m := range []uint32{0o777, 0o755, 0o2775, 0o1777, 0o700, 0o3777} {
				name := fmt.Sprintf("d-%03o-%04o", um, m)
				must(t, syscall.Mkdir(filepath.Join(root, name), m))
				out = append(out, res{name, lstatOf(t, filepath.Join(root, name)).Mode})
			}
			name := fmt.Sprintf("l-%03o", um)
			must(t, os.Symlink("x", filepath.Join(root, name)))
			out = append(out, res{name, lstatOf(t, filepath.Join(root, name)).Mode})
		}
		return out
	}
	want, got := run(e.local), run(e.dir)
	syscall.Umask(old)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: mode %#o on the mount, %#o on the local disk", want[i].name, got[i].mode, want[i].mode)
		}
	}
	// chmod to no permission at all shows no permission (with
	// default_permissions the kernel checks access from these bits).
	for _, p := range []string{e.in("f-022-0644"), e.in("d-022-0755")} {
		must(t, os.Chmod(p, 0))
		if st := lstatOf(t, p); st.Mode&0o7777 != 0 {
			t.Errorf("chmod %s 0: mode %#o", filepath.Base(p), st.Mode&0o7777)
		}
		must(t, os.Chmod(p, 0o755))
	}
}

// posixFtruncateHoles: ftruncate shrinks and grows; grown bytes read as
// zeros, never as the bytes that were cut, flushed or not.
func posixFtruncateHoles(t *testing.T, e posixEnv) {
	p := e.in("f")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err)
	defer f.Close()
	data := randBytes(11, 3<<20+12345) // not flushed yet
	_, err = f.WriteAt(data, 0)
	must(t, err)
	expect := func(stage string, want []byte) {
		t.Helper()
		if st := fstatOf(t, f); st.Size != int64(len(want)) {
			t.Fatalf("%s: size %d, want %d", stage, st.Size, len(want))
		}
		got := pread(t, f, len(want)+100, 0)
		mustEqual(t, stage, got, want)
	}
	must(t, f.Truncate(100))
	expect("shrunk to 100 (unflushed)", data[:100])
	must(t, f.Truncate(5000))
	expect("grown to 5000", append(slices.Clone(data[:100]), zeros(4900)...))
	must(t, f.Sync())
	// Flushed data, cut inside a stripe row and grown back over it.
	_, err = f.WriteAt(data, 0)
	must(t, err)
	must(t, f.Sync())
	must(t, f.Truncate(1<<20+5))
	must(t, f.Truncate(int64(len(data))))
	expect("cut at 1 MiB+5 and grown back", append(slices.Clone(data[:1<<20+5]), zeros(len(data)-(1<<20+5))...))
	must(t, f.Truncate(0))
	must(t, f.Truncate(3<<20))
	expect("cut to 0 and grown to 3 MiB", zeros(3<<20))
	must(t, f.Close())
	// And as another mount reads it.
	other := filepath.Join(e.cl.Mount(), "FtruncateHoles", "f")
	mustEqual(t, "from another mount", readAll(t, other), zeros(3<<20))
	// truncate(2) by path, with no open file.
	must(t, os.Truncate(p, 7))
	must(t, os.Truncate(p, 9))
	mustEqual(t, "truncate by path", readAll(t, p), zeros(9))
}

// posixSparse: a write far past the end leaves a hole that reads as zeros
// and costs no space on the OSTs.
func posixSparse(t *testing.T, e posixEnv) {
	before := ostBytes(t, e.cl, 6)
	p := e.in("sparse")
	f, err := os.Create(p)
	must(t, err)
	const off = 200<<20 + 7
	_, err = f.WriteAt([]byte("x"), off)
	must(t, err)
	must(t, f.Close())
	st := statOf(t, p)
	if st.Size != off+1 {
		t.Fatalf("size %d, want %d", st.Size, off+1)
	}
	f, err = os.Open(p)
	must(t, err)
	defer f.Close()
	mustEqual(t, "hole at the start", pread(t, f, 1<<20, 0), zeros(1<<20))
	mustEqual(t, "hole before the byte", pread(t, f, 4096, off-4096), zeros(4096))
	mustEqual(t, "the byte", pread(t, f, 10, off), []byte("x"))
	if used := ostBytes(t, e.cl, 6) - before; used > 4<<20 {
		t.Errorf("a 200 MiB sparse file with one byte took %d bytes on the OSTs", used)
	}
	t.Logf("st_blocks of a 200 MiB file with one byte: %d (%d bytes)", st.Blocks, st.Blocks*512)
}

// posixFallocate: mode 0 grows the file with zeros, KEEP_SIZE keeps the
// size, and the modes that move data (collapsing and inserting ranges) are
// not supported. Punching holes and zeroing: TestPosixHolesAndCopies.
func posixFallocate(t *testing.T, e posixEnv) {
	f, err := os.Create(e.in("f"))
	must(t, err)
	defer f.Close()
	fd := int(f.Fd())
	_, err = f.Write([]byte("0123456789"))
	must(t, err)
	size := func() int64 { return fstatOf(t, f).Size }
	must(t, unix.Fallocate(fd, 0, 0, 1<<20))
	if s := size(); s != 1<<20 {
		t.Errorf("fallocate(0, 1 MiB): size %d", s)
	}
	mustEqual(t, "after fallocate", pread(t, f, 1<<20, 0), append([]byte("0123456789"), zeros(1<<20-10)...))
	must(t, unix.Fallocate(fd, 0, 100, 10))
	if s := size(); s != 1<<20 {
		t.Errorf("fallocate inside the file: size %d", s)
	}
	must(t, unix.Fallocate(fd, 0, 3<<20, 5))
	if s := size(); s != 3<<20+5 {
		t.Errorf("fallocate past the end: size %d, want %d", s, 3<<20+5)
	}
	must(t, unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, 64<<20))
	if s := size(); s != 3<<20+5 {
		t.Errorf("fallocate KEEP_SIZE: size %d, want %d", s, 3<<20+5)
	}
	wantErrno(t, "fallocate COLLAPSE_RANGE", unix.Fallocate(fd, unix.FALLOC_FL_COLLAPSE_RANGE, 0, 1<<20), syscall.EOPNOTSUPP)
	wantErrno(t, "fallocate INSERT_RANGE", unix.Fallocate(fd, unix.FALLOC_FL_INSERT_RANGE, 0, 1<<20), syscall.EOPNOTSUPP)
	mustEqual(t, "data after refused modes", pread(t, f, 10, 0), []byte("0123456789"))
	// On unflushed writes: a fallocate below the buffered end changes
	// nothing.
	_, err = f.WriteAt([]byte("tail"), 5<<20)
	must(t, err)
	must(t, unix.Fallocate(fd, 0, 0, 4<<20))
	if s := size(); s != 5<<20+4 {
		t.Errorf("fallocate below unflushed writes: size %d, want %d", s, 5<<20+4)
	}
}

// posixOver4GiB: offsets past 4 GiB (and a write across it) work, and
// stay sparse: 5 GiB of zeros are never written.
func posixOver4GiB(t *testing.T, e posixEnv) {
	const gib = int64(1) << 30
	before := ostBytes(t, e.cl, 6)
	p := e.in("big")
	f, err := os.Create(p)
	must(t, err)
	mib := randBytes(5, 1<<20)
	_, err = f.WriteAt(mib, 5*gib)
	must(t, err)
	_, err = f.WriteAt([]byte("xyz"), 4*gib-1) // across 2^32
	must(t, err)
	check := func(stage string, f *os.File) {
		t.Helper()
		if st := fstatOf(t, f); st.Size != 5*gib+1<<20 {
			t.Fatalf("%s: size %d, want %d", stage, st.Size, 5*gib+1<<20)
		}
		mustEqual(t, stage+": the MiB at 5 GiB", pread(t, f, 1<<20, 5*gib), mib)
		want := append(append(zeros(4095), "xyz"...), zeros(4094)...)
		mustEqual(t, stage+": around 4 GiB", pread(t, f, 8192, 4*gib-4096), want)
		mustEqual(t, stage+": hole at 1 GiB", pread(t, f, 1<<20, gib), zeros(1<<20))
		mustEqual(t, stage+": end", pread(t, f, 100, 5*gib+1<<20-10), mib[1<<20-10:])
	}
	check("unflushed", f)
	must(t, f.Close())
	g, err := os.Open(filepath.Join(e.cl.Mount(), "FileOver4GiB", "big"))
	must(t, err)
	defer g.Close()
	check("another mount", g)
	if used := ostBytes(t, e.cl, 6) - before; used > 64<<20 {
		t.Errorf("a 5 GiB sparse file with 1 MiB of data took %d bytes on the OSTs", used)
	}
}

// posixReadPastEOF: reads at or past the end return nothing; a read across
// it returns the bytes up to it, unflushed ones included.
func posixReadPastEOF(t *testing.T, e posixEnv) {
	f, err := os.OpenFile(e.in("f"), os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err)
	defer f.Close()
	data := randBytes(3, 1000)
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Sync())
	for _, off := range []int64{1000, 1001, 5000, 1 << 40, 1<<62 + 5} {
		if b := pread(t, f, 100, off); len(b) != 0 {
			t.Errorf("pread at %d past the end (1000): %d bytes", off, len(b))
		}
	}
	mustEqual(t, "read across the end", pread(t, f, 100, 950), data[950:])
	if n, err := f.ReadAt(make([]byte, 10), 1000); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at the end: %d, %v; want 0, EOF", n, err)
	}
	more := randBytes(4, 500) // unflushed
	_, err = f.Write(more)
	must(t, err)
	mustEqual(t, "read across the unflushed end", pread(t, f, 1000, 1200), more[200:])
	if b := pread(t, f, 10, 1500); len(b) != 0 {
		t.Errorf("pread at the unflushed end: %d bytes", len(b))
	}
}

// posixWriteFarBeyondEOF: writes far past the end, up to Shoal's largest
// offset (2^62); past it EFBIG.
func posixWriteFarBeyondEOF(t *testing.T, e posixEnv) {
	f, err := os.OpenFile(e.in("f"), os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err)
	defer f.Close()
	_, err = f.Write([]byte("start"))
	must(t, err)
	const tib = int64(1) << 40
	_, err = f.WriteAt([]byte("end"), tib)
	must(t, err)
	if st := fstatOf(t, f); st.Size != tib+3 {
		t.Errorf("size after a write at 1 TiB: %d", st.Size)
	}
	must(t, f.Sync())
	mustEqual(t, "at 1 TiB", pread(t, f, 10, tib), []byte("end"))
	mustEqual(t, "in the hole", pread(t, f, 4096, tib/2), zeros(4096))
	mustEqual(t, "the start", pread(t, f, 5, 0), []byte("start"))

	const maxSize = int64(1) << 62
	_, err = f.WriteAt([]byte("z"), maxSize-1)
	must(t, err)
	if st := fstatOf(t, f); st.Size != maxSize {
		t.Errorf("size after a write at 2^62-1: %d", st.Size)
	}
	must(t, f.Sync())
	mustEqual(t, "the last byte", pread(t, f, 10, maxSize-1), []byte("z"))
	_, err = f.WriteAt([]byte("z"), maxSize)
	wantErrno(t, "write at 2^62", err, syscall.EFBIG)
	wantErrno(t, "ftruncate to 2^62+1", f.Truncate(maxSize+1), syscall.EFBIG)
	must(t, f.Truncate(10))
	mustEqual(t, "after the truncate", pread(t, f, 100, 0), append([]byte("start"), zeros(5)...))
}

// posixNamesAnyByte: a name may hold any byte but '/' and NUL, UTF-8 or
// not; readdir returns each name byte for byte.
func posixNamesAnyByte(t *testing.T, e posixEnv) {
	var all []byte
	for b := 1; b < 256; b++ {
		if b != '/' {
			all = append(all, byte(b))
		}
	}
	names := []string{string(all), "\xff\xfe\xfd", "\x80\x80", "tab\there", "new\nline", " lead", "trail ", "-dash",
		"ünïcödé", "日本語", "...", ".hidden", "a.", `back\slash`, "quote\"'", "*?[", "\x7f\x7f"}
	for b := 1; b < 256; b++ {
		if b != '/' && b != '.' {
			names = append(names, string([]byte{byte(b)}))
		}
	}
	for _, n := range names {
		if err := os.WriteFile(e.in(n), []byte(n), 0o644); err != nil {
			t.Fatalf("create %q: %v", n, err)
		}
	}
	ents, err := os.ReadDir(e.dir)
	must(t, err)
	var got []string
	for _, en := range ents {
		got = append(got, en.Name())
	}
	want := slices.Clone(names)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("readdir: %d names, want %d; first difference: %q", len(got), len(want), firstDiffName(got, want))
	}
	for _, n := range names {
		if b, err := os.ReadFile(e.in(n)); err != nil || string(b) != n {
			t.Errorf("read %q: %q, %v", n, b, err)
		}
	}
	// Rename, link and symlink with such names.
	rev := slices.Clone(all)
	slices.Reverse(rev)
	must(t, os.Rename(e.in(string(all)), e.in(string(rev))))
	must(t, os.Link(e.in(string(rev)), e.in("\xff\x01link")))
	must(t, os.Symlink(string(all), e.in("\xfe\x02sym")))
	if tgt, err := os.Readlink(e.in("\xfe\x02sym")); err != nil || tgt != string(all) {
		t.Errorf("readlink of a symlink to every byte: %q, %v", tgt, err)
	}
	if b := readAll(t, e.in("\xff\x01link")); string(b) != string(all) {
		t.Errorf("hard link with a binary name: %q", b)
	}
}

func firstDiffName(a, b []string) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("%q vs %q", a[i], b[i])
		}
	}
	return "one list is a prefix of the other"
}

// posixNameLengths: 255-byte names work everywhere a name is taken;
// 256-byte ones fail with ENAMETOOLONG, as on the local disk. Symlink
// targets may be up to 4095 bytes.
func posixNameLengths(t *testing.T, e posixEnv) {
	n255, n256 := strings.Repeat("a", 255), strings.Repeat("b", 256)
	for _, root := range []string{e.dir, e.local} {
		in := func(n string) string { return filepath.Join(root, n) }
		must(t, os.WriteFile(in("src"), []byte("x"), 0o644))
		ops := []struct {
			name string
			op   func(n string) error
		}{
			{"create", func(n string) error { return os.WriteFile(in("c"+n[1:]), nil, 0o644) }},
			{"mkdir", func(n string) error { return os.Mkdir(in("m"+n[1:]), 0o755) }},
			{"symlink", func(n string) error { return os.Symlink("src", in("s"+n[1:])) }},
			{"link", func(n string) error { return os.Link(in("src"), in("l"+n[1:])) }},
			{"rename", func(n string) error {
				must(t, os.WriteFile(in("r"), nil, 0o644))
				return os.Rename(in("r"), in("r"+n[1:]))
			}},
		}
		for _, o := range ops {
			if err := o.op(n255); err != nil {
				t.Errorf("%s: %s with a 255-byte name: %v", root, o.name, err)
			}
			wantErrno(t, root+": "+o.name+" with a 256-byte name", o.op(n256), syscall.ENAMETOOLONG)
		}
		_, err := os.Lstat(in(n256))
		wantErrno(t, root+": lstat of a 256-byte name", err, syscall.ENAMETOOLONG)
		_, err = os.Lstat(in(n255))
		wantErrno(t, root+": lstat of a missing 255-byte name", err, syscall.ENOENT)
		long := strings.Repeat("t", 4095)
		must(t, os.Symlink(long, in("longtarget")))
		if tgt, err := os.Readlink(in("longtarget")); err != nil || tgt != long {
			t.Errorf("%s: readlink of a 4095-byte target: %d bytes, %v", root, len(tgt), err)
		}
	}
	if msg := fsx.CompareTrees(e.local, e.dir); msg != "" {
		t.Errorf("mount and local disk differ: %s", msg)
	}
}

// posixSymlinks: relative, absolute and dangling symlinks, loops (ELOOP at
// open), O_NOFOLLOW, links to directories.
func posixSymlinks(t *testing.T, e posixEnv) {
	must(t, os.WriteFile(e.in("target"), []byte("data"), 0o644))
	must(t, os.Mkdir(e.in("sub"), 0o755))
	must(t, os.Symlink("target", e.in("rel")))
	must(t, os.Symlink("../target", e.in("sub/up")))
	must(t, os.Symlink(e.in("target"), e.in("abs")))
	for _, l := range []string{"rel", "sub/up", "abs"} {
		if b, err := os.ReadFile(e.in(l)); err != nil || string(b) != "data" {
			t.Errorf("read through %s: %q, %v", l, b, err)
		}
		st := lstatOf(t, e.in(l))
		tgt, _ := os.Readlink(e.in(l))
		if st.Mode&syscall.S_IFMT != syscall.S_IFLNK || st.Size != int64(len(tgt)) || st.Nlink != 1 {
			t.Errorf("lstat %s: mode %#o size %d nlink %d (target %q)", l, st.Mode, st.Size, st.Nlink, tgt)
		}
	}
	if tgt, _ := os.Readlink(e.in("abs")); tgt != e.in("target") {
		t.Errorf("readlink abs: %q", tgt)
	}

	must(t, os.Symlink("nowhere", e.in("dangling")))
	lstatOf(t, e.in("dangling"))
	_, err := os.Stat(e.in("dangling"))
	wantErrno(t, "stat of a dangling symlink", err, syscall.ENOENT)
	_, err = os.Open(e.in("dangling"))
	wantErrno(t, "open of a dangling symlink", err, syscall.ENOENT)

	must(t, os.Symlink("loop2", e.in("loop1")))
	must(t, os.Symlink("loop1", e.in("loop2")))
	must(t, os.Symlink("self", e.in("self")))
	for _, l := range []string{"loop1", "self"} {
		_, err = os.Open(e.in(l))
		wantErrno(t, "open of symlink loop "+l, err, syscall.ELOOP)
		_, err = os.Stat(e.in(l))
		wantErrno(t, "stat of symlink loop "+l, err, syscall.ELOOP)
	}
	_, err = os.OpenFile(e.in("rel"), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	wantErrno(t, "O_NOFOLLOW on a symlink", err, syscall.ELOOP)
	wantErrno(t, "symlink over an existing name", os.Symlink("x", e.in("rel")), syscall.EEXIST)

	must(t, os.Symlink("sub", e.in("subl")))
	if ents, err := os.ReadDir(e.in("subl")); err != nil || len(ents) != 1 || ents[0].Name() != "up" {
		t.Errorf("readdir through a symlink to a directory: %v, %v", ents, err)
	}
	wantErrno(t, "rmdir of a symlink to a directory", syscall.Rmdir(e.in("subl")), syscall.ENOTDIR)
	must(t, os.Remove(e.in("subl")))
	if _, err := os.Stat(e.in("sub/up")); err != nil {
		t.Errorf("unlink of a symlink removed its target's contents: %v", err)
	}
	must(t, os.Chmod(e.in("rel"), 0o600)) // follows the link
	if st := statOf(t, e.in("target")); st.Mode&0o777 != 0o600 {
		t.Errorf("chmod through a symlink: target mode %#o", st.Mode&0o777)
	}
}

// renameFixture builds, under root: files f1 ("one") with a second name
// f1link, f2 ("two"); directory d1 holding x, empty d2, d3 holding y;
// symlink s -> f1.
func renameFixture(t *testing.T, root string) {
	t.Helper()
	must(t, os.Mkdir(root, 0o755))
	in := func(n string) string { return filepath.Join(root, n) }
	must(t, os.WriteFile(in("f1"), []byte("one"), 0o644))
	must(t, os.Link(in("f1"), in("f1link")))
	must(t, os.WriteFile(in("f2"), []byte("two"), 0o600))
	for _, d := range []string{"d1", "d2", "d3"} {
		must(t, os.Mkdir(in(d), 0o755))
	}
	must(t, os.WriteFile(in("d1/x"), []byte("x"), 0o644))
	must(t, os.WriteFile(in("d3/y"), []byte("y"), 0o644))
	must(t, os.Symlink("f1", in("s")))
}

// posixRename: rename(2) and renameat2(2) in their POSIX and Linux cases,
// each on a fresh fixture on the mount and on the local disk: the same
// result (want), and the same trees after.
func posixRename(t *testing.T, e posixEnv) {
	const (
		noReplace = unix.RENAME_NOREPLACE
		exchange  = unix.RENAME_EXCHANGE
	)
	for i, tc := range []struct {
		name     string
		from, to string
		flags    uint
		want     syscall.Errno // 0: success
	}{
		{"file to a new name", "f1", "new", 0, 0},
		{"file over a file", "f1", "f2", 0, 0},
		{"file over its own hard link", "f1", "f1link", 0, 0},
		{"file to itself", "f1", "f1", 0, 0},
		{"file into a directory", "f1", "d2/f1", 0, 0},
		{"file over a file in a directory", "f2", "d1/x", 0, 0},
		{"file over an empty directory", "f1", "d2", 0, syscall.EISDIR},
		{"directory over a file", "d2", "f1", 0, syscall.ENOTDIR},
		{"directory to a new name", "d1", "dnew", 0, 0},
		{"directory over an empty directory", "d1", "d2", 0, 0},
		{"directory over a non-empty directory", "d1", "d3", 0, syscall.ENOTEMPTY},
		{"directory into another", "d1", "d3/d1", 0, 0},
		{"directory into its own subtree", "d1", "d1/sub", 0, syscall.EINVAL},
		{"directory to itself", "d1", "d1", 0, 0},
		{"symlink", "s", "s2", 0, 0},
		{"symlink over a file", "s", "f2", 0, 0},
		{"missing source", "missing", "x", 0, syscall.ENOENT},
		{"into a missing directory", "f1", "missing/x", 0, syscall.ENOENT},
		{"through a file", "f1", "f2/x", 0, syscall.ENOTDIR},
		{"NOREPLACE over a file", "f1", "f2", noReplace, syscall.EEXIST},
		{"NOREPLACE over a directory", "d1", "d2", noReplace, syscall.EEXIST},
		{"NOREPLACE to a new name", "f1", "new", noReplace, 0},
		{"EXCHANGE two files", "f1", "f2", exchange, 0},
		{"EXCHANGE a file and a directory", "f2", "d3", exchange, 0},
		{"EXCHANGE across directories", "d1", "d3/y", exchange, 0},
		{"EXCHANGE two directories", "d1", "d3", exchange, 0},
		{"EXCHANGE with a missing name", "f1", "missing", exchange, syscall.ENOENT},
		{"EXCHANGE hard links of one file", "f1", "f1link", exchange, 0},
		{"EXCHANGE into its own subtree", "d1", "d1/x", exchange, syscall.EINVAL},
		{"NOREPLACE|EXCHANGE", "f1", "f2", noReplace | exchange, syscall.EINVAL},
	} {
		for _, base := range []string{e.dir, e.local} {
			root := filepath.Join(base, fmt.Sprintf("case%02d", i), "r")
			must(t, os.Mkdir(filepath.Dir(root), 0o755))
			renameFixture(t, root)
			var err error
			if tc.flags == 0 {
				err = syscall.Rename(filepath.Join(root, tc.from), filepath.Join(root, tc.to))
			} else {
				err = unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, tc.from), unix.AT_FDCWD, filepath.Join(root, tc.to), tc.flags)
			}
			where := "mount"
			if base == e.local {
				where = "local disk"
			}
			if tc.want == 0 && err != nil {
				t.Errorf("%s (%s): %v", tc.name, where, err)
			} else if tc.want != 0 {
				wantErrno(t, fmt.Sprintf("%s (%s)", tc.name, where), err, tc.want)
			}
		}
		c := fmt.Sprintf("case%02d", i)
		if msg := fsx.CompareTrees(filepath.Join(e.local, c), filepath.Join(e.dir, c)); msg != "" {
			t.Errorf("%s: mount and local disk differ after it: %s", tc.name, msg)
		}
	}
}

// posixHardLinks: link counts and shared data through every name.
func posixHardLinks(t *testing.T, e posixEnv) {
	nlink := func(p string) uint64 { return uint64(lstatOf(t, p).Nlink) }
	must(t, os.WriteFile(e.in("f"), []byte("v1"), 0o644))
	must(t, os.Link(e.in("f"), e.in("g")))
	must(t, os.Mkdir(e.in("sub"), 0o755))
	must(t, os.Link(e.in("g"), e.in("sub/h")))
	for _, n := range []string{"f", "g", "sub/h"} {
		if got := nlink(e.in(n)); got != 3 {
			t.Errorf("nlink of %s: %d, want 3", n, got)
		}
	}
	if a, b := lstatOf(t, e.in("f")).Ino, lstatOf(t, e.in("sub/h")).Ino; a != b {
		t.Errorf("hard links have inodes %d and %d", a, b)
	}
	must(t, os.WriteFile(e.in("g"), []byte("v2 longer"), 0o644))
	if b := readAll(t, e.in("sub/h")); string(b) != "v2 longer" {
		t.Errorf("write through one name, read through another: %q", b)
	}
	must(t, os.Remove(e.in("f")))
	if got := nlink(e.in("g")); got != 2 {
		t.Errorf("nlink after unlinking one name: %d, want 2", got)
	}
	must(t, os.WriteFile(e.in("other"), []byte("other"), 0o644))
	must(t, os.Rename(e.in("other"), e.in("g"))) // g's inode loses a name
	if got := nlink(e.in("sub/h")); got != 1 {
		t.Errorf("nlink after a rename over one name: %d, want 1", got)
	}
	if got := nlink(e.in("g")); got != 1 {
		t.Errorf("nlink of the file renamed over a link: %d, want 1", got)
	}
	wantErrno(t, "link of a directory", os.Link(e.in("sub"), e.in("dirlink")), syscall.EPERM)
	wantErrno(t, "link over an existing name", os.Link(e.in("g"), e.in("sub/h")), syscall.EEXIST)
	wantErrno(t, "link of a missing file", os.Link(e.in("missing"), e.in("x")), syscall.ENOENT)
	// link(2) does not follow symlinks: the new name is the symlink.
	must(t, os.Symlink("g", e.in("s")))
	must(t, os.Link(e.in("s"), e.in("s2")))
	if st := lstatOf(t, e.in("s2")); st.Mode&syscall.S_IFMT != syscall.S_IFLNK || st.Nlink != 2 {
		t.Errorf("hard link to a symlink: mode %#o nlink %d, want a symlink with 2 links", st.Mode, st.Nlink)
	}
	if tgt, err := os.Readlink(e.in("s2")); err != nil || tgt != "g" {
		t.Errorf("readlink of a hard link to a symlink: %q, %v", tgt, err)
	}
	// The directory's link count: 2 + subdirectories.
	if got := nlink(e.dir); got != 3 {
		t.Errorf("nlink of a directory with one subdirectory: %d, want 3", got)
	}
}

func tsTime(ts syscall.Timespec) time.Time { return time.Unix(ts.Sec, ts.Nsec) }

var oldTime = time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)

// setOld sets p's atime and mtime to oldTime.
func setOld(t *testing.T, p string) {
	t.Helper()
	must(t, os.Chtimes(p, oldTime, oldTime))
}

// posixTimesUpdatedBy: mtime and ctime change with write, truncate,
// chmod, rename, link and unlink as on Linux file systems, as seen right
// after the call (no waiting out the attribute cache).
func posixTimesUpdatedBy(t *testing.T, e posixEnv) {
	type times struct{ m, c time.Time }
	get := func(p string) times {
		st := lstatOf(t, p)
		return times{tsTime(st.Mtim), tsTime(st.Ctim)}
	}
	tick := func() time.Time { time.Sleep(5 * time.Millisecond); return time.Now().Add(-time.Millisecond) }
	p := e.in("f")
	must(t, os.WriteFile(p, []byte("x"), 0o644))

	// write(2): mtime and ctime, seen while the file is open and after close.
	setOld(t, p)
	t0 := tick()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.Write([]byte("more"))
	must(t, err)
	st := fstatOf(t, f)
	if m := tsTime(st.Mtim); m.Before(t0) {
		t.Errorf("write: fstat before close shows mtime %v, want >= %v", m, t0)
	}
	must(t, f.Close())
	if tm := get(p); tm.m.Before(t0) || tm.c.Before(t0) {
		t.Errorf("write: after close mtime %v ctime %v, want >= %v", tm.m, tm.c, t0)
	}

	// truncate(2): mtime and ctime.
	setOld(t, p)
	t0 = tick()
	must(t, os.Truncate(p, 1))
	if tm := get(p); tm.m.Before(t0) || tm.c.Before(t0) {
		t.Errorf("truncate: mtime %v ctime %v, want >= %v", tm.m, tm.c, t0)
	}
	// ftruncate(2) through an open file.
	setOld(t, p)
	f, err = os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	t0 = tick()
	must(t, f.Truncate(100))
	if tm := get(p); tm.m.Before(t0) || tm.c.Before(t0) {
		t.Errorf("ftruncate: mtime %v ctime %v, want >= %v", tm.m, tm.c, t0)
	}
	must(t, f.Close())

	// chmod(2): ctime only.
	setOld(t, p)
	t0 = tick()
	must(t, os.Chmod(p, 0o600))
	if tm := get(p); !tm.m.Equal(oldTime) || tm.c.Before(t0) {
		t.Errorf("chmod: mtime %v (want unchanged %v), ctime %v (want >= %v)", tm.m, oldTime, tm.c, t0)
	}

	// rename(2): ctime of the inode; mtime and ctime of both directories.
	must(t, os.Mkdir(e.in("a"), 0o755))
	must(t, os.Mkdir(e.in("b"), 0o755))
	must(t, os.Rename(p, e.in("a/f")))
	setOld(t, e.in("a/f"))
	setOld(t, e.in("a"))
	setOld(t, e.in("b"))
	t0 = tick()
	must(t, os.Rename(e.in("a/f"), e.in("b/f")))
	if tm := get(e.in("b/f")); !tm.m.Equal(oldTime) || tm.c.Before(t0) {
		t.Errorf("rename: the file's mtime %v (want unchanged), ctime %v (want >= %v)", tm.m, tm.c, t0)
	}
	for _, d := range []string{"a", "b"} {
		if tm := get(e.in(d)); tm.m.Before(t0) || tm.c.Before(t0) {
			t.Errorf("rename: directory %s mtime %v ctime %v, want >= %v", d, tm.m, tm.c, t0)
		}
	}

	// link(2): ctime of the inode, mtime and ctime of the directory.
	setOld(t, e.in("b/f"))
	setOld(t, e.in("a"))
	t0 = tick()
	must(t, os.Link(e.in("b/f"), e.in("a/g")))
	if tm := get(e.in("b/f")); !tm.m.Equal(oldTime) || tm.c.Before(t0) {
		t.Errorf("link: the file's mtime %v (want unchanged), ctime %v (want >= %v)", tm.m, tm.c, t0)
	}
	if tm := get(e.in("a")); tm.m.Before(t0) || tm.c.Before(t0) {
		t.Errorf("link: directory mtime %v ctime %v, want >= %v", tm.m, tm.c, t0)
	}

	// unlink(2) of one of two names: ctime of the inode, mtime of the directory.
	setOld(t, e.in("b/f"))
	setOld(t, e.in("a"))
	t0 = tick()
	must(t, os.Remove(e.in("a/g")))
	if tm := get(e.in("b/f")); !tm.m.Equal(oldTime) || tm.c.Before(t0) {
		t.Errorf("unlink: the remaining name's mtime %v (want unchanged), ctime %v (want >= %v)", tm.m, tm.c, t0)
	}
	if tm := get(e.in("a")); tm.m.Before(t0) || tm.c.Before(t0) {
		t.Errorf("unlink: directory mtime %v ctime %v, want >= %v", tm.m, tm.c, t0)
	}

	// create and mkdir: the directory's mtime and ctime.
	setOld(t, e.in("a"))
	t0 = tick()
	must(t, os.WriteFile(e.in("a/new"), nil, 0o644))
	if tm := get(e.in("a")); tm.m.Before(t0) || tm.c.Before(t0) {
		t.Errorf("create: directory mtime %v ctime %v, want >= %v", tm.m, tm.c, t0)
	}
}

// posixUtimensat: explicit times to the nanosecond, UTIME_NOW and
// UTIME_OMIT, and ctime following every change.
func posixUtimensat(t *testing.T, e posixEnv) {
	p := e.in("f")
	must(t, os.WriteFile(p, []byte("x"), 0o644))
	at := unix.Timespec{Sec: 1234567890, Nsec: 123456789}
	mt := unix.Timespec{Sec: 987654321, Nsec: 987654321}
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{at, mt}, 0))
	st := statOf(t, p)
	if st.Atim.Sec != at.Sec || st.Atim.Nsec != at.Nsec || st.Mtim.Sec != mt.Sec || st.Mtim.Nsec != mt.Nsec {
		t.Errorf("explicit times: atime %v mtime %v, want %v %v", st.Atim, st.Mtim, at, mt)
	}
	c0 := tsTime(st.Ctim)

	time.Sleep(5 * time.Millisecond)
	t0 := time.Now().Add(-time.Millisecond)
	omit, now := unix.Timespec{Nsec: unix.UTIME_OMIT}, unix.Timespec{Nsec: unix.UTIME_NOW}
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{omit, now}, 0))
	st = statOf(t, p)
	if st.Atim.Sec != at.Sec || st.Atim.Nsec != at.Nsec {
		t.Errorf("UTIME_OMIT atime, UTIME_NOW mtime: atime changed to %v", st.Atim)
	}
	if m := tsTime(st.Mtim); m.Before(t0) || m.After(time.Now().Add(time.Second)) {
		t.Errorf("UTIME_NOW mtime: %v, want about %v", m, t0)
	}
	if c := tsTime(st.Ctim); !c.After(c0) {
		t.Errorf("utimensat: ctime %v did not move from %v", c, c0)
	}
	m1 := st.Mtim

	time.Sleep(5 * time.Millisecond)
	t0 = time.Now().Add(-time.Millisecond)
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{now, omit}, 0))
	st = statOf(t, p)
	if st.Mtim != m1 {
		t.Errorf("UTIME_OMIT mtime: changed from %v to %v", m1, st.Mtim)
	}
	if a := tsTime(st.Atim); a.Before(t0) {
		t.Errorf("UTIME_NOW atime: %v, want >= %v", a, t0)
	}
	// Both omitted: nothing changes, not even ctime.
	c1 := st.Ctim
	time.Sleep(5 * time.Millisecond)
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{omit, omit}, 0))
	if st2 := statOf(t, p); st2.Ctim != c1 || st2.Mtim != m1 {
		t.Errorf("both UTIME_OMIT: ctime %v -> %v, mtime %v -> %v", c1, st2.Ctim, m1, st2.Mtim)
	}
	// A time before 1970.
	pre := unix.Timespec{Sec: -86400*365 - 1, Nsec: 5}
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{pre, pre}, 0))
	if st := statOf(t, p); st.Mtim.Sec != pre.Sec || st.Mtim.Nsec != pre.Nsec {
		t.Errorf("mtime before 1970: %v, want %v", st.Mtim, pre)
	}
	// On a symlink itself (AT_SYMLINK_NOFOLLOW).
	must(t, os.Symlink("f", e.in("s")))
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, e.in("s"), []unix.Timespec{at, at}, unix.AT_SYMLINK_NOFOLLOW))
	if st := lstatOf(t, e.in("s")); st.Mtim.Sec != at.Sec || st.Mtim.Nsec != at.Nsec {
		t.Errorf("utimensat on a symlink: mtime %v, want %v", st.Mtim, at)
	}
}

// posixTimesSetBeforeClose: times set while a writer still has the file
// open (cp -p and rsync set them on the open file) survive the close
// that flushes the data.
func posixTimesSetBeforeClose(t *testing.T, e posixEnv) {
	p := e.in("f")
	f, err := os.Create(p)
	must(t, err)
	_, err = f.Write(randBytes(1, 100_000))
	must(t, err)
	must(t, os.Chtimes(p, oldTime, oldTime))
	must(t, f.Close())
	if st := statOf(t, p); !tsTime(st.Mtim).Equal(oldTime) {
		t.Errorf("mtime set before close: %v after close, want %v", tsTime(st.Mtim), oldTime)
	}
	other := filepath.Join(e.cl.Mount(), "TimesSetBeforeClose", "f")
	if st := statOf(t, other); !tsTime(st.Mtim).Equal(oldTime) {
		t.Errorf("mtime set before close, from another mount: %v, want %v", tsTime(st.Mtim), oldTime)
	}
}

// posixMmapWriteWithAppendHandle: pages written through a shared mapping
// go back to their place in the file, also when the mapping was made
// through a descriptor opened O_RDWR|O_APPEND (the kernel writes dirty
// pages back through the handles that were mapped shared and writable).
func posixMmapWriteWithAppendHandle(t *testing.T, e posixEnv) {
	p := e.in("f")
	data := randBytes(2, 3*4096+100)
	must(t, os.WriteFile(p, data, 0o644))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	must(t, err)
	defer f.Close()
	patch := bytes.Repeat([]byte("M"), 5000)
	if err := mmapWrite(f, 1000, patch); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(data)
	copy(want[1000:], patch)
	if st := fstatOf(t, f); st.Size != int64(len(data)) {
		t.Errorf("size after an mmap write and msync: %d, want %d", st.Size, len(data))
	}
	must(t, f.Close())
	mustEqual(t, "file after an mmap write", readAll(t, p), want)
}

// mmapWrite writes p at off through a shared mapping of f and msyncs it.
// The mapping is written with pwrite(2) from a memfd rather than by Go
// code: a page fault on a mapping of a file this process serves (the
// in-process mount) must happen inside a system call, or the garbage
// collector's stop-the-world deadlocks with the FUSE server (see
// test/fsx).
func mmapWrite(f *os.File, off int64, p []byte) error {
	pg := off &^ 4095
	m, err := unix.Mmap(int(f.Fd()), pg, int(off-pg)+len(p), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(m)
	mfd, err := unix.MemfdCreate("mmapwrite", 0)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	if _, err := unix.Pwrite(mfd, p, 0); err != nil {
		return err
	}
	// pread(2) from the memfd into the mapping: the kernel copies, and
	// takes the page faults, inside the system call.
	if n, err := unix.Pread(mfd, m[off-pg:], 0); err != nil || n != len(p) {
		return fmt.Errorf("copy into the mapping: %d of %d bytes: %v", n, len(p), err)
	}
	return unix.Msync(m, unix.MS_SYNC)
}

// TestPosixBigDirectory creates 100,000 entries in one directory through
// the mount, lists it and looks up a sample, and logs the rates. It takes
// about 3 minutes on a loaded 2-core machine (some 600 creates/s: each is
// a create, an open and a close at the MDS), so -short skips it.
func TestPosixBigDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): 100,000 creates through a mount take minutes")
	}
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	mnt := cl.Mount()
	dir := filepath.Join(mnt, "big")
	must(t, os.Mkdir(dir, 0o755))
	// Two creators: on this 2-core machine 8 were slower than 1 (the MDS
	// serialises mutations).
	const n, workers = 100_000, 2
	name := func(i int) string { return fmt.Sprintf("entry-%06d", i) }
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				fd, err := syscall.Open(filepath.Join(dir, name(i)), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
				if err != nil {
					errc <- fmt.Errorf("create %s: %w", name(i), err)
					return
				}
				syscall.Close(fd)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	createT := time.Since(start)

	// List it from a fresh mount (nothing cached in its kernel).
	mnt2 := cl.Mount()
	dir2 := filepath.Join(mnt2, "big")
	start = time.Now()
	d, err := os.Open(dir2)
	must(t, err)
	names, err := d.Readdirnames(-1)
	d.Close()
	must(t, err)
	readdirT := time.Since(start)
	if len(names) != n {
		t.Fatalf("readdir: %d names, want %d", len(names), n)
	}
	slices.Sort(names)
	for i, nm := range names {
		if nm != name(i) {
			t.Fatalf("readdir: name %d is %q, want %q", i, nm, name(i))
		}
	}

	// Look up a sample from a third mount, so that readdir filled no cache.
	dir3 := filepath.Join(cl.Mount(), "big")
	rng := rand.New(rand.NewPCG(1, 2))
	const lookups = 2000
	start = time.Now()
	for i := 0; i < lookups; i++ {
		k := rng.IntN(n)
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir3, name(k)), &st); err != nil {
			t.Fatalf("lookup %s: %v", name(k), err)
		}
	}
	for i := 0; i < 100; i++ {
		var st syscall.Stat_t
		err := syscall.Lstat(filepath.Join(dir3, fmt.Sprintf("missing-%d", i)), &st)
		wantErrno(t, "lookup of a missing name", err, syscall.ENOENT)
	}
	lookupT := time.Since(start)
	if st := statOf(t, dir); st.Nlink != 2 {
		t.Errorf("nlink of a directory of files: %d", st.Nlink)
	}
	t.Logf("%d creates (%d workers) in %v: %.0f creates/s; readdir of %d names in %v (%.0f names/s); %d lookups in %v (%.0f lookups/s)",
		n, workers, createT.Round(time.Millisecond), float64(n)/createT.Seconds(),
		n, readdirT.Round(time.Millisecond), float64(n)/readdirT.Seconds(),
		lookups+100, lookupT.Round(time.Millisecond), float64(lookups+100)/lookupT.Seconds())
}
