package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testSyncPlan keeps the sync figures small in tests.
var testSyncPlan = syncPlan{size: 1 << 20, ops: 40, budget: 10 * time.Second}

// syncRunner is a runner over the given targets, caches never dropped.
func syncRunner(ts ...*target) *runner {
	return &runner{o: Options{Progress: io.Discard}, pat: newPattern(), vals: values{}, broken: map[string]bool{}, targets: ts}
}

// faultyFS is a directory whose files Create wraps.
type faultyFS struct {
	osFS
	wrap func(*os.File) file
}

func (f faultyFS) Create(p string) (file, error) {
	x, err := f.osFS.Create(p)
	if err != nil {
		return nil, err
	}
	return f.wrap(x.(*os.File)), nil
}

// dropWrites loses the 4 KiB writes of meta.fsync4k.
type dropWrites struct{ *os.File }

func (d dropWrites) WriteAt(p []byte, off int64) (int, error) {
	if len(p) == syncBlock {
		return len(p), nil
	}
	return d.File.WriteAt(p, off)
}

// failSync fails every fsync after the first (the one after the file is
// written) with EIO.
type failSync struct {
	*os.File
	n *int
}

func (f failSync) Sync() error {
	if *f.n++; *f.n > 1 {
		return &os.PathError{Op: "fsync", Path: f.Name(), Err: syscall.EIO}
	}
	return f.File.Sync()
}

// ignoreTruncate does not truncate.
type ignoreTruncate struct{ *os.File }

func (ignoreTruncate) Truncate(int64) error { return nil }

// mapOther maps another file of the same size: the stores are lost.
type mapOther struct {
	*os.File
	other *os.File
}

func (m mapOther) Fd() uintptr { return m.other.Fd() }

func TestMetaSyncOnDisk(t *testing.T) {
	dir := t.TempDir()
	r := syncRunner(&target{path: pathDisk, fs: osFS{root: dir}},
		// An "API" path over a directory: the same, without meta.mmap.
		&target{path: pathAPI, fs: osFS{root: t.TempDir()}})
	if err := r.metaSyncWith(context.Background(), testSyncPlan); err != nil {
		t.Fatal(err)
	}
	if len(r.failures) > 0 {
		t.Fatalf("failures: %v", r.failures)
	}
	for _, fig := range []string{"meta.fsync4k", "meta.truncate", "meta.mmap"} {
		if v := r.vals[key(fig, "ops/s", pathDisk)]; !(v > 0) {
			t.Errorf("%s on the disk: %v ops/s", fig, v)
		}
		_, ok := r.vals[key(fig, "ops/s", pathAPI)]
		if want := fig != "meta.mmap"; ok != want {
			t.Errorf("%s on the API: a value is %v, want %v", fig, ok, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "meta-sync")); !os.IsNotExist(err) {
		t.Errorf("meta-sync left behind: %v", err)
	}
}

// A file that loses data, or fails, fails its step: reported as other
// failed steps are, with no figure for it or for the steps after it.
func TestMetaSyncFailures(t *testing.T) {
	cases := []struct {
		name    string
		wrap    func(*os.File) file
		failure string // the start of the failure recorded
		figures []string
	}{
		{"lost writes", func(f *os.File) file { return dropWrites{f} }, "meta.fsync4k read back on disk: byte", nil},
		{"EIO", func(f *os.File) file { return failSync{f, new(int)} }, "meta.fsync4k on disk: fsync after a write at", nil},
		{"lost truncations", func(f *os.File) file { return ignoreTruncate{f} }, "meta.truncate read back on disk: read of", []string{"meta.fsync4k"}},
		{"lost stores", func(f *os.File) file {
			o, err := os.Create(filepath.Join(t.TempDir(), "other"))
			if err == nil {
				t.Cleanup(func() { o.Close() })
				err = o.Truncate(testSyncPlan.size)
			}
			if err != nil {
				t.Fatal(err)
			}
			return mapOther{f, o}
		}, "meta.mmap read back on disk: byte", []string{"meta.fsync4k", "meta.truncate"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := syncRunner(&target{path: pathDisk, fs: faultyFS{osFS{root: t.TempDir()}, c.wrap}})
			if err := r.metaSyncWith(context.Background(), testSyncPlan); err != nil {
				t.Fatal(err)
			}
			if len(r.failures) != 1 || !strings.HasPrefix(r.failures[0], c.failure) {
				t.Fatalf("failures %q, want one starting %q", r.failures, c.failure)
			}
			if c.name == "EIO" && !strings.Contains(r.failures[0], "input/output error") {
				t.Errorf("failure %q does not say EIO", r.failures[0])
			}
			var got []string
			for _, fig := range []string{"meta.fsync4k", "meta.truncate", "meta.mmap"} {
				if _, ok := r.vals[key(fig, "ops/s", pathDisk)]; ok {
					got = append(got, fig)
				}
			}
			if strings.Join(got, ",") != strings.Join(c.figures, ",") {
				t.Errorf("figures %v, want %v", got, c.figures)
			}
		})
	}
}

func TestShadowTruncate(t *testing.T) {
	s := &shadow{buf: []byte("abcdefgh"), size: 8, cut: 8}
	s.truncate(3)
	s.truncate(6)
	s.truncate(5)
	s.settle()
	if s.size != 5 || string(s.buf) != "abc\x00\x00\x00\x00\x00" {
		t.Errorf("size %d, bytes %q", s.size, s.buf)
	}
	for i := range 10 {
		s.touch(int64(i), 1)
	}
	if len(s.touched) != syncCheck || s.touched[0][0] != 10-syncCheck || s.touched[syncCheck-1][0] != 9 {
		t.Errorf("touched %v: want the last %d", s.touched, syncCheck)
	}
}
