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
