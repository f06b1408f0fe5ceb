package datanet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
)

// Handler serves the requests of a Server. Its errors wrap the sentinels
// of internal/errs; they reach the client as the same typed errors. The
// handler checks req.Cap, the request's capability.
type Handler interface {
	// WriteChunk stores data (req.Length bytes, Align-aligned) as chunk
	// (req.Extent, req.Index) and returns when it is durable. data is the
	// server's buffer, reused after the call.
	WriteChunk(ctx context.Context, req Request, data []byte) error
	// ReadChunk fills dst (req.Length bytes, Align-aligned) with bytes
	// [req.Offset, req.Offset+req.Length) of chunk (req.Extent, req.Index),
	// verified. dst is the server's buffer, sent after the call.
	ReadChunk(ctx context.Context, req Request, dst []byte) error
}

// Defaults of ServerOptions.
const (
	DefaultIdleTimeout   = 5 * time.Minute
	DefaultIOTimeout     = time.Minute
	DefaultMaxBytesInUse = 512 << 20
)

// handshakeTimeout bounds a TLS handshake of the server.
const handshakeTimeout = 10 * time.Second

// ServerOptions configure a Server.
type ServerOptions struct {
	Handler Handler      // required
	Logger  *slog.Logger // nil discards
	// IdleTimeout closes a connection that sends no request for this long.
	IdleTimeout time.Duration
	// IOTimeout bounds the transfer of one request's payload and of its
	// reply.
	IOTimeout time.Duration
	// MaxBytesInUse bounds the payload buffers of all requests being
	// served at once; a request waits for room before it allocates. At
	// least MaxLength.
	MaxBytesInUse int64
	// Bufs recycles payload buffers; nil gives the server a pool of its own.
	Bufs *BufPool
	// TLS, when set, serves TLS only (wire.Creds.DataServerConfig:
	// TLS 1.3, a client certificate from the cluster CA required, ALPN
	// wire.DataALPN). A connection that does not complete the handshake
	// or negotiate wire.DataALPN is closed without a reply. nil serves
	// plaintext (a cluster run --insecure).
	TLS *tls.Config
	// Authorize, when set with TLS, decides whether the peer of a
	// connection may use the data path, from its verified certificate
	// (nil when the configuration verified none). A refused peer's first
	// request gets the error (wrapping errs.ErrPermission, say) with the
	// close flag, without reaching the Handler.
	Authorize func(cert *x509.Certificate) error
	// Local marks a listener of local connections (local.go: ListenLocal):
	// plaintext, each peer checked by its credentials (root or this
	// process's user; a refused one gets ErrPermission for its first
	// request), and OpOpen served when the Handler is an Opener. TLS must
	// be nil.
	Local bool
}

func (o *ServerOptions) setDefaults() error {
	if o.Handler == nil {
		return fmt.Errorf("datanet: ServerOptions.Handler is nil: %w", errs.ErrInvalid)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.IOTimeout <= 0 {
		o.IOTimeout = DefaultIOTimeout
	}
	if o.MaxBytesInUse == 0 {
		o.MaxBytesInUse = DefaultMaxBytesInUse
	}
	if o.MaxBytesInUse < MaxLength {
		return fmt.Errorf("datanet: MaxBytesInUse %d is below MaxLength: %w", o.MaxBytesInUse, errs.ErrInvalid)
	}
	if o.Bufs == nil {
		o.Bufs = &BufPool{}
	}
	if o.Local && o.TLS != nil {
		return fmt.Errorf("datanet: a local listener with TLS: %w", errs.ErrInvalid)
	}
	return nil
}

// Server serves the data protocol on one listener. Each connection has
// its own goroutine, which serves its requests one at a time.
//
// Lock order: Server.mu before serverConn.mu.
type Server struct {
	opts   ServerOptions
	log    *slog.Logger
	lis    net.Listener
	budget *semaphore.Weighted // bytes of payload buffers in use
	ctx    context.Context     // of every request; cancelled when Close gives up waiting
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection goroutine

	mu struct {
		sync.Mutex
		closing bool
		conns   map[*serverConn]struct{}
	}
}

// serverConn is one accepted connection.
type serverConn struct {
	c  net.Conn // the TCP connection: Shutdown and Close close it, not its TLS
	mu struct {
		sync.Mutex
		busy   bool // a request is being served
		closed bool // closed by Shutdown while idle
	}
}

// Serve starts serving lis in the background. The Server owns lis from
// then on and closes it in Shutdown.
func Serve(lis net.Listener, o ServerOptions) (*Server, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{opts: o, log: o.Logger, lis: lis, budget: semaphore.NewWeighted(o.MaxBytesInUse), ctx: ctx, cancel: cancel}
	s.mu.conns = map[*serverConn]struct{}{}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

func (s *Server) accept() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := s.lis.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.mu.closing
			s.mu.Unlock()
			if closing || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (EMFILE, ...): back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("data path: accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		sc := &serverConn{c: c}
		s.mu.Lock()
		if s.mu.closing {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.mu.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(sc)
	}
}

// Shutdown stops accepting connections, closes the idle ones, and waits
// for the requests being served to finish and their connections to close.
// When ctx ends first it closes every connection, cancels the requests'
// context and waits for them to return.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.mu.closing = true
	for sc := range s.mu.conns {
		sc.mu.Lock()
		if !sc.mu.busy {
			sc.mu.closed = true
			sc.c.Close()
		}
		sc.mu.Unlock()
	}
	s.mu.Unlock()
	err := s.lis.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.cancel()
		return err
	case <-ctx.Done():
	}
	s.Close()
	return ctx.Err()
}

// Close closes the listener and every connection at once, as a crash
// would, and waits for the connection goroutines to return.
func (s *Server) Close() error {
	s.mu.Lock()
	s.mu.closing = true
	for sc := range s.mu.conns {
		sc.c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	err := s.lis.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	s.wg.Wait()
	return err
}

func (s *Server) serveConn(sc *serverConn) {
	defer s.wg.Done()
	defer func() {
		sc.c.Close()
		s.mu.Lock()
		delete(s.mu.conns, sc)
		s.mu.Unlock()
	}()
	if tc, ok := sc.c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	conn := sc.c
	var denied error // the peer may not use the data path (Authorize)
	if s.opts.TLS != nil {
		tc, err := s.handshake(sc.c)
		if err != nil {
			s.log.Info("data path: refused a connection", "remote", sc.c.RemoteAddr().String(), "err", err)
			return
		}
		conn = tc
		if s.opts.Authorize != nil {
			var cert *x509.Certificate
			if ch := tc.ConnectionState().VerifiedChains; len(ch) > 0 && len(ch[0]) > 0 {
				cert = ch[0][0]
			}
			if denied = s.opts.Authorize(cert); denied != nil {
				s.log.Warn("data path: refused a certificate", "remote", sc.c.RemoteAddr().String(), "err", denied)
			}
		}
	}
	if s.opts.Local {
		if denied = checkLocalPeer(sc.c); denied != nil {
			s.log.Warn("data path: refused a local peer", "err", denied)
		}
	}
	var hdr [RequestSize]byte
	capBuf := make([]byte, MaxCapLength) // the requests' capabilities, in turn
	for {
		sc.c.SetReadDeadline(time.Now().Add(s.opts.IdleTimeout))
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("data path: connection closed", "remote", sc.c.RemoteAddr().String(), "err", err)
			}
			return
		}
		sc.mu.Lock()
		if sc.mu.closed {
			sc.mu.Unlock()
			return
		}
		sc.mu.busy = true
		sc.mu.Unlock()

		keep := s.serveRequest(conn, &hdr, capBuf, denied)

		// Idle first, then look for a Shutdown: one that saw this
		// connection busy left it to be closed here.
		sc.mu.Lock()
		sc.mu.busy = false
		sc.mu.Unlock()
		s.mu.Lock()
		closing := s.mu.closing
		s.mu.Unlock()
		if !keep || closing {
			return
		}
	}
}

// handshake runs the server side of a TLS handshake on c and checks that
// it chose the data path's protocol.
func (s *Server) handshake(c net.Conn) (*tls.Conn, error) {
	tc := tls.Server(c, s.opts.TLS)
	c.SetDeadline(time.Now().Add(min(handshakeTimeout, s.opts.IOTimeout)))
	if err := tc.HandshakeContext(s.ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != wire.DataALPN {
		return nil, fmt.Errorf("TLS: protocol %q, not %q", p, wire.DataALPN)
	}
	c.SetDeadline(time.Time{})
	return tc, nil
}

// serveRequest serves the request whose header is in hdr, reading its
// capability into capBuf, and reports whether the connection can carry
// another one. A non-nil denied refuses it (and the connection).
func (s *Server) serveRequest(c net.Conn, hdr *[RequestSize]byte, capBuf []byte, denied error) (keep bool) {
	if !hasRequestMagic(hdr) {
		s.log.Warn("data path: bad magic; closing the connection", "remote", c.RemoteAddr().String())
		return false
	}
	c.SetDeadline(time.Now().Add(s.opts.IOTimeout))
	req, capLen, err := DecodeRequest(hdr)
	if err != nil {
		// The payload's length cannot be trusted: reply, then close.
		s.log.Warn("data path: bad request header; closing the connection", "remote", c.RemoteAddr().String(), "err", err)
		s.replyError(c, Op(hdr[5]), err, true)
		return false
	}
	if capLen > 0 {
		if _, err := io.ReadFull(c, capBuf[:capLen]); err != nil {
			s.log.Debug("data path: capability", "remote", c.RemoteAddr().String(), "err", err)
			return false
		}
		req.Cap = capBuf[:capLen]
	}
	// The payload's bytes on the wire: an s2 frame's for a compressed
	// write.
	wire := int64(req.Length)
	if req.Op == OpWrite && req.Flags&FlagS2 != 0 {
		wire = int64(req.WireLength)
	}
	if denied != nil {
		// Skip the payload, so that the client reads the reply rather
		// than a reset, then refuse and close.
		if req.Op == OpWrite {
			if _, err := io.CopyN(io.Discard, c, wire); err != nil {
				return false
			}
		}
		s.replyError(c, req.Op, denied, true)
		return false
	}
	switch req.Op {
	case OpOpen:
		return s.serveOpen(c, req)
	case OpCreate:
		return s.serveCreate(c, req, hdr, capBuf)
	case OpCommit:
		// Only right after its OpCreate, which reads it.
		s.replyError(c, req.Op, fmt.Errorf("datanet: commit without a create: %w", errs.ErrInvalid), true)
		return false
	}
	n := int(req.Length)
	// The budget counts the chunk's buffer and the frame's: the one
	// received (FlagS2) or the one a compressed read reply may need
	// (FlagAcceptS2), within the whole budget.
	frameLen := 0
	switch {
	case req.Op == OpWrite && req.Flags&FlagS2 != 0:
		frameLen = int(wire)
	case req.Op == OpRead && req.Flags&FlagAcceptS2 != 0 && n >= MinCompress:
		frameLen = maxFrameLen(n)
	}
	need := min(int64(n)+int64(frameLen), s.opts.MaxBytesInUse)
	if err := s.budget.Acquire(s.ctx, need); err != nil {
		return false // closing
	}
	defer s.budget.Release(need)
	buf := s.opts.Bufs.Get(n)
	defer s.opts.Bufs.Put(buf)

	switch req.Op {
	case OpWrite:
		if frameLen > 0 {
			f := s.opts.Bufs.Get(frameLen)
			defer s.opts.Bufs.Put(f)
			if _, err := io.ReadFull(c, f); err != nil {
				s.log.Debug("data path: write payload", "remote", c.RemoteAddr().String(), "err", err)
				return false
			}
			// The frame was read in full: a bad one leaves the
			// connection in step.
			if err := decodeFrame([][]byte{buf}, f, nil); err != nil {
				s.log.Warn("data path: compressed write refused", "remote", c.RemoteAddr().String(),
					"extent", req.Extent, "index", req.Index, "err", err)
				return s.replyError(c, req.Op, err, false)
			}
		} else if _, err := io.ReadFull(c, buf); err != nil {
			s.log.Debug("data path: write payload", "remote", c.RemoteAddr().String(), "err", err)
			return false
		}
		err := s.opts.Handler.WriteChunk(s.ctx, req, buf)
		// The handler may take long (fsync); the reply gets a fresh bound.
		c.SetWriteDeadline(time.Now().Add(s.opts.IOTimeout))
		if err != nil {
			return s.replyError(c, req.Op, err, false)
		}
		return s.reply(c, Reply{Op: req.Op}, nil)
	default: // OpRead: Validate knows no other op
		err := s.opts.Handler.ReadChunk(s.ctx, req, buf)
		c.SetWriteDeadline(time.Now().Add(s.opts.IOTimeout))
		if err != nil {
			return s.replyError(c, req.Op, err, false)
		}
		if frameLen > 0 {
			f := s.opts.Bufs.Get(frameLen)
			defer s.opts.Bufs.Put(f)
			if fr := encodeFrame(f, buf); fr != nil {
				return s.reply(c, Reply{Op: req.Op, Compressed: true, Length: uint64(len(fr))}, fr)
			}
		}
		return s.reply(c, Reply{Op: req.Op, Length: req.Length}, buf)
	}
}

// reply sends a reply header and its payload in one writev.
func (s *Server) reply(c net.Conn, r Reply, payload []byte) bool {
	var h [ReplySize]byte
	r.Encode(&h)
	bufs := net.Buffers{h[:]}
	if len(payload) > 0 {
		bufs = append(bufs, payload)
	}
	if _, err := bufs.WriteTo(c); err != nil {
		s.log.Debug("data path: reply", "remote", c.RemoteAddr().String(), "err", err)
		return false
	}
	return !r.Close
}

// replyError sends err as an error reply: the google.rpc.Status that
// wire.ToStatus makes of it.
func (s *Server) replyError(c net.Conn, op Op, err error, closing bool) bool {
	b, merr := EncodeError(err)
	if merr != nil {
		s.log.Warn("data path: encode error reply", "err", merr)
		return false
	}
	return s.reply(c, Reply{Op: op, Failed: true, Close: closing, Length: uint64(len(b))}, b)
}

// EncodeError encodes err as the payload of an error reply: the
// google.rpc.Status proto of wire.ToStatus(err), its message cut so that
// the whole fits in MaxErrorLength.
func EncodeError(err error) ([]byte, error) {
	sp := status.Convert(wire.ToStatus(err)).Proto()
	if len(sp.GetMessage()) > MaxErrorLength/2 {
		sp.Message = sp.GetMessage()[:MaxErrorLength/2] + "..."
	}
	b, merr := proto.Marshal(sp)
	if merr != nil {
		return nil, merr
	}
	if len(b) > MaxErrorLength {
		return nil, fmt.Errorf("datanet: error status of %d bytes: %w", len(b), errs.ErrTooLarge)
	}
	return b, nil
}
