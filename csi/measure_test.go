package csi_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/fuse"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestCSIMountChoice measures the two ways a node could publish volumes
// (docs/deploy.md, "Kubernetes CSI driver"): a FUSE mount per volume (all
// served by one process and one client, as a node plugin would) against
// a bind mount per volume from one node-wide FUSE mount. It reports the
// time to mount and the memory of the process per volume. Opt-in:
// SHOAL_CSI_MEASURE=1.
func TestCSIMountChoice(t *testing.T) {
	if os.Getenv("SHOAL_CSI_MEASURE") == "" {
		t.Skip("SKIP: a measurement; SHOAL_CSI_MEASURE=1 runs it")
	}
	cluster.RequireFUSE(t)
	const n = 32
	c := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	cl := c.Client()
	ctx := context.Background()
	for i := range n {
		p := fmt.Sprintf("/volumes/v%d", i)
		if err := cl.MkdirAll(ctx, p, 0o777); err != nil {
			t.Fatal(err)
		}
		f, err := cl.Create(ctx, p+"/f", 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(ctx, []byte("x"), 0)
		f.Close(ctx)
	}
	base := t.TempDir()
	use := func(dir string) {
		// What a pod's start does: list, stat, read.
		if _, err := os.ReadDir(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadFile(filepath.Join(dir, "f")); err != nil {
			t.Fatal(err)
		}
	}
	report := func(name string, lat []time.Duration, before, after memSample) {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("%-28s mount p50 %8s p90 %8s max %8s | per volume: RSS %6.0f KiB, Go heap %6.0f KiB, goroutines %.1f",
			name, lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*9/10].Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond),
			float64(after.rssKiB-before.rssKiB)/n, float64(after.heap-before.heap)/1024/n, float64(after.goroutines-before.goroutines)/n)
	}

	// Warm up: one of each first, so that neither pays for the first.
	warm := filepath.Join(base, "warm")
	os.MkdirAll(warm, 0o755)
	if wm, err := fuse.Mount(ctx, warm, fuse.Options{Client: cl}); err == nil {
		use(filepath.Join(warm, "volumes", "v0"))
		wm.Unmount()
	}

	// A FUSE mount per volume. (Of the file system's root: a mount of a
	// subdirectory would differ by one lookup of it.)
	before := sample()
	var lat []time.Duration
	var ms []*fuse.Mounted
	for i := range n {
		dir := filepath.Join(base, fmt.Sprintf("fuse-%d", i))
		os.MkdirAll(dir, 0o755)
		t0 := time.Now()
		m, err := fuse.Mount(ctx, dir, fuse.Options{Client: cl})
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		ms = append(ms, m)
		use(filepath.Join(dir, "volumes", fmt.Sprintf("v%d", i)))
	}
	report("FUSE mount per volume", lat, before, sample())
	for _, m := range ms {
		if err := m.Unmount(); err != nil {
			t.Fatal(err)
		}
	}

	// One node mount, a bind mount per volume.
	node := filepath.Join(base, "node")
	os.MkdirAll(node, 0o755)
	before = sample()
	t0 := time.Now()
	m, err := fuse.Mount(ctx, node, fuse.Options{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the node mount itself: %s", time.Since(t0).Round(time.Microsecond))
	lat = lat[:0]
	var targets []string
	for i := range n {
		dir := filepath.Join(base, fmt.Sprintf("bind-%d", i))
		os.MkdirAll(dir, 0o755)
		t0 := time.Now()
		if err := unix.Mount(filepath.Join(node, "volumes", fmt.Sprintf("v%d", i)), dir, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		targets = append(targets, dir)
		use(dir)
	}
	report("bind mount per volume", lat, before, sample())
	for _, d := range targets {
		unix.Unmount(d, 0)
	}
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
}

type memSample struct {
	rssKiB     int64
	heap       int64
	goroutines int
}

func sample() memSample {
	runtime.GC() // twice: sync.Pool keeps a victim cache for one GC
	runtime.GC()
	debug.FreeOSMemory()
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	out := memSample{heap: int64(s.HeapInuse), goroutines: runtime.NumGoroutine()}
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			out.rssKiB, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return out
}
