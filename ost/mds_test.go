package ost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// fakeMDS implements RegisterOst and Heartbeat: ids by uuid, and NotFound
// for heartbeats from ids it does not know (forgotten ones).
type fakeMDS struct {
	mdspb.UnimplementedMdsServer
	addr string

	mu        sync.Mutex
	ids       map[string]uint32 // uuid -> id
	known     map[uint32]bool   // ids heartbeats are accepted from
	next      uint32            // last id assigned
	registers int
	beats     []*mdspb.HeartbeatRequest
}

// startFakeMDS serves a fakeMDS on addr ("127.0.0.1:0" for any port).
func startFakeMDS(t *testing.T, addr string, firstID uint32) *fakeMDS {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeMDS{addr: lis.Addr().String(), ids: map[string]uint32{}, known: map[uint32]bool{}, next: firstID - 1}
	g := grpc.NewServer(wire.ServerOptions()...)
	mdspb.RegisterMdsServer(g, f)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return f
}

func (f *fakeMDS) RegisterOst(_ context.Context, req *mdspb.RegisterOstRequest) (*mdspb.RegisterOstReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetUuid() == "" || req.GetAddr() == "" || req.GetCapacity() == 0 {
		return nil, fmt.Errorf("fake mds: bad RegisterOst %v: %w", req, errs.ErrInvalid)
	}
	id, ok := f.ids[req.GetUuid()]
	if !ok {
		f.next++
		id = f.next
		f.ids[req.GetUuid()] = id
	}
	f.known[id] = true
	f.registers++
	return &mdspb.RegisterOstReply{Id: id}, nil
}

func (f *fakeMDS) Heartbeat(_ context.Context, req *mdspb.HeartbeatRequest) (*mdspb.Empty, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known[req.GetId()] {
		return nil, fmt.Errorf("fake mds: ost %d: %w", req.GetId(), errs.ErrNotFound)
	}
	f.beats = append(f.beats, req)
	return &mdspb.Empty{}, nil
}

func (f *fakeMDS) forget(id uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.known, id)
}

func (f *fakeMDS) counts() (registers, beats int, last *mdspb.HeartbeatRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.beats); n > 0 {
		last = f.beats[n-1]
	}
	return f.registers, len(f.beats), last
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRegisterAndHeartbeat(t *testing.T) {
	mds := startFakeMDS(t, "127.0.0.1:0", 7)
	dir := t.TempDir()
	o := Options{MDSAddr: mds.addr, AdvertiseAddr: "127.0.0.1:9999", HeartbeatInterval: 10 * time.Millisecond, BlockSize: testBlock}
	to := startOST(t, dir, o)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := to.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// After Start: an OST with an MDS takes chunk calls once registered
	// (caps.go).
	to.write(t, 1, 0, make([]byte, 5000))
	if to.srv.ID() != 7 {
		t.Fatalf("ID %d, want 7", to.srv.ID())
	}
	if b, err := os.ReadFile(filepath.Join(dir, idFile)); err != nil || strings.TrimSpace(string(b)) != "7" {
		t.Fatalf("%s: %q, %v", idFile, b, err)
	}
	if err := to.srv.Start(ctx); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("second Start: %v, want ErrInvalid", err)
	}
	waitFor(t, "heartbeats", func() bool { _, n, _ := mds.counts(); return n >= 3 })
	_, _, last := mds.counts()
	if last.GetId() != 7 || last.GetAddr() != o.AdvertiseAddr || last.GetChunks() != 1 || last.GetUsed() != 5000 || last.GetCapacity() == 0 {
		t.Fatalf("heartbeat %v", last)
	}

	// The MDS forgets the OST: it registers again and heartbeats go on.
	regs, _, _ := mds.counts()
	mds.forget(7)
	waitFor(t, "re-registration", func() bool { r, _, _ := mds.counts(); return r > regs })
	_, beats, _ := mds.counts()
	waitFor(t, "heartbeats after re-registration", func() bool { _, n, _ := mds.counts(); return n > beats+2 })

	// Restart: the persisted id is known before Start, and kept.
	to.stop(t)
	_, beats, _ = mds.counts()
	time.Sleep(30 * time.Millisecond)
	if _, n, _ := mds.counts(); n != beats {
		t.Fatalf("heartbeats after Close: %d, then %d", beats, n)
	}
	to2 := startOST(t, dir, o)
	if to2.srv.ID() != 7 || to2.info(t).GetId() != 7 {
		t.Fatalf("ID after reopen %d, want 7", to2.srv.ID())
	}
	if err := to2.srv.Start(ctx); err != nil || to2.srv.ID() != 7 {
		t.Fatalf("Start after reopen: %v, id %d", err, to2.srv.ID())
	}
	to2.stop(t)

	// An MDS that assigns this uuid another id is refused.
	other := startFakeMDS(t, "127.0.0.1:0", 100)
	o.MDSAddr = other.addr
	to3 := startOST(t, dir, o)
	if err := to3.srv.Start(ctx); !errors.Is(err, errs.ErrStale) {
		t.Fatalf("Start with another id: %v, want ErrStale", err)
	}
	if to3.srv.ID() != 7 {
		t.Fatalf("ID %d after refused registration", to3.srv.ID())
	}
}

func TestStartWaitsForMDS(t *testing.T) {
	// Find a free port, then bring the MDS up on it only after Start began.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	to := startOST(t, t.TempDir(), Options{MDSAddr: addr, AdvertiseAddr: "127.0.0.1:1", HeartbeatInterval: 10 * time.Millisecond})

	// Not reachable: Start gives up when its context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := to.srv.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start with no MDS: %v, want DeadlineExceeded", err)
	}

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- to.srv.Start(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	mds := startFakeMDS(t, addr, 3)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if to.srv.ID() != 3 {
		t.Fatalf("ID %d, want 3", to.srv.ID())
	}
	waitFor(t, "heartbeats", func() bool { _, n, _ := mds.counts(); return n >= 1 })
}

func TestStartNeedsAdvertiseAddr(t *testing.T) {
	s, err := Open(t.Context(), Options{Dir: t.TempDir(), MDSAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Start(t.Context()); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Start: %v, want ErrInvalid", err)
	}
}
