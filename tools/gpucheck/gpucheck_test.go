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
	"github.com/shoalfs/shoal/test/cluster"
)

// TestRunHost runs the whole check on the host backend with a small
// checkpoint: every way of reading is measured and checked.
func TestRunHost(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	// Plaintext, as `shoal local` (which gpu-check starts) is today (docs/security.md).
	c := cluster.Start(t, cluster.Options{Layout: layout.Layout{K: 4, M: 2, Unit: 64 << 10}, Insecure: true})
	var dirs []string
	for i := 0; i < 6; i++ {
		dirs = append(dirs, c.OST(i).Dir)
	}
	dir := t.TempDir()
	var out bytes.Buffer
	res, err := Run(context.Background(), Options{MDS: c.MDSAddr(), OSTDirs: dirs, Backend: "host", Size: 6 << 20, TensorSize: 1 << 20, Dir: dir, Out: &out})
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 5 {
		t.Fatalf("%d rows", len(res.Rows))
	}
	for _, r := range res.Rows {
		if !r.Checked || r.GBps <= 0 || r.Path != "host" {
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
}
