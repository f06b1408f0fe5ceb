package datanet

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
)

// testPKI is a cluster CA in a temporary directory.
type testPKI struct {
	dir string
	ca  *pki.CA
}

func newPKI(t testing.TB, name string) *testPKI {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	ca, err := pki.InitCA(dir, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{dir: dir, ca: ca}
}

// creds issues a certificate of role to name for 127.0.0.1.
func (p *testPKI) creds(t testing.TB, role pki.Role, name string) *wire.Creds {
	t.Helper()
	paths, err := p.ca.IssueTo(filepath.Join(p.dir, "certs"), pki.Request{Role: role, Name: name, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := wire.LoadCreds(wire.TLSFiles{Cert: paths.Cert, Key: paths.Key, CA: paths.CA})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// capHandler is a memHandler that records the capabilities it saw.
type capHandler struct {
	*memHandler
	mu   sync.Mutex
	caps [][]byte
}

func (h *capHandler) record(tok []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.caps = append(h.caps, bytes.Clone(tok))
}

func (h *capHandler) WriteChunk(ctx context.Context, req Request, data []byte) error {
	h.record(req.Cap)
	return h.memHandler.WriteChunk(ctx, req, data)
}

func (h *capHandler) ReadChunk(ctx context.Context, req Request, dst []byte) error {
	h.record(req.Cap)
	return h.memHandler.ReadChunk(ctx, req, dst)
}

// serveTLS starts a TLS server with h on loopback, the OST's way: roles
// client, admin and mds only.
func serveTLS(t testing.TB, h Handler, creds *wire.Creds) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Serve(lis, ServerOptions{Handler: h, TLS: creds.DataServerConfig(), Authorize: allowRoles(pki.RoleClient, pki.RoleAdmin, pki.RoleMDS)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func allowRoles(roles ...pki.Role) func(*x509.Certificate) error {
	return func(cert *x509.Certificate) error {
		if cert != nil {
			if id, ok := wire.IdentityOf(cert); ok {
				for _, r := range roles {
					if id.Role == r {
						return nil
					}
				}
			}
		}
		return fmt.Errorf("not allowed: %w", errs.ErrPermission)
	}
}

func tlsClient(t testing.TB, creds *wire.Creds) *Client {
	c := NewClient(ClientOptions{TLS: creds.DataClientConfig})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTLSRoundTrip: over TLS, chunks and capabilities arrive intact, and
// sequential requests share one connection.
func TestTLSRoundTrip(t *testing.T) {
	p := newPKI(t, "ca")
	h := &capHandler{memHandler: newMemHandler()}
	s := serveTLS(t, h, p.creds(t, pki.RoleOST, "ost"))
	c := tlsClient(t, p.creds(t, pki.RoleClient, "node"))
	addr := s.Addr().String()
	tok := randBytes(38, 9)
	for i, n := range []int{1, 4096, 1<<20 + 17, 3 << 20} {
		data := randBytes(n, uint64(i))
		if err := c.Write(t.Context(), addr, uint64(i+1), 1, tok, [][]byte{data[:n/2], data[n/2:]}); err != nil {
			t.Fatalf("write %d bytes: %v", n, err)
		}
		got := make([]byte, n)
		if err := c.Read(t.Context(), addr, uint64(i+1), 1, tok, 0, [][]byte{got}); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes: %v (equal %v)", n, err, bytes.Equal(got, data))
		}
	}
	if err := c.Read(t.Context(), addr, 1, 1, nil, 0, [][]byte{make([]byte, 1)}); err != nil {
		t.Fatalf("read without a capability (the handler checks none): %v", err)
	}
	h.mu.Lock()
	for i, got := range h.caps {
		want := tok
		if i == len(h.caps)-1 {
			want = nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("request %d: handler saw capability %x, want %x", i, got, want)
		}
	}
	h.mu.Unlock()
	if n := c.idleConns(addr); n != 1 {
		t.Errorf("%d idle connections after sequential requests, want 1", n)
	}
	// Typed errors cross as over plaintext.
	h.setFail(fmt.Errorf("x: %w", errs.ErrNotFound))
	if err := c.Read(t.Context(), addr, 1, 1, tok, 0, [][]byte{make([]byte, 1)}); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("handler error over TLS: %v", err)
	}
	// A capability over MaxCapLength is refused before anything is sent.
	if err := c.Read(t.Context(), addr, 1, 1, make([]byte, MaxCapLength+1), 0, [][]byte{make([]byte, 1)}); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("capability over MaxCapLength: %v, want ErrInvalid", err)
	}
}

// TestTLSRefusals: a TLS server refuses plaintext, a certificate of another
// CA, a client that does not ask for the data path's ALPN protocol and a
// certificate whose role may not use the data path; none reaches the
// handler. A client refuses a server whose certificate is not a server's.
func TestTLSRefusals(t *testing.T) {
	p := newPKI(t, "ca")
	h := newMemHandler()
	s := serveTLS(t, h, p.creds(t, pki.RoleOST, "ost"))
	addr := s.Addr().String()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	chunk := [][]byte{make([]byte, 8192)}

	t.Run("plaintext", func(t *testing.T) {
		c := newClient(t)
		if err := c.Write(ctx, addr, 1, 0, nil, chunk); err == nil {
			t.Fatal("a plaintext write to a TLS server succeeded")
		}
		if err := c.Read(ctx, addr, 1, 0, nil, 0, [][]byte{make([]byte, 10)}); err == nil {
			t.Fatal("a plaintext read from a TLS server succeeded")
		}
		// Raw: the server closes without a reply.
		var b [RequestSize]byte
		Request{Op: OpRead, Extent: 1, Length: 10}.Encode(&b)
		wantClosed(t, rawConn(t, addr, b[:]))
	})
	t.Run("another CA", func(t *testing.T) {
		other := newPKI(t, "other")
		c := tlsClient(t, other.creds(t, pki.RoleClient, "intruder"))
		err := c.Write(ctx, addr, 1, 0, nil, chunk)
		if err == nil {
			t.Fatal("a certificate of another CA was accepted")
		}
		if !errors.Is(err, errs.ErrUnavailable) {
			t.Errorf("another CA: %v, want ErrUnavailable (a failed handshake)", err)
		}
	})
	t.Run("no ALPN", func(t *testing.T) {
		cr := p.creds(t, pki.RoleClient, "grpc-like")
		conn, err := tls.Dial("tcp", addr, cr.ClientConfig("127.0.0.1")) // asks for no protocol
		if err == nil {
			// TLS 1.3: the server's refusal may come after the client's
			// side of the handshake.
			var b [RequestSize]byte
			Request{Op: OpRead, Extent: 1, Length: 10}.Encode(&b)
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			conn.Write(b[:])
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil {
			t.Fatal("a TLS client without the data path's ALPN protocol got an answer")
		}
		h2 := cr.ClientConfig("127.0.0.1")
		h2.NextProtos = []string{"h2"}
		if conn, err := tls.Dial("tcp", addr, h2); err == nil {
			conn.Close()
			t.Fatal("a gRPC (h2) client completed a handshake with the data path")
		}
	})
	t.Run("role", func(t *testing.T) {
		c := tlsClient(t, p.creds(t, pki.RoleOST, "other-ost"))
		// A write's payload is skipped, so that the refusal arrives.
		if err := c.Write(ctx, addr, 1, 0, nil, [][]byte{make([]byte, 4<<20)}); !errors.Is(err, errs.ErrPermission) {
			t.Errorf("write with an ost certificate: %v, want ErrPermission", err)
		}
		if err := c.Read(ctx, addr, 1, 0, nil, 0, [][]byte{make([]byte, 10)}); !errors.Is(err, errs.ErrPermission) {
			t.Errorf("read with an ost certificate: %v, want ErrPermission", err)
		}
		if n := c.idleConns(addr); n != 0 {
			t.Errorf("%d idle connections after refusals, want 0", n)
		}
	})
	if n := h.calls.Load(); n != 0 {
		t.Errorf("handler called %d times for refused connections", n)
	}
	t.Run("server role", func(t *testing.T) {
		// A server holding a client certificate is not a server.
		fake := serveTLS(t, newMemHandler(), p.creds(t, pki.RoleClient, "impostor"))
		c := tlsClient(t, p.creds(t, pki.RoleClient, "node"))
		if err := c.Write(ctx, fake.Addr().String(), 1, 0, nil, chunk); !errors.Is(err, errs.ErrUnavailable) {
			t.Errorf("write to a server with a client certificate: %v, want ErrUnavailable", err)
		}
	})
	t.Run("allowed roles", func(t *testing.T) {
		for _, r := range []pki.Role{pki.RoleClient, pki.RoleAdmin, pki.RoleMDS} {
			c := tlsClient(t, p.creds(t, r, "ok-"+string(r)))
			if err := c.Write(ctx, addr, 1, 0, nil, chunk); err != nil {
				t.Errorf("write with a %s certificate: %v", r, err)
			}
		}
	})
}

// TestTLSReload: after the server's credentials are reloaded from files
// of a new CA, new connections need the new CA; open ones keep working.
func TestTLSReload(t *testing.T) {
	oldCA := newPKI(t, "old")
	srvCreds := oldCA.creds(t, pki.RoleOST, "ost")
	s := serveTLS(t, newMemHandler(), srvCreds)
	addr := s.Addr().String()
	oldClient := tlsClient(t, oldCA.creds(t, pki.RoleClient, "node"))
	if err := oldClient.Write(t.Context(), addr, 1, 0, nil, [][]byte{make([]byte, 4096)}); err != nil {
		t.Fatal(err)
	}

	// New files in place of the server's (SIGHUP's Reload reads them).
	newCA := newPKI(t, "new")
	np, err := newCA.ca.IssueTo(filepath.Join(newCA.dir, "certs"), pki.Request{Role: pki.RoleOST, Name: "ost", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	f := srvCreds.Files()
	for src, dst := range map[string]string{np.Cert: f.Cert, np.Key: f.Key, np.CA: f.CA} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := srvCreds.Reload(); err != nil {
		t.Fatal(err)
	}
	// The pooled connection was made before: it still works.
	if err := oldClient.Write(t.Context(), addr, 2, 0, nil, [][]byte{make([]byte, 4096)}); err != nil {
		t.Errorf("a connection opened before the reload: %v", err)
	}
	fresh := tlsClient(t, oldCA.creds(t, pki.RoleClient, "node2"))
	if err := fresh.Write(t.Context(), addr, 3, 0, nil, [][]byte{make([]byte, 4096)}); err == nil {
		t.Error("a new connection with the old CA's certificate was accepted after the reload")
	}
	newClient := tlsClient(t, newCA.creds(t, pki.RoleClient, "node"))
	if err := newClient.Write(t.Context(), addr, 4, 0, nil, [][]byte{make([]byte, 4096)}); err != nil {
		t.Errorf("a new connection with the new CA's certificate: %v", err)
	}
}

// nopHandler stores nothing and reads whatever its buffer holds: the
// transport alone.
type nopHandler struct{}

func (nopHandler) WriteChunk(context.Context, Request, []byte) error { return nil }
func (nopHandler) ReadChunk(context.Context, Request, []byte) error  { return nil }

// BenchmarkTransfer writes and reads 4 MiB chunks (an RS 4+2 extent's
// chunk with 1 MiB cells) over loopback, plaintext and mutual TLS, with a
// 38-byte capability on each request, on one connection.
func BenchmarkTransfer(b *testing.B) {
	const size = 4 << 20
	p := newPKI(b, "ca")
	tok := randBytes(38, 1)
	data := AlignedBuf(size)
	copy(data, randBytes(size, 2))
	for _, mode := range []string{"plain", "tls"} {
		var s *Server
		var c *Client
		if mode == "tls" {
			s = serveTLS(b, nopHandler{}, p.creds(b, pki.RoleOST, "ost"))
			c = tlsClient(b, p.creds(b, pki.RoleClient, "node"))
		} else {
			s = serve(b, nopHandler{})
			c = NewClient(ClientOptions{})
			b.Cleanup(func() { c.Close() })
		}
		addr := s.Addr().String()
		b.Run(mode+"/write", func(b *testing.B) {
			b.SetBytes(size)
			defer reportCPU(b, size)()
			for b.Loop() {
				if err := c.Write(b.Context(), addr, 1, 0, tok, [][]byte{data}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode+"/read", func(b *testing.B) {
			b.SetBytes(size)
			dst := AlignedBuf(size)
			defer reportCPU(b, size)()
			for b.Loop() {
				if err := c.Read(b.Context(), addr, 1, 0, tok, 0, [][]byte{dst}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// reportCPU reports the bytes moved per CPU-second of the process (both
// ends of the transfer) when the returned function runs.
func reportCPU(b *testing.B, size int) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0 := cpu()
	return func() {
		if d := cpu() - c0; d > 0 {
			b.ReportMetric(float64(size)*float64(b.N)/1e6/d.Seconds(), "MB/cpu-s")
		}
	}
}
