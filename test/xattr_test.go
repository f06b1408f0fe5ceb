package test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/test/cluster"
)

// xattrErr fails unless err is the errno want (0: no error).
func xattrErr(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	switch {
	case want == 0 && err != nil:
		t.Fatalf("%s: %v", what, err)
	case want != 0 && !errors.Is(err, want):
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

// xattrGet reads attr of path (following symlinks unless nofollow) with
// the size probe that getfattr uses.
func xattrGet(t *testing.T, path, attr string, nofollow bool) ([]byte, error) {
	t.Helper()
	get := unix.Getxattr
	if nofollow {
		get = unix.Lgetxattr
	}
	n, err := get(path, attr, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n)
	n, err = get(path, attr, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// xattrList lists the attribute names of path with a size probe.
func xattrList(t *testing.T, path string, nofollow bool) []string {
	t.Helper()
	list := unix.Listxattr
	if nofollow {
		list = unix.Llistxattr
	}
	n, err := list(path, nil)
	if err != nil {
		t.Fatalf("listxattr %s (size): %v", path, err)
	}
	buf := make([]byte, n)
	n, err = list(path, buf)
	if err != nil {
		t.Fatalf("listxattr %s: %v", path, err)
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	return names
}

func xattrCtime(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ctim.Nano()
}

// TestXattrMount checks extended attributes through the mount, with the
// errnos Linux gives.
func TestXattrMount(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	mnt := cl.Mount()
	f := filepath.Join(mnt, "f")
	if err := os.WriteFile(f, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("SetGetListRemove", func(t *testing.T) {
		_, err := xattrGet(t, f, "user.a", false)
		xattrErr(t, "get before set", err, unix.ENODATA)
		if got := xattrList(t, f, false); len(got) != 0 {
			t.Fatalf("new file lists %q", got)
		}
		xattrErr(t, "set user.a", unix.Setxattr(f, "user.a", []byte("alpha"), 0), 0)
		xattrErr(t, "set user.empty", unix.Setxattr(f, "user.empty", nil, 0), 0)
		bin := []byte{0, 0xff, 0, 7}
		xattrErr(t, "set trusted.b", unix.Setxattr(f, "trusted.b", bin, 0), 0)
		xattrErr(t, "set security.c", unix.Setxattr(f, "security.c", []byte("lbl"), 0), 0)
		v, err := xattrGet(t, f, "user.a", false)
		xattrErr(t, "get user.a", err, 0)
		if string(v) != "alpha" {
			t.Fatalf("user.a = %q", v)
		}
		v, err = xattrGet(t, f, "trusted.b", false)
		xattrErr(t, "get trusted.b", err, 0)
		if !bytes.Equal(v, bin) {
			t.Fatalf("trusted.b = %x, want %x", v, bin)
		}
		v, err = xattrGet(t, f, "user.empty", false)
		xattrErr(t, "get user.empty", err, 0)
		if len(v) != 0 {
			t.Fatalf("user.empty = %q", v)
		}
		got := xattrList(t, f, false)
		slices.Sort(got)
		if want := []string{"security.c", "trusted.b", "user.a", "user.empty"}; !slices.Equal(got, want) {
			t.Fatalf("list %q, want %q", got, want)
		}

		xattrErr(t, "remove user.a", unix.Removexattr(f, "user.a"), 0)
		_, err = xattrGet(t, f, "user.a", false)
		xattrErr(t, "get removed", err, unix.ENODATA)
		xattrErr(t, "remove missing", unix.Removexattr(f, "user.a"), unix.ENODATA)
		for _, name := range []string{"user.empty", "trusted.b", "security.c"} {
			xattrErr(t, "remove "+name, unix.Removexattr(f, name), 0)
		}
		if got := xattrList(t, f, false); len(got) != 0 {
			t.Fatalf("after removing all: %q", got)
		}
	})

	t.Run("Flags", func(t *testing.T) {
		xattrErr(t, "replace missing", unix.Setxattr(f, "user.fl", []byte("1"), unix.XATTR_REPLACE), unix.ENODATA)
		xattrErr(t, "create", unix.Setxattr(f, "user.fl", []byte("1"), unix.XATTR_CREATE), 0)
		xattrErr(t, "create existing", unix.Setxattr(f, "user.fl", []byte("2"), unix.XATTR_CREATE), unix.EEXIST)
		xattrErr(t, "replace", unix.Setxattr(f, "user.fl", []byte("3"), unix.XATTR_REPLACE), 0)
		xattrErr(t, "plain set", unix.Setxattr(f, "user.fl", []byte("4"), 0), 0)
		v, err := xattrGet(t, f, "user.fl", false)
		xattrErr(t, "get", err, 0)
		if string(v) != "4" {
			t.Fatalf("user.fl = %q, want 4", v)
		}
		xattrErr(t, "cleanup", unix.Removexattr(f, "user.fl"), 0)
	})

	t.Run("Buffers", func(t *testing.T) {
		xattrErr(t, "set", unix.Setxattr(f, "user.buf", []byte("0123456789"), 0), 0)
		n, err := unix.Getxattr(f, "user.buf", nil)
		xattrErr(t, "size probe", err, 0)
		if n != 10 {
			t.Fatalf("size probe: %d, want 10", n)
		}
		_, err = unix.Getxattr(f, "user.buf", make([]byte, 9))
		xattrErr(t, "get into 9 bytes", err, unix.ERANGE)
		buf := make([]byte, 100)
		n, err = unix.Getxattr(f, "user.buf", buf)
		xattrErr(t, "get into 100 bytes", err, 0)
		if string(buf[:n]) != "0123456789" {
			t.Fatalf("get %q", buf[:n])
		}
		n, err = unix.Listxattr(f, nil)
		xattrErr(t, "list size probe", err, 0)
		if n != len("user.buf\x00") {
			t.Fatalf("list size %d", n)
		}
		_, err = unix.Listxattr(f, make([]byte, n-1))
		xattrErr(t, "list into a short buffer", err, unix.ERANGE)
		xattrErr(t, "cleanup", unix.Removexattr(f, "user.buf"), 0)
	})

	t.Run("Limits", func(t *testing.T) {
		name255 := "user." + strings.Repeat("n", 250)
		xattrErr(t, "name of 255 bytes", unix.Setxattr(f, name255, []byte("v"), 0), 0)
		if got := xattrList(t, f, false); !slices.Equal(got, []string{name255}) {
			t.Fatalf("list %q", got)
		}
		xattrErr(t, "remove it", unix.Removexattr(f, name255), 0)
		xattrErr(t, "name of 256 bytes", unix.Setxattr(f, name255+"n", []byte("v"), 0), unix.ERANGE)
		_, err := unix.Getxattr(f, name255+"n", nil)
		xattrErr(t, "get name of 256 bytes", err, unix.ERANGE)

		big := randBytes(7, 64<<10)
		xattrErr(t, "value of 64 KiB", unix.Setxattr(f, "user.big", big, 0), 0)
		v, err := xattrGet(t, f, "user.big", false)
		xattrErr(t, "get 64 KiB", err, 0)
		if !bytes.Equal(v, big) {
			t.Fatalf("64 KiB value came back as %d different bytes", len(v))
		}
		xattrErr(t, "value over 64 KiB", unix.Setxattr(f, "user.big2", append(big, 0), 0), unix.E2BIG)
		xattrErr(t, "cleanup", unix.Removexattr(f, "user.big"), 0)

		// system.* is POSIX ACLs and the like: not supported, whether
		// the kernel parses the value (an ACL) or not.
		xattrErr(t, "set system.foo", unix.Setxattr(f, "system.foo", []byte("v"), 0), unix.EOPNOTSUPP)
		_, err = unix.Getxattr(f, "system.foo", nil)
		xattrErr(t, "get system.foo", err, unix.EOPNOTSUPP)
		acl := posixACL(0o6, 0o4, 0o4)
		xattrErr(t, "set an ACL", unix.Setxattr(f, "system.posix_acl_access", acl, 0), unix.EOPNOTSUPP)
		_, err = unix.Getxattr(f, "system.posix_acl_access", nil)
		xattrErr(t, "get the ACL", err, unix.EOPNOTSUPP)
		xattrErr(t, "set an unknown namespace", unix.Setxattr(f, "os2.foo", []byte("v"), 0), unix.EOPNOTSUPP)
	})

	t.Run("Budget", func(t *testing.T) {
		// Names and values of one inode are bounded to 1 MiB.
		g := filepath.Join(mnt, "budget")
		if err := os.WriteFile(g, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		val := randBytes(8, 64<<10)
		for i := range 15 {
			xattrErr(t, "fill", unix.Setxattr(g, fmt.Sprintf("user.%02d", i), val, 0), 0)
		}
		xattrErr(t, "one too many", unix.Setxattr(g, "user.15", val, 0), unix.ENOSPC)
		xattrErr(t, "replace at the limit", unix.Setxattr(g, "user.00", val, unix.XATTR_REPLACE), 0)
		xattrErr(t, "free one", unix.Removexattr(g, "user.00"), 0)
		xattrErr(t, "fits again", unix.Setxattr(g, "user.15", val, 0), 0)
	})

	t.Run("Ctime", func(t *testing.T) {
		c0 := xattrCtime(t, f)
		time.Sleep(10 * time.Millisecond)
		xattrErr(t, "set", unix.Setxattr(f, "user.t", []byte("v"), 0), 0)
		c1 := xattrCtime(t, f)
		if c1 <= c0 {
			t.Fatalf("setxattr: ctime %d -> %d", c0, c1)
		}
		time.Sleep(10 * time.Millisecond)
		xattrErr(t, "remove", unix.Removexattr(f, "user.t"), 0)
		if c2 := xattrCtime(t, f); c2 <= c1 {
			t.Fatalf("removexattr: ctime %d -> %d", c1, c2)
		}
		// A failed set changes nothing.
		c3 := xattrCtime(t, f)
		time.Sleep(10 * time.Millisecond)
		xattrErr(t, "failed replace", unix.Setxattr(f, "user.t", []byte("v"), unix.XATTR_REPLACE), unix.ENODATA)
		if c4 := xattrCtime(t, f); c4 != c3 {
			t.Fatalf("failed setxattr: ctime %d -> %d", c3, c4)
		}
	})

	t.Run("SymlinkAndDir", func(t *testing.T) {
		d := filepath.Join(mnt, "dir")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		xattrErr(t, "set on a directory", unix.Setxattr(d, "user.d", []byte("dv"), 0), 0)
		v, err := xattrGet(t, d, "user.d", false)
		xattrErr(t, "get on a directory", err, 0)
		if string(v) != "dv" {
			t.Fatalf("dir user.d = %q", v)
		}

		target := filepath.Join(mnt, "target")
		if err := os.WriteFile(target, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		xattrErr(t, "set on the target", unix.Setxattr(target, "user.t", []byte("tv"), 0), 0)
		link := filepath.Join(mnt, "link")
		if err := os.Symlink("target", link); err != nil {
			t.Fatal(err)
		}
		xattrErr(t, "lsetxattr user.* on a symlink", unix.Lsetxattr(link, "user.l", []byte("v"), 0), unix.EPERM)
		_, err = xattrGet(t, link, "user.t", true)
		xattrErr(t, "lgetxattr user.* of a symlink", err, unix.ENODATA)
		xattrErr(t, "lremovexattr user.* of a symlink", unix.Lremovexattr(link, "user.t"), unix.EPERM)
		// Through the link: the target's attributes.
		v, err = xattrGet(t, link, "user.t", false)
		xattrErr(t, "getxattr through a symlink", err, 0)
		if string(v) != "tv" {
			t.Fatalf("through the link: %q", v)
		}
		xattrErr(t, "setxattr through a symlink", unix.Setxattr(link, "user.t2", []byte("v2"), 0), 0)
		if got := xattrList(t, target, false); !slices.Equal(got, []string{"user.t", "user.t2"}) {
			t.Fatalf("target lists %q", got)
		}
		// trusted.* is allowed on the link itself (we are root).
		xattrErr(t, "lsetxattr trusted.* on a symlink", unix.Lsetxattr(link, "trusted.l", []byte("lv"), 0), 0)
		v, err = xattrGet(t, link, "trusted.l", true)
		xattrErr(t, "lgetxattr trusted.* of a symlink", err, 0)
		if string(v) != "lv" {
			t.Fatalf("link trusted.l = %q", v)
		}
		if got := xattrList(t, link, true); !slices.Equal(got, []string{"trusted.l"}) {
			t.Fatalf("llistxattr %q", got)
		}
	})

	t.Run("HardLinksAndUnlink", func(t *testing.T) {
		a := filepath.Join(mnt, "ha")
		b := filepath.Join(mnt, "hb")
		if err := os.WriteFile(a, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(a, b); err != nil {
			t.Fatal(err)
		}
		xattrErr(t, "set via a", unix.Setxattr(a, "user.h", []byte("shared"), 0), 0)
		v, err := xattrGet(t, b, "user.h", false)
		xattrErr(t, "get via b", err, 0)
		if string(v) != "shared" {
			t.Fatalf("via b: %q", v)
		}
		var st unix.Stat_t
		if err := unix.Stat(a, &st); err != nil {
			t.Fatal(err)
		}
		c := cl.Client()
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.Remove(a))
		if names, err := c.ListXattr(t.Context(), st.Ino); err != nil || !slices.Equal(names, []string{"user.h"}) {
			t.Fatalf("after unlinking one name: %q %v", names, err)
		}
		must(os.Remove(b))
		if _, err := c.ListXattr(t.Context(), st.Ino); !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("after unlinking the last name: %v", err)
		}
	})

	// The kernel asks for security.capability before every write and
	// drops it when set; the mount caches "absent" (so that writes cost
	// no MDS call) but never past a set through the same mount.
	t.Run("CapabilityDroppedOnWrite", func(t *testing.T) {
		p := filepath.Join(mnt, "capfile")
		w, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for range 3 {
			if _, err := w.Write([]byte("x")); err != nil { // probes, caches "absent"
				t.Fatal(err)
			}
		}
		caps := fileCaps(1 << 10) // CAP_NET_BIND_SERVICE
		xattrErr(t, "set security.capability", unix.Setxattr(p, "security.capability", caps, 0), 0)
		v, err := xattrGet(t, p, "security.capability", false)
		xattrErr(t, "get security.capability after a cached absent", err, 0)
		if !bytes.Equal(v, caps) {
			t.Fatalf("security.capability = %x, want %x", v, caps)
		}
		if _, err := w.Write([]byte("y")); err != nil {
			t.Fatal(err)
		}
		_, err = xattrGet(t, p, "security.capability", false)
		xattrErr(t, "security.capability after a write", err, unix.ENODATA)
	})

	// Everything set through one mount is there through a fresh one and
	// through the client library.
	t.Run("Remount", func(t *testing.T) {
		xattrErr(t, "set", unix.Setxattr(f, "user.keep", []byte("kept"), 0), 0)
		mnt2 := cl.Mount()
		v, err := xattrGet(t, filepath.Join(mnt2, "f"), "user.keep", false)
		xattrErr(t, "get through a second mount", err, 0)
		if string(v) != "kept" {
			t.Fatalf("second mount: %q", v)
		}
		var st unix.Stat_t
		if err := unix.Stat(f, &st); err != nil {
			t.Fatal(err)
		}
		v, err = cl.Client().GetXattr(t.Context(), st.Ino, "user.keep")
		if err != nil || string(v) != "kept" {
			t.Fatalf("client GetXattr: %q %v", v, err)
		}
		_, err = cl.Client().GetXattr(t.Context(), st.Ino, "user.nope")
		if !errors.Is(err, errs.ErrNoData) {
			t.Fatalf("client GetXattr of a missing name: %v", err)
		}
	})
}

// fileCaps encodes file capabilities (version 2, permitted only) as the
// security.capability xattr that setcap(8) writes.
func fileCaps(permitted uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0x02000000) // VFS_CAP_REVISION_2
	b = binary.LittleEndian.AppendUint32(b, permitted)
	b = binary.LittleEndian.AppendUint32(b, 0) // inheritable
	return binary.LittleEndian.AppendUint64(b, 0)
}

// posixACL encodes a minimal POSIX ACL (owner, group, other) in the
// system.posix_acl_access xattr format, which the kernel parses before
// the file system sees it.
func posixACL(user, group, other uint16) []byte {
	const (
		version  = 2
		userObj  = 0x01
		groupObj = 0x04
		otherTag = 0x20
		undefID  = 0xffffffff
	)
	b := binary.LittleEndian.AppendUint32(nil, version)
	for _, e := range []struct{ tag, perm uint16 }{{userObj, user}, {groupObj, group}, {otherTag, other}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, undefID)
	}
	return b
}
