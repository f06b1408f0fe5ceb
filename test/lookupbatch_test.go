package test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestLookupBatches: lookups made at the same time by many goroutines go
// to the MDS together (client/lookupbatch.go) and each gets its own
// answer: the attributes of its name, ENOENT for an absent one, and
// EACCES for a caller who may not search the directory, while root's
// lookups of the same names at the same time succeed (batches never mix
// callers).
func TestLookupBatches(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	a := cl.ClientWith(client.Options{Registry: reg, NoDirLeases: true})
	if err := a.Mkdir(ctx, "/d", 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := a.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	const files = 200
	inos := map[string]uint64{}
	for i := range files {
		name := fmt.Sprintf("f%03d", i)
		at, err := a.CreateIn(ctx, d.Ino, name, client.CreateOptions{Mode: 0o644})
		if err != nil {
			t.Fatal(err)
		}
		inos[name] = at.Ino
	}
	user := wire.WithUser(ctx, wire.User{UID: 1000, GID: 1000})
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for w := range 32 {
		wg.Go(func() {
			for i := w; i < 3*files; i += 32 {
				name := fmt.Sprintf("f%03d", i%files)
				switch {
				case w%4 == 3: // another caller, without search permission
					if _, err := a.Lookup(user, d.Ino, name); !errors.Is(err, errs.ErrPermission) {
						errc <- fmt.Errorf("uid 1000 lookup of %s in a 0700 directory: %v, want EACCES", name, err)
						return
					}
				case i >= 2*files: // absent names
					if _, err := a.Lookup(ctx, d.Ino, "absent-"+name); !errors.Is(err, errs.ErrNotFound) {
						errc <- fmt.Errorf("lookup of an absent name: %v, want ENOENT", err)
						return
					}
				default:
					at, err := a.Lookup(ctx, d.Ino, name)
					if err != nil || at.Ino != inos[name] {
						errc <- fmt.Errorf("lookup of %s: %v, %+v, want inode %d", name, err, at, inos[name])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if n := counterValue(t, reg, "shoal_client_lookups_batched_total"); n == 0 {
		t.Fatal("32 goroutines' lookups never went in a batch")
	} else {
		t.Logf("%v of %d lookups went in batches", n, 3*files)
	}
}
