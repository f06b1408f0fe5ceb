package test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestSyncNamespaceSkips: a namespace sync (fsync's barrier) calls the
// MDS only when this client has been answered early since the last one:
// after a change, once; with nothing new, not at all.
func TestSyncNamespaceSkips(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	a := cl.ClientWith(client.Options{Registry: reg, EarlyNamespaceReplies: true})
	skipped := func() float64 { return counterValue(t, reg, "shoal_client_namespace_syncs_skipped_total") }
	sync := func(wantSkip bool) {
		t.Helper()
		before := skipped()
		if err := a.SyncNamespace(ctx); err != nil {
			t.Fatal(err)
		}
		if got := skipped() - before; got != map[bool]float64{true: 1, false: 0}[wantSkip] {
			t.Fatalf("sync skipped %v times, want skip %v", got, wantSkip)
		}
	}
	sync(true) // nothing answered early yet
	if err := a.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	sync(false)
	sync(true)
	f, err := a.Create(ctx, "/d/f", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sync(false) // the create was answered early
	sync(true)
	if err := a.Remove(ctx, "/d/f"); err != nil {
		t.Fatal(err)
	}
	sync(false)
}

// TestSpareAllocations: a file written and fsynced in small pieces takes
// each upload's extent from the allocations earlier fsyncs asked for
// (client/spare.go); the bytes read back, here and from another client,
// and the spares left at close are counted unused.
func TestSpareAllocations(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	a := cl.ClientWith(client.Options{Registry: reg})
	spares := func(outcome string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "shoal_client_spare_allocs_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	f, err := a.Create(ctx, "/log", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	const size, rounds = 1 << 20, 30
	want := make([]byte, size)
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range rounds {
		p := make([]byte, 4096)
		for j := range p {
			p[j] = byte(rng.IntN(256))
		}
		off := rng.Int64N(size - 4096)
		copy(want[off:], p)
		if _, err := f.WriteAt(ctx, p, off); err != nil {
			t.Fatal(err)
		}
		if err := f.Fsync(ctx); err != nil {
			t.Fatalf("fsync %d: %v", i, err)
		}
	}
	if used := spares("used"); used < rounds-spareWarmup {
		t.Fatalf("%v of %d uploads took a spare allocation, want at least %d", used, rounds, rounds-spareWarmup)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Spares come in batches of 8 (client/spare.go, spareBatch): every
	// extent of every batch is counted once, used or, left at close,
	// unused.
	used, unused := spares("used"), spares("unused")
	if unused < 1 || unused > 2*8 || int(used+unused)%8 != 0 {
		t.Fatalf("%v spares used and %v unused, want the unused ones left at close (1 to 16) and whole batches of 8 in all", used, unused)
	}
	for _, c := range []*client.Client{a, cl.Client()} {
		g, err := c.Open(ctx, "/log")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if _, err := g.ReadAt(ctx, got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatal("the file reads back different bytes")
		}
		g.Close(ctx)
	}
}

// spareWarmup is how many of TestSpareAllocations's fsyncs go without a
// spare: the first write and fsync, and the one that asks for the first.
const spareWarmup = 3
