package datanet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

// memHandler keeps chunks in memory. The error set with setFail is
// returned for every request; a channel set with setBlock is waited on
// before serving.
type memHandler struct {
	mu     sync.Mutex
	chunks map[[2]uint64][]byte
	fail   error
	block  chan struct{}
	calls  atomic.Int64
}

func newMemHandler() *memHandler { return &memHandler{chunks: map[[2]uint64][]byte{}} }

func (h *memHandler) setFail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fail = err
}

func (h *memHandler) setBlock(c chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.block = c
}

func (h *memHandler) wait(ctx context.Context) error {
	h.calls.Add(1)
	h.mu.Lock()
	block, fail := h.block, h.fail
	h.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fail
}

func (h *memHandler) WriteChunk(ctx context.Context, req Request, data []byte) error {
	if err := h.wait(ctx); err != nil {
		return err
	}
	if !IsAligned(data) {
		return fmt.Errorf("unaligned buffer: %w", errs.ErrInvalid)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.chunks[[2]uint64{req.Extent, uint64(req.Index)}] = bytes.Clone(data)
	return nil
}

func (h *memHandler) ReadChunk(ctx context.Context, req Request, dst []byte) error {
	if err := h.wait(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.chunks[[2]uint64{req.Extent, uint64(req.Index)}]
	if !ok {
		return fmt.Errorf("chunk %d.%d: %w", req.Extent, req.Index, errs.ErrNotFound)
	}
	if req.Offset+req.Length > uint64(len(c)) {
		return fmt.Errorf("range: %w", errs.ErrInvalid)
	}
	copy(dst, c[req.Offset:])
	return nil
}

// serve starts a server with h on loopback, shut down at the end of the
// test.
func serve(t testing.TB, h Handler) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Serve(lis, ServerOptions{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newClient(t *testing.T) *Client {
	c := NewClient(ClientOptions{})
	t.Cleanup(func() { c.Close() })
	return c
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func (c *Client) idleConns(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.idle[addr])
}

// sameRequest reports whether a and b are equal, capabilities compared by
// their bytes (nil and empty alike).
func sameRequest(a, b Request) bool {
	return a.Op == b.Op && a.Flags == b.Flags && a.Extent == b.Extent && a.Index == b.Index &&
		a.Offset == b.Offset && a.Length == b.Length && a.WireLength == b.WireLength && bytes.Equal(a.Cap, b.Cap)
}

// readRequest reads one request and its capability from conn, as a
// server does.
func readRequest(conn net.Conn) (Request, error) {
	var h [RequestSize]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return Request{}, err
	}
	req, capLen, err := DecodeRequest(&h)
	if err != nil {
		return Request{}, err
	}
	req.Cap = make([]byte, capLen)
	_, err = io.ReadFull(conn, req.Cap)
	return req, err
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{Op: OpWrite, Extent: 1, Index: 0, Length: 4096},
		{Op: OpRead, Extent: ^uint64(0), Index: ^uint32(0), Offset: 1 << 40, Length: MaxLength},
		{Op: OpRead, Extent: 7, Index: 3},
		{Op: OpWrite, Extent: 9, Index: 2, Length: 4096, Cap: randBytes(38, 1)},
		{Op: OpRead, Extent: 9, Index: 5, Offset: 4096, Length: 100, Cap: randBytes(MaxCapLength, 2)},
		{Op: OpRead, Extent: 9, Cap: []byte{0}},
		{Op: OpWrite, Flags: FlagS2, Extent: 3, Index: 1, Length: 1 << 20, WireLength: 12345, Cap: randBytes(38, 3)},
		{Op: OpWrite, Flags: FlagS2, Extent: 3, Length: MaxLength, WireLength: MaxLength},
		{Op: OpRead, Flags: FlagAcceptS2, Extent: 3, Offset: 8192, Length: 1 << 20},
	} {
		if err := r.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", r, err)
		}
		var b [RequestSize]byte
		r.Encode(&b)
		if n := binary.LittleEndian.Uint32(b[20:24]); n != uint32(len(r.Cap)) {
			t.Errorf("Encode(%+v) writes capability length %d", r, n)
		}
		got, capLen, err := DecodeRequest(&b)
		if err != nil || capLen != len(r.Cap) {
			t.Errorf("DecodeRequest(Encode(%+v)) = %+v, capability length %d, %v", r, got, capLen, err)
			continue
		}
		if got.Cap != nil {
			t.Errorf("DecodeRequest returned capability bytes %x from a header", got.Cap)
		}
		// On the wire: the header, then the capability.
		a, b2 := net.Pipe()
		go func() {
			defer a.Close()
			a.Write(append(b[:], r.Cap...))
		}()
		wired, err := readRequest(b2)
		b2.Close()
		if err != nil || !sameRequest(wired, r) {
			t.Errorf("round trip of %+v: %+v, %v", r, wired, err)
		}
	}
	for _, r := range []Reply{
		{Op: OpWrite},
		{Op: OpRead, Length: MaxLength},
		{Op: OpRead, Failed: true, Close: true, Length: MaxErrorLength},
		{Op: OpRead, Compressed: true, Length: 5},
		{Op: OpRead, Compressed: true, Close: true, Length: MaxLength},
	} {
		var b [ReplySize]byte
		r.Encode(&b)
		got, err := DecodeReply(&b)
		if err != nil || got != r {
			t.Errorf("DecodeReply(Encode(%+v)) = %+v, %v", r, got, err)
		}
	}
}

func TestDecodeRequestRejects(t *testing.T) {
	valid := func() [RequestSize]byte {
		var b [RequestSize]byte
		Request{Op: OpRead, Extent: 1, Length: 4096}.Encode(&b)
		return b
	}
	tests := []struct {
		name  string
		patch func(b *[RequestSize]byte)
		want  error
	}{
		{"magic", func(b *[RequestSize]byte) { b[0] = 'X' }, errs.ErrInvalid},
		{"version", func(b *[RequestSize]byte) { b[4] = Version + 1 }, errs.ErrNotSupported},
		{"op 0", func(b *[RequestSize]byte) { b[5] = 0 }, errs.ErrNotSupported},
		{"op 9", func(b *[RequestSize]byte) { b[5] = 9 }, errs.ErrNotSupported},
		{"flags", func(b *[RequestSize]byte) { b[6] = 4 }, errs.ErrInvalid},
		{"high flags", func(b *[RequestSize]byte) { b[7] = 0x80 }, errs.ErrInvalid},
		{"FlagS2 on a read", func(b *[RequestSize]byte) { b[6] = byte(FlagS2) }, errs.ErrInvalid},
		{"FlagAcceptS2 on a write", func(b *[RequestSize]byte) { b[5] = byte(OpWrite); b[6] = byte(FlagAcceptS2) }, errs.ErrInvalid},
		{"compressed write, wire length 0", func(b *[RequestSize]byte) { b[5] = byte(OpWrite); b[6] = byte(FlagS2) }, errs.ErrInvalid},
		{"compressed write, wire length 4", func(b *[RequestSize]byte) { b[5] = byte(OpWrite); b[6] = byte(FlagS2); b[24] = 4 }, errs.ErrInvalid},
		{"compressed write, wire length over length", func(b *[RequestSize]byte) {
			b[5] = byte(OpWrite)
			b[6] = byte(FlagS2)
			binary.LittleEndian.PutUint64(b[24:], 4097)
		}, errs.ErrInvalid},
		{"capability over MaxCapLength", func(b *[RequestSize]byte) { binary.LittleEndian.PutUint32(b[20:], MaxCapLength+1) }, errs.ErrInvalid},
		{"huge capability", func(b *[RequestSize]byte) { b[23] = 1 }, errs.ErrInvalid},
		{"length", func(b *[RequestSize]byte) { binary.LittleEndian.PutUint64(b[32:], MaxLength+1) }, errs.ErrTooLarge},
		{"huge length", func(b *[RequestSize]byte) { binary.LittleEndian.PutUint64(b[32:], ^uint64(0)) }, errs.ErrTooLarge},
		{"read overflow", func(b *[RequestSize]byte) { binary.LittleEndian.PutUint64(b[24:], ^uint64(0)-10) }, errs.ErrInvalid},
		{"write offset", func(b *[RequestSize]byte) { b[5] = byte(OpWrite); b[24] = 1 }, errs.ErrInvalid},
	}
	for _, tc := range tests {
		b := valid()
		tc.patch(&b)
		if _, _, err := DecodeRequest(&b); !errors.Is(err, tc.want) {
			t.Errorf("%s: DecodeRequest = %v, want %v", tc.name, err, tc.want)
		}
	}
	b := valid()
	binary.LittleEndian.PutUint32(b[20:], MaxCapLength)
	if _, n, err := DecodeRequest(&b); err != nil || n != MaxCapLength {
		t.Errorf("a capability of MaxCapLength: %d, %v", n, err)
	}
	if n := testing.AllocsPerRun(100, func() { DecodeRequest(&b) }); n != 0 {
		t.Errorf("DecodeRequest of a valid header allocates %v times", n)
	}
	if err := (Request{Op: OpRead, Extent: 1, Cap: make([]byte, MaxCapLength+1)}).Validate(); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("Validate of a capability over MaxCapLength: %v", err)
	}
}

func TestDecodeReplyRejects(t *testing.T) {
	valid := func() [ReplySize]byte {
		var b [ReplySize]byte
		Reply{Op: OpRead, Length: 10}.Encode(&b)
		return b
	}
	for name, patch := range map[string]func(b *[ReplySize]byte){
		"magic":        func(b *[ReplySize]byte) { b[3] = 'Q' },
		"version":      func(b *[ReplySize]byte) { b[4] = 0 },
		"status":       func(b *[ReplySize]byte) { b[6] = 2 },
		"flags":        func(b *[ReplySize]byte) { b[7] = 4 },
		"s2 on error":  func(b *[ReplySize]byte) { b[6] = 1; b[7] = replyS2 },
		"s2 on write":  func(b *[ReplySize]byte) { b[5] = byte(OpWrite); b[7] = replyS2 },
		"s2 of 4":      func(b *[ReplySize]byte) { b[7] = replyS2; b[8] = 4 },
		"length":       func(b *[ReplySize]byte) { binary.LittleEndian.PutUint64(b[8:], MaxLength+1) },
		"error length": func(b *[ReplySize]byte) { b[6] = 1; binary.LittleEndian.PutUint64(b[8:], MaxErrorLength+1) },
	} {
		b := valid()
		patch(&b)
		if _, err := DecodeReply(&b); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: DecodeReply = %v, want ErrInvalid", name, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	h := newMemHandler()
	s := serve(t, h)
	c := newClient(t)
	ctx := t.Context()
	addr := s.Addr().String()
	for i, n := range []int{4096, 1 << 20, 3<<20 + 4096, 12345} {
		data := randBytes(n, uint64(i))
		// Send it as pieces, as the client's encoder does.
		parts := [][]byte{data[:n/3], nil, data[n/3 : n/2], data[n/2:]}
		if err := c.Write(ctx, addr, uint64(i+1), 2, nil, parts); err != nil {
			t.Fatalf("write %d bytes: %v", n, err)
		}
		got := make([]byte, n)
		if err := c.Read(ctx, addr, uint64(i+1), 2, nil, 0, [][]byte{got[:100], got[100:]}); err != nil {
			t.Fatalf("read %d bytes: %v", n, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes: differ", n)
		}
		part := make([]byte, n/4)
		if err := c.Read(ctx, addr, uint64(i+1), 2, nil, uint64(n/2), [][]byte{part}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(part, data[n/2:n/2+n/4]) {
			t.Fatalf("range read differs")
		}
	}
	if err := c.Read(ctx, addr, 1, 2, nil, 0, nil); err != nil {
		t.Errorf("read of 0 bytes: %v", err)
	}
	// Sequential requests share one connection.
	if n := c.idleConns(addr); n != 1 {
		t.Errorf("%d idle connections after sequential requests, want 1", n)
	}
}

func TestConcurrentRequests(t *testing.T) {
	h := newMemHandler()
	s := serve(t, h)
	c := NewClient(ClientOptions{MaxIdlePerAddr: 3})
	defer c.Close()
	addr := s.Addr().String()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			data := randBytes(64<<10, uint64(i))
			if err := c.Write(t.Context(), addr, uint64(i+1), 0, nil, [][]byte{data}); err != nil {
				t.Error(err)
				return
			}
			got := make([]byte, len(data))
			if err := c.Read(t.Context(), addr, uint64(i+1), 0, nil, 0, [][]byte{got}); err != nil || !bytes.Equal(got, data) {
				t.Errorf("chunk %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if n := c.idleConns(addr); n > 3 {
		t.Errorf("%d idle connections, bound 3", n)
	}
}

// TestErrorsCrossTyped checks that every sentinel of internal/errs comes
// out of the client as itself, as it does over gRPC (internal/wire).
func TestErrorsCrossTyped(t *testing.T) {
	h := newMemHandler()
	s := serve(t, h)
	c := newClient(t)
	addr := s.Addr().String()
	for _, sentinel := range errs.All {
		h.setFail(fmt.Errorf("chunk 1.0 says: %w", sentinel))
		werr := c.Write(t.Context(), addr, 1, 0, nil, [][]byte{make([]byte, 4096)})
		rerr := c.Read(t.Context(), addr, 1, 0, nil, 0, [][]byte{make([]byte, 4096)})
		for _, err := range []error{werr, rerr} {
			if !errors.Is(err, sentinel) {
				t.Errorf("handler error %v came back as %v", sentinel, err)
			}
			for _, other := range errs.All {
				if other != sentinel && errors.Is(err, other) {
					t.Errorf("handler error %v also matches %v", sentinel, other)
				}
			}
		}
	}
	h.setFail(context.DeadlineExceeded)
	if err := c.Write(t.Context(), addr, 1, 0, nil, [][]byte{make([]byte, 4096)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline error came back as %v", err)
	}
	h.setFail(errors.New("something else"))
	err := c.Write(t.Context(), addr, 1, 0, nil, [][]byte{make([]byte, 4096)})
	if err == nil || errors.Is(err, errs.ErrUnavailable) || errors.Is(err, errs.ErrInvalid) {
		t.Errorf("untyped error came back as %v", err)
	}
	// Typed error replies leave the connection in step: one connection
	// served every request.
	if n := c.idleConns(addr); n != 1 {
		t.Errorf("%d idle connections, want 1 (error replies keep the connection)", n)
	}
}

// rawConn dials s and sends b.
func rawConn(t *testing.T, addr string, b []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readReply reads one reply and its payload from conn.
func readReply(t *testing.T, conn net.Conn) (Reply, error) {
	t.Helper()
	var rh [ReplySize]byte
	if _, err := io.ReadFull(conn, rh[:]); err != nil {
		t.Fatalf("read reply: %v", err)
	}
	r, err := DecodeReply(&rh)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, r.Length)
	if _, err := io.ReadFull(conn, b); err != nil {
		t.Fatal(err)
	}
	if r.Failed {
		return r, DecodeError(b)
	}
	return r, nil
}

func wantClosed(t *testing.T, conn net.Conn) {
	t.Helper()
	var b [1]byte
	if n, err := conn.Read(b[:]); err != io.EOF {
		t.Errorf("connection not closed by the server: read %d, %v", n, err)
	}
}

func TestBadHeaders(t *testing.T) {
	h := newMemHandler()
	s := serve(t, h)
	addr := s.Addr().String()

	t.Run("bad magic", func(t *testing.T) {
		conn := rawConn(t, addr, bytes.Repeat([]byte{'x'}, RequestSize))
		wantClosed(t, conn)
	})
	t.Run("unknown op", func(t *testing.T) {
		var b [RequestSize]byte
		Request{Op: OpRead, Extent: 1, Length: 4096}.Encode(&b)
		b[5] = 77
		conn := rawConn(t, addr, b[:])
		r, err := readReply(t, conn)
		if !errors.Is(err, errs.ErrNotSupported) || !r.Close {
			t.Errorf("unknown op: reply %+v, %v; want ErrNotSupported and close", r, err)
		}
		wantClosed(t, conn)
	})
	t.Run("oversized capability", func(t *testing.T) {
		var b [RequestSize]byte
		Request{Op: OpRead, Extent: 1, Length: 4096}.Encode(&b)
		binary.LittleEndian.PutUint32(b[20:], MaxCapLength+1)
		// The header alone: the server refuses it before reading more.
		conn := rawConn(t, addr, b[:])
		r, err := readReply(t, conn)
		if !errors.Is(err, errs.ErrInvalid) || !r.Close {
			t.Errorf("oversized capability: reply %+v, %v; want ErrInvalid and close", r, err)
		}
		wantClosed(t, conn)
	})
	t.Run("oversized length", func(t *testing.T) {
		var b [RequestSize]byte
		Request{Op: OpWrite, Extent: 1, Length: 4096}.Encode(&b)
		binary.LittleEndian.PutUint64(b[32:], 1<<40)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		conn := rawConn(t, addr, b[:])
		r, err := readReply(t, conn)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, errs.ErrTooLarge) || !r.Close {
			t.Errorf("oversized write: reply %+v, %v; want ErrTooLarge and close", r, err)
		}
		wantClosed(t, conn)
		if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
			t.Errorf("refusing an oversized request allocated %d bytes", d)
		}
	})
	if n := h.calls.Load(); n != 0 {
		t.Errorf("handler called %d times for bad headers", n)
	}
	t.Run("server still serves", func(t *testing.T) {
		c := newClient(t)
		if err := c.Write(t.Context(), addr, 5, 0, nil, [][]byte{make([]byte, 8192)}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestClientRefusesBadRequests(t *testing.T) {
	c := newClient(t)
	// No server at this address: the client must refuse before dialing.
	if err := c.Read(t.Context(), "127.0.0.1:1", 1, 0, nil, 0, [][]byte{make([]byte, MaxLength+1)}); !errors.Is(err, errs.ErrTooLarge) {
		t.Errorf("read over MaxLength: %v", err)
	}
}

func TestCancelMidTransfer(t *testing.T) {
	h := newMemHandler()
	block := make(chan struct{})
	h.setBlock(block)
	s := serve(t, h)
	c := newClient(t)
	addr := s.Addr().String()

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Write(ctx, addr, 1, 0, nil, [][]byte{make([]byte, 1<<20)}) }()
	for h.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled write: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not unblock the write")
	}

	tctx, tcancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer tcancel()
	err := c.Read(tctx, addr, 1, 0, nil, 0, [][]byte{make([]byte, 4096)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if n := c.idleConns(addr); n != 0 {
		t.Errorf("%d idle connections after cancelled requests, want 0: they are mid-request", n)
	}
	close(block)
	// A fresh connection works.
	if err := c.Write(t.Context(), addr, 2, 0, nil, [][]byte{make([]byte, 4096)}); err != nil {
		t.Fatal(err)
	}
}

// TestCancelMidPayload cancels requests whose payload is half way: a
// write whose server stopped reading (the client blocks in writev) and a
// read whose server stopped sending (the client blocks reading into dst).
func TestCancelMidPayload(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	f := startFake(t, func(_ int64, conn net.Conn) {
		req, err := readRequest(conn)
		if err != nil {
			return
		}
		if req.Op == OpRead {
			var rh [ReplySize]byte
			Reply{Op: OpRead, Length: req.Length}.Encode(&rh)
			conn.Write(rh[:])
			conn.Write(make([]byte, req.Length/2))
		}
		<-release // stop reading or sending
	})
	c := newClient(t)
	addr := f.lis.Addr().String()
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"write", func(ctx context.Context) error {
			return c.Write(ctx, addr, 1, 0, nil, [][]byte{make([]byte, 48<<20)})
		}},
		{"read", func(ctx context.Context) error {
			return c.Read(ctx, addr, 1, 0, nil, 0, [][]byte{make([]byte, 8<<20)})
		}},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- tc.call(ctx) }()
		time.Sleep(100 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("%s returned %v before the cancel", tc.name, err)
		default:
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s cancelled mid-payload: %v, want context.Canceled", tc.name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: cancel did not unblock the transfer", tc.name)
		}
	}
	if n := c.idleConns(addr); n != 0 {
		t.Errorf("%d idle connections after cancelled transfers, want 0", n)
	}
}

// fakeServer accepts connections and runs serve on each, counting them.
type fakeServer struct {
	lis      net.Listener
	accepted atomic.Int64
}

func startFake(t *testing.T, serve func(n int64, conn net.Conn)) *fakeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{lis: lis}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			n := f.accepted.Add(1)
			wg.Go(func() {
				defer conn.Close()
				serve(n, conn)
			})
		}
	})
	return f
}

// answer reads requests from conn and answers each with reply, until
// conn fails or stop says so.
func answer(conn net.Conn, reply func(req Request) []byte, stop func(i int) bool) {
	for i := 0; !stop(i); i++ {
		req, err := readRequest(conn)
		if err != nil {
			return
		}
		if req.Op == OpWrite {
			io.CopyN(io.Discard, conn, int64(req.Length))
		}
		if _, err := conn.Write(reply(req)); err != nil {
			return
		}
	}
}

func okReply(req Request) []byte {
	r := Reply{Op: req.Op}
	if req.Op == OpRead {
		r.Length = req.Length
	}
	var h [ReplySize]byte
	r.Encode(&h)
	return append(h[:], make([]byte, r.Length)...)
}

func TestConnectionNotReusedAfterError(t *testing.T) {
	never := func(int) bool { return false }
	cases := []struct {
		name    string
		reply   func(req Request) []byte
		wantErr error // nil: any non-typed error
	}{
		{"garbage reply", func(Request) []byte { return bytes.Repeat([]byte{0xff}, ReplySize) }, errs.ErrInvalid},
		{"wrong length", func(req Request) []byte {
			var h [ReplySize]byte
			Reply{Op: req.Op, Length: req.Length + 1}.Encode(&h)
			return h[:]
		}, errs.ErrInvalid},
		{"wrong op", func(req Request) []byte {
			var h [ReplySize]byte
			Reply{Op: OpWrite}.Encode(&h)
			return h[:]
		}, errs.ErrInvalid},
		{"close flag", func(req Request) []byte {
			b, _ := EncodeError(fmt.Errorf("x: %w", errs.ErrNotFound))
			var h [ReplySize]byte
			Reply{Op: req.Op, Failed: true, Close: true, Length: uint64(len(b))}.Encode(&h)
			return append(h[:], b...)
		}, errs.ErrNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, func(n int64, conn net.Conn) {
				if n == 1 {
					answer(conn, tc.reply, never)
					return
				}
				answer(conn, okReply, never)
			})
			c := newClient(t)
			addr := f.lis.Addr().String()
			err := c.Read(t.Context(), addr, 1, 0, nil, 0, [][]byte{make([]byte, 4096)})
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("first read: %v, want %v", err, tc.wantErr)
			}
			if err := c.Read(t.Context(), addr, 1, 0, nil, 0, [][]byte{make([]byte, 4096)}); err != nil {
				t.Fatalf("second read: %v", err)
			}
			if n := f.accepted.Load(); n != 2 {
				t.Errorf("%d connections, want 2: the first must not be reused", n)
			}
		})
	}
}

func TestStalePooledConnection(t *testing.T) {
	// The server answers one request per connection and then closes it,
	// as one restarted or timed out would: the client's pooled connection
	// is dead when it next takes it, and the request is tried again on a
	// new one.
	f := startFake(t, func(_ int64, conn net.Conn) {
		answer(conn, okReply, func(i int) bool { return i == 1 })
	})
	c := newClient(t)
	addr := f.lis.Addr().String()
	for i := range 3 {
		if err := c.Write(t.Context(), addr, 1, 0, nil, [][]byte{make([]byte, 4096)}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		time.Sleep(20 * time.Millisecond) // let the server's close arrive
	}
	if n := f.accepted.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

func TestUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c := newClient(t)
	if err := c.Write(t.Context(), addr, 1, 0, nil, [][]byte{make([]byte, 4096)}); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("write to a closed port: %v, want ErrUnavailable", err)
	}
	// A server that drops the connection mid-request.
	f := startFake(t, func(_ int64, conn net.Conn) {
		var h [RequestSize]byte
		io.ReadFull(conn, h[:])
	})
	if err := c.Read(t.Context(), f.lis.Addr().String(), 1, 0, nil, 0, [][]byte{make([]byte, 4096)}); !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("read from a server that hangs up: %v, want ErrUnavailable", err)
	}
}

func TestShutdownWaitsForRequests(t *testing.T) {
	h := newMemHandler()
	s := serve(t, h)
	c := newClient(t)
	addr := s.Addr().String()
	// One idle connection, one busy.
	idle := NewClient(ClientOptions{})
	defer idle.Close()
	if err := idle.Write(t.Context(), addr, 9, 0, nil, [][]byte{make([]byte, 4096)}); err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	h.setBlock(block)
	done := make(chan error, 1)
	go func() { done <- c.Write(t.Context(), addr, 1, 0, nil, [][]byte{make([]byte, 4096)}) }()
	for h.calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(t.Context()) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	default:
	}
	close(block)
	if err := <-done; err != nil {
		t.Errorf("request in flight at Shutdown: %v", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("server still accepts after Shutdown")
	}
}

func TestShutdownGivesUp(t *testing.T) {
	h := newMemHandler()
	block := make(chan struct{})
	h.setBlock(block)
	defer close(block)
	s := serve(t, h)
	c := newClient(t)
	done := make(chan error, 1)
	go func() { done <- c.Write(t.Context(), s.Addr().String(), 1, 0, nil, [][]byte{make([]byte, 4096)}) }()
	for h.calls.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown past its deadline: %v", err)
	}
	// The handler saw its context cancelled; the client its connection go.
	if err := <-done; !errors.Is(err, errs.ErrUnavailable) && !errors.Is(err, context.Canceled) {
		t.Errorf("request cut by Shutdown: %v", err)
	}
}

func TestBufPool(t *testing.T) {
	var p BufPool
	for _, n := range []int{1, 4095, 4096, 4097, 1 << 20, 3<<20 + 1, MaxLength} {
		b := p.Get(n)
		if len(b) != n || !IsAligned(b) || cap(b)&(cap(b)-1) != 0 {
			t.Errorf("Get(%d): len %d cap %d aligned %v", n, len(b), cap(b), IsAligned(b))
		}
		p.Put(b)
	}
	if b := p.Get(MaxLength + 1); len(b) != MaxLength+1 || !IsAligned(b) {
		t.Errorf("Get over MaxLength: len %d aligned %v", len(b), IsAligned(b))
	}
	if p.Get(0) != nil {
		t.Error("Get(0) is not nil")
	}
	p.Put(make([]byte, 100)) // not from the pool: ignored
	p.Put(nil)
	// Classes from hugeMin up: aligned to a huge page, usable.
	for range 3 {
		b := p.Get(3<<20 + 1)
		if addrOf(b)&(hugeMin-1) != 0 || cap(b) != 4<<20 {
			t.Fatalf("huge class: address %#x cap %d", addrOf(b), cap(b))
		}
		for i := range b {
			b[i] = byte(i)
		}
		if b[len(b)-1] != byte(len(b)-1) {
			t.Fatal("huge buffer does not hold its bytes")
		}
		p.Put(b)
	}
	for _, n := range []int{1, 5000, 1 << 20} {
		b := AlignedBuf(n)
		if len(b) != n || cap(b) != n || !IsAligned(b) {
			t.Errorf("AlignedBuf(%d): len %d cap %d aligned %v", n, len(b), cap(b), IsAligned(b))
		}
	}
}

func FuzzDecodeHeader(f *testing.F) {
	var rq [RequestSize]byte
	Request{Op: OpWrite, Extent: 1, Length: 4 << 20}.Encode(&rq)
	f.Add(rq[:])
	Request{Op: OpRead, Extent: 0xab, Index: 3, Offset: 1 << 20, Length: 1 << 20}.Encode(&rq)
	f.Add(rq[:])
	// With a capability after the header.
	tok := bytes.Repeat([]byte{0xca}, 38)
	Request{Op: OpRead, Extent: 0xab, Index: 1, Length: 4096, Cap: tok}.Encode(&rq)
	f.Add(append(rq[:], tok...))
	var rp [ReplySize]byte
	Reply{Op: OpRead, Length: 4096}.Encode(&rp)
	f.Add(rp[:])
	// Wire compression: a compressed write, a read that takes a
	// compressed reply, a compressed reply.
	Request{Op: OpWrite, Flags: FlagS2, Extent: 0xab, Index: 2, Length: 1 << 20, WireLength: 9000, Cap: tok}.Encode(&rq)
	f.Add(append(rq[:], tok...))
	Request{Op: OpRead, Flags: FlagAcceptS2, Extent: 0xab, Length: 1 << 20, Cap: tok}.Encode(&rq)
	f.Add(append(rq[:], tok...))
	Reply{Op: OpRead, Compressed: true, Length: 9000}.Encode(&rp)
	f.Add(rp[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= RequestSize {
			h := [RequestSize]byte(b[:RequestSize])
			if r, capLen, err := DecodeRequest(&h); err == nil {
				if r.Length > MaxLength || r.Validate() != nil || capLen < 0 || capLen > MaxCapLength || r.Cap != nil ||
					r.Flags&^requestFlags != 0 || r.WireLength > r.Length || (r.Flags&FlagS2 != 0) != (r.WireLength > crcSize) {
					t.Fatalf("DecodeRequest accepted %+v with a capability of %d bytes", r, capLen)
				}
				// The capability that follows, as much of it as b holds.
				r.Cap = make([]byte, capLen)
				copy(r.Cap, b[RequestSize:])
				if r.Validate() != nil {
					t.Fatalf("DecodeRequest accepted %+v, invalid with its capability", r)
				}
				var again [RequestSize]byte
				r.Encode(&again)
				if again != h {
					t.Fatalf("DecodeRequest accepted a non-canonical header %x", h)
				}
			}
		}
		if len(b) >= ReplySize {
			h := [ReplySize]byte(b[:ReplySize])
			if r, err := DecodeReply(&h); err == nil {
				if r.Length > MaxLength || (r.Failed && r.Length > MaxErrorLength) ||
					(r.Compressed && (r.Failed || r.Op != OpRead || r.Length <= crcSize)) {
					t.Fatalf("DecodeReply accepted %+v", r)
				}
				var again [ReplySize]byte
				r.Encode(&again)
				if again != h {
					t.Fatalf("DecodeReply accepted a non-canonical header %x", h)
				}
			}
		}
		DecodeError(b) // must not panic
	})
}
