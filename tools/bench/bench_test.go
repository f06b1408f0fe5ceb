package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestSmoke runs the whole benchmark at tiny sizes against a real local
// cluster started from a freshly built binary, and checks that every
// figure is there with a positive value, baseline and ratio. It asserts
// nothing about speed.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): builds shoal and starts a cluster")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("SKIP (no FUSE): /dev/fuse is missing: %v", err)
	}
	if os.Geteuid() != 0 {
		// The loopback baseline mounts with mount(2), and cold reads need
		// drop_caches: both need root.
		t.Skip("SKIP (no FUSE): the benchmark's smoke test needs root to mount")
	}
	bin := filepath.Join(t.TempDir(), "shoal")
	build := exec.Command("go", "build", "-o", bin, "github.com/shoalfs/shoal/cmd/shoal")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	rep, err := Run(ctx, Options{
		Dir: dir, Binary: bin,
		Size: 2 << 20, Threads: 2, MetaThreads: 2, Files: 24,
		Progress: logWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Figure{}
	for _, f := range rep.Figures {
		got[f.Name+" "+f.Unit] = f
	}
	for _, s := range specs {
		for _, p := range []string{pathMount, pathAPI, pathLoopback} {
			if s.noAPI && p == pathAPI {
				continue
			}
			f, ok := got[s.name+"."+p+" "+s.unit]
			if !ok {
				t.Errorf("figure %s.%s (%s) is missing", s.name, p, s.unit)
				continue
			}
			if !(f.Value > 0 && f.Baseline > 0 && f.Ratio > 0) {
				t.Errorf("figure %s: value %v, baseline %v, ratio %v: want all positive", f.Name, f.Value, f.Baseline, f.Ratio)
			}
		}
	}
	want := 0
	for _, s := range specs {
		want += 3
		if s.noAPI {
			want--
		}
	}
	if len(rep.Figures) != want {
		t.Errorf("%d figures, want %d", len(rep.Figures), want)
	}
	for _, n := range rep.Notes {
		t.Log(n)
	}
	// Everything the run made under dir is gone but the cluster's log.
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		if e.Name() != "cluster.log" {
			t.Errorf("%s left behind in the benchmark directory", e.Name())
		}
	}
}
