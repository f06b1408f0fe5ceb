package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/datanet"
)

// TestCkptReadDirMaps: save's files come mapped (large) or read (small),
// with the same bytes, and a file written to after it took them is
// reported as changed.
func TestCkptReadDirMaps(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), mapMin/16+1000)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "small.bin"), []byte("rng"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := ckptReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if len(d.shards) != 2 || !bytes.Equal(d.shards[0].Blob, big) || string(d.shards[1].Blob) != "rng" {
		t.Fatalf("shards %d", len(d.shards))
	}
	if d.files[0].data == nil || d.files[1].data != nil {
		t.Errorf("big mapped %v, small mapped %v", d.files[0].data != nil, d.files[1].data != nil)
	}
	if err := d.Changed(); err != nil {
		t.Fatalf("nothing changed: %v", err)
	}
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "small.bin"), []byte("RNG"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Changed(); err == nil {
		t.Error("a rewritten file: no change reported")
	}
}

// TestOutFile: restore's output file takes aligned pieces (with O_DIRECT
// where the file system has it), an unaligned tail, and unaligned writes,
// from several goroutines at once, and reads back the bytes written.
func TestOutFile(t *testing.T) {
	const piece = 1 << 20
	name := filepath.Join(t.TempDir(), "out")
	o, err := createOut(name)
	if err != nil {
		t.Fatal(err)
	}
	if o.twin == nil {
		t.Log("this file system refuses O_DIRECT: every write goes through the page cache")
	}
	size := 5*piece + 1234
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 6)
	for off := 0; off < size; off += piece {
		n := min(piece, size-off)
		buf := datanet.AlignedBuf(piece)[:n]
		copy(buf, want[off:off+n])
		wg.Go(func() {
			_, err := o.WriteAt(buf, int64(off))
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	// An unaligned rewrite of bytes already there (the page cache).
	if _, err := o.WriteAt(want[100:5000], 100); err != nil {
		t.Fatal(err)
	}
	if err := o.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, want %d, equal %v", len(got), len(want), bytes.Equal(got, want))
	}
}
