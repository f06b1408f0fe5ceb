package mds

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// TestSingleMDSRetryGetsRecordedAnswer: a single MDS deduplicates
// retried mutations by request id, across a restart (the client resends
// a call whose answer was lost when the MDS went down: client
// Options.MDSRetry), and forgets ids after requestTTL.
func TestSingleMDSRetryGetsRecordedAnswer(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	with := func(id string) context.Context { return metadataCtx(ctx, wire.RequestIDHeader, id) }
	creq := &mdspb.CreateRequest{Parent: rootIno, Name: []byte("a"), Mode: sIFREG | 0o644, Exclusive: true}
	c1, err := e.c.Create(with("create-a"), creq)
	if err != nil {
		t.Fatal(err)
	}
	e = e.reopen() // the answer was lost; the MDS restarted
	c2, err := e.c.Create(with("create-a"), creq)
	if err != nil {
		t.Fatalf("retried create after a restart: %v", err)
	}
	if !proto.Equal(c2.GetAttr(), c1.GetAttr()) || !c2.GetCreated() {
		t.Fatalf("retried create answered %v created %v; first try %v", c2.GetAttr(), c2.GetCreated(), c1.GetAttr())
	}

	// A retried extent commit is not applied over a later write.
	ino := c1.GetAttr().GetIno()
	ex := e.alloc(ino, 2)
	a, b := written(ex[0], mib), written(ex[1], mib)
	req := &mdspb.CommitExtentsRequest{Ino: ino, Extents: []*mdspb.ExtentRef{ref(0, mib, 0, a)}}
	first, err := e.c.CommitExtents(with("commit-a"), req)
	if err != nil {
		t.Fatal(err)
	}
	e.commit(ino, ref(0, mib, 0, b))
	retry, err := e.c.CommitExtents(with("commit-a"), req)
	if err != nil || !proto.Equal(retry, first) {
		t.Fatalf("retried commit: %v, %v; first %v", retry, err, first)
	}
	if got, want := e.mapOf(ino), fmt.Sprintf("0+1@%d:0 ", b.Id); got != want {
		t.Fatalf("map after the retried commit %s, want %s", got, want)
	}
	e.check()

	// Past the TTL the id is forgotten: the same call is a new one.
	e.clock.Advance(requestTTL + time.Second)
	if err := e.s.gc.round(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Create(with("create-a"), creq)
	wantErr(t, "create with an expired request id", err, errs.ErrExists)
}

// BenchmarkSingleCreateRequestID: parallel creates through gRPC on a
// single MDS, without and with a request id (as the client sends them):
// what recording ids costs.
func BenchmarkSingleCreateRequestID(b *testing.B) {
	for _, withID := range []bool{false, true} {
		b.Run(fmt.Sprintf("id=%v", withID), func(b *testing.B) {
			e := startEnv(b, testOptions(b), newClock())
			var seq atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := seq.Add(1)
					c := ctx
					if withID {
						c = metadataCtx(ctx, wire.RequestIDHeader, fmt.Sprintf("bench-%d", i))
					}
					if _, err := e.c.Create(c, &mdspb.CreateRequest{Parent: rootIno, Name: fmt.Appendf(nil, "f%d", i), Mode: sIFREG | 0o644, Exclusive: true}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
		})
	}
}
