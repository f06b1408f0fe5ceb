package test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestOpenAhead: a sequential reader on the OSTs' host has the chunk files
// of the two read-ahead windows past its own opened before its rows get
// there (client/openahead.go), and no further: after a first read of a
// file of five extents with a read-ahead of one extent, the data chunks of
// extents 0-3 are open and extent 4's are not. The file then reads back
// whole and right.
func TestOpenAhead(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl := cluster.Start(t, cluster.Options{Registry: reg})
	ctx := context.Background()
	w := cl.Client()
	root, err := w.GetAttr(ctx, client.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	lo := root.Layout
	const extentRows = 4
	extent := extentRows * int64(lo.K) * int64(lo.Unit)
	data := randBytes(41, int(5*extent))
	writeFile(t, cl.ClientWith(client.Options{ExtentRows: extentRows}), "/ahead", data)

	opens := func() float64 { return counterValue(t, reg, "shoal_ost_local_opens_total") }
	before := opens()
	r := cl.ClientWith(client.Options{ReadAheadRows: extentRows})
	f, err := r.Open(ctx, "/ahead")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	buf := make([]byte, 1<<20)
	if _, err := f.ReadAt(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	want := float64(4 * lo.K) // extents 0-3, data chunks only
	deadline := time.Now().Add(10 * time.Second)
	for opens()-before < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // nothing more may come
	if got := opens() - before; got != want {
		t.Fatalf("after one read: %v chunk files opened, want %v (the data chunks of extents 0-3)", got, want)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "/ahead", got, data)
}
