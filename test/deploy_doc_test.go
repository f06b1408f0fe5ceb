package test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoalfs/shoal/test/cluster"
)

// deployMarker precedes each block of docs/deploy.md that TestDeployDoc
// runs.
const deployMarker = "<!-- deploy-test -->"

// deployBlocks returns the code blocks of doc that follow a marker line.
func deployBlocks(doc string) []string {
	re := regexp.MustCompile("(?s)" + regexp.QuoteMeta(deployMarker) + "\\s*\\n```[a-z]*\\n(.*?)\\n```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(doc, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestDeployDoc follows docs/deploy.md, "The same on one machine, step by
// step", as written: its marked blocks run in order in one shell, in an
// empty directory, with `shoal` built from ./cmd/shoal on PATH, as
// separate processes (CA, certificates, shoal mds, three shoal ost, shoal
// mount, a file written and read, shoal admin status). So the doc cannot
// rot (issue 18).
func TestDeployDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster of separate processes and mounts it")
	}
	cluster.RequireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP (not root): the doc's steps run as root")
	}
	if _, err := exec.LookPath("mountpoint"); err != nil {
		t.Skip("SKIP: no mountpoint(1) (util-linux)")
	}
	_, self, _, _ := runtime.Caller(0)
	repo := filepath.Dir(filepath.Dir(self))
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := deployBlocks(string(doc))
	if len(blocks) < 4 {
		t.Fatalf("docs/deploy.md: %d blocks after %s, want the 4 of section 0", len(blocks), deployMarker)
	}
	// The doc's ports are fixed; a busy one is a loud skip, not a
	// failure of the doc.
	for _, p := range []string{"7700", "7710", "7711", "7720", "7721", "7730", "7731"} {
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			t.Skipf("SKIP: port %s, which docs/deploy.md uses, is busy: %v", p, err)
		}
		l.Close()
	}

	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "shoal"), "./cmd/shoal")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shoal: %v\n%s", err, out)
	}
	dir := filepath.Join(work, "run")
	os.Mkdir(dir, 0o755)

	script := "set -e\n" + strings.Join(blocks, "\n") + "\n"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-c", script)
	sh.Dir = dir
	sh.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + work}
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sh.Cancel = func() error { return syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() {
		// The daemons the doc started in the background: a stop as
		// systemd would send, then unmount whatever is left.
		if sh.Process != nil {
			syscall.Kill(-sh.Process.Pid, syscall.SIGTERM)
		}
		time.Sleep(time.Second)
		exec.Command("umount", "-l", filepath.Join(dir, "mnt")).Run()
		if sh.Process != nil {
			syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		}
	})
	// A file, not a pipe: the daemons the doc starts in the background
	// keep its stdout open after the shell exits.
	outPath := filepath.Join(work, "out")
	outf, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer outf.Close()
	sh.Stdout, sh.Stderr = outf, outf
	t0 := time.Now()
	err = sh.Run()
	out, _ := os.ReadFile(outPath)
	logs := func() string {
		var b strings.Builder
		for _, f := range []string{"mds.log", "ost1.log", "mount.log"} {
			x, _ := os.ReadFile(filepath.Join(dir, f))
			b.WriteString("--- " + f + "\n" + string(x))
		}
		return b.String()
	}
	if err != nil {
		t.Fatalf("docs/deploy.md section 0: %v after %s\n%s\n%s", err, time.Since(t0).Round(time.Millisecond), out, logs())
	}
	t.Logf("docs/deploy.md section 0 ran in %s:\n%s", time.Since(t0).Round(time.Millisecond), out)
	for _, want := range []string{"hello\n", "/hello (file, inode", "HEALTH_OK"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in the output\n%s", want, logs())
		}
	}
	if n := strings.Count(string(out), " up "); n < 3 {
		t.Errorf("admin osts: %d up, want 3", n)
	}
}
