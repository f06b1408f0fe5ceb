package mds

import (
	"context"
	"fmt"
	"testing"

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
