package mds

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"google.golang.org/protobuf/proto"
)

// TestRaftRetryGetsRecordedAnswer: a mutation retried with the request id
// of a try that was applied gets that try's answer, recorded with it in
// the same entry, even after another client changed the name in between,
// and even at a new leader: a create answers with the file it created
// (not ENOENT, not a new file), an unlink with the inode it removed (not
// ENOENT, and the name's new file stays), a rename with success (and the
// name's new file stays where it is).
func TestRaftRetryGetsRecordedAnswer(t *testing.T) {
	gr := startGroup(t, 3)
	cli := groupClient(t, gr)
	ctx := context.Background()
	with := func(id string) context.Context { return metadataCtx(ctx, wire.RequestIDHeader, id) }
	lookup := func(name string) (uint64, error) {
		r, err := cli.Lookup(ctx, &mdspb.LookupRequest{Parent: rootIno, Name: []byte(name)})
		return r.GetAttr().GetIno(), err
	}
	create := func(name string) uint64 {
		t.Helper()
		r, err := cli.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(name), Mode: sIFREG | 0o644, Exclusive: true})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return r.GetAttr().GetIno()
	}

	// Create, renamed away by another client, retried: the same inode.
	creq := &mdspb.CreateRequest{Parent: rootIno, Name: []byte("a"), Mode: sIFREG | 0o644, Exclusive: true}
	c1, err := cli.Create(with("create-a"), creq)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Rename(ctx, &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte("a"), NewParent: rootIno, NewName: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	c2, err := cli.Create(with("create-a"), creq)
	if err != nil {
		t.Fatalf("retried create after a rename: %v", err)
	}
	if c2.GetAttr().GetIno() != c1.GetAttr().GetIno() || !c2.GetCreated() {
		t.Fatalf("retried create answered inode %d created %v; first try: inode %d created %v",
			c2.GetAttr().GetIno(), c2.GetCreated(), c1.GetAttr().GetIno(), c1.GetCreated())
	}
	if _, err := lookup("a"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("the retry created a again: %v", err)
	}
	// The same name unlinked and made again by others: still the first
	// answer, and the new file is left alone.
	if _, err := cli.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	other := create("a")
	if c3, err := cli.Create(with("create-a"), creq); err != nil || c3.GetAttr().GetIno() != c1.GetAttr().GetIno() {
		t.Fatalf("retried create after the name was reused: inode %d, %v; first try %d", c3.GetAttr().GetIno(), err, c1.GetAttr().GetIno())
	}
	if ino, err := lookup("a"); err != nil || ino != other {
		t.Fatalf("a is inode %d (%v), want the other client's %d", ino, err, other)
	}

	// Mkdir, removed by another client, retried at a new leader: the
	// same inode, no EEXIST, no new directory.
	mreq := &mdspb.CreateRequest{Parent: rootIno, Name: []byte("d"), Mode: sIFDIR | 0o755}
	m1, err := cli.Mkdir(with("mkdir-d"), mreq)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Rmdir(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	gr.stop(gr.leader())
	m2, err := cli.Mkdir(with("mkdir-d"), mreq)
	if err != nil || m2.GetAttr().GetIno() != m1.GetAttr().GetIno() {
		t.Fatalf("retried mkdir at a new leader: inode %d, %v; first try %d", m2.GetAttr().GetIno(), err, m1.GetAttr().GetIno())
	}
	if _, err := lookup("d"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("the retry made d again: %v", err)
	}

	// Unlink, the name made again by another client, retried: the
	// removed inode's attributes, and the new file stays.
	e1 := create("e")
	ureq := &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("e")}
	u1, err := cli.Unlink(with("unlink-e"), ureq)
	if err != nil || u1.GetAttr().GetIno() != e1 {
		t.Fatalf("unlink e: %v, %v", u1, err)
	}
	e2 := create("e")
	u2, err := cli.Unlink(with("unlink-e"), ureq)
	if err != nil {
		t.Fatalf("retried unlink: %v", err)
	}
	if u2.GetAttr().GetIno() != e1 || u2.GetAttr().GetNlink() != u1.GetAttr().GetNlink() {
		t.Fatalf("retried unlink answered %v; first try %v", u2.GetAttr(), u1.GetAttr())
	}
	if ino, err := lookup("e"); err != nil || ino != e2 {
		t.Fatalf("e is inode %d (%v) after the retried unlink, want the new file %d", ino, err, e2)
	}

	// Rename, the old name made again and the new one removed by others,
	// retried: success, and neither name is touched.
	r1 := create("r")
	rreq := &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte("r"), NewParent: rootIno, NewName: []byte("s")}
	if _, err := cli.Rename(with("rename-r"), rreq); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("s")}); err != nil {
		t.Fatal(err)
	}
	r2 := create("r")
	if _, err := cli.Rename(with("rename-r"), rreq); err != nil {
		t.Fatalf("retried rename: %v", err)
	}
	if ino, err := lookup("r"); err != nil || ino != r2 || r2 == r1 {
		t.Fatalf("r is inode %d (%v) after the retried rename, want %d", ino, err, r2)
	}
	if _, err := lookup("s"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("the retried rename moved r again: %v", err)
	}

	// Create and open, the file renamed away: the retry opens the
	// created inode for the session (not the name).
	sess, err := cli.OpenSession(ctx, &mdspb.OpenSessionRequest{Client: "test"})
	if err != nil {
		t.Fatal(err)
	}
	oreq := &mdspb.CreateRequest{Parent: rootIno, Name: []byte("o"), Mode: sIFREG | 0o644, Exclusive: true, OpenSession: sess.GetSession()}
	o1, err := cli.Create(with("create-o"), oreq)
	if err != nil || !o1.GetCreated() || o1.GetHandle() == 0 {
		t.Fatalf("create and open: %v, %v", o1, err)
	}
	if _, err := cli.Rename(ctx, &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte("o"), NewParent: rootIno, NewName: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	o2, err := cli.Create(with("create-o"), oreq)
	if err != nil || !o2.GetCreated() || o2.GetHandle() == 0 || o2.GetAttr().GetIno() != o1.GetAttr().GetIno() {
		t.Fatalf("retried create and open after a rename: %v, %v; first try %v", o2, err, o1)
	}
	if _, err := lookup("o"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("the retry created o again: %v", err)
	}
	gr.converge()
}

// BenchmarkRaftCreateRequestID is BenchmarkRaftCreate with a request id on
// every create, as the client library sends them through gRPC: the id
// and the answer are recorded with each create.
func BenchmarkRaftCreateRequestID(b *testing.B) {
	gr := startGroup(b, 3)
	s := gr.srv[gr.leader()]
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
			ctx := context.WithValue(context.Background(), callKey{}, &callInfo{reqID: fmt.Sprintf("bench-%d", i)})
			if _, err := s.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: fmt.Appendf(nil, "f%d", i), Mode: sIFREG | 0o644, Exclusive: true}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}

// TestRaftRetriedCommitExtents: an extent commit retried with the request
// id of a try that was applied is not applied again: it gets the first
// try's answer, and what another client committed over the same range in
// between stays in the map.
func TestRaftRetriedCommitExtents(t *testing.T) {
	gr := startGroup(t, 3)
	cli := groupClient(t, gr)
	ctx := context.Background()
	for i := range 6 {
		if _, err := cli.RegisterOst(ctx, &mdspb.RegisterOstRequest{Uuid: fmt.Sprintf("ost-%d", i+1),
			Addr: fmt.Sprintf("127.0.0.1:%d", i+1), Capacity: 1 << 40, Free: 1 << 40}); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	f, err := cli.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("f"), Mode: sIFREG | 0o644, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	ino := f.GetAttr().GetIno()
	al, err := cli.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: ino, Count: 2})
	if err != nil || len(al.GetExtents()) != 2 {
		t.Fatalf("alloc: %v (%d extents)", err, len(al.GetExtents()))
	}
	const mib = 1 << 20
	a, b := written(al.Extents[0], mib), written(al.Extents[1], mib)
	req := &mdspb.CommitExtentsRequest{Ino: ino, Extents: []*mdspb.ExtentRef{ref(0, mib, 0, a)}}
	first, err := cli.CommitExtents(metadataCtx(ctx, wire.RequestIDHeader, "commit-a"), req)
	if err != nil {
		t.Fatal(err)
	}
	// Another client writes the same range.
	if _, err := cli.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: ino, Extents: []*mdspb.ExtentRef{ref(0, mib, 0, b)}}); err != nil {
		t.Fatal(err)
	}
	retry, err := cli.CommitExtents(metadataCtx(ctx, wire.RequestIDHeader, "commit-a"), req)
	if err != nil {
		t.Fatalf("retried commit: %v", err)
	}
	if !proto.Equal(retry, first) {
		t.Fatalf("retried commit answered %v; first try %v", retry, first)
	}
	ge, err := cli.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: ino})
	if err != nil {
		t.Fatal(err)
	}
	if got := ge.GetExtents(); len(got) != 1 || got[0].GetExtent().GetId() != b.GetId() {
		t.Fatalf("map after the retry: %v; want only extent %d (the other client's)", got, b.GetId())
	}
}

// groupClient waits for gr's leader and returns a client of the whole
// group (leader following, as clients do), closed when the test ends.
func groupClient(t *testing.T, gr *group) mdspb.MdsClient {
	t.Helper()
	gr.leader()
	var addrs []string
	for id := uint64(1); id <= 3; id++ {
		addrs = append(addrs, gr.addrs[id])
	}
	gc, err := wire.DialGroup(strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gc.Close() })
	return mdspb.NewMdsClient(gc)
}

// TestRequestTTLCoversRetries: a request id outlives every retry of its
// call with room to spare: clients retry for wire.GroupRetryFor after
// their first send, and the members' clocks may disagree.
func TestRequestTTLCoversRetries(t *testing.T) {
	if requestTTL < 4*wire.GroupRetryFor {
		t.Fatalf("request ids are kept %v, under 4x the %v clients retry for", requestTTL, wire.GroupRetryFor)
	}
}
