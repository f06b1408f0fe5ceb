package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
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
