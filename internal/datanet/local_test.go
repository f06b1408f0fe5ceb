package datanet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/errs"
)

// fileHandler keeps chunks as files with their checksum tables, as an OST
// does, and serves OpOpen (Opener). Chunks whose extent is in logged are
// "in a log": OpOpen refuses them with ErrNotSupported.
type fileHandler struct {
	*memHandler
	dir    string
	tabs   map[[2]uint64]checksum.Table
	logged map[uint64]bool
	opens  atomic.Int64
	reads  atomic.Int64
	direct bool // pass an O_DIRECT twin too
}

const testBlock = 4096

func newFileHandler(t *testing.T) *fileHandler {
	return &fileHandler{memHandler: newMemHandler(), dir: t.TempDir(), tabs: map[[2]uint64]checksum.Table{}, logged: map[uint64]bool{}}
}

func (h *fileHandler) path(extent uint64, index uint32) string {
	return filepath.Join(h.dir, fmt.Sprintf("%d.%d", extent, index))
}

func (h *fileHandler) WriteChunk(ctx context.Context, req Request, data []byte) error {
	if err := h.memHandler.WriteChunk(ctx, req, data); err != nil {
		return err
	}
	tab, err := checksum.Compute(data, testBlock)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.tabs[[2]uint64{req.Extent, uint64(req.Index)}] = tab
	h.mu.Unlock()
	return os.WriteFile(h.path(req.Extent, req.Index), data, 0o600)
}

// ReadChunk reads the file and verifies it, as an OST does.
func (h *fileHandler) ReadChunk(ctx context.Context, req Request, dst []byte) error {
	h.reads.Add(1)
	h.mu.Lock()
	tab, ok := h.tabs[[2]uint64{req.Extent, uint64(req.Index)}]
	h.mu.Unlock()
	if !ok {
		return fmt.Errorf("chunk %d.%d: %w", req.Extent, req.Index, errs.ErrNotFound)
	}
	f, err := os.Open(h.path(req.Extent, req.Index))
	if err != nil {
		return err
	}
	defer f.Close()
	var bufs BufPool
	return tab.ReadVerified(f, req.Offset, dst, 1<<20, bufs.Get, bufs.Put)
}

func (h *fileHandler) OpenChunk(ctx context.Context, req Request) (f, direct *os.File, table []byte, err error) {
	h.opens.Add(1)
	h.mu.Lock()
	tab, ok := h.tabs[[2]uint64{req.Extent, uint64(req.Index)}]
	logged := h.logged[req.Extent]
	h.mu.Unlock()
	switch {
	case logged:
		return nil, nil, nil, fmt.Errorf("in the log: %w", errs.ErrNotSupported)
	case !ok:
		return nil, nil, nil, fmt.Errorf("chunk %d.%d: %w", req.Extent, req.Index, errs.ErrNotFound)
	}
	path := h.path(req.Extent, req.Index)
	if f, err = os.Open(path); err != nil {
		return nil, nil, nil, err
	}
	if h.direct {
		// Where the file system refuses O_DIRECT (tmpfs), none.
		direct, _ = os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	}
	return f, direct, tab.Encode(), nil
}

// serveWithLocal starts a TCP server and its local endpoint with h.
func serveWithLocal(t *testing.T, h Handler) (tcp, local *Server) {
	t.Helper()
	tcp = serve(t, h)
	lis, err := ListenLocal(tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	local, err = Serve(lis, ServerOptions{Handler: h, Local: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	return tcp, local
}

func newLocalClient(t *testing.T) *Client {
	c := NewClient(ClientOptions{ShortCircuit: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// writeChunk writes data, its slices one after the other, as chunk
// extent.index at addr.
func writeChunk(t *testing.T, c *Client, addr string, extent uint64, index uint32, data ...[]byte) {
	t.Helper()
	if err := c.Write(context.Background(), addr, extent, index, nil, data); err != nil {
		t.Fatalf("write %d.%d: %v", extent, index, err)
	}
}

// readBack reads len(want) bytes at off of chunk extent.index at addr,
// into a buffer of its own, and fails unless they are want.
func readBack(c *Client, addr string, extent uint64, index uint32, off int, want []byte) error {
	buf := make([]byte, len(want))
	if err := c.Read(context.Background(), addr, extent, index, nil, uint64(off), [][]byte{buf}); err != nil {
		return fmt.Errorf("read %d.%d [%d, +%d): %w", extent, index, off, len(want), err)
	}
	if string(buf) != string(want) {
		return fmt.Errorf("read %d.%d [%d, +%d): wrong bytes", extent, index, off, len(want))
	}
	return nil
}

// mustReadBack is readBack, fatal when it fails.
func mustReadBack(t *testing.T, c *Client, addr string, extent uint64, index uint32, off int, want []byte) {
	t.Helper()
	if err := readBack(c, addr, extent, index, off, want); err != nil {
		t.Fatal(err)
	}
}

// wantCalls checks how many opens (OpOpen) and reads (OpRead) reached h.
func wantCalls(t *testing.T, h *fileHandler, opens, reads int64) {
	t.Helper()
	if o, r := h.opens.Load(), h.reads.Load(); o != opens || r != reads {
		t.Errorf("%d opens, %d reads at the server; want %d and %d", o, r, opens, reads)
	}
}

// TestLocalReadsAndWrites: a client on the server's host writes over the
// local endpoint, reads through the file it passes (opened once, kept),
// odd ranges and several destination slices included, and counts none
// of it on the wire.
func TestLocalReadsAndWrites(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) { testLocalReadsAndWrites(t, direct) })
	}
}

func testLocalReadsAndWrites(t *testing.T, direct bool) {
	h := newFileHandler(t)
	h.direct = direct
	tcp, _ := serveWithLocal(t, h)
	addr := tcp.Addr().String()
	c := newLocalClient(t)
	ctx := context.Background()
	data := randBytes(2*minDirectRead+5*testBlock+123, 1)
	writeChunk(t, c, addr, 7, 1, data[:1000], data[1000:])
	for _, r := range [][2]int{{0, len(data)}, {1, 10}, {testBlock - 1, 2*testBlock + 7}, {3 * testBlock, len(data) - 3*testBlock}, {minDirectRead, minDirectRead}} {
		off, n := r[0], r[1]
		// Two aligned slices, the first a multiple of the alignment:
		// the large aligned parts may go through O_DIRECT.
		a, b := AlignedBuf(n/3&^(Align-1) + 1)[:n/3&^(Align-1)], AlignedBuf(n-n/3&^(Align-1))
		if err := c.Read(ctx, addr, 7, 1, nil, uint64(off), [][]byte{a, b}); err != nil {
			t.Fatalf("read [%d, +%d): %v", off, n, err)
		}
		if got := append(a, b...); string(got) != string(data[off:off+n]) {
			t.Fatalf("read [%d, +%d): wrong bytes", off, n)
		}
	}
	wantCalls(t, h, 1, 0) // five reads of one chunk, the file kept open
	if lf := c.local.file(chunkKey{addr: addr, extent: 7, index: 1}); lf == nil || (lf.direct != nil) != direct {
		t.Errorf("the client's file of the chunk: %+v, want an O_DIRECT twin: %v", lf, direct)
	}
	st := c.Stats()
	if st.LocalWriteBytes != uint64(len(data)) || st.WriteWireBytes != 0 || st.ReadWireBytes != 0 || st.LocalReadBytes != st.ReadBytes || st.ReadBytes == 0 {
		t.Errorf("stats %+v", st)
	}
	// Past the end: the server's answer (a range error), never bytes.
	if err := c.Read(ctx, addr, 7, 1, nil, uint64(len(data)-1), [][]byte{make([]byte, 2)}); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("read past the end: %v, want ErrInvalid", err)
	}
}

// TestLocalCorruptFile: a chunk file changed under a client that holds it
// open fails its checksum in the client, which then asks the server,
// whose read reports the corruption: an error, never the bad bytes.
func TestLocalCorruptFile(t *testing.T) {
	h := newFileHandler(t)
	tcp, _ := serveWithLocal(t, h)
	addr := tcp.Addr().String()
	c := newLocalClient(t)
	data := randBytes(4*testBlock, 2)
	writeChunk(t, c, addr, 3, 0, data)
	mustReadBack(t, c, addr, 3, 0, 0, data)
	f, err := os.OpenFile(h.path(3, 0), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{data[testBlock+5] ^ 0xff}, testBlock+5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := readBack(c, addr, 3, 0, testBlock, data[testBlock:2*testBlock]); !errors.Is(err, errs.ErrCorrupt) {
		t.Fatalf("read of a corrupt block: %v, want ErrCorrupt", err)
	}
	wantCalls(t, h, 1, 1) // the read that reports the corruption
	// The blocks around it still read.
	mustReadBack(t, c, addr, 3, 0, 2*testBlock, data[2*testBlock:3*testBlock])
}

// TestLocalNotAFile: a chunk the server cannot pass as a file (one in its
// log) is read over the local connection.
func TestLocalNotAFile(t *testing.T) {
	h := newFileHandler(t)
	tcp, _ := serveWithLocal(t, h)
	addr := tcp.Addr().String()
	c := newLocalClient(t)
	data := randBytes(3000, 3)
	writeChunk(t, c, addr, 9, 2, data)
	h.mu.Lock()
	h.logged[9] = true
	h.mu.Unlock()
	mustReadBack(t, c, addr, 9, 2, 0, data)
	wantCalls(t, h, 1, 1)
	if st := c.Stats(); st.ReadWireBytes != 0 || st.LocalReadBytes != uint64(len(data)) {
		t.Errorf("stats %+v", st)
	}
}

// TestLocalServerStops: once the local endpoint is closed, the files it
// passed are not read any more; reads go over TCP while it serves, and
// fail when it does not either.
func TestLocalServerStops(t *testing.T) {
	h := newFileHandler(t)
	tcp, local := serveWithLocal(t, h)
	addr := tcp.Addr().String()
	c := newLocalClient(t)
	data := randBytes(2*testBlock, 4)
	writeChunk(t, c, addr, 5, 0, data)
	mustReadBack(t, c, addr, 5, 0, 0, data)
	local.Close()
	mustReadBack(t, c, addr, 5, 0, 0, data) // over TCP
	wantCalls(t, h, 1, 1)                   // the open before the close, the read over TCP
	if st := c.Stats(); st.ReadWireBytes != uint64(len(data)) {
		t.Errorf("stats %+v: the second read not on the wire", st)
	}
	tcp.Close()
	if err := readBack(c, addr, 5, 0, 0, data); !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("read with the server gone: %v, want ErrUnavailable", err)
	}
}

// TestLocalAbsent: a server without a local endpoint is reached over TCP,
// and the client stops looking for one for a while.
func TestLocalAbsent(t *testing.T) {
	h := newFileHandler(t)
	addr := serve(t, h).Addr().String()
	c := newLocalClient(t)
	data := randBytes(1000, 5)
	writeChunk(t, c, addr, 1, 0, data)
	if c.useLocal(addr) {
		t.Error("the client still looks for a local endpoint that was not there")
	}
	mustReadBack(t, c, addr, 1, 0, 0, data)
	if st := c.Stats(); st.WriteWireBytes != 1000 || st.ReadWireBytes != 1000 || st.LocalReadBytes+st.LocalWriteBytes != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestOpenOverTCP: OpOpen is for local connections only.
func TestOpenOverTCP(t *testing.T) {
	h := newFileHandler(t)
	addr := serve(t, h).Addr().String()
	c := newClient(t)
	var out openedChunk
	err := c.do(context.Background(), addr, Request{Op: OpOpen, Extent: 1}, nil, nil, false, &out)
	if !errors.Is(err, errs.ErrNotSupported) || out.f != nil {
		t.Fatalf("open over TCP: %v, file %v", err, out.f)
	}
	wantCalls(t, h, 0, 0) // no open over TCP
}

// TestLocalPeerCheck: the server sees this process's own user as its
// peer; a listener with TLS cannot be local.
func TestLocalPeerCheck(t *testing.T) {
	a, b, err := unixPair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	if err := checkLocalPeer(a); err != nil {
		t.Fatal(err)
	}
	if err := checkLocalPeer(&net.TCPConn{}); !errors.Is(err, errs.ErrPermission) {
		t.Fatalf("a TCP connection as local: %v", err)
	}
	if _, err := Serve(nil, ServerOptions{Handler: newMemHandler(), Local: true, TLS: &tls.Config{}}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("local with TLS: %v", err)
	}
}

func unixPair() (*net.UnixConn, *net.UnixConn, error) {
	lis, err := net.Listen("unix", "@shoal-test-"+fmt.Sprint(os.Getpid()))
	if err != nil {
		return nil, nil, err
	}
	defer lis.Close()
	a, err := net.Dial("unix", lis.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	b, err := lis.Accept()
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a.(*net.UnixConn), b.(*net.UnixConn), nil
}

// creatingHandler is a fileHandler that also takes chunks by file
// (Creator), as an OST does.
type creatingHandler struct {
	*fileHandler
	creates atomic.Int64
	flags   atomic.Uint32 // of the last create
}

type testPending struct {
	h    *creatingHandler
	req  Request
	f    *os.File
	path string
}

func (h *creatingHandler) CreateChunk(ctx context.Context, req Request) (PendingChunk, error) {
	h.creates.Add(1)
	h.flags.Store(uint32(req.Flags))
	path := h.path(req.Extent, req.Index) + ".tmp"
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return &testPending{h: h, req: req, f: f, path: path}, nil
}

func (p *testPending) File() *os.File    { return p.f }
func (p *testPending) BlockSize() uint32 { return testBlock }
func (p *testPending) Abort()            { p.f.Close(); os.Remove(p.path) }

func (p *testPending) Commit(ctx context.Context, table []byte) error {
	p.f.Close()
	tab, err := checksum.Decode(table)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(p.path)
	if err != nil {
		return err
	}
	want, err := checksum.Compute(data, testBlock)
	if err != nil {
		return err
	}
	if fmt.Sprint(want) != fmt.Sprint(tab) || uint64(len(data)) != p.req.Length {
		return fmt.Errorf("table of %d bytes does not match the file's %d: %w", tab.Length, len(data), errs.ErrCorrupt)
	}
	p.h.mu.Lock()
	p.h.tabs[[2]uint64{p.req.Extent, uint64(p.req.Index)}] = tab
	p.h.mu.Unlock()
	return os.Rename(p.path, p.h.path(p.req.Extent, p.req.Index))
}

// TestLocalWriteByFile: a large chunk goes into the file the server
// passes, with the client's checksum table, aligned or not; a small one
// over the socket; a commit without its create is refused.
func TestLocalWriteByFile(t *testing.T) {
	h := &creatingHandler{fileHandler: newFileHandler(t)}
	tcp, _ := serveWithLocal(t, h)
	addr := tcp.Addr().String()
	c := newLocalClient(t)
	ctx := context.Background()
	big := randBytes(MinLocalFileWrite+3*testBlock, 7)
	aligned := AlignedBuf(len(big))
	copy(aligned, big)
	for i, tc := range []struct {
		data   [][]byte
		direct bool
	}{
		{[][]byte{aligned[:MinLocalFileWrite], aligned[MinLocalFileWrite:]}, true},
		{[][]byte{big[:1000], big[1000:]}, false}, // odd slices: no O_DIRECT, blocks across them
	} {
		idx := uint32(i)
		writeChunk(t, c, addr, 11, idx, tc.data...)
		if got := uint16(h.flags.Load()) == FlagDirect; got != tc.direct {
			t.Errorf("write %d: FlagDirect %v, want %v", i, got, tc.direct)
		}
		got, err := os.ReadFile(h.path(11, idx))
		if err != nil || string(got) != string(big) {
			t.Fatalf("write %d: the chunk file holds other bytes (%v)", i, err)
		}
		mustReadBack(t, c, addr, 11, idx, 0, big)
	}
	if n := h.creates.Load(); n != 2 {
		t.Errorf("%d creates, want 2", n)
	}
	if err := c.Write(ctx, addr, 12, 0, nil, [][]byte{big[:1000]}); err != nil || h.creates.Load() != 2 {
		t.Fatalf("a small write: %v, %d creates", err, h.creates.Load())
	}
	if st := c.Stats(); st.LocalWriteBytes != uint64(2*len(big)+1000) || st.WriteWireBytes != 0 {
		t.Errorf("stats %+v", st)
	}
	// A commit on its own.
	conn, err := net.Dial("unix", LocalName(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hdr [RequestSize]byte
	Request{Op: OpCommit, Extent: 1, Length: 8}.Encode(&hdr)
	conn.Write(append(hdr[:], make([]byte, 8)...))
	var rh [ReplySize]byte
	if _, err := io.ReadFull(conn, rh[:]); err != nil {
		t.Fatal(err)
	}
	if r, err := DecodeReply(&rh); err != nil || !r.Failed || !r.Close {
		t.Errorf("a commit without a create: %+v, %v", r, err)
	}
}

// TestLocalOpensOnce: readers of one chunk at once share its open.
func TestLocalOpensOnce(t *testing.T) {
	h := newFileHandler(t)
	tcp, _ := serveWithLocal(t, h)
	addr := tcp.Addr().String()
	data := randBytes(8*testBlock, 8)
	writeChunk(t, newLocalClient(t), addr, 4, 0, data)
	c := newLocalClient(t)
	errc := make(chan error, 8)
	for i := range 8 {
		go func() { errc <- readBack(c, addr, 4, 0, i*testBlock, data[i*testBlock:(i+1)*testBlock]) }()
	}
	for range 8 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	wantCalls(t, h, 1, 0) // 8 readers of one chunk at once
}

// TestLocalOpenAhead: OpenAhead opens a chunk's file once, a read after it
// asks the server nothing more, a second OpenAhead of a chunk held is no
// call, and an OpenAhead to a server without a local endpoint is nothing.
func TestLocalOpenAhead(t *testing.T) {
	h := newFileHandler(t)
	tcp, _ := serveWithLocal(t, h)
	addr := tcp.Addr().String()
	c := newLocalClient(t)
	ctx := context.Background()
	data := randBytes(3*testBlock, 4)
	writeChunk(t, c, addr, 5, 2, data)
	c.OpenAhead(ctx, addr, 5, 2, nil)
	wantCalls(t, h, 1, 0)
	if lf := c.local.file(chunkKey{addr: addr, extent: 5, index: 2}); lf == nil {
		t.Fatal("OpenAhead left the chunk's file unheld")
	}
	c.OpenAhead(ctx, addr, 5, 2, nil)
	mustReadBack(t, c, addr, 5, 2, 0, data)
	wantCalls(t, h, 1, 0)

	plain := serve(t, newFileHandler(t)) // no local endpoint
	c.OpenAhead(ctx, plain.Addr().String(), 1, 0, nil)
	if c.Local(plain.Addr().String()) {
		t.Error("a server without a local endpoint still counted local after OpenAhead")
	}
}
