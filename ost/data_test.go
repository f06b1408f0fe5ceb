package ost

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// dataClient returns a data-path client for to, closed at the end of the
// test.
func dataClient(t *testing.T, to *testOST) (*datanet.Client, string) {
	t.Helper()
	addr := to.srv.DataAddr()
	if addr == "" {
		t.Fatal("the OST has no data path")
	}
	c := datanet.NewClient(datanet.ClientOptions{})
	t.Cleanup(func() { c.Close() })
	return c, addr
}

func TestDataPathRoundTrip(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock})
	dc, addr := dataClient(t, to)
	if got := to.info(t).GetDataAddr(); got != addr {
		t.Fatalf("Info reports data address %q, the server listens on %q", got, addr)
	}
	ctx := t.Context()
	var written, read uint64
	for i, size := range []int{1, testBlock, 3*testBlock + 17, 1 << 20, 4<<20 + 8192} {
		extent := uint64(2000 + i)
		data := randBytes(size, extent)
		// In pieces, as the client sends the cells of a data chunk.
		if err := dc.Write(ctx, addr, extent, 1, nil, [][]byte{data[:size/2], data[size/2:]}); err != nil {
			t.Fatalf("size %d: write: %v", size, err)
		}
		written += uint64(size)
		onDisk, err := os.ReadFile(to.srv.ChunkPath(extent, 1))
		if err != nil || !bytes.Equal(onDisk, data) {
			t.Fatalf("size %d: data file differs (%v)", size, err)
		}
		// The same chunk over gRPC and over the data path.
		if got, err := to.read(extent, 1, 0, uint64(size)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("size %d: gRPC read back: %v", size, err)
		}
		read += uint64(size)
		for _, r := range [][2]int{{0, size}, {0, 1}, {size - 1, 1}, {size / 3, size / 3}, {testBlock, testBlock}, {testBlock / 2, testBlock}} {
			off, n := r[0], r[1]
			if off+n > size {
				continue
			}
			got := make([]byte, n)
			if err := dc.Read(ctx, addr, extent, 1, nil, uint64(off), [][]byte{got}); err != nil {
				t.Fatalf("size %d: read [%d,+%d): %v", size, off, n, err)
			}
			if !bytes.Equal(got, data[off:off+n]) {
				t.Fatalf("size %d: read [%d,+%d): wrong bytes", size, off, n)
			}
			read += uint64(n)
		}
		// A rewrite with the same bytes is an idempotent success.
		if err := dc.Write(ctx, addr, extent, 1, nil, [][]byte{data}); err != nil {
			t.Fatalf("size %d: rewrite: %v", size, err)
		}
	}
	// The metrics count both transports, as the gRPC calls alone did.
	if got := metric(t, to.reg, "shoal_ost_write_bytes_total"); got != float64(written) {
		t.Errorf("write bytes metric %v, want %v", got, written)
	}
	if got := metric(t, to.reg, "shoal_ost_read_bytes_total"); got != float64(read) {
		t.Errorf("read bytes metric %v, want %v", got, read)
	}
}

func TestDataPathErrors(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock})
	dc, addr := dataClient(t, to)
	ctx := t.Context()
	data := randBytes(4*testBlock, 9)
	if err := dc.Write(ctx, addr, 7, 0, nil, [][]byte{data}); err != nil {
		t.Fatal(err)
	}
	buf := func(n int) [][]byte { return [][]byte{make([]byte, n)} }
	other := bytes.Clone(data)
	other[5] ^= 1
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"missing chunk", dc.Read(ctx, addr, 8, 0, nil, 0, buf(10)), errs.ErrNotFound},
		{"missing index", dc.Read(ctx, addr, 7, 1, nil, 0, buf(10)), errs.ErrNotFound},
		{"past the end", dc.Read(ctx, addr, 7, 0, nil, uint64(len(data)-5), buf(10)), errs.ErrInvalid},
		{"extent 0 read", dc.Read(ctx, addr, 0, 0, nil, 0, buf(10)), errs.ErrInvalid},
		{"extent 0 write", dc.Write(ctx, addr, 0, 0, nil, [][]byte{data}), errs.ErrInvalid},
		{"empty write", dc.Write(ctx, addr, 9, 0, nil, nil), errs.ErrInvalid},
		{"different bytes", dc.Write(ctx, addr, 7, 0, nil, [][]byte{other}), errs.ErrExists},
	}
	for _, tc := range tests {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	flipByte(t, to.srv.ChunkPath(7, 0), 2*testBlock+1)
	if err := dc.Read(ctx, addr, 7, 0, nil, 0, buf(len(data))); !errors.Is(err, errs.ErrCorrupt) {
		t.Errorf("read over a flipped byte: %v, want ErrCorrupt", err)
	}
	if got := metric(t, to.reg, "shoal_ost_corrupt_blocks_total"); got != 1 {
		t.Errorf("corrupt blocks metric %v, want 1", got)
	}
	// Blocks away from it still read.
	got := make([]byte, testBlock)
	if err := dc.Read(ctx, addr, 7, 0, nil, 0, [][]byte{got}); err != nil || !bytes.Equal(got, data[:testBlock]) {
		t.Errorf("read away from the flipped byte: %v", err)
	}
}

func TestDataPathOff(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{DataListen: DataListenOff})
	if a := to.srv.DataAddr(); a != "" {
		t.Errorf("DataAddr %q with the data path off", a)
	}
	if a := to.info(t).GetDataAddr(); a != "" {
		t.Errorf("Info reports data address %q with the data path off", a)
	}
	to.write(t, 1, 0, randBytes(5000, 1)) // gRPC still serves chunk I/O
}

func TestDataPathListenAddress(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{DataListen: "0.0.0.0:0", AdvertiseAddr: "127.0.0.2:7000"})
	a := to.srv.DataAddr()
	if !strings.HasPrefix(a, "127.0.0.2:") || strings.HasSuffix(a, ":0") {
		t.Errorf("data path on every interface advertises %q, want the advertised host with the bound port", a)
	}
	if _, err := Open(t.Context(), Options{Dir: t.TempDir(), DataListen: "127.0.0.1:bad"}); err == nil {
		t.Error("Open with a bad DataListen succeeded")
	}
}

// residentPages reports how many pages of the file at path are in the
// page cache.
func residentPages(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// onTmpfs reports whether dir is on tmpfs.
func onTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}

func TestDirectIO(t *testing.T) {
	dir := t.TempDir()
	if onTmpfs(dir) {
		t.Skip("the test directory is on tmpfs, which refuses O_DIRECT")
	}
	for _, mode := range []DirectIO{DirectOff, DirectWrites, DirectAll, DirectDefault} {
		t.Run(map[DirectIO]string{DirectOff: "off", DirectWrites: "writes", DirectAll: "all", DirectDefault: "default"}[mode], func(t *testing.T) {
			to := startOST(t, t.TempDir(), Options{DirectIO: mode})
			st := to.srv.st
			wantW, wantR := mode != DirectOff, mode == DirectAll || (mode == DirectDefault && directReadsByDefault)
			if st.directWrites.Load() != wantW || st.directReads.Load() != wantR {
				t.Fatalf("direct writes %v reads %v, want %v %v", st.directWrites.Load(), st.directReads.Load(), wantW, wantR)
			}
			dc, addr := dataClient(t, to)
			ctx := t.Context()
			// An aligned chunk: O_DIRECT when asked, so none of it is left
			// in the page cache.
			data := randBytes(1<<20, 5)
			if err := dc.Write(ctx, addr, 1, 0, nil, [][]byte{data}); err != nil {
				t.Fatal(err)
			}
			path := to.srv.ChunkPath(1, 0)
			switch n := residentPages(t, path); {
			case wantW && n != 0:
				t.Errorf("%d pages of an O_DIRECT-written chunk in the page cache", n)
			case !wantW && n == 0:
				t.Errorf("no page of a chunk written through the page cache is in it")
			}
			// An unaligned chunk is written through the page cache.
			odd := randBytes(5000, 6)
			if err := dc.Write(ctx, addr, 2, 0, nil, [][]byte{odd}); err != nil {
				t.Fatal(err)
			}
			// gRPC requests carry unaligned buffers.
			to.write(t, 3, 0, data)
			for _, c := range []struct {
				extent uint64
				data   []byte
			}{{1, data}, {2, odd}, {3, data}} {
				n := len(c.data)
				for _, r := range [][2]int{{0, n}, {4096, 8192}, {4096, 64 << 10}, {100, 5000}, {n - 4096, 4096}, {n - 1, 1}} {
					off, l := r[0], r[1]
					if off < 0 || off+l > n {
						continue
					}
					got := make([]byte, l)
					if err := dc.Read(ctx, addr, c.extent, 0, nil, uint64(off), [][]byte{got}); err != nil || !bytes.Equal(got, c.data[off:off+l]) {
						t.Fatalf("chunk %d: read [%d,+%d): %v", c.extent, off, l, err)
					}
				}
			}
			// Checksums are verified on the direct path as on the other.
			flipByte(t, path, 70000)
			if err := dc.Read(ctx, addr, 1, 0, nil, 64<<10, [][]byte{make([]byte, 64<<10)}); !errors.Is(err, errs.ErrCorrupt) {
				t.Errorf("read over a flipped byte: %v, want ErrCorrupt", err)
			}
		})
	}
	// A block size off the 4 KiB alignment: reads fall back to the page
	// cache, and stay correct.
	to := startOST(t, t.TempDir(), Options{DirectIO: DirectAll, BlockSize: 1536})
	data := randBytes(64<<10, 8)
	to.write(t, 1, 0, data)
	got := make([]byte, 8192)
	if err := to.srv.st.readInto(chunkID{1, 0}, 4096, got); err != nil || !bytes.Equal(got, data[4096:4096+8192]) {
		t.Errorf("read with 1536-byte blocks: %v", err)
	}
	if !to.srv.st.directReads.Load() {
		t.Error("an unaligned block size turned direct reads off for good")
	}
}

// countingHandler counts log records whose message contains a string.
type countingHandler struct {
	mu   sync.Mutex
	sub  string
	hits int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if strings.Contains(r.Message, h.sub) {
		h.hits++
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// injectNoDirect makes st's opens fail with EINVAL when they ask for
// O_DIRECT, as a file system without it does.
func injectNoDirect(st *store) {
	st.openFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		if flag&unix.O_DIRECT != 0 {
			return nil, &os.PathError{Op: "open", Path: name, Err: unix.EINVAL}
		}
		return os.OpenFile(name, flag, perm)
	}
}

func TestDirectIORefused(t *testing.T) {
	h := &countingHandler{sub: "O_DIRECT"}
	to := startOST(t, t.TempDir(), Options{DirectIO: DirectAll, Logger: slog.New(h)})
	st := to.srv.st
	if onTmpfs(st.dir) {
		t.Skip("the test directory is on tmpfs")
	}
	if !st.directWrites.Load() || !st.directReads.Load() {
		t.Fatal("O_DIRECT off on a disk")
	}
	// The file system starts refusing O_DIRECT (as if the probe had been
	// wrong): the first write finds out, falls back, and says so once.
	injectNoDirect(st)
	dc, addr := dataClient(t, to)
	data := randBytes(1<<20, 3)
	for e := uint64(1); e <= 3; e++ {
		if err := dc.Write(t.Context(), addr, e, 0, nil, [][]byte{data}); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if err := dc.Read(t.Context(), addr, e, 0, nil, 0, [][]byte{got}); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back: %v", err)
		}
	}
	if st.directWrites.Load() || st.directReads.Load() {
		t.Error("O_DIRECT still on after the file system refused it")
	}
	// A store opened on such a file system finds out at its probe.
	st.directWrites.Store(true)
	st.directReads.Store(true)
	if err := st.probeDirect(); err != nil {
		t.Fatal(err)
	}
	if st.directWrites.Load() || st.directReads.Load() {
		t.Error("O_DIRECT still on after a refused probe")
	}
	// Reads that want O_DIRECT and meet a refusal fall back too.
	st.directReads.Store(true)
	got := make([]byte, 8192)
	if err := st.readInto(chunkID{1, 0}, 4096, got); err != nil || !bytes.Equal(got, data[4096:4096+8192]) {
		t.Fatalf("read: %v", err)
	}
	if st.directReads.Load() {
		t.Error("direct reads still on after a refused open")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hits != 1 {
		t.Errorf("the O_DIRECT fallback was logged %d times, want once", h.hits)
	}
}

func TestDirectIOOnTmpfs(t *testing.T) {
	// tmpfs refuses O_DIRECT before Linux 6.6 and takes it since: either
	// way chunks are written and read back.
	if !onTmpfs("/dev/shm") {
		t.Skip("no tmpfs at /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "shoal-ost-test-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	to := startOST(t, dir, Options{DirectIO: DirectAll})
	t.Logf("tmpfs: direct writes %v, reads %v", to.srv.st.directWrites.Load(), to.srv.st.directReads.Load())
	dc, addr := dataClient(t, to)
	data := randBytes(1<<20+4096, 4)
	if err := dc.Write(t.Context(), addr, 1, 0, nil, [][]byte{data}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := dc.Read(t.Context(), addr, 1, 0, nil, 0, [][]byte{got}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
}

func TestInfoOverGRPCHasDataAddr(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{})
	r, err := to.cli.Info(t.Context(), &ostpb.InfoRequest{})
	if err != nil || r.GetDataAddr() == "" || r.GetDataAddr() != to.srv.DataAddr() {
		t.Fatalf("Info: %v, %v", r, err)
	}
}

func TestMaxChunkSizeIsDataPathLimit(t *testing.T) {
	if MaxChunkSize != datanet.MaxLength {
		t.Fatalf("MaxChunkSize %d, data path carries %d", MaxChunkSize, datanet.MaxLength)
	}
}
