package gds

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/test/cluster"
)

// testCluster is a cluster on loopback with a client.
type testCluster struct {
	*cluster.Cluster
	cl *client.Client
}

func startCluster(t testing.TB, lo layout.Layout, osts, extentRows int) *testCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	c := cluster.Start(t, cluster.Options{OSTs: osts, Layout: lo, Client: client.Options{ExtentRows: extentRows}})
	return &testCluster{Cluster: c, cl: c.Client()}
}

// ostDirs are the directories of every OST of the cluster.
func (c *testCluster) ostDirs(n int) []string {
	var d []string
	for i := 0; i < n; i++ {
		d = append(d, c.OST(i).Dir)
	}
	return d
}

// localOSTs maps the first n OSTs' ids to their directories.
func (c *testCluster) localOSTs(t testing.TB, n int) map[uint32]string {
	t.Helper()
	m, err := DiscoverLocalOSTs(c.ostDirs(n))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != n {
		t.Fatalf("found %d local OSTs, want %d", len(m), n)
	}
	return m
}

// writeFile writes data to path through the client, as chunks of write
// (so that it becomes several extents when ExtentRows is small).
func (c *testCluster) writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	ctx := context.Background()
	f, err := c.cl.Create(ctx, path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 {
		if _, err := f.WriteAt(ctx, data, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Small chunks wait in the OSTs' chunk logs for moments before their
	// files exist (docs/ost-format.md); the local path reads the files.
	c.FlushChunkLogs(t)
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newTestReader(t testing.TB, c *testCluster, dev *Device, o Options) *Reader {
	t.Helper()
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	r, err := NewReader(c.cl, dev, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// readBack copies n bytes at off of b to the host.
func readBack(t *testing.T, b *Buffer, off, n int64) []byte {
	t.Helper()
	out := make([]byte, n)
	if err := b.CopyToHost(out, off); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("%s: %d bytes, first difference at %d (got %v, want %#x)", what, len(got), i, at(got, i), want[i])
		}
	}
	t.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
}

func at(b []byte, i int) string {
	if i < len(b) {
		return fmt.Sprintf("%#x", b[i])
	}
	return "none"
}

// chunkFiles lists the chunk data files under an OST directory.
func chunkFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "chunks", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range m {
		if filepath.Ext(p) != ".crc" {
			out = append(out, p)
		}
	}
	return out
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func removeFile(p string) error { return os.Remove(p) }
