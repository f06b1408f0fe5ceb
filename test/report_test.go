package test

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost"
	"github.com/shoalfs/shoal/test/cluster"
)

// Clients report the corrupt chunks their reads meet (client/report.go):
// the MDS rebuilds them without waiting for a scrub (docs/admin.md).

// metricValue sums the samples of a metric family whose labels include
// labels (name=value pairs).
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestClientReportsCorruptChunk flips bytes in a data chunk on an OST's
// disk with the scrubber off: a read returns the right bytes (rebuilt
// from parity), the client reports the chunk, and the MDS rebuilds it in
// place shortly after. A client's report of a healthy chunk is checked
// and dropped: the chunk file is not rewritten.
func TestClientReportsCorruptChunk(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	reg := prometheus.NewRegistry()
	cl := cluster.Start(t, cluster.Options{
		OSTs: 6, Layout: adminLayout, Registry: reg,
		Admin: mds.AdminOptions{Interval: 100 * time.Millisecond, RepairAfter: -1},
		Scrub: ost.ScrubOptions{Rate: -1}, // no background scrub: only the client can tell
	})
	c := cl.Client()
	ctx := context.Background()
	want := randBytes(77, 3<<20+12345)
	writeFile(t, c, "/f", want)
	a, err := c.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	exts, err := c.MDS().GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: a.Ino})
	if err != nil || len(exts.Extents) < 2 {
		t.Fatalf("extents: %v %v", exts, err)
	}
	idx := ostIndex(cl, 6)
	chunkPath := func(e *mdspb.Extent, j int) string {
		return cl.OST(idx[e.Osts[j]]).Server.ChunkPath(e.Id, uint32(j))
	}

	// Flip a byte of data chunk 1 of the first extent.
	bad := exts.Extents[0].Extent
	path := chunkPath(bad, 1)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x5a
	if err := os.WriteFile(path, flipped, 0o644); err != nil {
		t.Fatal(err)
	}

	// Reads are right; the first one reports the chunk.
	for range 3 {
		got, err := readFile(cl.Client(), "/f")
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "degraded read", got, want)
	}
	// The chunk file is rewritten before the worker counts the repair:
	// wait for both.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && bytes.Equal(b, good) && metricValue(t, reg, "shoal_mds_admin_bad_chunks_repaired_total") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chunk %d.1 not rebuilt 30s after a client read it corrupt (read err %v)", bad.Id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := metricValue(t, reg, "shoal_mds_admin_bad_chunks_reported_total", "source", "client"); n != 1 {
		t.Errorf("reported by clients: %v, want 1", n)
	}
	if n := metricValue(t, reg, "shoal_mds_admin_bad_chunks_repaired_total"); n != 1 {
		t.Errorf("repaired: %v, want 1", n)
	}
	if n := metricValue(t, reg, "shoal_ost_scrub_chunks_total"); n != 0 {
		t.Errorf("the scrubber checked %v chunks; it was off", n)
	}
	got, err := readFile(cl.Client(), "/f")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read after the repair", got, want)

	// A client's report of a healthy chunk: read again, found whole,
	// dropped; the chunk file stays the same file.
	healthy := exts.Extents[1].Extent
	hp := chunkPath(healthy, 0)
	before, err := os.Stat(hp)
	if err != nil {
		t.Fatal(err)
	}
	dismissed := metricValue(t, reg, "shoal_mds_admin_bad_chunks_dismissed_total")
	_, err = c.MDS().ReportCorrupt(ctx, &mdspb.ReportCorruptRequest{Chunks: []*mdspb.BadChunk{
		{Extent: healthy.Id, Index: 0, Ost: healthy.Osts[0], FromClient: true, Reason: "test: not really corrupt"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for metricValue(t, reg, "shoal_mds_admin_bad_chunks_dismissed_total") == dismissed {
		if time.Now().After(deadline) {
			t.Fatal("a client's report of a healthy chunk was not dismissed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	after, err := os.Stat(hp)
	if err != nil {
		t.Fatal(err)
	}
	if before.Sys().(*syscall.Stat_t).Ino != after.Sys().(*syscall.Stat_t).Ino {
		t.Error("a healthy chunk reported by a client was rewritten")
	}
	if n := metricValue(t, reg, "shoal_mds_admin_bad_chunks_repaired_total"); n != 1 {
		t.Errorf("repaired: %v, want still 1", n)
	}
	stub := adminStub(t, cl)
	fsckClean(t, stub, 30*time.Second)

	// An admin scrub now finds nothing; the metrics say what it did.
	startJob(t, stub, &mdspb.StartJobRequest{Kind: mds.JobScrub})
	if j := waitJob(t, stub, mds.JobScrub, time.Minute); j.State != mds.JobDone || j.CorruptFound != 0 {
		t.Fatalf("scrub: %v", j)
	}
	if n := metricValue(t, reg, "shoal_mds_admin_jobs", "kind", "scrub", "state", "done"); n != 1 {
		t.Errorf("shoal_mds_admin_jobs{kind=scrub,state=done} = %v, want 1", n)
	}
	if n := metricValue(t, reg, "shoal_ost_scrub_chunks_total", "pass", "admin"); n < float64(len(exts.Extents)*6) {
		t.Errorf("the admin scrub checked %v chunks, want at least %d", n, len(exts.Extents)*6)
	}
	if n := metricValue(t, reg, "shoal_ost_scrub_corrupt_chunks_total"); n != 0 {
		t.Errorf("the scrub found %v corrupt chunks after the repair", n)
	}
}
