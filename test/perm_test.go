package test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/shoalfs/shoal/test/cluster"
)

// as runs a shell command as uid:gid (no supplementary groups but extra)
// and returns its combined output and whether it succeeded.
func as(t *testing.T, uid, gid int, extraGroups string, script string) (string, bool) {
	t.Helper()
	args := []string{"--reuid", itoa(uid), "--regid", itoa(gid)}
	if extraGroups == "" {
		args = append(args, "--clear-groups")
	} else {
		args = append(args, "--groups", extraGroups)
	}
	args = append(args, "sh", "-c", script)
	out, err := exec.Command("setpriv", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

func itoa(i int) string { return strconv.Itoa(i) }

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (not root): permission tests switch users with setpriv")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("SKIP (no setpriv): util-linux's setpriv is needed to act as other users")
	}
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// TestPermissions checks mode bits, ownership rules, setuid/setgid
// clearing, setgid directories and sticky directories as Linux gives them,
// acting as unprivileged users on a mount made by root.
func TestPermissions(t *testing.T) {
	cluster.RequireFUSE(t)
	requireRoot(t)
	cl := cluster.Start(t, cluster.Options{AllowOther: true})
	mnt := cl.Mount()
	in := func(p string) string { return filepath.Join(mnt, p) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// t.TempDir's directories are 0700: let the other users reach the mount.
	must(os.Chmod(cl.Dir, 0o755))
	must(os.Chmod(filepath.Dir(cl.Dir), 0o755))
	must(os.Chmod(mnt, 0o755))
	// Root's private directory and files.
	must(os.Mkdir(in("private"), 0o700))
	must(os.WriteFile(in("secret"), []byte("s"), 0o600))
	must(os.Chmod(in("secret"), 0o600))
	must(os.Mkdir(in("shared"), 0o777))
	must(os.Chmod(in("shared"), 0o777))

	for _, tc := range []struct {
		name, script string
		ok           bool
		msg          string
	}{
		{"read a 0600 file of root", "cat " + in("secret"), false, "Permission denied"},
		{"list a 0700 dir of root", "ls " + in("private"), false, "Permission denied"},
		{"create in a 0700 dir of root", "touch " + in("private/x"), false, "Permission denied"},
		{"create in a 0755 root dir", "touch " + in("x"), false, "Permission denied"},
		{"create in a 0777 dir", "echo hi > " + in("shared/mine") + " && cat " + in("shared/mine"), true, "hi"},
		{"chmod a file of root", "chmod 666 " + in("secret"), false, "Operation not permitted"},
		{"chown own file to root", "chown 0 " + in("shared/mine"), false, "Operation not permitted"},
		{"chgrp own file to a group not held", "chgrp 0 " + in("shared/mine"), false, "Operation not permitted"},
	} {
		out, ok := as(t, 1000, 1000, "", tc.script)
		if ok != tc.ok || !strings.Contains(out, tc.msg) {
			t.Errorf("%s: ok=%v out=%q, want ok=%v and %q", tc.name, ok, out, tc.ok, tc.msg)
		}
	}
	// chgrp to a supplementary group the caller holds works.
	if out, ok := as(t, 1000, 1000, "1000,2000", "chgrp 2000 "+in("shared/mine")); !ok {
		t.Errorf("chgrp to a held group: %s", out)
	}
	var st syscall.Stat_t
	must(syscall.Stat(in("shared/mine"), &st))
	if st.Uid != 1000 || st.Gid != 2000 {
		t.Errorf("shared/mine owner %d:%d, want 1000:2000", st.Uid, st.Gid)
	}

	// setuid and setgid are cleared when another user writes the file.
	must(os.WriteFile(in("shared/suid"), []byte("x"), 0o777))
	must(syscall.Chmod(in("shared/suid"), 0o6777))
	if out, ok := as(t, 1000, 1000, "", "echo more >> "+in("shared/suid")); !ok {
		t.Fatalf("write to a 6777 file: %s", out)
	}
	if m := mode(t, in("shared/suid")); m&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("after a write by another user mode is %v, want setuid and setgid cleared", m)
	}
	// chown clears them too (root changing the owner of a non-directory).
	must(syscall.Chmod(in("shared/suid"), 0o6755))
	must(os.Chown(in("shared/suid"), 1000, 1000))
	if m := mode(t, in("shared/suid")); m&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("after chown mode is %v, want setuid and setgid cleared", m)
	}

	// A setgid directory gives new files its group and new dirs its bit.
	must(os.Mkdir(in("sgid"), 0o777))
	must(os.Chown(in("sgid"), 0, 3000))
	must(syscall.Chmod(in("sgid"), 0o2777))
	if out, ok := as(t, 1000, 1000, "", "touch "+in("sgid/f")+" && mkdir "+in("sgid/d")); !ok {
		t.Fatalf("create in setgid dir: %s", out)
	}
	must(syscall.Stat(in("sgid/f"), &st))
	if st.Gid != 3000 {
		t.Errorf("file in setgid dir has gid %d, want 3000", st.Gid)
	}
	must(syscall.Stat(in("sgid/d"), &st))
	if st.Gid != 3000 || st.Mode&syscall.S_ISGID == 0 {
		t.Errorf("dir in setgid dir: gid %d mode %o, want gid 3000 and setgid", st.Gid, st.Mode)
	}

	// Sticky directory: only the owner of the file (or dir, or root) may
	// unlink or rename it.
	must(os.Mkdir(in("tmp"), 0o777))
	must(syscall.Chmod(in("tmp"), 0o1777))
	if out, ok := as(t, 1000, 1000, "", "echo a > "+in("tmp/a")); !ok {
		t.Fatalf("create in sticky dir: %s", out)
	}
	if out, ok := as(t, 1001, 1001, "", "rm -f "+in("tmp/a")); ok || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("other user removed a file in a sticky dir: ok=%v %s", ok, out)
	}
	if out, ok := as(t, 1001, 1001, "", "mv "+in("tmp/a")+" "+in("tmp/b")); ok || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("other user renamed a file in a sticky dir: ok=%v %s", ok, out)
	}
	if out, ok := as(t, 1000, 1000, "", "rm "+in("tmp/a")); !ok {
		t.Errorf("owner could not remove own file in sticky dir: %s", out)
	}
	if _, err := os.Stat(in("tmp/a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tmp/a still there: %v", err)
	}
}
