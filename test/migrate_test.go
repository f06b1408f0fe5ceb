package test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// migrate rewrites a sparse file from RS 4+2 to RS 8+2 and to 3-way
// replication while another client reads it in a loop: every read returns
// the right bytes, holes stay holes, and the file keeps its inode.
func TestAdminMigrate(t *testing.T) {
	cl := adminCluster(t, 10)
	ctx := context.Background()
	c := cl.Client()
	const mib = 1 << 20
	head, tail := randBytes(31, 5*mib+12345), randBytes(32, 3*mib)
	want := make([]byte, 12*mib)
	copy(want, head)
	copy(want[8*mib:], tail)
	f, err := c.Create(ctx, "/m", 0o640)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		b   []byte
		off int64
	}{{head, 0}, {tail, 8 * mib}} {
		if _, err := f.WriteAt(ctx, w.b, w.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(ctx, 12*mib); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := c.Stat(ctx, "/m")
	if err != nil {
		t.Fatal(err)
	}

	// A reader on another client, the whole time.
	reader := cl.Client()
	var stop atomic.Bool
	var passes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, len(want))
		for !stop.Load() {
			rf, err := reader.Open(ctx, "/m")
			if err != nil {
				t.Errorf("reader open: %v", err)
				return
			}
			n, err := rf.ReadAt(ctx, buf, 0)
			rf.Close(ctx)
			if n != len(want) || !bytes.Equal(buf, want) {
				t.Errorf("reader: %d bytes (err %v), equal %v", n, err, bytes.Equal(buf[:n], want[:n]))
				return
			}
			passes.Add(1)
		}
	}()

	check := func(to client.Layout) {
		t.Helper()
		res, err := c.Migrate(ctx, "/m", to, nil)
		if err != nil {
			t.Fatalf("migrate to %v: %v", to, err)
		}
		if res.Unchanged || res.Bytes != int64(len(head)+len(tail)) {
			t.Fatalf("migrate to %v copied %d bytes (unchanged %v), want %d: holes must not be copied", to, res.Bytes, res.Unchanged, len(head)+len(tail))
		}
		a, err := c.Stat(ctx, "/m")
		if err != nil {
			t.Fatal(err)
		}
		if a.Ino != before.Ino || a.Size != before.Size || a.Mode != before.Mode || a.MtimeNs != before.MtimeNs {
			t.Fatalf("after migrate: %v, before %v", a, before)
		}
		if l := a.Layout; l.K != to.K || l.M != to.M || l.Unit != to.Unit {
			t.Fatalf("layout %v, want %v", l, to)
		}
		r, err := cl.MDSStub(c).GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: a.Ino})
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range r.GetExtents() {
			if l := ref.GetExtent().GetLayout(); l.GetK() != to.K || l.GetM() != to.M {
				t.Fatalf("extent %d has layout %v, want %v", ref.GetExtent().GetId(), l, to)
			}
			if e := ref.GetFileOff() + ref.GetLength(); e > uint64(len(head)) && ref.GetFileOff() < 8*mib {
				t.Fatalf("extent at %d+%d covers the hole", ref.GetFileOff(), ref.GetLength())
			}
		}
		rf, err := c.Open(ctx, "/m")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want)+1)
		n, _ := rf.ReadAt(ctx, got, 0)
		rf.Close(ctx)
		if n != len(want) || !bytes.Equal(got[:n], want) {
			t.Fatalf("read after migrate to %v: %d bytes, equal %v", to, n, bytes.Equal(got[:n], want[:min(n, len(want))]))
		}
		// No copy is left behind.
		es, err := c.ReadDirIno(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 1 {
			t.Fatalf("root holds %d entries after migrate, want only m", len(es))
		}
	}
	check(client.Layout{K: 8, M: 2, Unit: 64 << 10})
	check(client.Layout{K: 1, M: 2, Unit: 64 << 10}) // 3-way replication
	if res, err := c.Migrate(ctx, "/m", client.Layout{K: 1, M: 2, Unit: 64 << 10}, nil); err != nil || !res.Unchanged {
		t.Fatalf("migrate to the same layout: %+v, %v", res, err)
	}
	stop.Store(true)
	wg.Wait()
	if passes.Load() == 0 {
		t.Fatal("the reader never finished a pass")
	}
	t.Logf("reader passes during the migrations: %d", passes.Load())

	// A commit for a file that changed since its copy is refused, and
	// changes nothing.
	a, _ := c.Stat(ctx, "/m")
	tmp, err := c.Create(ctx, "/.m.copy", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := tmp.Truncate(ctx, int64(a.Size)); err != nil {
		t.Fatal(err)
	}
	tmp.Close(ctx)
	ta, _ := c.Stat(ctx, "/.m.copy")
	_, err = cl.MDSStub(c).MigrateCommit(ctx, &mdspb.MigrateCommitRequest{SrcIno: a.Ino, TmpParent: 1, TmpName: []byte(".m.copy"), TmpIno: ta.Ino,
		ExpectSize: a.Size, ExpectMtimeNs: a.MtimeNs - 1, ExpectCtimeNs: a.CtimeNs})
	if !errors.Is(err, errs.ErrStale) {
		t.Fatalf("commit of a stale copy: %v, want ErrStale", err)
	}
	if _, err := c.Stat(ctx, "/.m.copy"); err != nil {
		t.Fatalf("the refused commit removed the copy: %v", err)
	}
	if b, _ := c.Stat(ctx, "/m"); b.CtimeNs != a.CtimeNs {
		t.Fatal("the refused commit changed the file")
	}
}

// A file held open across a drain reads correctly after the drained
// OST's old chunk copies are retired: the client reloads the placements
// of its map when a read fails, instead of failing once more than m
// chunks of an extent have moved.
func TestOpenFileReadsAfterDrain(t *testing.T) {
	cl := adminCluster(t, 10)
	ctx := context.Background()
	c := cl.Client()
	stub := adminStub(t, cl)
	want := randBytes(41, 6<<20)
	f, err := c.Create(ctx, "/held", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, want, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Open on a client with no read cache worth speaking of, before the
	// moves: it holds the old placements.
	rc := cl.Client()
	rf, err := rc.Open(ctx, "/held")
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close(ctx)
	// Drain three OSTs, one after the other: more than m chunks of some
	// extents move, and the old copies are retired (RetireGrace 1s).
	for i := 0; i < 3; i++ {
		id := cl.OST(i).Server.ID()
		if _, err := stub.SetOstState(ctx, &mdspb.SetOstStateRequest{Id: id, State: "draining"}); err != nil {
			t.Fatalf("drain OST %d: %v", id, err)
		}
		if j := waitJob(t, stub, mds.JobDrain, 2*time.Minute); j.State != mds.JobDone {
			t.Fatalf("drain of OST %d: %v", id, j)
		}
	}
	time.Sleep(3 * time.Second) // past the retire grace: old copies deleted
	if _, err := stub.RunGC(ctx, &mdspb.GCRequest{}); err != nil {
		t.Fatalf("gc: %v", err)
	}
	got := make([]byte, len(want))
	if n, err := rf.ReadAt(ctx, got, 0); n != len(want) || (err != nil && !errors.Is(err, io.EOF)) {
		t.Fatalf("read of the held file after the drains: %d bytes, %v", n, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read of the held file after the drains returned wrong bytes")
	}
}
