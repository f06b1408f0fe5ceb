package test

import (
	"context"
	"sync"
	"testing"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestMkdirAllRace: clients that make the same path at the same time all
// succeed, each finding what the others made (a directory made between
// one's lookup and its mkdir is taken as made, not an error).
func TestMkdirAllRace(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	const n = 6
	cs := make([]*client.Client, n)
	for i := range cs {
		cs[i] = cl.Client()
	}
	for round := range 5 {
		p := "/r" + string(rune('a'+round)) + "/b/c/d"
		var wg sync.WaitGroup
		errc := make(chan error, n)
		for _, c := range cs {
			wg.Go(func() {
				if err := c.MkdirAll(ctx, p, 0o755); err != nil {
					errc <- err
					return
				}
				if a, err := c.Stat(ctx, p); err != nil || !client.IsDir(a) {
					errc <- err
				}
			})
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}
