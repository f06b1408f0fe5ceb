package mds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/mds/peerpb"
)

// group is an in-process MDS group on loopback.
type group struct {
	t     testing.TB
	dirs  map[uint64]string
	addrs map[uint64]string
	srv   map[uint64]*Server
	g     map[uint64]*wire.Server
}

func startGroup(t testing.TB, n int) *group {
	t.Helper()
	gr := &group{t: t, dirs: map[uint64]string{}, addrs: map[uint64]string{}, srv: map[uint64]*Server{}, g: map[uint64]*wire.Server{}}
	binds := map[uint64]*wire.Server{}
	for id := uint64(1); id <= uint64(n); id++ {
		b, err := wire.Bind("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		binds[id] = b
		gr.addrs[id] = b.Addr()
		gr.dirs[id] = t.TempDir()
	}
	for id := uint64(1); id <= uint64(n); id++ {
		gr.startMember(id, binds[id])
	}
	t.Cleanup(func() {
		for id := range gr.srv {
			gr.stop(id)
		}
	})
	return gr
}

func (gr *group) startMember(id uint64, b *wire.Server) {
	gr.t.Helper()
	if b == nil {
		var err error
		if b, err = wire.Bind(gr.addrs[id]); err != nil {
			gr.t.Fatal(err)
		}
	}
	o := testOptions(gr.t)
	o.Dir = gr.dirs[id]
	o.Raft = &RaftOptions{ID: id, Peers: gr.addrs, TickInterval: 20 * time.Millisecond, SnapshotEntries: 200, KeepEntries: 50}
	s, err := Open(context.Background(), o)
	if err != nil {
		gr.t.Fatal(err)
	}
	b.Serve(s.Register)
	gr.srv[id], gr.g[id] = s, b
}

// stop kills member id: its server drops every connection at once and
// the MDS closes without waiting for anything in flight.
func (gr *group) stop(id uint64) {
	gr.g[id].Kill()
	gr.srv[id].Close()
	delete(gr.srv, id)
	delete(gr.g, id)
}

// leader waits for a member that serves and returns its id.
func (gr *group) leader() uint64 {
	gr.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for id, s := range gr.srv {
			if s.raft.check() == nil {
				return id
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	gr.t.Fatal("no leader within 10s")
	return 0
}

// converge waits until every running member applied the same index and
// checks that their state machines are equal and valid.
func (gr *group) converge() {
	gr.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var idx []uint64
		for _, s := range gr.srv {
			s.raft.mu.Lock()
			idx = append(idx, s.raft.mu.applied)
			s.raft.mu.Unlock()
		}
		same := true
		for _, i := range idx {
			same = same && i == idx[0]
		}
		if same {
			break
		}
		if time.Now().After(deadline) {
			gr.t.Fatalf("members did not converge: applied %v", idx)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var first []byte
	for id, s := range gr.srv {
		var dump bytes.Buffer
		if err := s.snapshot(func(r reader) error {
			if err := checkInvariants(r); err != nil {
				return err
			}
			return scanRange(r, []byte{0}, []byte{0xff}, func(k, v []byte) (bool, error) {
				fmt.Fprintf(&dump, "%x=%x\n", k, v)
				return true, nil
			})
		}); err != nil {
			gr.t.Fatalf("member %d: %v", id, err)
		}
		if first == nil {
			first = dump.Bytes()
		} else if !bytes.Equal(first, dump.Bytes()) {
			gr.t.Fatalf("member %d differs from another member", id)
		}
	}
}

func TestRaftGroupReplicatesAndFailsOver(t *testing.T) {
	gr := startGroup(t, 3)
	lead := gr.leader()
	ctx := context.Background()
	for _, s := range gr.srv {
		if _, err := s.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: rootIno}); err != nil && !errors.Is(err, errs.ErrNotLeader) {
			t.Fatalf("GetAttr: %v", err)
		}
	}
	// Concurrent creates on the leader pipeline through the overlay.
	create := func(s *Server, prefix string, n int) {
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					if _, err := s.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: fmt.Appendf(nil, "%s%d", prefix, i), Mode: sIFREG | 0o644, Exclusive: true}); err != nil {
						t.Errorf("create %s%d: %v", prefix, i, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	create(gr.srv[lead], "a", 300)
	// A follower refuses, naming the leader.
	for id, s := range gr.srv {
		if id == lead {
			continue
		}
		_, err := s.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("x"), Mode: sIFREG | 0o644})
		var nl *errs.NotLeaderError
		if !errors.As(err, &nl) || nl.Leader != gr.addrs[lead] {
			t.Fatalf("follower %d: %v", id, err)
		}
	}
	gr.converge()

	// Kill the leader; another takes over and has every file.
	gr.stop(lead)
	t0 := time.Now()
	lead2 := gr.leader()
	t.Logf("failover: member %d leads after %v", lead2, time.Since(t0))
	create(gr.srv[lead2], "b", 100)
	for i := 0; i < 300; i++ {
		if _, err := gr.srv[lead2].Lookup(ctx, &mdspb.LookupRequest{Parent: rootIno, Name: fmt.Appendf(nil, "a%d", i)}); err != nil {
			t.Fatalf("a%d lost: %v", i, err)
		}
	}
	// The killed member comes back and catches up (its log was
	// compacted past on the others: SnapshotEntries is 200).
	create(gr.srv[lead2], "c", 400)
	gr.startMember(lead, nil)
	gr.converge()
}

// TestRaftRequestIDs: a mutation retried with the same request id through
// gRPC is applied once and answers as the first try did.
func TestRaftRequestIDs(t *testing.T) {
	gr := startGroup(t, 3)
	gr.leader()
	var addrs []byte
	for id := uint64(1); id <= 3; id++ {
		if id > 1 {
			addrs = append(addrs, ',')
		}
		addrs = append(addrs, gr.addrs[id]...)
	}
	gc, err := wire.DialGroup(string(addrs))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	cli := mdspb.NewMdsClient(gc)
	ctx := context.Background()
	if _, err := cli.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: rootIno}); err != nil {
		t.Fatal(err)
	}
	rctx := metadataCtx(ctx, wire.RequestIDHeader, "test-1")
	req := &mdspb.CreateRequest{Parent: rootIno, Name: []byte("f"), Mode: sIFREG | 0o644, Exclusive: true}
	r1, err := cli.Create(rctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := cli.Create(rctx, req)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if r1.GetAttr().GetIno() != r2.GetAttr().GetIno() {
		t.Fatalf("retry answered inode %d, first try %d", r2.GetAttr().GetIno(), r1.GetAttr().GetIno())
	}
	// Another id is a new request: EEXIST.
	if _, err := cli.Create(metadataCtx(ctx, wire.RequestIDHeader, "test-2"), req); !errors.Is(err, errs.ErrExists) {
		t.Fatalf("second create: %v", err)
	}

	// A create that also opens (the mount's create): the retry answers
	// with an open handle of the same session, as the first try did.
	sess, err := cli.OpenSession(ctx, &mdspb.OpenSessionRequest{Client: "test"})
	if err != nil {
		t.Fatal(err)
	}
	oreq := &mdspb.CreateRequest{Parent: rootIno, Name: []byte("g"), Mode: sIFREG | 0o644, Exclusive: true, OpenSession: sess.GetSession()}
	octx := metadataCtx(ctx, wire.RequestIDHeader, "test-3")
	o1, err := cli.Create(octx, oreq)
	if err != nil || !o1.GetCreated() || o1.GetHandle() == 0 {
		t.Fatalf("create and open: %v, %v", o1, err)
	}
	o2, err := cli.Create(octx, oreq)
	if err != nil {
		t.Fatalf("retry of create and open: %v", err)
	}
	if !o2.GetCreated() || o2.GetHandle() == 0 || o2.GetAttr().GetIno() != o1.GetAttr().GetIno() {
		t.Fatalf("retry of create and open answered created %v handle %d ino %d; first try: ino %d",
			o2.GetCreated(), o2.GetHandle(), o2.GetAttr().GetIno(), o1.GetAttr().GetIno())
	}
	if _, err := cli.Release(ctx, &mdspb.ReleaseRequest{Session: sess.GetSession(), Handle: o2.GetHandle()}); err != nil {
		t.Fatalf("release the retry's handle: %v", err)
	}
	// The retry reaches a leader that no longer knows the session (as
	// after a failover): the attributes and no handle, never STALE
	// (which would say nothing was created).
	gone := proto.Clone(oreq).(*mdspb.CreateRequest)
	gone.OpenSession = sess.GetSession() + 1000
	o3, err := cli.Create(octx, gone)
	if err != nil || o3.GetHandle() != 0 || o3.GetCreated() || o3.GetAttr().GetIno() != o1.GetAttr().GetIno() {
		t.Fatalf("retry with a lost session: %v, %v", o3, err)
	}
	gr.converge()
}

func metadataCtx(ctx context.Context, k, v string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, k, v)
}

// BenchmarkRaftCreate: parallel creates (8 per CPU, as BenchmarkNamespace) through a 3-member
// group, to compare with BenchmarkNamespace/create on a single MDS.
func BenchmarkRaftCreate(b *testing.B) {
	gr := startGroup(b, 3)
	s := gr.srv[gr.leader()]
	ctx := context.Background()
	var mu sync.Mutex
	n := 0
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			mu.Lock()
			n++
			i := n
			mu.Unlock()
			if _, err := s.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: fmt.Appendf(nil, "f%d", i), Mode: sIFREG | 0o644, Exclusive: true}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

// TestRaftRestartAllBeforeSnapshot stops every member before any log
// compaction and starts them again: the configuration, which the Raft
// library reads from the log's snapshot, comes from the state machine
// (restoreConfState), so the group elects a leader and has everything.
// Then the same after a member is added (the configuration changed since
// the last snapshot).
func TestRaftRestartAllBeforeSnapshot(t *testing.T) {
	gr := startGroup(t, 3)
	ctx := context.Background()
	create := func(name string) {
		t.Helper()
		if _, err := gr.srv[gr.leader()].Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(name), Mode: sIFREG | 0o644, Exclusive: true}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	restartAll := func() {
		t.Helper()
		var ids []uint64
		for id := range gr.srv {
			ids = append(ids, id)
		}
		for _, id := range ids {
			gr.stop(id)
		}
		for _, id := range ids {
			gr.startMember(id, nil)
		}
	}
	check := func(names ...string) {
		t.Helper()
		lead := gr.srv[gr.leader()]
		for _, n := range names {
			if _, err := lead.Lookup(ctx, &mdspb.LookupRequest{Parent: rootIno, Name: []byte(n)}); err != nil {
				t.Fatalf("%s after restarting every member: %v", n, err)
			}
		}
	}
	create("a")
	restartAll()
	check("a")
	create("b")

	// A fourth member joins; all four restart.
	gr.add(4)
	create("c")
	gr.converge()
	restartAll()
	check("a", "b", "c")
	if st, _ := gr.srv[4].MemberStatus(); len(st.Members) != 4 {
		t.Fatalf("member 4 sees members %v", st.Members)
	}
	gr.converge()
}

// add starts member id with Join and has the leader add it.
func (gr *group) add(id uint64) {
	gr.t.Helper()
	b, err := wire.Bind("127.0.0.1:0")
	if err != nil {
		gr.t.Fatal(err)
	}
	gr.addrs[id], gr.dirs[id] = b.Addr(), gr.t.TempDir()
	o := testOptions(gr.t)
	o.Dir = gr.dirs[id]
	o.Raft = &RaftOptions{ID: id, Join: true, Peers: gr.addrs, TickInterval: 20 * time.Millisecond}
	s, err := Open(context.Background(), o)
	if err != nil {
		gr.t.Fatal(err)
	}
	b.Serve(s.Register)
	gr.srv[id], gr.g[id] = s, b
	lead := gr.srv[gr.leader()]
	if _, err := (&peerService{s: lead}).ChangeMember(context.Background(), &peerpb.ChangeMemberRequest{Op: peerpb.ChangeMemberRequest_ADD, Id: id, Addr: gr.addrs[id]}); err != nil {
		gr.t.Fatalf("add member %d: %v", id, err)
	}
}

// TestRaftAddMemberAfterCompaction adds a member to a group whose log was
// compacted before the member existed, and writes nothing more: the
// snapshot it is sent carries the current configuration
// (freshenSnapshots), so it accepts it and catches up; before, it
// refused the compaction's snapshot (not in its configuration) until the
// next compaction.
func TestRaftAddMemberAfterCompaction(t *testing.T) {
	gr := startGroup(t, 3) // compaction every 200 entries, 50 kept
	ctx := context.Background()
	lead := gr.srv[gr.leader()]
	for i := 0; i < 260; i++ {
		if _, err := lead.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: fmt.Appendf(nil, "f%d", i), Mode: sIFREG | 0o644, Exclusive: true}); err != nil {
			t.Fatal(err)
		}
	}
	gr.add(4)
	gr.converge()
	// Kill a follower of the first three: the new member is needed for
	// a quorum (three of four).
	for id := uint64(1); id <= 3; id++ {
		if id != gr.leader() {
			gr.stop(id)
			break
		}
	}
	if _, err := gr.srv[gr.leader()].Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("after"), Mode: sIFREG | 0o644, Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	gr.converge()
}
