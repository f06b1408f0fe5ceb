package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// reportMDS records ReportCorrupt calls; block makes each call wait for
// its context.
type reportMDS struct {
	mdspb.MdsClient // nil: other calls panic
	block           bool

	mu    sync.Mutex
	calls [][]*mdspb.BadChunk
}

func (m *reportMDS) ReportCorrupt(ctx context.Context, req *mdspb.ReportCorruptRequest, _ ...grpc.CallOption) (*mdspb.Empty, error) {
	if m.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, req.GetChunks())
	return &mdspb.Empty{}, nil
}

func (m *reportMDS) reported() []*mdspb.BadChunk {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*mdspb.BadChunk
	for _, c := range m.calls {
		out = append(out, c...)
	}
	return out
}

func TestReportCorruptDedup(t *testing.T) {
	m := &reportMDS{}
	c := &Client{log: slog.New(slog.DiscardHandler), mds: m}
	corrupt := fmt.Errorf("extent 7 chunk 1: %w", errs.ErrCorrupt)
	for range 5 {
		c.noteChunkError(7, 1, 3, corrupt)
	}
	c.noteChunkError(7, 2, 4, errs.ErrUnavailable) // not corruption: not reported
	c.noteChunkError(7, 2, 4, nil)
	c.noteChunkError(8, 0, 5, corrupt)
	deadline := time.Now().Add(10 * time.Second)
	for len(m.reported()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	c.rep.stop()
	got := m.reported()
	if len(got) != 2 {
		t.Fatalf("reported %v, want chunks 7.1 and 8.0 once each", got)
	}
	for i, want := range []struct {
		ext uint64
		idx uint32
		ost uint32
	}{{7, 1, 3}, {8, 0, 5}} {
		b := got[i]
		if b.Extent != want.ext || b.Index != want.idx || b.Ost != want.ost || !b.FromClient || b.Reason == "" {
			t.Errorf("report %d: %v, want extent %d chunk %d OST %d from a client", i, b, want.ext, want.idx, want.ost)
		}
	}
	// Closed: nothing more is sent.
	c.noteChunkError(9, 0, 1, corrupt)
	time.Sleep(20 * time.Millisecond)
	if n := len(m.reported()); n != 2 {
		t.Errorf("%d reports after stop, want 2", n)
	}
}

// TestReportNeverBlocksRead: an MDS that does not answer slows neither
// the read path's note nor Close.
func TestReportNeverBlocksRead(t *testing.T) {
	m := &reportMDS{block: true}
	c := &Client{log: slog.New(slog.DiscardHandler), mds: m}
	corrupt := errors.Join(errs.ErrCorrupt)
	start := time.Now()
	for i := range 1000 {
		c.noteChunkError(uint64(i+1), 0, 1, corrupt)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("1000 notes with a stuck MDS took %v", el)
	}
	start = time.Now()
	c.rep.stop()
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("stop with a stuck MDS took %v", el)
	}
}
