package cluster

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TmpfsDir returns a new directory on tmpfs (/dev/shm), removed when the
// test ends, for Options.Dir: the servers' fsyncs then cost nothing, which
// makes tests of semantics (not of durability) several times faster. It
// returns "" (the default, t.TempDir()) where /dev/shm is not a tmpfs.
func TmpfsDir(t testing.TB) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Logf("no tmpfs at /dev/shm: the cluster keeps its state on disk")
		return ""
	}
	dir, err := os.MkdirTemp("/dev/shm", "shoal-test-")
	if err != nil {
		t.Logf("tmpfs: %v: the cluster keeps its state on disk", err)
		return ""
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
