package gpucheck

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/test/cluster"
)

// startCluster starts a cluster with mutual TLS, as `shoal local` (which
// gpu-check starts) runs, and returns it with its OST directories.
func startCluster(t *testing.T) (*cluster.Cluster, []string) {
	t.Helper()
	c := cluster.Start(t, cluster.Options{Layout: layout.Layout{K: 4, M: 2, Unit: 64 << 10}})
	var dirs []string
	for i := 0; i < 6; i++ {
		dirs = append(dirs, c.OST(i).Dir)
	}
	return c, dirs
}

// TestRunHost runs the whole check on the host backend with a small
// checkpoint: every way of reading is measured and checked, and a run
// whose local path cannot run (no OST of the cluster on this node) fails.
func TestRunHost(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	c, dirs := startCluster(t)
	creds := c.Creds(pki.RoleAdmin)
	dir := t.TempDir()
	var out bytes.Buffer
	res, err := Run(context.Background(), Options{MDS: c.MDSAddr(), OSTDirs: dirs, Backend: "host", Size: 6 << 20, TensorSize: 1 << 20, Dir: dir, Out: &out, Creds: creds})
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 5 {
		t.Fatalf("%d rows", len(res.Rows))
	}
	for _, r := range res.Rows {
		if !r.Checked || r.GBps <= 0 || r.Path != "host" || !r.Ran || r.Measures != "host" {
			t.Fatalf("row %+v", r)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "ckpt.json"))
	if err != nil || !strings.Contains(string(b), res.SHA256) {
		t.Fatalf("ckpt.json: %s %v", b, err)
	}
	var js map[string]any
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	if _, err := Probe(Options{Backend: "cuda", CUDA: cudaNone()}); err == nil || !strings.Contains(err.Error(), "no GPU") {
		t.Fatalf("probe without CUDA: %v", err)
	}
	p, err := Probe(Options{Backend: "host"})
	if err != nil || !strings.Contains(p.String(), "glibc: ") || !strings.Contains(p.String(), "/run/udev: ") {
		t.Fatalf("probe: %v\n%s", err, p)
	}
	t.Logf("\n%s", p)

	// No local OST: the local rows measured nothing local.
	out.Reset()
	res, err = Run(context.Background(), Options{MDS: c.MDSAddr(), Backend: "host", Size: 2 << 20, TensorSize: 1 << 20, Out: &out, Creds: creds})
	t.Logf("\n%s", out.String())
	if err == nil || !strings.Contains(err.Error(), "the local path did not run") || !strings.Contains(out.String(), "HOST PATH DID NOT RUN") {
		t.Fatalf("run without local OSTs: %v", err)
	}
	if res == nil || res.Rows[0].Ran || !res.Rows[2].Ran {
		t.Fatalf("rows %+v", res)
	}
}
