package test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/test/cluster"
)

// Sizes with partial last rows and several extents (RS 4+2, 1 MiB cells,
// 16 MiB extents).
var dataPathSizes = []int{1, 5000, 4<<20 + 5000, 5<<20 + 4096*3 + 1, 16<<20 + 12345, 35 << 20}

// transports are the ways a client can move chunks: the data path, gRPC
// to OSTs that have no data path, and gRPC by the client's choice.
var transports = []struct {
	name string
	opts func(o *cluster.Options)
}{
	{"datapath", func(*cluster.Options) {}},
	{"old-osts", func(o *cluster.Options) { o.NoDataPath = true }},
	{"grpc-client", func(o *cluster.Options) { o.Client.GRPCChunks = true }},
}

func TestClientDataPathTransports(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			o := cluster.Options{Dir: cluster.TmpfsDir(t)}
			tr.opts(&o)
			cl := cluster.Start(t, o)
			c := cl.Client()
			ctx := context.Background()
			files := map[string][]byte{}
			for i, n := range dataPathSizes {
				data := randBytes(uint64(100+i), n)
				path := "/t" + string(rune('a'+i))
				writeFile(t, c, path, data)
				files[path] = data
				got, err := readFile(cl.Client(), path)
				if err != nil {
					t.Fatalf("read %s: %v", path, err)
				}
				mustEqual(t, path, got, data)
			}
			// Small random reads: one chunk read per piece, straight into
			// the caller's buffer.
			r := rand.New(rand.NewPCG(1, 2))
			rc := cl.Client()
			for path, data := range files {
				f, err := rc.Open(ctx, path)
				if err != nil {
					t.Fatal(err)
				}
				for range 20 {
					off := r.IntN(len(data))
					n := min(1+r.IntN(300_000), len(data)-off)
					p := make([]byte, n)
					if _, err := f.ReadAt(ctx, p, int64(off)); err != nil && !errors.Is(err, io.EOF) {
						t.Fatalf("%s: read [%d,+%d): %v", path, off, n, err)
					}
					mustEqual(t, path+" random read", p, data[off:off+n])
				}
				f.Close(ctx)
			}
			// Degraded: two OSTs down, every file still reads.
			cl.StopOST(0)
			cl.StopOST(3)
			for path, data := range files {
				got, err := readFile(cl.Client(), path)
				if err != nil {
					t.Fatalf("degraded read %s: %v", path, err)
				}
				mustEqual(t, path+" degraded", got, data)
			}
		})
	}
}

// counterValue returns the value of the counter name in reg (0 when absent).
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestClientFindsRestartedDataPath restarts every OST: each comes back on
// its gRPC address with a data path on a new port. A client that cached
// the old data addresses finds the new ones (through Info) without
// degrading a read.
func TestClientFindsRestartedDataPath(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t), Client: client.Options{Registry: reg}})
	c := cl.Client()
	data := randBytes(7, 9<<20+3)
	writeFile(t, c, "/r", data)
	old := cl.OST(0).Server.DataAddr()
	for i := range 6 {
		cl.StopOST(i)
		if err := cl.StartOST(i); err != nil {
			t.Fatal(err)
		}
	}
	if cl.OST(0).Server.DataAddr() == old {
		t.Logf("OST 0 got its old data port %s back", old)
	}
	got, err := readFile(c, "/r")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read after restart", got, data)
	if n := counterValue(t, reg, "shoal_client_degraded_reads_total"); n != 0 {
		t.Errorf("%v degraded reads after the OSTs moved their data path", n)
	}
	writeFile(t, c, "/r2", data) // and writes find them too
	got, err = readFile(c, "/r2")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "write after restart", got, data)
}

// flipChunk flips one byte in chunk j of every extent of path.
func flipChunk(t *testing.T, cl *cluster.Cluster, c *client.Client, path string, j int) {
	t.Helper()
	ctx := context.Background()
	a, err := c.Stat(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.MDSStub(c).GetExtents(ctx, mdsGetExtents(a.Ino))
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range r.GetExtents() {
		ext := ref.GetExtent()
		for i := range 6 {
			o := cl.OST(i)
			if o.Server == nil || o.Server.ID() != ext.GetOsts()[j] {
				continue
			}
			p := o.Server.ChunkPath(ext.GetId(), uint32(j))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 0x40 // the last row: partial where the extent is
			b[0] ^= 0x40
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCorruptPartialRows corrupts each data chunk in turn, in its first
// and last row (a partial one, where a cell is part data, part padding):
// sequential and random reads rebuild the bytes.
func TestCorruptPartialRows(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	c := cl.Client()
	ctx := context.Background()
	for j := range 4 {
		data := randBytes(uint64(40+j), 5<<20+4096*3+1+j*700_000)
		path := "/p" + string(rune('0'+j))
		writeFile(t, c, path, data)
		flipChunk(t, cl, c, path, j)
		got, err := readFile(cl.Client(), path)
		if err != nil {
			t.Fatalf("chunk %d corrupt: %v", j, err)
		}
		mustEqual(t, path, got, data)
		f, err := cl.Client().Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int{{0, 5000}, {len(data) - 5000, 5000}, {4<<20 - 100, 300_000}, {len(data) - 1, 1}} {
			p := make([]byte, r[1])
			if _, err := f.ReadAt(ctx, p, int64(r[0])); err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("chunk %d corrupt: read [%d,+%d): %v", j, r[0], r[1], err)
			}
			mustEqual(t, path+" random read", p, data[r[0]:r[0]+r[1]])
		}
		f.Close(ctx)
	}
}

// TestRowCacheConcurrentReaders has many readers share one File with a
// small row cache, so that rows are evicted and their pooled buffers
// reused while other readers copy out of them.
func TestRowCacheConcurrentReaders(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t), Client: client.Options{ReadAheadRows: 1, ReadCacheRows: 2}})
	c := cl.Client()
	ctx := context.Background()
	data := randBytes(11, 24<<20+999)
	writeFile(t, c, "/rc", data)
	f, err := cl.Client().Open(ctx, "/rc")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			p := make([]byte, 700_000+g*1000)
			for off := g * 100_000; off < len(data); off += len(p) {
				n, err := f.ReadAt(ctx, p, int64(off))
				if err != nil && !errors.Is(err, io.EOF) {
					t.Errorf("reader %d at %d: %v", g, off, err)
					return
				}
				if string(p[:n]) != string(data[off:off+n]) {
					t.Errorf("reader %d at %d: wrong bytes", g, off)
					return
				}
			}
		})
	}
	wg.Wait()
}
