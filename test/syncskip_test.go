package test

import (
	"context"
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
