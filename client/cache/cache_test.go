package cache

import (
	"bytes"
	"context"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func openT(t *testing.T, dir string) *Cache {
	t.Helper()
	c, err := Open(context.Background(), Options{Dir: dir, Size: 64 << 20, BlockSize: 64 << 10, Cluster: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// source is a file of the cluster: ReadAt counts its calls.
type source struct {
	data  []byte
	mu    sync.Mutex
	reads int
}

func (s *source) read(_ context.Context, p []byte, off int64) (int, error) {
	s.mu.Lock()
	s.reads++
	s.mu.Unlock()
	if off >= int64(len(s.data)) {
		return 0, io.EOF
	}
	n := copy(p, s.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func readAll(t *testing.T, h *Handle, src *source, chunk int) []byte {
	t.Helper()
	out := make([]byte, len(src.data))
	for off := 0; off < len(out); off += chunk {
		end := min(off+chunk, len(out))
		if _, err := h.ReadAt(context.Background(), out[off:end], int64(off), src.read); err != nil && err != io.EOF {
			t.Fatal(err)
		}
	}
	return out
}

// TestFillConcurrentAndCheckedOnce: concurrent readers fill a file (the
// writes are asynchronous) and read the right bytes; a later open finds
// it complete, checked once, and a data file changed on disk since is
// checked again and dropped, never served.
func TestFillConcurrentAndCheckedOnce(t *testing.T) {
	dir := t.TempDir()
	c := openT(t, dir)
	defer c.Close()
	src := &source{data: make([]byte, 1<<20+12345)}
	rand.New(rand.NewSource(1)).Read(src.data)
	var v Version
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := c.Open(1, v, int64(len(src.data)))
			defer h.Release()
			if got := readAll(t, h, src, 4096*(i+1)); !bytes.Equal(got, src.data) {
				t.Errorf("reader %d: wrong bytes", i)
			}
		}()
	}
	wg.Wait()

	h := c.Open(1, v, int64(len(src.data)))
	if !h.Complete(context.Background()) {
		t.Fatal("not complete after the fills")
	}
	h.Release()
	reads := src.reads
	h = c.Open(1, v, int64(len(src.data)))
	if !h.Complete(context.Background()) {
		t.Fatal("not complete on a second open")
	}
	if got := readAll(t, h, src, 1<<20); !bytes.Equal(got, src.data) || src.reads != reads {
		t.Fatalf("second open: right bytes %v, cluster reads %d (want none)", bytes.Equal(got, src.data), src.reads-reads)
	}
	h.Release()

	// Corrupt the data file behind the cache's back: its stamp changes,
	// so the next open checks the blocks again.
	datas, _ := filepath.Glob(filepath.Join(dir, "*.data"))
	if len(datas) != 1 {
		t.Fatalf("data files: %v", datas)
	}
	f, err := os.OpenFile(datas[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{src.data[700000] ^ 1}, 700000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	h = c.Open(1, v, int64(len(src.data)))
	if h.Complete(context.Background()) {
		t.Fatal("a corrupted data file was reported complete")
	}
	if got := readAll(t, h, src, 1<<20); !bytes.Equal(got, src.data) {
		t.Fatal("wrong bytes after the corruption")
	}
	h.Release()
}

// TestFillWholeBlocks: Fill answers whole missing blocks (and the file's
// short last block) from their own buffers with the right bytes, declines
// reads that are not one missing block, and the blocks it filled are in
// the data file (written with O_DIRECT where the file system takes it):
// a second open is complete and reads nothing from the cluster.
func TestFillWholeBlocks(t *testing.T) {
	c := openT(t, t.TempDir())
	defer c.Close()
	const bs = 64 << 10
	src := &source{data: make([]byte, 5*bs+777)}
	rand.New(rand.NewSource(2)).Read(src.data)
	var v Version
	ctx := context.Background()
	h := c.Open(7, v, int64(len(src.data)))
	if _, ok, _ := h.Fill(ctx, bs, 100, src.read); ok {
		t.Fatal("Fill took an unaligned read")
	}
	if _, ok, _ := h.Fill(ctx, 2*bs, 0, src.read); ok {
		t.Fatal("Fill took a read of two blocks")
	}
	var blocks []*Block
	for b := range 6 {
		off := int64(b) * bs
		blk, ok, err := h.Fill(ctx, bs, off, src.read)
		if err != nil || !ok {
			t.Fatalf("block %d: ok %v err %v", b, ok, err)
		}
		want := src.data[off:min(off+bs, int64(len(src.data)))]
		if !bytes.Equal(blk.Data, want) {
			t.Fatalf("block %d: wrong bytes", b)
		}
		blocks = append(blocks, blk)
	}
	if _, ok, _ := h.Fill(ctx, bs, 0, src.read); ok {
		t.Fatal("Fill took a block already filled or being filled")
	}
	for _, blk := range blocks {
		blk.Done()
	}
	// A read waits for the blocks' writes and is served from the cache.
	reads := src.reads
	if got := readAll(t, h, src, bs); !bytes.Equal(got, src.data) || src.reads != reads {
		t.Fatalf("after the fills: right bytes %v, cluster reads %d (want none)", bytes.Equal(got, src.data), src.reads-reads)
	}
	if !h.Complete(ctx) {
		t.Fatal("not complete after the fills")
	}
	if h.e.df == nil && !h.e.noDirect {
		t.Fatal("whole blocks were not written through the O_DIRECT file")
	}
	h.Release()
	h = c.Open(7, v, int64(len(src.data)))
	defer h.Release()
	if !h.Complete(ctx) {
		t.Fatal("not complete on a second open")
	}
	if got := readAll(t, h, src, bs); !bytes.Equal(got, src.data) || src.reads != reads {
		t.Fatalf("second open: right bytes %v, cluster reads %d (want none)", bytes.Equal(got, src.data), src.reads-reads)
	}
}

// TestFillMemoryBound: while the disk has not written the fills (the
// writers held), readers of those blocks copy from the fills' buffers
// without reading the cluster again, and a read that finds the fills'
// memory taken is served from the cluster without filling and counted;
// it is filled by a read once the memory is free.
func TestFillMemoryBound(t *testing.T) {
	const bs = 64 << 10
	gate := make(chan struct{})
	c, err := Open(context.Background(), Options{Dir: t.TempDir(), Size: 64 << 20, BlockSize: bs, Cluster: "test",
		FillMemory: 2 * bs, beforeWrite: func(int64) { <-gate }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src := &source{data: make([]byte, 3*bs)}
	rand.New(rand.NewSource(3)).Read(src.data)
	h := c.Open(1, Version{}, int64(len(src.data)))
	defer h.Release()
	ctx := context.Background()
	read := func(off, n int) {
		t.Helper()
		p := make([]byte, n)
		if _, err := h.ReadAt(ctx, p, int64(off), src.read); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if !bytes.Equal(p, src.data[off:off+n]) {
			t.Fatalf("read %d at %d: wrong bytes", n, off)
		}
	}
	read(0, 2*bs) // fills blocks 0 and 1: the fill memory is taken
	if got := src.reads; got != 2 {
		t.Fatalf("cluster reads after filling 2 blocks: %d", got)
	}
	read(4096, bs) // the rest of block 0 and the head of block 1, from the fills in flight
	if got := src.reads; got != 2 {
		t.Fatalf("a read of blocks in flight read the cluster: %d reads", got)
	}
	read(2*bs, bs) // block 2: no memory for its fill
	if got, want := testutil.ToFloat64(c.met.skipped), 1.0; got != want {
		t.Fatalf("fills skipped %v, want %v", got, want)
	}
	if h.Complete(ctx) {
		t.Fatal("complete with block 2 never filled")
	}
	close(gate)
	for deadline := time.Now().Add(10 * time.Second); c.pending.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fills of blocks 0 and 1 were not written")
		}
	}
	read(2*bs, bs) // fills it now that blocks 0 and 1 were written
	if !h.Complete(ctx) {
		t.Fatal("not complete after every block was filled")
	}
	if got := testutil.ToFloat64(c.met.pending); got != 0 {
		t.Fatalf("pending fill bytes %v after the writes", got)
	}
	if got := c.pendingN.Load(); got != 0 {
		t.Fatalf("%d fills counted in flight after the writes", got)
	}
}
