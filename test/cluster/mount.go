package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoalfs/shoal/fuse"
)

// Mount mounts the file system at a new directory and returns its path. It
// skips the test, loudly, when FUSE is not usable here.
func (c *Cluster) Mount() string {
	c.t.Helper()
	return c.MountWith(fuse.Options{})
}

// MountWith mounts as Mount does, with the mount options of fo (its Client,
// Logger and AllowOther are filled in).
func (c *Cluster) MountWith(fo fuse.Options) string {
	c.t.Helper()
	RequireFUSE(c.t)
	dir := filepath.Join(c.Dir, fmt.Sprintf("mnt-%d", len(c.mounts)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	o := c.opts.Client
	o.EarlyNamespaceReplies = !c.opts.SyncNamespace
	fo.Client, fo.Logger, fo.AllowOther = c.clientWith(o), c.log.With("proc", "fuse"), c.opts.AllowOther
	if fo.Registry == nil {
		fo.Registry = o.Registry // the mount's metrics beside its client's
	}
	m, err := fuse.Mount(c.ctx(), dir, fo)
	if err != nil {
		c.t.Fatalf("mount: %v", err)
	}
	c.mu.Lock()
	c.mounts = append(c.mounts, m)
	c.mu.Unlock()
	return dir
}

// RequireFUSE skips the test with a loud reason when /dev/fuse is missing
// or the test cannot mount.
func RequireFUSE(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("SKIP (no FUSE): /dev/fuse is missing: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := os.Stat("/usr/bin/fusermount3"); err != nil {
			t.Skipf("SKIP (no FUSE): not root and fusermount3 is missing; run make deps")
		}
	}
}
