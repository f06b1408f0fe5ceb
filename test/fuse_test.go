package test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/shoalfs/shoal/test/cluster"
)

func sha(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// makeTree writes n small files of varied sizes under dir, in nested
// directories, and returns their relative paths.
func makeTree(t *testing.T, dir string, n int) []string {
	t.Helper()
	var paths []string
	for i := 0; i < n; i++ {
		rel := filepath.Join(fmt.Sprintf("d%02d", i%17), fmt.Sprintf("s%d", i%3), fmt.Sprintf("file-%04d.bin", i))
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, randBytes(uint64(1000+i), (i*7919)%70000), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, rel)
	}
	return paths
}

func compareTrees(t *testing.T, a, b string, paths []string) {
	t.Helper()
	for _, rel := range paths {
		want, err := os.ReadFile(filepath.Join(a, rel))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil {
			t.Fatalf("read %s: %v", rel, err)
		}
		mustEqual(t, rel, got, want)
	}
}

// TestMountEndToEnd is the foundation's acceptance test: a 256 MiB file and
// a tree of 1,000 small files go in with cp and come back identical, after a
// full cluster restart, with 2 of 6 OSTs stopped, and with a flipped chunk.
func TestMountEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): end-to-end mount test")
	}
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	src := t.TempDir()
	big := filepath.Join(src, "big.bin")
	if err := os.WriteFile(big, randBytes(42, 256<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	bigSum := sha(t, big)
	tree := filepath.Join(src, "tree")
	paths := makeTree(t, tree, 1000)

	mnt := cl.Mount()
	run(t, "cp", big, filepath.Join(mnt, "big.bin"))
	run(t, "cp", "-r", tree, filepath.Join(mnt, "tree"))
	check := func(stage string) {
		t.Helper()
		if got := sha(t, filepath.Join(mnt, "big.bin")); got != bigSum {
			t.Fatalf("%s: sha256 of big.bin differs", stage)
		}
		fi, err := os.Stat(filepath.Join(mnt, "big.bin"))
		if err != nil || fi.Size() != 256<<20 {
			t.Fatalf("%s: stat big.bin: %v %v", stage, fi, err)
		}
		compareTrees(t, tree, filepath.Join(mnt, "tree"), paths)
	}
	check("after cp")

	cl.Restart()
	mnt = cl.Mount()
	check("after restart")

	cl.StopOST(1)
	cl.StopOST(4)
	mnt = cl.Mount() // a fresh mount: nothing cached in the kernel
	check("with 2 of 6 OSTs stopped")
	for _, i := range []int{1, 4} {
		if err := cl.StartOST(i); err != nil {
			t.Fatal(err)
		}
	}

	c := cl.Client()
	if n := flipDataChunks(t, cl, c, "/big.bin"); n == 0 {
		t.Fatal("no chunk corrupted")
	}
	mnt = cl.Mount()
	check("with flipped chunks")
}

// TestMountTooManyOSTsDown: more than m OSTs down gives EIO, never bytes.
func TestMountTooManyOSTsDown(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	mnt := cl.Mount()
	p := filepath.Join(mnt, "f")
	if err := os.WriteFile(p, randBytes(1, 9<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		cl.StopOST(i)
	}
	mnt = cl.Mount()
	_, err := os.ReadFile(filepath.Join(mnt, "f"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read with 3 of 6 OSTs down: %v, want EIO", err)
	}
}

// TestMountErrnos checks the errors of bad requests.
func TestMountErrnos(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	mnt := cl.Mount()
	in := func(p string) string { return filepath.Join(mnt, p) }
	if err := os.MkdirAll(in("a/b/c"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in("a/file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"name of 256 bytes", os.WriteFile(in(strings.Repeat("n", 256)), nil, 0o644), syscall.ENAMETOOLONG},
		{"rmdir non-empty", syscall.Rmdir(in("a")), syscall.ENOTEMPTY},
		{"unlink missing", syscall.Unlink(in("missing")), syscall.ENOENT},
		{"mkdir existing", syscall.Mkdir(in("a"), 0o755), syscall.EEXIST},
		{"rename dir into own subtree", syscall.Rename(in("a"), in("a/b/c/a")), syscall.EINVAL},
		{"rmdir a file", syscall.Rmdir(in("a/file")), syscall.ENOTDIR},
		{"unlink a dir", syscall.Unlink(in("a/b")), syscall.EISDIR},
		{"open missing", func() error { _, err := os.Open(in("nope")); return err }(), syscall.ENOENT},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	// A 255-byte name is fine.
	if err := os.WriteFile(in(strings.Repeat("n", 255)), []byte("ok"), 0o644); err != nil {
		t.Errorf("255-byte name: %v", err)
	}
}

// TestMountEverydayCommands runs the commands a user types.
func TestMountEverydayCommands(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	mnt := cl.Mount()
	in := func(p string) string { return filepath.Join(mnt, p) }

	run(t, "mkdir", "-p", in("x/y/z"))
	run(t, "dd", "if=/dev/urandom", "of="+in("x/y/z/dd.bin"), "bs=1M", "count=5", "status=none")
	if fi, err := os.Stat(in("x/y/z/dd.bin")); err != nil || fi.Size() != 5<<20 {
		t.Fatalf("dd: %v %v", fi, err)
	}
	run(t, "cp", in("x/y/z/dd.bin"), in("copy.bin"))
	if sha(t, in("copy.bin")) != sha(t, in("x/y/z/dd.bin")) {
		t.Fatal("cp inside the mount changed bytes")
	}
	if err := os.WriteFile(in("hello.txt"), []byte("hello shoal\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := run(t, "cat", in("hello.txt")); out != "hello shoal\n" {
		t.Fatalf("cat: %q", out)
	}
	run(t, "mv", in("hello.txt"), in("x/hello.txt"))
	if _, err := os.Stat(in("hello.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("mv left the source: %v", err)
	}
	run(t, "ln", "-s", "x/hello.txt", in("sym"))
	if out := run(t, "cat", in("sym")); out != "hello shoal\n" {
		t.Fatalf("cat through symlink: %q", out)
	}
	if target, err := os.Readlink(in("sym")); err != nil || target != "x/hello.txt" {
		t.Fatalf("readlink: %q %v", target, err)
	}
	run(t, "ln", in("x/hello.txt"), in("hard"))
	var st syscall.Stat_t
	if err := syscall.Stat(in("hard"), &st); err != nil || st.Nlink != 2 {
		t.Fatalf("hard link nlink: %d %v", st.Nlink, err)
	}
	run(t, "chmod", "640", in("hard"))
	if fi, _ := os.Stat(in("x/hello.txt")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("chmod: mode %v", fi.Mode())
	}
	run(t, "touch", "-d", "2020-01-02 03:04:05", in("x/hello.txt"))
	if fi, _ := os.Stat(in("x/hello.txt")); fi.ModTime().Year() != 2020 {
		t.Fatalf("touch -d: mtime %v", fi.ModTime())
	}
	run(t, "touch", in("new-empty"))
	run(t, "truncate", "-s", "3M", in("new-empty"))
	b, err := os.ReadFile(in("new-empty"))
	if err != nil || len(b) != 3<<20 || strings.Trim(string(b), "\x00") != "" {
		t.Fatalf("truncate -s 3M: %d bytes, err %v", len(b), err)
	}
	run(t, "truncate", "-s", "100", in("copy.bin"))
	if fi, _ := os.Stat(in("copy.bin")); fi.Size() != 100 {
		t.Fatalf("truncate -s 100: %d", fi.Size())
	}
	if out := run(t, "stat", "-c", "%s %h %F", in("x/y/z/dd.bin")); out != "5242880 1 regular file\n" {
		t.Fatalf("stat: %q", out)
	}
	if out := run(t, "ls", "-l", in("x")); !strings.Contains(out, "hello.txt") || !strings.Contains(out, "-rw-r-----") {
		t.Fatalf("ls -l: %q", out)
	}
	if out := run(t, "df", "-P", mnt); !strings.Contains(out, mnt) {
		t.Fatalf("df: %q", out)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sfs); err != nil || sfs.Blocks == 0 {
		t.Fatalf("statfs: %+v %v", sfs, err)
	}
	run(t, "rm", "-r", in("x"))
	if _, err := os.Stat(in("x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("rm -r: %v", err)
	}
	// The symlink now dangles; the hard link still holds the data.
	if out := run(t, "cat", in("hard")); out != "hello shoal\n" {
		t.Fatalf("hard link after rm of the other name: %q", out)
	}
	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "copy.bin,hard,new-empty,sym" {
		t.Fatalf("readdir: %v", names)
	}
}
