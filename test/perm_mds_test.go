package test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoalfs/shoal/fuse"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestPermissionsAtMDSThroughMount checks that the mount sends each
// request's caller (uid, gid and supplementary groups) to the MDS, and
// that the MDS refuses what that user may not do even when the kernel's
// own check (default_permissions) lets the call through. The kernel is
// made to let it through with attributes cached for an hour, changed
// behind its back through the client library.
func TestPermissionsAtMDSThroughMount(t *testing.T) {
	cluster.RequireFUSE(t)
	requireRoot(t)
	cl := cluster.Start(t, cluster.Options{AllowOther: true})
	mnt := cl.MountWith(fuse.Options{AttrTimeout: time.Hour, EntryTimeout: time.Hour})
	in := func(p string) string { return filepath.Join(mnt, p) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(cl.Dir, 0o755))
	must(os.Chmod(filepath.Dir(cl.Dir), 0o755))
	must(os.Chmod(mnt, 0o755))
	lib := cl.Client()
	ctx := context.Background()
	setattr := func(p string, req *mdspb.SetAttrRequest) {
		t.Helper()
		a, err := lib.Stat(ctx, "/"+p)
		must(err)
		req.Ino = a.GetIno()
		_, err = lib.SetAttr(ctx, req)
		must(err)
	}

	// A supplementary group reaches the MDS: a 0770 directory of group
	// 2000 is writable by a member of 2000 whose primary group is not.
	must(os.Mkdir(in("grp"), 0o770))
	must(os.Chown(in("grp"), 0, 2000))
	must(os.Chmod(in("grp"), 0o770)) // not umasked
	if out, ok := as(t, 1000, 1000, "1000,2000", "touch "+in("grp/mine")); !ok {
		t.Errorf("create in a 0770 dir of a supplementary group: %s", out)
	}
	if out, ok := as(t, 1000, 1000, "", "touch "+in("grp/other")); ok || !strings.Contains(out, "Permission denied") {
		t.Errorf("create in a 0770 dir of a group not held: ok=%v %s", ok, out)
	}

	// The kernel believes "open" is 0777; the MDS knows it is 0755.
	must(os.Mkdir(in("open"), 0o777))
	must(os.Chmod(in("open"), 0o777))
	// (Not ls: a readdir marks the directory's atime stale, and the next
	// stat would fetch every attribute again.)
	if out, ok := as(t, 1000, 1000, "", "stat "+in("open")); !ok {
		t.Fatalf("stat: %s", out)
	}
	setattr("open", &mdspb.SetAttrRequest{Valid: uint32(mdspb.SetAttrBits_SETATTR_MODE), Mode: 0o755})
	if fi, err := os.Stat(in("open")); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("the kernel should still see 0777: %v %v", fi.Mode(), err)
	}
	for _, tc := range []struct{ name, script, msg string }{
		{"create", "touch " + in("open/f"), "Permission denied"},
		{"mkdir", "mkdir " + in("open/d"), "Permission denied"},
	} {
		if out, ok := as(t, 1000, 1000, "", tc.script); ok || !strings.Contains(out, tc.msg) {
			t.Errorf("%s in a dir the MDS knows is 0755: ok=%v %q, want refused with %q", tc.name, ok, out, tc.msg)
		}
	}
	// Root may, through the same mount.
	must(os.WriteFile(in("open/root"), nil, 0o644))

	// The kernel believes uid 1000 owns "mine"; the MDS knows root does.
	if out, ok := as(t, 1000, 1000, "1000,2000", "mkdir "+in("grp/minedir")); !ok {
		t.Fatalf("mkdir: %s", out)
	}
	setattr("grp/minedir", &mdspb.SetAttrRequest{Valid: uint32(mdspb.SetAttrBits_SETATTR_UID | mdspb.SetAttrBits_SETATTR_GID), Uid: 0, Gid: 0})
	if out, ok := as(t, 1000, 1000, "1000,2000", "chmod 700 "+in("grp/minedir")); ok || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("chmod of a dir the MDS knows is root's: ok=%v %q", ok, out)
	}
}
