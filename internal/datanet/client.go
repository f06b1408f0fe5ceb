package datanet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
)

// Defaults of ClientOptions.
const (
	DefaultMaxIdlePerAddr = 16
	DefaultDialTimeout    = 5 * time.Second
	DefaultMaxIdleTime    = time.Minute
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// MaxIdlePerAddr bounds the idle connections kept per server; more
	// may be open while busy (one per request in flight).
	MaxIdlePerAddr int
	// DialTimeout bounds a connect, within the request's own deadline.
	DialTimeout time.Duration
	// MaxIdleTime closes a pooled connection unused for this long
	// (shorter than the server's IdleTimeout).
	MaxIdleTime time.Duration
	// TLS, when set, makes every connection TLS: it returns the
	// configuration for a server at serverName (the host of the address
	// dialed), such as wire.Creds.DataClientConfig. The client asks for
	// the ALPN protocol wire.DataALPN and requires it. nil: plaintext
	// (a cluster run --insecure).
	TLS func(serverName string) *tls.Config
	// Compress, when set, says whether requests to the server at addr
	// use wire compression: writes send an s2 frame of each chunk that
	// shrinks under 97% (FlagS2), reads ask for one (FlagAcceptS2). nil:
	// never (docs/compression.md, "Wire compression").
	Compress func(addr string) bool
	// Bufs recycles the buffers of compressed payloads; nil gives the
	// client a pool of its own.
	Bufs *BufPool
	// ShortCircuit, when set, sends the requests for a server that has a
	// local endpoint on this host (local.go) over it: reads pread the
	// chunk's file, passed by the server, and verify it here; writes go
	// over the unix socket. Servers without one are remembered for a
	// while and reached over TCP.
	ShortCircuit bool
}

func (o *ClientOptions) setDefaults() {
	if o.MaxIdlePerAddr <= 0 {
		o.MaxIdlePerAddr = DefaultMaxIdlePerAddr
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxIdleTime <= 0 {
		o.MaxIdleTime = DefaultMaxIdleTime
	}
	if o.Bufs == nil {
		o.Bufs = &BufPool{}
	}
}

// Stats counts the payload bytes of a Client's successful requests: the
// chunk bytes written and read, and the bytes that carried them on the
// wire (fewer where wire compression paid; headers and capabilities not
// counted).
type Stats struct {
	WriteBytes, WriteWireBytes uint64
	ReadBytes, ReadWireBytes   uint64
	// LocalReadBytes and LocalWriteBytes are those of ReadBytes and
	// WriteBytes that went through local endpoints (short-circuit reads
	// from the chunk files; writes over the unix socket): no wire bytes.
	LocalReadBytes, LocalWriteBytes uint64
}

// Stats returns the counts so far.
func (c *Client) Stats() Stats {
	return Stats{
		WriteBytes: c.stats.writeBytes.Load(), WriteWireBytes: c.stats.writeWire.Load(),
		ReadBytes: c.stats.readBytes.Load(), ReadWireBytes: c.stats.readWire.Load(),
		LocalReadBytes: c.stats.localRead.Load(), LocalWriteBytes: c.stats.localWrite.Load(),
	}
}

// Client sends requests to data servers over pooled connections: each
// request takes an idle connection to its server (or dials one) and gives
// it back when the reply has been read in full, so the number of requests
// in flight to a server is the number of its connections in use. It is
// safe for concurrent use.
type Client struct {
	opts   ClientOptions
	dialer net.Dialer
	stats  struct {
		writeBytes, writeWire, readBytes, readWire atomic.Uint64
		localRead, localWrite                      atomic.Uint64
	}
	local localState // local endpoints and open chunk files (localclient.go)

	mu struct {
		sync.Mutex
		closed bool
		idle   map[string][]*clientConn // by address; most recently used last
	}
}

type clientConn struct {
	c        net.Conn // the connection's I/O: TLS over raw, or raw
	raw      net.Conn // the TCP connection, which close closes
	lastUsed time.Time
}

// close closes the TCP connection at once: a TLS close_notify could
// block on a peer that stopped reading.
func (cc *clientConn) close() { cc.raw.Close() }

// NewClient returns a client with no connections yet.
func NewClient(o ClientOptions) *Client {
	o.setDefaults()
	c := &Client{opts: o, dialer: net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}}
	c.mu.idle = map[string][]*clientConn{}
	c.local.init()
	return c
}

// Close closes the idle connections; connections in use are closed when
// their request ends. Requests after Close fail.
func (c *Client) Close() error {
	c.mu.Lock()
	idle := c.mu.idle
	c.mu.idle = map[string][]*clientConn{}
	c.mu.closed = true
	c.mu.Unlock()
	for _, cs := range idle {
		for _, cc := range cs {
			cc.close()
		}
	}
	c.local.close()
	return nil
}

// Write stores the concatenation of data (at most MaxLength bytes) as
// chunk (extent, index) on the server at addr, with capability tok (at
// most MaxCapLength bytes; nil: none). Over plaintext the bytes go from
// data to the socket without a copy. With wire compression on for addr
// (ClientOptions.Compress), data that shrinks goes as an s2 frame.
func (c *Client) Write(ctx context.Context, addr string, extent uint64, index uint32, tok []byte, data [][]byte) error {
	var n uint64
	for _, b := range data {
		n += uint64(len(b))
	}
	req := Request{Op: OpWrite, Extent: extent, Index: index, Length: n, Cap: tok}
	if c.useLocal(addr) {
		err := errFileWrite
		if n >= MinLocalFileWrite && n <= MaxLength {
			err = c.writeByFile(ctx, addr, req, data) // localwrite.go
		}
		if errors.Is(err, errFileWrite) || errors.Is(err, errs.ErrNotSupported) {
			err = c.do(ctx, addr, req, data, nil, true, nil)
		}
		if !errors.Is(err, errNoLocal) {
			if err == nil {
				c.stats.writeBytes.Add(n)
				c.stats.localWrite.Add(n)
			}
			return err
		}
	}
	if n <= MaxLength && c.opts.Compress != nil && c.opts.Compress(addr) {
		if f := encodeFrameOf(c.opts.Bufs, data, int(n)); f != nil {
			defer c.opts.Bufs.Put(f)
			req.Flags |= FlagS2
			req.WireLength = uint64(len(f))
			data = [][]byte{f}
		}
	}
	err := c.do(ctx, addr, req, data, nil, false, nil)
	if err == nil {
		c.stats.writeBytes.Add(n)
		wire := n
		if req.Flags&FlagS2 != 0 {
			wire = req.WireLength
		}
		c.stats.writeWire.Add(wire)
	}
	return err
}

// Read reads bytes [off, off+n) of chunk (extent, index) from the server at
// addr into dst, in order, where n is the total length of dst's slices
// (at most MaxLength), with capability tok (at most MaxCapLength bytes;
// nil: none). Over plaintext the bytes go from the socket to dst without
// a copy. With wire compression on for addr (ClientOptions.Compress) the
// server may send an s2 frame, which is decoded into dst (when dst is one
// slice; through a buffer when it is several).
func (c *Client) Read(ctx context.Context, addr string, extent uint64, index uint32, tok []byte, off uint64, dst [][]byte) error {
	var n uint64
	for _, b := range dst {
		n += uint64(len(b))
	}
	req := Request{Op: OpRead, Extent: extent, Index: index, Offset: off, Length: n, Cap: tok}
	if c.useLocal(addr) {
		err := c.readLocal(ctx, addr, req, dst)
		if !errors.Is(err, errNoLocal) {
			return err
		}
	}
	if n >= MinCompress && c.opts.Compress != nil && c.opts.Compress(addr) {
		req.Flags |= FlagAcceptS2
	}
	return c.do(ctx, addr, req, nil, dst, false, nil)
}

// maxPooledTries bounds the tries of one request on pooled connections
// that fail (see do); the try after them is on a new connection.
const maxPooledTries = 3

// do runs one request. A request that fails with an I/O error on a pooled
// connection is tried again on a new one (both operations are
// idempotent): the server may have closed it while it sat idle, or gone
// away and come back (a restart). Every other idle connection to the
// server was made before that failure too, so they are all closed at once
// (dropIdle), rather than found dead one request at a time. A failure on
// a connection just dialed is the server's answer: ErrUnavailable.
//
// With local, the request goes to addr's local endpoint (local.go); one
// that cannot be reached fails with errNoLocal, for the caller to go over
// TCP. out receives an OpOpen's file.
func (c *Client) do(ctx context.Context, addr string, req Request, send, recv [][]byte, local bool, out *openedChunk) error {
	if err := req.Validate(); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("datanet: %v on %s: %w", req.Op, addr, err)
		}
		key := addr
		if local {
			key = localKey(addr)
		}
		cc, pooled, err := c.get(ctx, key, attempt >= maxPooledTries)
		if err != nil {
			return err
		}
		keep, err := c.exchange(ctx, cc, req, send, recv, out)
		if keep {
			c.put(key, cc)
			return err
		}
		cc.close()
		var ioe *ioError
		if !errors.As(err, &ioe) {
			return err
		}
		if pooled && ctx.Err() == nil {
			c.dropIdle(key)
			continue
		}
		if local {
			// The server went away since it was found: TCP will say
			// whether it is back.
			c.local.setAbsent(addr)
			return fmt.Errorf("datanet: local %v on %s: %w (%w)", req.Op, addr, errNoLocal, ioe.err)
		}
		return fmt.Errorf("datanet: %v on %s: %w (%w)", req.Op, addr, errs.ErrUnavailable, ioe.err)
	}
}

// dropIdle closes every idle connection to addr.
func (c *Client) dropIdle(addr string) {
	c.mu.Lock()
	idle := c.mu.idle[addr]
	delete(c.mu.idle, addr)
	c.mu.Unlock()
	for _, cc := range idle {
		cc.close()
	}
}

// ioError marks a failed transfer: the server is unreachable, went away
// or stopped answering.
type ioError struct{ err error }

func (e *ioError) Error() string { return e.err.Error() }
func (e *ioError) Unwrap() error { return e.err }

// get returns an idle connection to addr (pooled true) or dials one;
// with dial, always a new one.
func (c *Client) get(ctx context.Context, addr string, dial bool) (cc *clientConn, pooled bool, err error) {
	now := time.Now()
	var stale []*clientConn
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil, false, fmt.Errorf("datanet: client closed: %w", errs.ErrInvalid)
	}
	cs := c.mu.idle[addr]
	for len(cs) > 0 && cc == nil && !dial {
		last := cs[len(cs)-1]
		cs = cs[:len(cs)-1]
		if now.Sub(last.lastUsed) > c.opts.MaxIdleTime {
			stale = append(stale, last)
			continue
		}
		cc = last
	}
	c.mu.idle[addr] = cs
	c.mu.Unlock()
	for _, s := range stale {
		s.close()
	}
	if cc != nil {
		return cc, true, nil
	}
	if a, ok := isLocalKey(addr); ok {
		return c.dialLocal(ctx, a)
	}
	conn, err := c.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("datanet: dial %s: %w", addr, ctx.Err())
		}
		return nil, false, fmt.Errorf("datanet: dial %s: %w (%w)", addr, errs.ErrUnavailable, err)
	}
	if c.opts.TLS == nil {
		return &clientConn{c: conn, raw: conn}, false, nil
	}
	tc, err := c.handshake(ctx, conn, addr)
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("datanet: TLS to %s: %w", addr, ctx.Err())
		}
		return nil, false, fmt.Errorf("datanet: TLS to %s: %w (%w)", addr, errs.ErrUnavailable, err)
	}
	return &clientConn{c: tc, raw: conn}, false, nil
}

// handshake runs the client side of a TLS handshake on conn to addr,
// within DialTimeout.
func (c *Client) handshake(ctx context.Context, conn net.Conn, addr string) (*tls.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	cfg := c.opts.TLS(host).Clone()
	if cfg == nil {
		return nil, fmt.Errorf("no TLS configuration for %s", host)
	}
	cfg.NextProtos = []string{wire.DataALPN}
	tc := tls.Client(conn, cfg)
	hctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return nil, err
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != wire.DataALPN {
		return nil, fmt.Errorf("server chose protocol %q, not %q", p, wire.DataALPN)
	}
	return tc, nil
}

// put gives a connection whose last exchange ended cleanly back to the
// pool, or closes it when the pool is full.
func (c *Client) put(addr string, cc *clientConn) {
	cc.lastUsed = time.Now()
	c.mu.Lock()
	if !c.mu.closed && len(c.mu.idle[addr]) < c.opts.MaxIdlePerAddr {
		c.mu.idle[addr] = append(c.mu.idle[addr], cc)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	cc.close()
}

// exchange sends req (and send) on cc and reads the reply into recv. keep
// reports whether the connection is still in step for another request.
// The context's deadline becomes the connection's; its cancellation
// unblocks the transfer, which then fails and discards the connection.
func (c *Client) exchange(ctx context.Context, cc *clientConn, req Request, send, recv [][]byte, out *openedChunk) (keep bool, err error) {
	dl, _ := ctx.Deadline() // zero: none
	if err := cc.c.SetDeadline(dl); err != nil {
		return false, &ioError{err}
	}
	// A deadline in the past unblocks every pending read and write.
	stop := context.AfterFunc(ctx, func() { cc.c.SetDeadline(time.Unix(1, 0)) })
	switch req.Op {
	case OpOpen:
		keep, err = c.transferOpen(cc.c, req, out)
	case OpCreate:
		keep, err = c.transferCreate(cc.c, req, send)
	default:
		keep, err = c.transfer(cc.c, req, send, recv)
	}
	if !stop() {
		out.close()
		// Cancelled or past the deadline: whatever the transfer saw, the
		// connection may be mid-request.
		return false, fmt.Errorf("datanet: %v: %w", req.Op, context.Cause(ctx))
	}
	var ioe *ioError
	if errors.As(err, &ioe) && errors.Is(ioe.err, os.ErrDeadlineExceeded) && !dl.IsZero() {
		// The connection's deadline, which is the context's, fired just
		// before the context noticed.
		return false, fmt.Errorf("datanet: %v: %w", req.Op, context.DeadlineExceeded)
	}
	return keep, err
}

// transfer is exchange without the context handling.
func (c *Client) transfer(conn net.Conn, req Request, send, recv [][]byte) (keep bool, err error) {
	// The header and the capability in one buffer: one TLS record.
	var h [RequestSize + MaxCapLength]byte
	req.Encode((*[RequestSize]byte)(h[:RequestSize]))
	n := RequestSize + copy(h[RequestSize:], req.Cap)
	out := make(net.Buffers, 0, 1+len(send))
	out = append(out, h[:n])
	for _, b := range send {
		if len(b) > 0 {
			out = append(out, b)
		}
	}
	if _, err := out.WriteTo(conn); err != nil {
		return false, &ioError{err}
	}
	var rh [ReplySize]byte
	if _, err := io.ReadFull(conn, rh[:]); err != nil {
		return false, &ioError{err}
	}
	r, err := DecodeReply(&rh)
	if err != nil {
		return false, err
	}
	if r.Op != req.Op {
		return false, fmt.Errorf("datanet: reply to %v for %v: %w", r.Op, req.Op, errs.ErrInvalid)
	}
	if r.Failed {
		return readErrorReply(conn, r)
	}
	if r.Compressed {
		// DecodeReply allows it on read replies only.
		if req.Flags&FlagAcceptS2 == 0 || r.Length > req.Length {
			return false, fmt.Errorf("datanet: compressed reply of %d bytes for %d (asked: %v): %w", r.Length, req.Length, req.Flags&FlagAcceptS2 != 0, errs.ErrInvalid)
		}
		f := c.opts.Bufs.Get(int(r.Length))
		defer c.opts.Bufs.Put(f)
		if _, err := io.ReadFull(conn, f); err != nil {
			return false, &ioError{err}
		}
		// The frame was read in full: the connection is in step whether
		// or not it decodes.
		if err := decodeFrame(recv, f, c.opts.Bufs); err != nil {
			return !r.Close, fmt.Errorf("datanet: %v reply: %w", req.Op, err)
		}
		c.stats.readBytes.Add(req.Length)
		c.stats.readWire.Add(r.Length)
		return !r.Close, nil
	}
	want := uint64(0)
	if req.Op == OpRead {
		want = req.Length
	}
	if r.Length != want {
		return false, fmt.Errorf("datanet: %v reply of %d bytes, want %d: %w", req.Op, r.Length, want, errs.ErrInvalid)
	}
	for _, b := range recv {
		if _, err := io.ReadFull(conn, b); err != nil {
			return false, &ioError{err}
		}
	}
	if req.Op == OpRead {
		c.stats.readBytes.Add(req.Length)
		if _, local := conn.(*net.UnixConn); local {
			c.stats.localRead.Add(req.Length)
		} else {
			c.stats.readWire.Add(req.Length)
		}
	}
	return !r.Close, nil
}

// readErrorReply reads the payload of the failed reply r from conn and
// returns the error it carries, with whether the connection may be kept.
func readErrorReply(conn net.Conn, r Reply) (keep bool, err error) {
	b := make([]byte, r.Length)
	if _, err := io.ReadFull(conn, b); err != nil {
		return false, &ioError{err}
	}
	return !r.Close, DecodeError(b)
}

// DecodeError turns the payload of an error reply back into the typed
// error it was made from, with wire.FromStatus.
func DecodeError(b []byte) error {
	var sp spb.Status
	if err := proto.Unmarshal(b, &sp); err != nil {
		return fmt.Errorf("datanet: undecodable error reply: %v: %w", err, errs.ErrInvalid)
	}
	if codes.Code(sp.GetCode()) == codes.OK {
		return fmt.Errorf("datanet: error reply with status OK: %w", errs.ErrInvalid)
	}
	return wire.FromStatus(status.ErrorProto(&sp))
}
