package ckpt_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/shoalfs/shoal/internal/compress"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestCompressedConcurrentReads: a file of BF16 weights stored as byte
// planes (three extents and a part) read back the way a restore reads it
// and some other ways, concurrently, through one File and fresh ones:
// a small read at 0 (the header: it starts read-ahead), then 4 MiB
// reads at 4 KiB past each 4 MiB, 4 at a time (the blocks they share are
// decoded once, by one of them, and the read-ahead blocks are taken from
// the cache); reads across extent boundaries; random ranges from 8
// goroutines. Every byte must match.
func TestCompressedConcurrentReads(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	c := cl.Client()
	ctx := context.Background()
	const size = 56<<20 + 12345
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+2 <= size; i += 2 {
		binary.LittleEndian.PutUint16(data[i:], uint16(math.Float32bits(float32(r.NormFloat64()*0.02))>>16))
	}
	f, err := c.Create(ctx, "/w.bin", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetCompression(&compress.Options{Codec: compress.Zstd, ElemSize: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f, err = c.Open(ctx, "/w.bin")
	if err != nil {
		t.Fatal(err)
	}
	if l, s := f.StoredBytes(0, size); s > 0.75*float64(l) {
		t.Fatalf("stored %.0f of %d bytes: not compressed", s, l)
	}
	f.Close(ctx)
	check := func(f interface {
		ReadAt(context.Context, []byte, int64) (int, error)
	}, off, n int64) {
		t.Helper()
		buf := make([]byte, n)
		if _, err := f.ReadAt(ctx, buf, off); err != nil {
			t.Errorf("read %d+%d: %v", off, n, err)
			return
		}
		if !bytes.Equal(buf, data[off:off+n]) {
			t.Errorf("read %d+%d: bytes differ", off, n)
		}
	}
	for round := range 2 {
		f, err := c.Open(ctx, "/w.bin")
		if err != nil {
			t.Fatal(err)
		}
		check(f, 0, 4096)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for off := int64(4096); off < size; off += 4 << 20 {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				check(f, off, min(4<<20, size-off))
			})
		}
		wg.Wait()
		// Across the extent boundaries (16 MiB of file data each), large
		// and small.
		for _, b := range []int64{16 << 20, 32 << 20, 48 << 20} {
			check(f, b-3<<20-100, 6<<20)
			check(f, b-5000, 10000)
		}
		for g := range 8 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				for range 20 {
					n := int64(1 + r.IntN([]int{4096, 1 << 20, 9 << 20}[r.IntN(3)]))
					off := r.Int64N(size - n)
					check(f, off, n)
				}
			})
		}
		wg.Wait()
		f.Close(ctx)
	}
}
