package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestConcurrentWritesAndFsyncs shares one client.File between writers
// that each fill their own region (in pieces, streaming and jumping) and
// call Fsync now and then, with one upload in flight at a time, so that
// writes and flushes keep waiting for room while others change the write
// buffer. Every byte must land where it was written, and every Fsync and
// the Close must succeed. (A cut that used a buffer length taken before
// its wait panicked on a buffer emptied meanwhile: EIO at close through
// FUSE, as TestPosix/OAppendAtomic showed.)
func TestConcurrentWritesAndFsyncs(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{
		Layout: layout.Layout{K: 4, M: 2, Unit: 4096},
		Client: client.Options{UploadsPerFile: 1, ExtentRows: 1},
		Dir:    cluster.TmpfsDir(t),
	})
	c := cl.Client()
	ctx := context.Background()
	const writers, region = 6, 256 << 10
	for round := 0; round < 5; round++ {
		path := fmt.Sprintf("/race-%d", round)
		f, err := c.Create(ctx, path, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, writers*region)
		var wg sync.WaitGroup
		errc := make(chan error, writers)
		for w := 0; w < writers; w++ {
			base := w * region
			data := randBytes(uint64(round*100+w), region)
			copy(want[base:], data)
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				// Pieces in an order that mostly streams and sometimes
				// jumps back, so that buffers are cut at random.
				type piece struct{ off, n int }
				var pieces []piece
				for off := 0; off < region; {
					n := min(region-off, 1+rng.IntN(20_000))
					pieces = append(pieces, piece{off, n})
					off += n
				}
				for i := range pieces {
					if j := i + rng.IntN(3); j < len(pieces) && rng.IntN(4) == 0 {
						pieces[i], pieces[j] = pieces[j], pieces[i]
					}
				}
				for i, p := range pieces {
					if _, err := f.WriteAt(ctx, data[p.off:p.off+p.n], int64(base+p.off)); err != nil {
						errc <- fmt.Errorf("writer %d: write at %d: %w", w, base+p.off, err)
						return
					}
					if i%7 == 3 {
						if err := f.Fsync(ctx); err != nil {
							errc <- fmt.Errorf("writer %d: fsync: %w", w, err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		got, err := readFile(c, path)
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, fmt.Sprintf("round %d", round), got, want)
	}
}
