package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/test/cluster"
)

// The Python package (python/) against a real cluster: the library built
// with -buildmode=c-shared, a cluster with mutual TLS on loopback, and
// python/tests run with the stdlib's unittest, the environment as a user
// has it after `. DIR/env` (SHOAL_MDS, SHOAL_CERT, SHOAL_KEY, SHOAL_CA).

// pythonWithNumPy returns a python3 that imports numpy: $SHOAL_PYTHON,
// python3 on PATH, or Debian's /usr/bin/python3 (python3-numpy, which
// tools/deps.sh installs, lands there even when PATH has another python).
func pythonWithNumPy(t *testing.T) string {
	var tried []string
	cands := []string{os.Getenv("SHOAL_PYTHON")}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, p := range cands {
		if p == "" {
			continue
		}
		out, err := exec.Command(p, "-c", "import numpy; print(numpy.__version__)").CombinedOutput()
		if err == nil {
			t.Logf("python: %s, numpy %s", p, strings.TrimSpace(string(out)))
			return p
		}
		tried = append(tried, p)
	}
	msg := fmt.Sprintf("SKIP: no python3 with numpy (tried %v): the Python package is NOT tested here; `make deps` (tools/deps.sh) installs python3-numpy", tried)
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
	return ""
}

// buildLib builds libshoal.so into dir.
func buildLib(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		if _, err := exec.LookPath("cc"); err != nil {
			msg := "SKIP: no C compiler (gcc or cc): libshoal cannot be built here; tools/deps.sh installs gcc"
			fmt.Fprintln(os.Stderr, msg)
			t.Skip(msg)
		}
	}
	lib := filepath.Join(dir, "libshoal.so")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-buildmode=c-shared", "-o", lib, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	return lib
}

// pyCluster starts a cluster (mutual TLS, tmpfs) for the Python tests
// and returns it with the environment a user would have: SHOAL_MDS and
// an administrator's certificate files.
func pyCluster(t *testing.T, lib string) (*cluster.Cluster, []string) {
	t.Helper()
	c := cluster.Start(t, cluster.Options{
		Dir:          cluster.TmpfsDir(t),
		Layout:       layout.Layout{K: 4, M: 2, Unit: 64 << 10},
		GCGrace:      8 * time.Second,
		SessionLease: 2 * time.Second,
	})
	ca, err := pki.LoadOrInitCA(filepath.Join(c.Dir, "tls"), "shoal test CA")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.IssueTo(filepath.Join(t.TempDir(), "certs"), pki.Request{Role: pki.RoleAdmin, Name: "python", Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"SHOAL_MDS="+c.MDSAddr(), "SHOAL_CERT="+p.Cert, "SHOAL_KEY="+p.Key, "SHOAL_CA="+p.CA, "SHOAL_INSECURE=",
		"SHOAL_LIB="+lib, "PYTHONPATH="+filepath.Join(repo, "python"), "PYTHONDONTWRITEBYTECODE=1",
		"OMP_NUM_THREADS=1")
	return c, env
}

// TestPython runs python/tests (unittest) against a real cluster.
func TestPython(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): builds a c-shared library, starts a cluster and runs Python")
	}
	py := pythonWithNumPy(t)
	lib := buildLib(t, t.TempDir())
	_, env := pyCluster(t, lib)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-v", "-s", "../../python/tests", "-t", "../../python")
	cmd.Env = append(env, "SHOAL_PYTHON="+py)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("python -m unittest (%v):\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("python tests: %v", err)
	}
	if !strings.Contains(out.String(), "\nOK") {
		t.Fatalf("python tests: no OK in the output")
	}
}
