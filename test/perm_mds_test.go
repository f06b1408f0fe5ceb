package test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/fuse"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
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
	setattr := func(p string, req client.SetAttrs) {
		t.Helper()
		a, err := lib.Stat(ctx, "/"+p)
		must(err)
		_, err = lib.SetAttr(ctx, a.Ino, req)
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
	setattr("open", client.SetAttrs{Valid: client.SetMode, Mode: 0o755})
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
	setattr("grp/minedir", client.SetAttrs{Valid: client.SetUID | client.SetGID, UID: 0, GID: 0})
	if out, ok := as(t, 1000, 1000, "1000,2000", "chmod 700 "+in("grp/minedir")); ok || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("chmod of a dir the MDS knows is root's: ok=%v %q", ok, out)
	}
}

// TestPermissionsAtMDSCalls: the MDS calls that had no permission check
// (xattrs, CommitExtents, CloneExtents, SetLayout) refuse uid 1000 what
// POSIX refuses it, through the client library on real servers, with the
// errors the mount turns into EACCES and EPERM.
func TestPermissionsAtMDSCalls(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: layout.Layout{K: 2, M: 1, Unit: 4096}})
	ctx := context.Background()
	root := cl.Client()
	user := client.WithUser(ctx, client.User{UID: 1000, GID: 1000})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	chmod := func(ino uint64, mode uint32) {
		t.Helper()
		_, err := root.SetAttr(ctx, ino, client.SetAttrs{Valid: client.SetMode, Mode: mode})
		must(err)
	}
	writeFile(t, root, "/secret", []byte("root only"))
	writeFile(t, root, "/pub", []byte("anyone may read"))
	secret, err := root.Stat(ctx, "/secret")
	must(err)
	pub, err := root.Stat(ctx, "/pub")
	must(err)
	chmod(secret.Ino, 0o600)
	chmod(pub.Ino, 0o644)
	mine, err := root.CreateIn(ctx, client.RootIno, "mine", client.CreateOptions{Mode: 0o644, UID: 1000, GID: 1000, Exclusive: true})
	must(err)
	sticky, err := root.MkdirIn(ctx, client.RootIno, "tmp", client.CreateOptions{Mode: 0o1777})
	must(err)
	chmod(sticky.Ino, 0o1777)
	for _, ino := range []uint64{secret.Ino, pub.Ino, sticky.Ino} {
		for _, n := range []string{"user.a", "trusted.t"} {
			_, err := root.SetXattr(ctx, ino, n, []byte("v"), 0)
			must(err)
		}
	}

	type check struct {
		what  string
		err   error
		want  error
		errno syscall.Errno
	}
	_, getSecret := root.GetXattr(user, secret.Ino, "user.a")
	_, setPub := root.SetXattr(user, pub.Ino, "user.b", []byte("w"), 0)
	_, rmPub := root.RemoveXattr(user, pub.Ino, "user.a")
	_, setSticky := root.SetXattr(user, sticky.Ino, "user.b", []byte("w"), 0)
	_, setTrusted := root.SetXattr(user, mine.Ino, "trusted.x", []byte("w"), 0)
	_, getTrusted := root.GetXattr(user, pub.Ino, "trusted.t")
	_, setOwn := root.SetXattr(user, mine.Ino, "user.mine", []byte("w"), 0)
	_, getPub := root.GetXattr(user, pub.Ino, "user.a")

	// Committing root's extents into its own file would give uid 1000 read
	// capabilities for root's 0600 data.
	ex, err := cl.MDSStub(root).GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: secret.Ino})
	must(err)
	if len(ex.GetExtents()) == 0 {
		t.Fatal("/secret has no extents")
	}
	_, stealExtents := cl.MDSStub(root).CommitExtents(user, &mdspb.CommitExtentsRequest{Ino: mine.Ino, Extents: ex.GetExtents()})
	_, commitPub := cl.MDSStub(root).CommitExtents(user, &mdspb.CommitExtentsRequest{Ino: pub.Ino})
	whole := []*mdspb.CloneRange{{Length: 0}}
	_, cloneSecret := cl.MDSStub(root).CloneExtents(user, &mdspb.CloneExtentsRequest{SrcIno: secret.Ino, DstIno: mine.Ino, Ranges: whole})
	_, cloneIntoPub := cl.MDSStub(root).CloneExtents(user, &mdspb.CloneExtentsRequest{SrcIno: pub.Ino, DstIno: pub.Ino, Ranges: []*mdspb.CloneRange{{SrcOff: 0, DstOff: 100, Length: 1}}})
	_, clonePub := cl.MDSStub(root).CloneExtents(user, &mdspb.CloneExtentsRequest{SrcIno: pub.Ino, DstIno: mine.Ino, Ranges: whole})
	lo := &mdspb.Layout{K: 2, M: 1, Unit: 4096}
	_, layoutDir := cl.MDSStub(root).SetLayout(user, &mdspb.SetLayoutRequest{Ino: client.RootIno, Layout: lo})
	_, layoutPub := cl.MDSStub(root).SetLayout(user, &mdspb.SetLayoutRequest{Ino: pub.Ino, Layout: lo})
	own, err := root.CreateIn(ctx, client.RootIno, "own-empty", client.CreateOptions{Mode: 0o644, UID: 1000, GID: 1000, Exclusive: true})
	must(err)
	_, layoutOwn := cl.MDSStub(root).SetLayout(user, &mdspb.SetLayoutRequest{Ino: own.Ino, Layout: lo})

	for _, c := range []check{
		{"getxattr user.* of a 0600 file", getSecret, errs.ErrPermission, syscall.EACCES},
		{"setxattr user.* of root's 0644 file", setPub, errs.ErrPermission, syscall.EACCES},
		{"removexattr user.* of root's 0644 file", rmPub, errs.ErrPermission, syscall.EACCES},
		{"setxattr user.* of root's sticky directory", setSticky, errs.ErrNotPermitted, syscall.EPERM},
		{"setxattr trusted.* of its own file", setTrusted, errs.ErrNotPermitted, syscall.EPERM},
		{"getxattr trusted.*", getTrusted, errs.ErrNoData, syscall.ENODATA},
		{"setxattr user.* of its own file", setOwn, nil, 0},
		{"getxattr user.* of a 0644 file", getPub, nil, 0},
		{"commit root's extents into its own file", stealExtents, errs.ErrPermission, syscall.EACCES},
		{"commit to root's 0644 file", commitPub, errs.ErrPermission, syscall.EACCES},
		{"clone from root's 0600 file", cloneSecret, errs.ErrPermission, syscall.EACCES},
		{"clone into root's 0644 file", cloneIntoPub, errs.ErrPermission, syscall.EACCES},
		{"clone from a 0644 file into its own", clonePub, nil, 0},
		{"set layout of the root directory", layoutDir, errs.ErrNotPermitted, syscall.EPERM},
		{"set layout of root's file", layoutPub, errs.ErrNotPermitted, syscall.EPERM},
		{"set layout of its own empty file", layoutOwn, nil, 0},
	} {
		switch {
		case c.want == nil && c.err != nil:
			t.Errorf("uid 1000: %s: %v, want success", c.what, c.err)
		case c.want != nil && !errors.Is(c.err, c.want):
			t.Errorf("uid 1000: %s: %v, want %v", c.what, c.err, c.want)
		case c.want != nil && fuse.ToErrno(c.err) != c.errno:
			t.Errorf("uid 1000: %s: errno %v at the mount, want %v", c.what, fuse.ToErrno(c.err), c.errno)
		}
	}
	names, err := root.ListXattr(user, pub.Ino)
	if err != nil || strings.Join(names, ",") != "user.a" {
		t.Errorf("uid 1000 lists %q (%v), want only user.a (trusted.* hidden)", names, err)
	}
	// The clone of /pub into /mine worked: uid 1000 reads it.
	if mf, err := root.OpenIno(user, mine.Ino); err != nil {
		t.Errorf("uid 1000 opens its clone: %v", err)
	} else {
		got := make([]byte, 64)
		n, err := mf.ReadAt(user, got, 0)
		if string(got[:n]) != "anyone may read" || (err != nil && !errors.Is(err, io.EOF)) {
			t.Errorf("uid 1000 reads its clone: %q, %v", got[:n], err)
		}
		mf.Close(user)
	}
	// A file opened by uid 1000 on root's 0644 file cannot be written.
	f, err := root.OpenIno(user, pub.Ino)
	must(err)
	if _, err := f.WriteAt(user, []byte("x"), 0); err == nil {
		err = f.Close(user)
		if !errors.Is(err, errs.ErrPermission) {
			t.Errorf("uid 1000 writes root's 0644 file: close %v, want a permission error", err)
		}
	} else if !errors.Is(err, errs.ErrPermission) {
		t.Errorf("uid 1000 writes root's 0644 file: %v", err)
	}
}
