package mds

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is one MDS served on loopback gRPC, with a client.
type env struct {
	t     testing.TB
	o     Options
	s     *Server
	c     mdspb.MdsClient
	g     *grpc.Server
	cc    *grpc.ClientConn
	clock *fakeClock
}

// testOptions returns options on a fresh directory with a fake clock and a
// GC loop that never fires on its own (tests call gcRound).
func testOptions(t testing.TB) Options {
	return Options{
		Dir:        t.TempDir(),
		GCInterval: time.Hour,
		GCGrace:    time.Minute,
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return startEnv(t, testOptions(t), newClock())
}

// startEnv opens an MDS with o, its clock set to clock, and serves it.
func startEnv(t testing.TB, o Options, clock *fakeClock) *env {
	t.Helper()
	o.Now = clock.Now
	e := &env{t: t, o: o, clock: clock}
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	e.s = s
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.g = grpc.NewServer(wire.ServerOptions()...)
	s.Register(e.g)
	go e.g.Serve(lis)
	e.cc, err = wire.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	e.c = mdspb.NewMdsClient(e.cc)
	t.Cleanup(e.stop)
	return e
}

// stop shuts the server down (idempotent).
func (e *env) stop() {
	if e.s == nil {
		return
	}
	e.cc.Close()
	e.g.Stop()
	if err := e.s.Close(); err != nil {
		e.t.Errorf("Close: %v", err)
	}
	e.s = nil
}

// reopen closes and reopens the MDS on the same directory.
func (e *env) reopen() *env {
	e.t.Helper()
	e.stop()
	return startEnv(e.t, e.o, e.clock)
}

// check fails the test if any invariant is broken.
func (e *env) check() {
	e.t.Helper()
	if err := e.s.snapshot(checkInvariants); err != nil {
		e.t.Fatal(err)
	}
}

var ctx = context.Background()

// wantErr fails unless err matches target (nil: no error).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	switch {
	case target == nil && err != nil:
		t.Fatalf("%s: unexpected error %v", what, err)
	case target != nil && !errors.Is(err, target):
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

func (e *env) mkdir(parent uint64, name string) *mdspb.Attr {
	e.t.Helper()
	r, err := e.c.Mkdir(ctx, &mdspb.CreateRequest{Parent: parent, Name: []byte(name), Mode: 0o755})
	if err != nil {
		e.t.Fatalf("mkdir %q: %v", name, err)
	}
	return r.Attr
}

func (e *env) create(parent uint64, name string) *mdspb.Attr {
	e.t.Helper()
	r, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: parent, Name: []byte(name), Mode: sIFREG | 0o644, Exclusive: true})
	if err != nil {
		e.t.Fatalf("create %q: %v", name, err)
	}
	return r.Attr
}

func (e *env) getattr(ino uint64) *mdspb.Attr {
	e.t.Helper()
	r, err := e.c.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: ino})
	if err != nil {
		e.t.Fatalf("getattr %d: %v", ino, err)
	}
	return r.Attr
}

func (e *env) lookup(parent uint64, name string) (*mdspb.Attr, error) {
	r, err := e.c.Lookup(ctx, &mdspb.LookupRequest{Parent: parent, Name: []byte(name)})
	return r.GetAttr(), err
}
