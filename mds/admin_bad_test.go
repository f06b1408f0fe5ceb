package mds

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// TestDamaged: every kind of damage the scrubber recognises, as a
// whole-chunk read answers it, is damage; a busy or unreachable OST is
// not (the check is tried again).
func TestDamaged(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("block 3: %w", errs.ErrCorrupt), true},
		{fmt.Errorf("sidecar missing: %w", errs.ErrCorrupt), true},
		{fmt.Errorf("chunk file gone: %w", errs.ErrNotFound), true},
		{fmt.Errorf("range [0, 0+65536) outside its 4096 bytes: %w", errs.ErrInvalid), true}, // truncated
		{fmt.Errorf("dial: %w", errs.ErrUnavailable), false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("capability: %w", errs.ErrPermission), false},
	} {
		if got := damaged(c.err); got != c.want {
			t.Errorf("damaged(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestReportReplacesClientReport: a scrub's or fsck's report of a chunk
// that a client reported replaces the client's (whose check may be
// waiting), so the rebuild goes ahead; a client's report never replaces
// another report.
func TestReportReplacesClientReport(t *testing.T) {
	e := newEnv(t) // the worker waits a heartbeat timeout of the fake clock: it never runs
	ctx := context.Background()
	get := func() *mdspb.BadChunk {
		t.Helper()
		v, err := getValue(e.s.db, badKey(7, 1))
		if err != nil {
			t.Fatal(err)
		}
		b := &mdspb.BadChunk{}
		if err := proto.Unmarshal(v, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	report := func(req *mdspb.ReportCorruptRequest) {
		t.Helper()
		if _, err := e.c.ReportCorrupt(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	report(&mdspb.ReportCorruptRequest{Chunks: []*mdspb.BadChunk{{Extent: 7, Index: 1, Ost: 2, FromClient: true, Reason: "client read"}}})
	if b := get(); !b.FromClient {
		t.Fatalf("client report stored as %v", b)
	}
	// The scrubber of OST 2 finds it too.
	report(&mdspb.ReportCorruptRequest{Ost: 2, Chunks: []*mdspb.BadChunk{{Extent: 7, Index: 1, Reason: "scrub: sidecar covers 65536 bytes, data file has 4096"}}})
	if b := get(); b.FromClient || b.Ost != 2 || b.Reason == "client read" {
		t.Fatalf("after the scrub's report: %v, want the scrub's", b)
	}
	// Another client's report changes nothing.
	report(&mdspb.ReportCorruptRequest{Chunks: []*mdspb.BadChunk{{Extent: 7, Index: 1, Ost: 2, FromClient: true, Reason: "client read again"}}})
	if b := get(); b.FromClient {
		t.Fatalf("a client's report replaced the scrub's: %v", b)
	}
	if n := testutil.ToFloat64(e.s.admin.met.badReported.WithLabelValues(badFromOST)); n != 1 {
		t.Errorf("reports counted from OSTs: %v, want 1", n)
	}
}

// TestHealthNamesFiles: Health counts degraded and unreadable extents
// from the OSTs' states now and the bad-chunk queue, and names their
// files by path, the most severe damage first.
func TestHealthNamesFiles(t *testing.T) {
	e := newEnv(t)
	ids := e.registerOsts(6)
	a := e.mkdir(rootIno, "a")
	b := e.mkdir(a.Ino, "b")
	withData := func(parent uint64, name string) *mdspb.Extent {
		f := e.create(parent, name)
		x := written(e.alloc(f.Ino, 1)[0], 3*mib)
		e.commit(f.Ino, ref(0, 3*mib, 0, x))
		return x
	}
	withData(b.Ino, "f")
	g := withData(rootIno, "g")
	health := func() *mdspb.HealthReply {
		t.Helper()
		r, err := e.c.Health(ctx, &mdspb.HealthRequest{MaxFiles: 10})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	files := func(r *mdspb.HealthReply) string {
		s := ""
		for _, f := range r.Files {
			s += fmt.Sprintf("%s:%s:%d ", f.Path, f.Damage, f.Extents)
		}
		return s
	}
	if r := health(); r.Extents != 2 || r.DegradedExtents != 0 || r.UnreadableExtents != 0 || len(r.Files) != 0 {
		t.Fatalf("healthy: %v", r)
	}
	// A bad chunk of /g.
	if _, err := e.c.ReportCorrupt(ctx, &mdspb.ReportCorruptRequest{Ost: g.Osts[0], Chunks: []*mdspb.BadChunk{{Extent: g.Id, Index: 0}}}); err != nil {
		t.Fatal(err)
	}
	if r := health(); r.DegradedExtents != 1 || r.BadChunksQueued != 1 || files(r) != "/g:bad:1 " {
		t.Fatalf("a bad chunk: %v (files %s)", r, files(r))
	}
	// Three of six OSTs down (RS 4+2): both extents unreadable now; one
	// down: degraded. Each is the present, not a job's last pass.
	e.clock.Advance(e.s.o.HeartbeatTimeout + time.Second)
	e.heartbeatAll(ids[:3])
	if r := health(); r.UnreadableExtents != 2 || r.DegradedExtents != 2 || files(r) != "/a/b/f:unreadable:1 /g:unreadable:1 " {
		t.Fatalf("three OSTs down: %v (files %s)", r, files(r))
	}
	e.heartbeatAll(ids[:5])
	if r := health(); r.UnreadableExtents != 0 || r.DegradedExtents != 2 || files(r) != "/g:bad:1 /a/b/f:degraded:1 " {
		t.Fatalf("one OST down: %v (files %s)", r, files(r))
	}
	e.heartbeatAll(ids)
	if r, err := e.c.Health(ctx, &mdspb.HealthRequest{}); err != nil || r.DegradedExtents != 1 || r.Files != nil {
		t.Fatalf("all up, no files asked: %v %v", r, err)
	}
}

// TestAutoRepairFailedNotRestarted: an automatic repair that failed for
// a set of OSTs (its extents lost) is not started again every round for
// the same OSTs (each start failed at once and logged twice); the job
// stays failed, and says why.
func TestAutoRepairFailedNotRestarted(t *testing.T) {
	o := testOptions(t)
	o.Admin.Interval = 10 * time.Millisecond
	e := startEnv(t, o, newClock())
	ids := e.registerOsts(6)
	f := e.create(rootIno, "f")
	x := written(e.alloc(f.Ino, 1)[0], 3*mib)
	e.commit(f.Ino, ref(0, 3*mib, 0, x))
	e.clock.Advance(31 * time.Minute) // past RepairAfter (30m)
	e.heartbeatAll(ids[:3])           // three of six down: RS 4+2 extents lost
	var first *mdspb.AdminJob
	for i := range 5 {
		e.clock.Advance(time.Millisecond) // a job started again has a later StartedNs
		if err := e.s.admin.waitRound(ctx); err != nil {
			t.Fatal(err)
		}
		j, err := e.s.loadJob(JobRepair)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = j
			if j.State != JobFailed || j.LostExtents != 1 || len(j.DamagedExtents) != 1 {
				t.Fatalf("automatic repair: %v", j)
			}
			continue
		}
		if j.State != JobFailed || j.StartedNs != first.StartedNs {
			t.Fatalf("round %d: the failed repair was started again: %v", i, j)
		}
	}
}
