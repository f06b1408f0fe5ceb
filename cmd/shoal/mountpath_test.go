package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Paths under a Shoal mount are paths inside its file system, and the
// mount names its MDS (issue 18: `setstripe ./mnt/dir` failed with a raw
// key); other paths are from the file system's root, as before.
func TestPathsThroughMounts(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "my mnt") // a space: mountinfo writes \040
	deep := filepath.Join(mnt, "inner")
	other := filepath.Join(dir, "other")
	pod := filepath.Join(dir, "pod") // a bind mount of a directory (a CSI volume)
	for _, d := range []string{deep, other, pod} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	esc := func(p string) string { return filepath.ToSlash(filepath.Clean(p)) }
	info := fmt.Sprintf(`22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
90 22 0:50 / %s rw,nosuid,nodev,relatime shared:40 - fuse.shoal shoal:127.0.0.1:7700 rw,user_id=0,group_id=0
91 90 0:51 / %s rw,relatime shared:41 - fuse.shoal shoal rw,user_id=0,group_id=0
92 22 0:52 / %s rw,relatime shared:42 - fuse.other shoal:10.0.0.9:7700 rw
93 22 0:50 /volumes/pvc-1 %s rw,relatime shared:40 - fuse.shoal shoal:127.0.0.1:7700 rw,user_id=0,group_id=0
`, stringsReplaceSpace(esc(mnt)), stringsReplaceSpace(esc(deep)), esc(other), esc(pod))
	mi := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(mi, []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(p string) { mountinfoPath = p }(mountinfoPath)
	mountinfoPath = mi

	t.Chdir(dir)
	for _, c := range []struct {
		arg, inner, mds string
	}{
		{"./my mnt/dir", "/dir", "127.0.0.1:7700"},
		{"my mnt", "/", "127.0.0.1:7700"},
		{filepath.Join(mnt, "a/b/not-yet"), "/a/b/not-yet", "127.0.0.1:7700"},
		{"my mnt/inner/x", "/x", ""},   // the innermost mount, which names no MDS
		{"other/x", "other/x", ""},     // not a Shoal mount
		{"/ckpt/job", "/ckpt/job", ""}, // from the file system's root
		{"/", "/", ""},
		{"pod/ckpt", "/volumes/pvc-1/ckpt", "127.0.0.1:7700"}, // from the bound directory
		{"pod", "/volumes/pvc-1", "127.0.0.1:7700"},
	} {
		p := resolveFSPath(c.arg)
		mds := mdsFor(false, "", p)
		if p.inner != c.inner || mds != c.mds {
			t.Errorf("%q: inner %q mds %q, want %q %q", c.arg, p.inner, mds, c.inner, c.mds)
		}
	}

	// Through the command line: the argument and --mds, unless given.
	for _, c := range []struct {
		args      []string
		inner     string
		mds, want string
	}{
		{[]string{"admin", "getstripe", "./my mnt/d"}, "/d", "", "127.0.0.1:7700"},
		{[]string{"admin", "getstripe", "./my mnt/d", "--mds", "10.1.1.1:7700"}, "/d", "", "10.1.1.1:7700"},
		{[]string{"admin", "getstripe", "/d"}, "/d", "env:7700", "env:7700"},
	} {
		t.Setenv("SHOAL_MDS", c.mds)
		root := newRoot()
		var got []string
		var gotMDS string
		cmd, _, err := root.Find(c.args)
		if err != nil {
			t.Fatal(err)
		}
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			got, gotMDS = args, cmd.Flag("mds").Value.String()
			return nil
		}
		root.SetArgs(c.args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if len(got) != 1 || got[0] != c.inner || gotMDS != c.want {
			t.Errorf("%v: args %q mds %q, want %q %q", c.args, got, gotMDS, c.inner, c.want)
		}
	}
}

func stringsReplaceSpace(s string) string {
	out := ""
	for _, r := range s {
		if r == ' ' {
			out += `\040`
		} else {
			out += string(r)
		}
	}
	return out
}

// TestRefuseStackedMount: a mount point that already has a Shoal mount (in
// mountinfo) is refused, saying which cluster it shows; others are not.
func TestRefuseStackedMount(t *testing.T) {
	dir := t.TempDir()
	mnt, free := filepath.Join(dir, "mnt"), filepath.Join(dir, "free")
	info := fmt.Sprintf("90 22 0:50 / %s rw,relatime shared:40 - fuse.shoal shoal:127.0.0.1:7700 rw,user_id=0,group_id=0\n", mnt)
	mi := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(mi, []byte(info), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(p string) { mountinfoPath = p }(mountinfoPath)
	mountinfoPath = mi
	t.Chdir(dir)
	err := refuseStackedMount("./mnt")
	if err == nil || !strings.Contains(err.Error(), "./mnt already has a Shoal mount of the MDS at 127.0.0.1:7700") {
		t.Errorf("./mnt: %v", err)
	}
	if err := refuseStackedMount(free); err != nil {
		t.Errorf("%s: %v", free, err)
	}
}
