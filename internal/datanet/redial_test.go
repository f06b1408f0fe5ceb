package datanet

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// serveAt starts a server with h on addr (retrying while the kernel still
// holds a port just closed).
func serveAt(t *testing.T, addr string, h Handler) (*Server, *countingListener) {
	t.Helper()
	var lis net.Listener
	var err error
	for try := 0; try < 50; try++ {
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: lis}
	s, err := Serve(cl, ServerOptions{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, cl
}

// TestRedialAfterServerRestart: a server with many of the client's
// connections in its pool shuts down (closing them) and a new one starts
// on the same address, as an OST restarted in place. The next requests
// succeed, and the first of them drops every dead idle connection at once
// instead of trying them one by one: the new server sees one connection
// per request in flight, no more.
func TestRedialAfterServerRestart(t *testing.T) {
	const conns = 8
	for _, how := range []string{"shutdown", "close"} {
		t.Run(how, func(t *testing.T) {
			h := newMemHandler()
			s, _ := serveAt(t, "127.0.0.1:0", h)
			addr := s.Addr().String()
			c := newClient(t)
			data := randBytes(3*4096, 1)

			// Fill the pool: conns writes in flight at once.
			block := make(chan struct{})
			h.setBlock(block)
			var wg sync.WaitGroup
			for i := range conns {
				wg.Go(func() {
					if err := c.Write(t.Context(), addr, uint64(i), 0, nil, [][]byte{data}); err != nil {
						t.Errorf("write %d: %v", i, err)
					}
				})
			}
			for h.calls.Load() < conns {
				time.Sleep(time.Millisecond)
			}
			close(block)
			wg.Wait()
			h.setBlock(nil)
			if n := c.idleConns(addr); n != conns {
				t.Fatalf("%d idle connections, want %d", n, conns)
			}

			if how == "shutdown" {
				if err := s.Shutdown(t.Context()); err != nil {
					t.Fatal(err)
				}
			} else {
				s.Close()
			}
			s2, lis2 := serveAt(t, addr, h)
			time.Sleep(20 * time.Millisecond) // let the closes arrive

			for i := range 3 {
				if err := c.Write(t.Context(), addr, 100+uint64(i), 0, nil, [][]byte{data}); err != nil {
					t.Fatalf("write %d after the restart: %v", i, err)
				}
			}
			got := make([]byte, len(data))
			if err := c.Read(t.Context(), addr, 3, 0, nil, 0, [][]byte{got}); err != nil {
				t.Fatalf("read after the restart: %v", err)
			}
			if string(got) != string(data) {
				t.Fatal("read after the restart: wrong bytes")
			}
			if n := lis2.accepted.Load(); n != 1 {
				t.Errorf("new server accepted %d connections for requests one at a time, want 1", n)
			}
			if n := c.idleConns(addr); n != 1 {
				t.Errorf("%d idle connections after the restart, want 1", n)
			}

			// Many requests at once after a second restart: each succeeds.
			for i := range conns {
				wg.Go(func() {
					if err := c.Read(t.Context(), addr, 3, 0, nil, 0, [][]byte{make([]byte, len(data))}); err != nil {
						t.Errorf("read %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			s2.Shutdown(t.Context())
			serveAt(t, addr, h)
			time.Sleep(20 * time.Millisecond)
			for i := range conns {
				wg.Go(func() {
					if err := c.Write(t.Context(), addr, 200+uint64(i), 0, nil, [][]byte{data}); err != nil {
						t.Errorf("concurrent write %d after the second restart: %v", i, err)
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestServerGoneNoRetryLoop: with the server gone for good, a request on a
// pooled connection fails with ErrUnavailable after one dial, and the
// pool is empty.
func TestServerGoneNoRetryLoop(t *testing.T) {
	h := newMemHandler()
	s, _ := serveAt(t, "127.0.0.1:0", h)
	addr := s.Addr().String()
	c := newClient(t)
	for i := range 4 {
		if err := c.Write(t.Context(), addr, uint64(i), 0, nil, [][]byte{make([]byte, 4096)}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	time.Sleep(20 * time.Millisecond)
	err := c.Write(t.Context(), addr, 9, 0, nil, [][]byte{make([]byte, 4096)})
	if !errors.Is(err, errs.ErrUnavailable) {
		t.Errorf("write to a server gone: %v, want ErrUnavailable", err)
	}
	if n := c.idleConns(addr); n != 0 {
		t.Errorf("%d idle connections to a server gone, want 0", n)
	}
}
