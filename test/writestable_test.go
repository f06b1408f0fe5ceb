package test

import (
	"context"
	"testing"

	"github.com/shoalfs/shoal/test/cluster"
)

// TestWriteAtStable writes through File.WriteAtStable after a buffered
// header, and checks the bytes three ways: read back before any flush
// (the uploads in flight and the buffered tail overlay the map), after
// Fsync, and from a new client after Close. The write is 2.5 extents
// long, so it has whole extents sent from the caller's bytes and a
// buffered tail; a second stable write continues it, and a plain write
// overwrites a range inside the first one.
func TestWriteAtStable(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	c := cl.Client()
	f, err := c.Create(ctx, "/stable", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ext := int(16 << 20) // the default layout's extent: 4 rows of RS 4+2 with 1 MiB cells
	header := randBytes(1, 4321)
	body := randBytes(2, 2*ext+ext/2)
	more := randBytes(3, ext+12345)
	patch := randBytes(4, 100_000)
	want := append(append(append([]byte(nil), header...), body...), more...)
	if _, err := f.WriteAt(ctx, header, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAtStable(ctx, body, int64(len(header))); err != nil || n != len(body) {
		t.Fatalf("stable write: %d, %v", n, err)
	}
	if n, err := f.WriteAtStable(ctx, more, int64(len(header)+len(body))); err != nil || n != len(more) {
		t.Fatalf("second stable write: %d, %v", n, err)
	}
	at := len(header) + ext - 50_000 // across the first stable extent's end
	if _, err := f.WriteAt(ctx, patch, int64(at)); err != nil {
		t.Fatal(err)
	}
	copy(want[at:], patch)
	got := make([]byte, len(want))
	if n, err := f.ReadAt(ctx, got, 0); n != len(want) {
		t.Fatalf("read before flush: %d, %v", n, err)
	}
	mustEqual(t, "read before flush", got, want)
	if err := f.Fsync(ctx); err != nil {
		t.Fatal(err)
	}
	clear(got)
	if n, err := f.ReadAt(ctx, got, 0); n != len(want) {
		t.Fatalf("read after fsync: %d, %v", n, err)
	}
	mustEqual(t, "read after fsync", got, want)
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	back, err := readFile(cl.Client(), "/stable")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read by a new client", back, want)
}
