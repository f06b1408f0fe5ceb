package fuse

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseStatus(t *testing.T) {
	const status = "Name:\tsh\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t42\n" +
		"Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t1000 2000 3000 \n"
	for _, tc := range []struct {
		name     string
		status   string
		uid, gid uint32
		want     []uint32
		ok       bool
	}{
		{"groups", status, 1000, 1000, []uint32{1000, 2000, 3000}, true},
		{"other uid", status, 1001, 1000, nil, false},
		{"other gid", status, 1000, 0, nil, false},
		{"no groups", "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n", 0, 0, nil, true},
		{"fsuid differs", "Uid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t\n", 1000, 0, nil, false},
		{"no groups line", "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n", 0, 0, nil, false},
		{"bad group", "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t1 x\n", 0, 0, nil, false},
		{"empty", "", 0, 0, nil, false},
	} {
		got, ok := parseStatus([]byte(tc.status), tc.uid, tc.gid)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestGroupsCache(t *testing.T) {
	dir := t.TempDir()
	write := func(groups string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "7"), 0o755); err != nil {
			t.Fatal(err)
		}
		s := "Uid:\t5\t5\t5\t5\nGid:\t6\t6\t6\t6\nGroups:\t" + groups + "\n"
		if err := os.WriteFile(filepath.Join(dir, "7", "status"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := &groupsCache{procDir: dir}
	write("6 10")
	if got := g.groups(7, 5, 6); !slices.Equal(got, []uint32{6, 10}) {
		t.Fatalf("groups = %v", got)
	}
	// Cached: a change within the TTL is not seen.
	write("6 11")
	if got := g.groups(7, 5, 6); !slices.Equal(got, []uint32{6, 10}) {
		t.Fatalf("cached groups = %v", got)
	}
	// Other ids for the same pid (reused, or changed ids) read again, and
	// a mismatch with the file gives no groups.
	if got := g.groups(7, 9, 6); got != nil {
		t.Fatalf("groups for other uid = %v, want none", got)
	}
	if got := g.groups(0, 5, 6); got != nil {
		t.Fatalf("groups of pid 0 = %v, want none", got)
	}
	if got := g.groups(8, 5, 6); got != nil {
		t.Fatalf("groups of a missing pid = %v, want none", got)
	}
	// This process, through the real /proc.
	real := &groupsCache{procDir: "/proc"}
	want, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	got := real.groups(uint32(os.Getpid()), uint32(os.Geteuid()), uint32(os.Getegid()))
	if len(got) != len(want) {
		t.Fatalf("own groups %v, want %v", got, want)
	}
}
