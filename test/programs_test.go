package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoalfs/shoal/test/cluster"
	"github.com/shoalfs/shoal/test/fsx"
)

// TestPrograms runs real programs on a mount: git, tar and sqlite3.
func TestPrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): git, tar and sqlite3 on a mount")
	}
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	mnt := cl.Mount()
	t.Run("Git", func(t *testing.T) { programGit(t, cl, mnt) })
	t.Run("Tar", func(t *testing.T) { programTar(t, mnt) })
	t.Run("SQLite", func(t *testing.T) { programSQLite(t, mnt) })
}

// cmdIn runs name with args in dir with a clean environment (no user or
// system git configuration) and returns its standard output.
func cmdIn(t *testing.T, dir, stdin, name string, args ...string) string {
	t.Helper()
	out, err := cmdErr(dir, stdin, name, args...)
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return out
}

func cmdErr(dir, stdin, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "HOME="+os.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func requireProgram(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("SKIP: %s is not installed (make deps installs it)", name)
	}
}

// programGit: init, add, commit and log a small repository on the mount;
// then status, fsck, gc and a clone out of the mount.
func programGit(t *testing.T, cl *cluster.Cluster, mnt string) {
	requireProgram(t, "git")
	repo := filepath.Join(mnt, "repo")
	git := func(args ...string) string {
		t.Helper()
		return cmdIn(t, repo, "", "git", append([]string{"-c", "user.name=Shoal Test", "-c", "user.email=test@shoal.invalid",
			"-c", "init.defaultBranch=main", "-c", "core.fsync=all"}, args...)...)
	}
	must(t, os.Mkdir(repo, 0o755))
	git("init", "-q")
	files := map[string][]byte{
		"README.md":       []byte("# Shoal test repository\n"),
		"src/main.go":     []byte("package main\n\nfunc main() {}\n"),
		"src/lib/util.go": []byte("package lib\n"),
		"data/blob.bin":   randBytes(77, 300_000),
		"run.sh":          []byte("#!/bin/sh\necho hi\n"),
	}
	for name, b := range files {
		p := filepath.Join(repo, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, b, 0o644))
	}
	must(t, os.Chmod(filepath.Join(repo, "run.sh"), 0o755))
	must(t, os.Symlink("src/main.go", filepath.Join(repo, "link")))
	git("add", "-A")
	git("commit", "-q", "-m", "first commit")
	must(t, os.WriteFile(filepath.Join(repo, "README.md"), []byte("# Shoal test repository\n\nSecond version.\n"), 0o644))
	git("rm", "-q", "src/lib/util.go")
	git("commit", "-q", "-a", "-m", "second commit")

	if log := git("log", "--format=%s"); log != "second commit\nfirst commit\n" {
		t.Errorf("git log: %q", log)
	}
	if st := git("status", "--porcelain"); st != "" {
		t.Errorf("git status after commit is not clean:\n%s", st)
	}
	if show := git("show", "HEAD~1:src/lib/util.go"); show != "package lib\n" {
		t.Errorf("git show of a removed file: %q", show)
	}
	git("fsck", "--full", "--strict")
	git("gc", "-q", "--aggressive")
	git("fsck", "--full", "--strict")

	// A clone out of the mount (from a fresh mount) has the same files.
	clone := filepath.Join(t.TempDir(), "clone")
	cmdIn(t, "/", "", "git", "clone", "-q", filepath.Join(cl.Mount(), "repo"), clone)
	for name, b := range files {
		if name == "src/lib/util.go" {
			continue
		}
		if name == "README.md" {
			b = []byte("# Shoal test repository\n\nSecond version.\n")
		}
		got, err := os.ReadFile(filepath.Join(clone, name))
		if err != nil {
			t.Errorf("clone: %v", err)
			continue
		}
		mustEqual(t, "clone: "+name, got, b)
	}
	if fi, err := os.Stat(filepath.Join(clone, "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("clone: run.sh is not executable: %v %v", fi, err)
	}
	// And a clone into the mount.
	cmdIn(t, mnt, "", "git", "clone", "-q", clone, filepath.Join(mnt, "clone2"))
	cmdIn(t, filepath.Join(mnt, "clone2"), "", "git", "fsck", "--full")
	if log := cmdIn(t, filepath.Join(mnt, "clone2"), "", "git", "log", "--format=%s"); log != "second commit\nfirst commit\n" {
		t.Errorf("git log of the clone into the mount: %q", log)
	}
}

// programTar: a tree on the local disk goes into the mount with tar
// (archive written into the mount, extracted there), comes back out the
// same way, and is identical: names, types, modes, link counts, symlink
// targets, contents and modification times.
func programTar(t *testing.T, mnt string) {
	requireProgram(t, "tar")
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.Mkdir(src, 0o755))
	makeTree(t, src, 300)
	must(t, os.WriteFile(filepath.Join(src, "exec.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "private"), []byte("secret"), 0o600))
	must(t, os.Link(filepath.Join(src, "private"), filepath.Join(src, "private-link")))
	must(t, os.Symlink("d00/s0", filepath.Join(src, "dirlink")))
	must(t, os.Symlink("missing", filepath.Join(src, "dangling")))
	must(t, os.MkdirAll(filepath.Join(src, "empty/dir"), 0o750))
	must(t, os.WriteFile(filepath.Join(src, "big.bin"), randBytes(9, 20<<20+12345), 0o644))
	sparse, err := os.Create(filepath.Join(src, "sparse.bin"))
	must(t, err)
	_, err = sparse.WriteAt([]byte("end"), 50<<20)
	must(t, err)
	must(t, sparse.Close())
	// Fixed times, so that a round trip can be compared to the second.
	stamp := time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC)
	must(t, filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, stamp, stamp)
	}))

	in := filepath.Join(mnt, "tar")
	must(t, os.Mkdir(in, 0o755))
	cmdIn(t, src, "", "tar", "--sparse", "-cf", filepath.Join(in, "a.tar"), ".")
	x := filepath.Join(in, "x")
	must(t, os.Mkdir(x, 0o755))
	cmdIn(t, x, "", "tar", "-xpf", filepath.Join(in, "a.tar"))
	if msg := fsx.CompareTrees(src, x); msg != "" {
		t.Errorf("extracted into the mount: %s", msg)
	}
	out := filepath.Join(t.TempDir(), "out")
	must(t, os.Mkdir(out, 0o755))
	cmdIn(t, x, "", "tar", "-cf", filepath.Join(out, "..", "b.tar"), ".")
	cmdIn(t, out, "", "tar", "-xpf", filepath.Join(out, "..", "b.tar"))
	if msg := fsx.CompareTrees(src, out); msg != "" {
		t.Errorf("round trip through the mount: %s", msg)
	}
	var wrong []string
	must(t, filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		for _, d := range []string{x, out} {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(d, rel), &st); err != nil {
				return err
			}
			if st.Mtim.Sec != stamp.Unix() {
				wrong = append(wrong, fmt.Sprintf("%s: %v", filepath.Join(d, rel), time.Unix(st.Mtim.Sec, 0).UTC()))
			}
		}
		return nil
	}))
	if len(wrong) > 0 {
		t.Errorf("%d files and directories lost their modification time (%v) in the round trip, e.g.:\n  %s",
			len(wrong), stamp, strings.Join(wrong[:min(len(wrong), 6)], "\n  "))
	}
	// tar's own comparison of the archive with the tree in the mount.
	if out, err := cmdErr(x, "", "tar", "--compare", "-f", filepath.Join(in, "a.tar")); err != nil {
		lines := strings.Split(out, "\n")
		t.Errorf("tar --compare of the archive with its extraction in the mount: %v (%d lines), e.g.:\n%s",
			err, len(lines), strings.Join(lines[:min(len(lines), 6)], "\n"))
	}
}

// programSQLite: transactions with the sqlite3 shell on a database in the
// mount, in rollback-journal and WAL modes: committed rows add up, a
// rolled back transaction leaves no trace, and the database checks clean.
func programSQLite(t *testing.T, mnt string) {
	requireProgram(t, "sqlite3")
	dir := filepath.Join(mnt, "sqlite")
	must(t, os.Mkdir(dir, 0o755))
	for _, mode := range []string{"DELETE", "WAL"} {
		db := filepath.Join(dir, "test-"+strings.ToLower(mode)+".db")
		sql := func(script string) string {
			t.Helper()
			return strings.TrimSpace(cmdIn(t, dir, script, "sqlite3", "-batch", "-bail", db))
		}
		if got := sql("PRAGMA journal_mode=" + mode + ";"); !strings.EqualFold(got, mode) {
			t.Fatalf("journal_mode %s: %q", mode, got)
		}
		sql(`CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER NOT NULL, pad BLOB);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 20000)
INSERT INTO t(v, pad) SELECT i, randomblob(100 + i % 300) FROM n;
COMMIT;`)
		const sum = 20000 * 20001 / 2
		if got := sql("SELECT sum(v) FROM t;"); got != fmt.Sprint(sum) {
			t.Errorf("%s: sum after commit: %s, want %d", mode, got, sum)
		}
		// A rolled back transaction leaves no trace.
		sql(`BEGIN;
INSERT INTO t(v) VALUES (1000000);
UPDATE t SET v = v * 2;
DELETE FROM t WHERE id % 3 = 0;
CREATE TABLE gone(x);
ROLLBACK;`)
		if got := sql("SELECT sum(v), count(*) FROM t;"); got != fmt.Sprintf("%d|20000", sum) {
			t.Errorf("%s: after ROLLBACK: %s, want %d|20000", mode, got, sum)
		}
		if got := sql("SELECT count(*) FROM sqlite_master WHERE name = 'gone';"); got != "0" {
			t.Errorf("%s: table created in a rolled back transaction exists: %s", mode, got)
		}
		// Many small transactions, then a delete of half and a VACUUM.
		var b strings.Builder
		for i := 0; i < 200; i++ {
			fmt.Fprintf(&b, "BEGIN; UPDATE t SET v = v + 1 WHERE id = %d; COMMIT;\n", i+1)
		}
		sql(b.String())
		sql("BEGIN; DELETE FROM t WHERE id % 2 = 0; COMMIT; VACUUM;")
		want := 0
		for i := 1; i <= 20000; i += 2 {
			want += i
			if i <= 200 {
				want++
			}
		}
		if got := sql("SELECT sum(v) FROM t;"); got != fmt.Sprint(want) {
			t.Errorf("%s: sum after updates, delete and vacuum: %s, want %d", mode, got, want)
		}
		if got := sql("PRAGMA integrity_check;"); got != "ok" {
			t.Errorf("%s: integrity_check: %s", mode, got)
		}
	}
}
