package test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/test/cluster"
)

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

func writeFile(t *testing.T, c *client.Client, path string, data []byte) {
	t.Helper()
	ctx := context.Background()
	f, err := c.Create(ctx, path, 0o644)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	// Write in uneven pieces to exercise the write buffer.
	for off := 0; off < len(data); {
		n := min(len(data)-off, 300_000+off%7919)
		if _, err := f.WriteAt(ctx, data[off:off+n], int64(off)); err != nil {
			t.Fatalf("write %s at %d: %v", path, off, err)
		}
		off += n
	}
	if err := f.Close(ctx); err != nil {
		t.Fatalf("close %s: %v", path, err)
	}
}

func readFile(c *client.Client, path string) ([]byte, error) {
	ctx := context.Background()
	f, err := c.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close(ctx)
	out := make([]byte, f.Size())
	for off := 0; off < len(out); {
		n, err := f.ReadAt(ctx, out[off:min(len(out), off+1<<20)], int64(off))
		off += n
		if err != nil && !(errors.Is(err, io.EOF) && off == len(out)) {
			return nil, err
		}
	}
	return out, nil
}

func mustEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from the %d written, first at %d", what, len(got), len(want), i)
	}
}

func TestClientRoundTripSizes(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	c := cl.Client()
	for i, n := range []int{0, 1, 4095, 4096, 100_000, 4<<20 - 1, 4 << 20, 4<<20 + 5, 16 << 20, 16<<20 + 4097, 37 << 20} {
		data := randBytes(uint64(i), n)
		path := "/f" + string(rune('a'+i))
		writeFile(t, c, path, data)
		a, err := c.Stat(context.Background(), path)
		if err != nil || a.Size != uint64(n) {
			t.Fatalf("%s: size %d err %v, want %d", path, a.Size, err, n)
		}
		got, err := readFile(cl.Client(), path) // a second client: close-to-open
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		mustEqual(t, path, got, data)
	}
}

func TestClientRandomReadsOverwritesAndTruncate(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{Layout: layout.Layout{K: 3, M: 2, Unit: 64 << 10}, OSTs: 5})
	c := cl.Client()
	ctx := context.Background()
	want := randBytes(7, 5<<20+123)
	writeFile(t, c, "/f", want)

	f, err := c.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	// Overwrites at random places, some past the end (holes), interleaved
	// with reads that must see them before any flush.
	for i := 0; i < 60; i++ {
		off := r.IntN(len(want) + 300_000)
		n := 1 + r.IntN(200_000)
		p := randBytes(uint64(100+i), n)
		if _, err := f.WriteAt(ctx, p, int64(off)); err != nil {
			t.Fatal(err)
		}
		if off+n > len(want) {
			want = append(want, make([]byte, off+n-len(want))...)
		}
		copy(want[off:], p)
		if i%7 == 0 {
			if err := f.Fsync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		ro := r.IntN(len(want))
		rn := 1 + r.IntN(300_000)
		buf := make([]byte, rn)
		got, err := f.ReadAt(ctx, buf, int64(ro))
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		mustEqual(t, "read after write", buf[:got], want[ro:min(len(want), ro+rn)])
	}
	if err := f.Truncate(ctx, 1_000_000); err != nil {
		t.Fatal(err)
	}
	want = want[:1_000_000]
	if err := f.Truncate(ctx, 1_500_000); err != nil { // grow: a hole of zeros
		t.Fatal(err)
	}
	want = append(want, make([]byte, 500_000)...)
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := readFile(cl.Client(), "/f")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "after truncate", got, want)
	// Reads past the end give EOF, never bytes.
	f2, _ := c.Open(ctx, "/f")
	defer f2.Close(ctx)
	if n, err := f2.ReadAt(ctx, make([]byte, 10), int64(len(want))+5); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read past EOF: %d %v", n, err)
	}
}

// TestDegradedReads stops OSTs one by one: up to m down, reads are correct;
// more, they fail with ErrUnavailable and never return wrong bytes.
func TestDegradedReads(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	c := cl.Client()
	data := randBytes(3, 21<<20+77)
	writeFile(t, c, "/big", data)
	for i := 0; i < 2; i++ {
		cl.StopOST(i)
		got, err := readFile(cl.Client(), "/big")
		if err != nil {
			t.Fatalf("%d OSTs down: %v", i+1, err)
		}
		mustEqual(t, "degraded read", got, data)
	}
	cl.KillOST(2)
	got, err := readFile(cl.Client(), "/big")
	if err == nil {
		t.Fatalf("3 of 6 OSTs down: read returned %d bytes and no error", len(got))
	}
	if !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("3 OSTs down: %v, want ErrUnavailable", err)
	}
	for i := 0; i < 3; i++ {
		if err := cl.StartOST(i); err != nil {
			t.Fatal(err)
		}
	}
	got, err = readFile(cl.Client(), "/big")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "after restart of OSTs", got, data)
}

// TestCorruptChunkIsRebuilt flips a byte in a data chunk on disk: the OST
// detects it by checksum and the client rebuilds the bytes from parity.
func TestCorruptChunkIsRebuilt(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	c := cl.Client()
	data := randBytes(5, 6<<20)
	writeFile(t, c, "/c", data)
	flipped := flipDataChunks(t, cl, c, "/c")
	if flipped == 0 {
		t.Fatal("found no chunk file to corrupt")
	}
	got, err := readFile(cl.Client(), "/c")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read of corrupted chunk", got, data)
}

// flipDataChunks flips one byte in chunk 0 of every extent of path and
// returns how many chunks it changed.
func flipDataChunks(t *testing.T, cl *cluster.Cluster, c *client.Client, path string) int {
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
	n := 0
	for _, ref := range r.GetExtents() {
		ext := ref.GetExtent()
		ostID := ext.GetOsts()[0]
		for i := 0; i < 16; i++ {
			o := cl.OST(i % 6)
			if o.Server == nil || o.Server.ID() != ostID {
				continue
			}
			p := o.Server.ChunkPath(ext.GetId(), 0)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/3] ^= 0x40
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			n++
			break
		}
	}
	return n
}

// TestWriteAvoidsDeadOST kills an OST the MDS still believes is up: the
// client's write fails on it and retries on a placement without it.
func TestWriteAvoidsDeadOST(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{OSTs: 7})
	c := cl.Client()
	cl.KillOST(3)
	data := randBytes(9, 9<<20)
	writeFile(t, c, "/w", data)
	got, err := readFile(cl.Client(), "/w")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "write with a dead OST", got, data)
}

func TestClusterRestartKeepsData(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	data := randBytes(11, 5<<20+3)
	writeFile(t, cl.Client(), "/r", data)
	cl.Restart()
	got, err := readFile(cl.Client(), "/r")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "after restart", got, data)
}

// TestConcurrentWritersOneFile: several goroutines write disjoint ranges of
// one File at once, in small pieces, so that the upload pipeline fills and
// writers wait on it; every byte must land where it was written.
func TestConcurrentWritersOneFile(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{Client: client.Options{UploadsPerFile: 1, ExtentRows: 1}})
	c := cl.Client()
	ctx := context.Background()
	f, err := c.Create(ctx, "/cw", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	const writers, span = 4, 9 << 20
	want := randBytes(77, writers*span)
	errc := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			for off := w * span; off < (w+1)*span; off += 100_003 {
				end := min(off+100_003, (w+1)*span)
				if _, err := f.WriteAt(ctx, want[off:end], int64(off)); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := readFile(cl.Client(), "/cw")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "4 concurrent writers", got, want)
}
