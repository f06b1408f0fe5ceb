package test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/test/cluster"
)

// uncachedRange is a read of n bytes at off for TestReadAtUncached.
type uncachedRange struct{ off, n int64 }

// TestReadAtUncached reads a file with holes through File.ReadAtUncached,
// the checkpoint restore's read (no row cache, straight into the
// caller's buffer), at aligned and unaligned offsets into buffers
// congruent to their offsets (datanet.AlignedAt: O_DIRECT runs) and into
// plain ones; then with a corrupted chunk and with an OST down, where the
// bytes come from parity; and over a write not yet flushed, which the
// read must see.
func TestReadAtUncached(t *testing.T) {
	ctx := context.Background()
	cl := cluster.Start(t, cluster.Options{})
	c := cl.Client()
	const size = 21<<20 + 77
	want := randBytes(21, size)
	clear(want[5<<20 : 9<<20]) // a hole
	f, err := c.Create(ctx, "/u", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []uncachedRange{{0, 5 << 20}, {9 << 20, size - 9<<20}} {
		if _, err := f.WriteAt(ctx, want[r.off:r.off+r.n], r.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ranges := []uncachedRange{
		{0, size},                  // the whole file
		{4097, 3<<20 + 5},          // unaligned both ends
		{5<<20 - 100, 4<<20 + 200}, // across the hole
		{1 << 20, 16 << 20},        // aligned, a row and more
		{size - 1000, 5000},        // past the end: short, io.EOF
	}
	check := func(what string, c *client.Client) {
		t.Helper()
		f, err := c.Open(ctx, "/u")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(ctx)
		for _, r := range ranges {
			for _, aligned := range []bool{true, false} {
				buf := make([]byte, r.n)
				if aligned {
					buf = datanet.AlignedAt(int(r.n), r.off)
				}
				n, err := f.ReadAtUncached(ctx, buf, r.off)
				wantN := min(r.n, size-r.off)
				if n != int(wantN) || (err != nil && !(errors.Is(err, io.EOF) && wantN < r.n)) {
					t.Fatalf("%s: ReadAtUncached %d+%d (aligned %v): %d bytes, %v; want %d", what, r.off, r.n, aligned, n, err, wantN)
				}
				if wantN < r.n && !errors.Is(err, io.EOF) {
					t.Fatalf("%s: short read %d+%d: %v, want io.EOF", what, r.off, r.n, err)
				}
				mustEqual(t, what, buf[:n], want[r.off:r.off+wantN])
			}
		}
	}
	check("clean", cl.Client())
	if flipDataChunks(t, cl, c, "/u") == 0 {
		t.Fatal("found no chunk file to corrupt")
	}
	check("corrupted chunk", cl.Client())
	cl.StopOST(1)
	check("one OST down", cl.Client())

	// A write not yet flushed is read back from the File's own buffer.
	w, err := c.Open(ctx, "/u")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	patch := randBytes(22, 300_000)
	if _, err := w.WriteAt(ctx, patch, 2<<20+11); err != nil {
		t.Fatal(err)
	}
	copy(want[2<<20+11:], patch)
	buf := datanet.AlignedAt(8<<20, 0)
	if _, err := w.ReadAtUncached(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "unflushed write", buf, want[:8<<20])
}
