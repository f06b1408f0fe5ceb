package test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/cache"
	"github.com/shoalfs/shoal/fuse"
	"github.com/shoalfs/shoal/test/cluster"
)

// The node-local read cache (client/cache, docs/fuse.md "Node-local
// cache") on real mounts of a real cluster.

// cachedMount is a mount with a cache, unmounted (and its cache closed)
// by unmount or at the end of the test.
type cachedMount struct {
	dir   string
	cl    *client.Client // the mount's client
	m     *fuse.Mounted
	c     *cache.Cache
	reg   *prometheus.Registry // the cache's and the mount's metrics
	unmnt bool
}

func mountCached(t *testing.T, cl *cluster.Cluster, cacheDir string, size int64) *cachedMount {
	t.Helper()
	cluster.RequireFUSE(t)
	ctx := context.Background()
	c := cl.Client()
	id, err := c.ClusterIdentity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ca, err := cache.Open(ctx, cache.Options{Dir: cacheDir, Size: size, Cluster: id, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	// The mount's own client, its metrics (content leases) with the
	// cache's and the mount's.
	c = cl.ClientWith(client.Options{Registry: reg})
	dir := t.TempDir()
	// The mount's warnings and go-fuse's go to the test's output, seen
	// when a test fails.
	// when a test fails; SHOAL_FUSE_DEBUG=1 adds go-fuse's request log.
	debug := os.Getenv("SHOAL_FUSE_DEBUG") != ""
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level}))
	m, err := fuse.Mount(ctx, dir, fuse.Options{Client: c, Cache: ca, Registry: reg, Logger: log, Debug: debug})
	if err != nil {
		ca.Close()
		t.Fatalf("mount: %v", err)
	}
	cm := &cachedMount{dir: dir, cl: c, m: m, c: ca, reg: reg}
	t.Cleanup(cm.unmount)
	return cm
}

func (cm *cachedMount) unmount() {
	if cm.unmnt {
		return
	}
	cm.unmnt = true
	cm.m.Unmount()
	cm.c.Close()
}

func (cm *cachedMount) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return metricValue(t, cm.reg, name, labels...)
}

func readFileT(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// settled returns the value of counter name of cm once it has not moved
// for 100 ms (the cache's background fills written), waiting up to 10 s.
func settled(t *testing.T, cm *cachedMount, name string) float64 {
	t.Helper()
	v := cm.metric(t, name)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		w := cm.metric(t, name)
		if w == v {
			return v
		}
		v = w
	}
	return v
}

// TestCacheStaleness: a file changed by another client is never read from
// the cache after its next open here, and a write through the cached
// mount itself is never hidden by the cache (write-through).
func TestCacheStaleness(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	cm := mountCached(t, cl, t.TempDir(), 64<<20)
	other := cl.Mount()
	pa, po := filepath.Join(cm.dir, "f"), filepath.Join(other, "f")

	v1 := randBytes(1, 3<<20+12345) // 4 blocks, the last partial
	if err := os.WriteFile(po, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "first read (fills)", readFileT(t, pa), v1)
	// Fills are written by background writers after the read's reply
	// (client/cache/fill.go): wait for them.
	for deadline := time.Now().Add(10 * time.Second); cm.metric(t, "shoal_client_cache_fills_total") < 4 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if f := cm.metric(t, "shoal_client_cache_fills_total"); f != 4 {
		t.Errorf("fills after the first read: %v, want 4", f)
	}
	mustEqual(t, "second read (cached)", readFileT(t, pa), v1)
	if f := cm.metric(t, "shoal_client_cache_fills_total"); f != 4 {
		t.Errorf("fills after the second read: %v, want still 4", f)
	}
	served := cm.metric(t, "shoal_client_cache_hits_total") + cm.metric(t, "shoal_client_cache_passthrough_opens_total")
	if served == 0 {
		t.Errorf("second read neither hit the cache nor went through passthrough")
	}

	// Another client rewrites it: same size, and a different one.
	for i, n := range []int{len(v1), 1 << 20, 5000} {
		v := randBytes(uint64(10+i), n)
		if err := os.WriteFile(po, v, 0o644); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "read after another client's rewrite", readFileT(t, pa), v)
		mustEqual(t, "again, from the cache", readFileT(t, pa), v)
	}
	if s := cm.metric(t, "shoal_client_cache_stale_total"); s < 3 {
		t.Errorf("stale drops: %v, want at least 3", s)
	}

	// A write through the cached mount: the next read sees it.
	v2 := randBytes(20, 2<<20)
	if err := os.WriteFile(pa, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read after own write", readFileT(t, pa), v2)
	f, err := os.OpenFile(pa, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("patched"), 1000); err != nil {
		t.Fatal(err)
	}
	copy(v2[1000:], "patched")
	got := make([]byte, len(v2))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mustEqual(t, "read through the writing descriptor", got, v2)
	mustEqual(t, "read after close", readFileT(t, pa), v2)
	mustEqual(t, "other client reads the write", readFileT(t, po), v2)
}

// TestCachePassthrough: a file complete in the cache is read by the kernel
// from the cache file: no READ reaches the daemon.
func TestCachePassthrough(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	cm := mountCached(t, cl, t.TempDir(), 64<<20)
	p := filepath.Join(cm.dir, "f")
	v := randBytes(3, 2<<20+100)
	if err := os.WriteFile(p, v, 0o644); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "fill", readFileT(t, p), v)
	reads := cm.metric(t, "shoal_fuse_ops_total", "op", "read")
	mustEqual(t, "complete", readFileT(t, p), v)
	if cm.metric(t, "shoal_client_cache_passthrough_opens_total") == 0 {
		t.Skipf("SKIP (no FUSE passthrough): the kernel took no passthrough open (needs Linux 6.9+ and CAP_SYS_ADMIN); the daemon served the cached file")
	}
	if r := cm.metric(t, "shoal_fuse_ops_total", "op", "read"); r != reads {
		t.Errorf("passthrough read sent %v READs to the daemon, want 0", r-reads)
	}
	// A second reader shares the backing file; a writer cannot join
	// while a passthrough reader is open (the kernel refuses mixing).
	r1, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := os.Open(p)
	if err != nil {
		t.Fatalf("second passthrough open: %v", err)
	}
	r2.Close()
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	t.Logf("open for writing while a passthrough reader is open: %v", err)
	if err == nil {
		w.Close()
	}
	r1.Close()
	// Once the readers are gone, writing works and is seen.
	v2 := randBytes(4, 10000)
	if err := os.WriteFile(p, v2, 0o644); err != nil {
		t.Fatalf("write after the readers closed: %v", err)
	}
	mustEqual(t, "read after the write", readFileT(t, p), v2)

	// Close, write, read at once, again and again: the kernel sends
	// RELEASE after close(2) returns, so the mount may still count a
	// closed passthrough reader when the next open comes. A write and
	// an open must then neither fail nor read the old copy.
	for i := range 6 {
		v := randBytes(uint64(50+i), 1<<20+i*4096)
		if err := os.WriteFile(p, v, 0o644); err != nil {
			t.Fatalf("round %d: write: %v", i, err)
		}
		mustEqual(t, "fill", readFileT(t, p), v)
		mustEqual(t, "from the cache", readFileT(t, p), v)
		r, err := os.Open(p)
		if err != nil {
			t.Fatalf("round %d: open: %v", i, err)
		}
		r.Close()
	}
	// An open that finds a handle of the other kind not yet released is
	// served by the daemon (from the cache), so not every open above was
	// passthrough; once the RELEASEs are in, one must be.
	before := cm.metric(t, "shoal_client_cache_passthrough_opens_total")
	for deadline := time.Now().Add(10 * time.Second); ; {
		mustEqual(t, "settled", readFileT(t, p), randBytes(55, 1<<20+5*4096))
		if cm.metric(t, "shoal_client_cache_passthrough_opens_total") > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no passthrough open of the complete file in 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCacheEviction: a cache smaller than the data keeps to its size,
// evicting the least recently used files, and a cache full of files in
// use reads around itself.
func TestCacheEviction(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	const size = 3 << 20
	cm := mountCached(t, cl, t.TempDir(), size)
	var vs [][]byte
	for i := range 6 {
		v := randBytes(uint64(100+i), 1<<20)
		vs = append(vs, v)
		if err := os.WriteFile(filepath.Join(cm.dir, "f"+string(rune('0'+i))), v, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range vs {
		mustEqual(t, "read", readFileT(t, filepath.Join(cm.dir, "f"+string(rune('0'+i)))), v)
		if u := cm.metric(t, "shoal_client_cache_used_bytes"); u > size {
			t.Fatalf("cache holds %v bytes, over its %d", u, size)
		}
	}
	if e := cm.metric(t, "shoal_client_cache_evictions_total"); e < 3 {
		t.Errorf("evictions: %v, want at least 3", e)
	}
	fills := settled(t, cm, "shoal_client_cache_fills_total") // background fills done
	mustEqual(t, "most recent file", readFileT(t, filepath.Join(cm.dir, "f5")), vs[5])
	if f := cm.metric(t, "shoal_client_cache_fills_total"); f != fills {
		t.Errorf("the most recently used file was filled again (%v fills, was %v)", f, fills)
	}
	mustEqual(t, "evicted file", readFileT(t, filepath.Join(cm.dir, "f0")), vs[0])

	// Four files held open by reading them at once, with room for three:
	// the fourth is read around the cache.
	var open []*os.File
	for i := range 4 {
		f, err := os.Open(filepath.Join(cm.dir, "f"+string(rune('0'+i))))
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, f)
	}
	full := cm.metric(t, "shoal_client_cache_errors_total", "kind", "full")
	for i, f := range open {
		got := make([]byte, 1<<20)
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "read with the cache full", got, vs[i])
	}
	for _, f := range open {
		f.Close()
	}
	if cm.metric(t, "shoal_client_cache_errors_total", "kind", "full") == full {
		t.Errorf("no read went around a cache full of files in use")
	}
	if u := cm.metric(t, "shoal_client_cache_used_bytes"); u > size {
		t.Errorf("cache holds %v bytes, over its %d", u, size)
	}
}

// TestCacheRemountCorrupt: the cache survives a remount (the files are not
// filled again), and a cache file corrupted meanwhile is detected,
// dropped and read from the OSTs.
func TestCacheRemountCorrupt(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	dir := t.TempDir()
	cm := mountCached(t, cl, dir, 64<<20)
	a, b := randBytes(7, 2<<20+5), randBytes(8, 70000)
	if err := os.WriteFile(filepath.Join(cm.dir, "a"), a, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cm.dir, "b"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "fill a", readFileT(t, filepath.Join(cm.dir, "a")), a)
	mustEqual(t, "fill b", readFileT(t, filepath.Join(cm.dir, "b")), b)
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(cm.dir, "b"), &st); err != nil {
		t.Fatal(err)
	}
	cm.unmount()

	// Flip a byte in the middle of b's cache file.
	datas, _ := filepath.Glob(filepath.Join(dir, "*.data"))
	if len(datas) != 2 {
		t.Fatalf("cache files after unmount: %v, want 2", datas)
	}
	corrupted := false
	for _, p := range datas {
		fi, _ := os.Stat(p)
		if fi.Size() != int64(len(b)) {
			continue
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		one := []byte{0}
		f.ReadAt(one, 40000)
		one[0] ^= 0xff
		f.WriteAt(one, 40000)
		f.Close()
		corrupted = true
	}
	if !corrupted {
		t.Fatal("no cache file of b's size")
	}

	cm2 := mountCached(t, cl, dir, 64<<20)
	mustEqual(t, "a after remount", readFileT(t, filepath.Join(cm2.dir, "a")), a)
	if f := cm2.metric(t, "shoal_client_cache_fills_total"); f != 0 {
		t.Errorf("a was filled again after the remount (%v fills)", f)
	}
	mustEqual(t, "corrupted b", readFileT(t, filepath.Join(cm2.dir, "b")), b)
	if c := cm2.metric(t, "shoal_client_cache_errors_total", "kind", "corrupt"); c != 1 {
		t.Errorf("corrupt cache files detected: %v, want 1", c)
	}
	// The next open of b anew (the kernel's RELEASE of the last one is
	// asynchronous: an open before it shares the open file that gave up on
	// the cache) fills it again.
	for i := 0; cm2.metric(t, "shoal_client_cache_fills_total") == 0; i++ {
		if i == 50 {
			t.Fatalf("b was not filled again after its corrupt copy was dropped")
		}
		time.Sleep(20 * time.Millisecond)
		mustEqual(t, "b again", readFileT(t, filepath.Join(cm2.dir, "b")), b)
	}
	if f := cm2.metric(t, "shoal_client_cache_fills_total"); f != 1 {
		t.Errorf("fills after b's refill: %v, want 1", f)
	}
}
