package mds

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// fakeOst is an OST on loopback that only records DeleteChunks.
type fakeOst struct {
	ostpb.UnimplementedOstServer
	addr string

	mu      sync.Mutex
	deleted []string // "extent/index"
	fail    bool
}

func (f *fakeOst) DeleteChunks(_ context.Context, req *ostpb.DeleteChunksRequest) (*ostpb.DeleteChunksReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, fmt.Errorf("disk on fire: %w", errs.ErrUnavailable)
	}
	for _, id := range req.GetIds() {
		f.deleted = append(f.deleted, fmt.Sprintf("%d/%d", id.GetExtent(), id.GetIndex()))
	}
	return &ostpb.DeleteChunksReply{Deleted: uint32(len(req.GetIds()))}, nil
}

func (f *fakeOst) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.deleted
	f.deleted = nil
	slices.Sort(d)
	return d
}

func (f *fakeOst) setFail(v bool) {
	f.mu.Lock()
	f.fail = v
	f.mu.Unlock()
}

func startFakeOsts(t *testing.T, n int) []*fakeOst {
	var out []*fakeOst
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f := &fakeOst{addr: lis.Addr().String()}
		g := grpc.NewServer(wire.ServerOptions()...)
		ostpb.RegisterOstServer(g, f)
		go g.Serve(lis)
		t.Cleanup(g.Stop)
		out = append(out, f)
	}
	return out
}

// gc runs one GC round on the test goroutine (the loop never fires: the
// interval is an hour).
func (e *env) gc() {
	e.t.Helper()
	if err := e.s.gc.round(context.Background()); err != nil {
		e.t.Fatalf("gc round: %v", err)
	}
}

func TestGC(t *testing.T) {
	fakes := startFakeOsts(t, 6)
	var addrs []string
	for _, f := range fakes {
		addrs = append(addrs, f.addr)
	}
	e := newEnv(t)
	ids := e.registerOsts(6, addrs...)
	byID := make(map[uint32]*fakeOst)
	for i, id := range ids {
		byID[id] = fakes[i]
	}
	f := e.create(rootIno, "f")
	ex := e.alloc(f.Ino, 2)
	A, B := written(ex[0], 4*mib), written(ex[1], 4*mib)
	e.commit(f.Ino, ref(0, 4*mib, 0, A))
	e.commit(f.Ino, ref(0, 4*mib, 0, B)) // A is now garbage
	if q := e.gcQueue(); !slices.Equal(q, []uint64{A.Id}) {
		t.Fatalf("gc queue %v", q)
	}

	// Before the grace period nothing is deleted.
	e.clock.Advance(30 * time.Second)
	e.heartbeatAll(ids)
	e.gc()
	for _, fk := range fakes {
		if d := fk.take(); len(d) != 0 {
			t.Fatalf("deleted early: %v", d)
		}
	}

	// After it, every OST of A's placement deletes its chunk; one OST
	// fails, so the entry stays.
	failing := byID[A.Osts[2]]
	failing.setFail(true)
	e.clock.Advance(31 * time.Second)
	e.heartbeatAll(ids)
	e.gc()
	for j, id := range A.Osts {
		d := byID[id].take()
		if id == A.Osts[2] {
			continue
		}
		if want := []string{fmt.Sprintf("%d/%d", A.Id, j)}; !slices.Equal(d, want) {
			t.Fatalf("OST %d deleted %v, want %v", id, d, want)
		}
	}
	if q := e.gcQueue(); !slices.Equal(q, []uint64{A.Id}) {
		t.Fatalf("gc queue after partial failure %v", q)
	}
	// The retry, gcRetryDelay later, asks only the OST that failed.
	failing.setFail(false)
	e.gc()
	if d := failing.take(); len(d) != 0 {
		t.Fatalf("retried before the delay: %v", d)
	}
	e.clock.Advance(gcRetryDelay)
	e.heartbeatAll(ids)
	e.gc()
	for _, fk := range fakes {
		if fk != failing && len(fk.take()) != 0 {
			t.Fatal("retry asked an OST that had confirmed")
		}
	}
	if d := failing.take(); !slices.Equal(d, []string{fmt.Sprintf("%d/2", A.Id)}) {
		t.Fatalf("retry deleted %v", d)
	}
	if q := e.gcQueue(); len(q) != 0 {
		t.Fatalf("gc queue %v after retry", q)
	}

	// An orphan allocation (never committed) expires after the grace
	// period: it is queued, its chunks deleted, and a late commit fails.
	orphan := e.alloc(f.Ino, 1)[0]
	e.clock.Advance(59 * time.Second)
	e.heartbeatAll(ids)
	e.gc()
	if p := e.pending(); !slices.Equal(p, []uint64{orphan.Id}) {
		t.Fatalf("pending %v", p)
	}
	e.clock.Advance(2 * time.Second)
	e.heartbeatAll(ids)
	e.gc()
	if p := e.pending(); len(p) != 0 {
		t.Fatalf("pending %v after expiry", p)
	}
	if q := e.gcQueue(); len(q) != 0 {
		t.Fatalf("gc queue %v", q)
	}
	n := 0
	for _, fk := range fakes {
		n += len(fk.take())
	}
	if n != 6 {
		t.Fatalf("orphan: %d chunks deleted, want 6", n)
	}
	_, err := e.c.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: f.Ino, Extents: []*mdspb.ExtentRef{ref(0, mib, 0, written(orphan, mib))}})
	wantErr(t, "late commit", err, errs.ErrStale)

	// A down OST is not called; the entry waits. An OST unknown to the
	// registry counts as done.
	if _, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("f")}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	e.heartbeatAll(ids[1:]) // ids[0] is down
	e.gc()
	if q := e.gcQueue(); !slices.Equal(q, []uint64{B.Id}) {
		t.Fatalf("gc queue %v with an OST down", q)
	}
	if d := fakes[0].take(); len(d) != 0 {
		t.Fatalf("down OST called: %v", d)
	}
	e.clock.Advance(gcRetryDelay)
	e.heartbeatAll(ids)
	e.gc()
	if q := e.gcQueue(); len(q) != 0 {
		t.Fatalf("gc queue %v", q)
	}
	if d := fakes[0].take(); len(d) != 1 {
		t.Fatalf("OST back up deleted %v", d)
	}
	e.check()
}

// The loop itself runs on its interval and stops with Close.
func TestGCLoop(t *testing.T) {
	fakes := startFakeOsts(t, 6)
	var addrs []string
	for _, f := range fakes {
		addrs = append(addrs, f.addr)
	}
	o := testOptions(t)
	o.GCInterval = 10 * time.Millisecond
	o.GCGrace = time.Nanosecond
	o.HeartbeatTimeout = time.Hour
	e := startEnv(t, o, newClock())
	e.registerOsts(6, addrs...)
	f := e.create(rootIno, "f")
	e.alloc(f.Ino, 1)
	e.clock.Advance(time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for len(e.pending()) != 0 || len(e.gcQueue()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("gc loop did not run: pending %v queue %v", e.pending(), e.gcQueue())
		}
		time.Sleep(10 * time.Millisecond)
	}
	n := 0
	for _, fk := range fakes {
		n += len(fk.take())
	}
	if n != 6 {
		t.Fatalf("%d chunks deleted, want 6", n)
	}
}
