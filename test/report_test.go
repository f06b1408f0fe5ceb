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
	exts, err := cl.MDSStub(c).GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: a.Ino})
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
	_, err = cl.MDSStub(c).ReportCorrupt(ctx, &mdspb.ReportCorruptRequest{Chunks: []*mdspb.BadChunk{
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
	chunks := 0 // k+m a full-size extent, 1+m a mirrored small one
	for _, r := range exts.Extents {
		chunks += len(r.GetExtent().GetOsts())
	}
	if n := metricValue(t, reg, "shoal_ost_scrub_chunks_total", "pass", "admin"); n < float64(chunks) {
		t.Errorf("the admin scrub checked %v chunks, want at least %d", n, chunks)
	}
	if n := metricValue(t, reg, "shoal_ost_scrub_corrupt_chunks_total"); n != 0 {
		t.Errorf("the scrub found %v corrupt chunks after the repair", n)
	}
}

// TestTruncatedChunkRepaired: a chunk file cut short on an OST's disk
// (issue 17, item 5) is rebuilt by every path that finds it: a client's
// read (the MDS's check of the report reads "range outside its bytes",
// which is damage, not "try later"), an admin scrub, and fsck --repair;
// and a client's report of a chunk gives way to a scrub's report of it.
// Each time the chunk file gets its bytes back and the bad-chunk gauge
// returns to 0.
func TestTruncatedChunkRepaired(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	reg := prometheus.NewRegistry()
	cl := cluster.Start(t, cluster.Options{
		OSTs: 6, Layout: adminLayout, Registry: reg,
		Admin: mds.AdminOptions{Interval: 100 * time.Millisecond, RepairAfter: -1},
		Scrub: ost.ScrubOptions{Rate: -1}, // no background scrub
	})
	c := cl.Client()
	ctx := context.Background()
	stub := adminStub(t, cl)
	idx := ostIndex(cl, 6)
	// truncate cuts chunk 1 (data) of the first extent of a new file to
	// half its length and returns its path, its good bytes and the file's.
	truncate := func(name string, seed uint64) (path string, good, data []byte) {
		t.Helper()
		data = randBytes(seed, 1<<20+777)
		writeFile(t, c, name, data)
		a, err := c.Stat(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		exts, err := cl.MDSStub(c).GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: a.Ino})
		if err != nil || len(exts.Extents) == 0 {
			t.Fatalf("extents of %s: %v %v", name, exts, err)
		}
		e := exts.Extents[0].Extent
		path = cl.OST(idx[e.Osts[1]]).Server.ChunkPath(e.Id, 1)
		if good, err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, int64(len(good)/2)); err != nil {
			t.Fatal(err)
		}
		return path, good, data
	}
	// repaired waits until the chunk file has its bytes back, nothing is
	// queued, and repaired counts want.
	repaired := func(how, path string, good []byte, want float64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			b, err := os.ReadFile(path)
			if err == nil && bytes.Equal(b, good) &&
				metricValue(t, reg, "shoal_mds_admin_bad_chunks_repaired_total") == want &&
				metricValue(t, reg, "shoal_mds_admin_bad_chunks_queued") == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: truncated chunk not rebuilt in 30s (file %d of %d bytes, %v; repaired %v, queued %v)", how, len(b), len(good), err,
					metricValue(t, reg, "shoal_mds_admin_bad_chunks_repaired_total"), metricValue(t, reg, "shoal_mds_admin_bad_chunks_queued"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// A client's read.
	path, good, data := truncate("/read", 1)
	got, err := readFile(cl.Client(), "/read")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read of a file with a truncated chunk", got, data)
	repaired("client read", path, good, 1)
	if n := metricValue(t, reg, "shoal_mds_admin_bad_chunks_reported_total", "source", "client"); n != 1 {
		t.Errorf("reported by clients: %v, want 1", n)
	}

	// An admin scrub, no client involved.
	path, good, _ = truncate("/scrub", 2)
	startJob(t, stub, &mdspb.StartJobRequest{Kind: mds.JobScrub})
	if j := waitJob(t, stub, mds.JobScrub, time.Minute); j.State != mds.JobDone || j.CorruptFound != 1 {
		t.Fatalf("scrub: %v", j)
	}
	repaired("scrub", path, good, 2)
	// The scrub's result names the file whose chunk it found bad.
	j, err := stub.GetJob(ctx, &mdspb.JobRequest{Kind: mds.JobScrub, Files: true})
	if err != nil || len(j.Files) != 1 || j.Files[0].Path != "/scrub" || j.Files[0].Damage != "bad" || len(j.DamagedExtents) != 1 {
		t.Errorf("scrub job's files: %v %v", j.GetFiles(), err)
	}

	// fsck --repair: a wrong length, queued and rebuilt.
	path, good, _ = truncate("/fsck", 3)
	r, err := stub.Fsck(ctx, &mdspb.FsckRequest{Repair: true, OrphanGraceNs: int64(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if r.ProblemCount != 1 || r.Problems[0].Kind != "wrong_length" || !r.Problems[0].Fixed {
		t.Fatalf("fsck --repair: %v", r)
	}
	repaired("fsck --repair", path, good, 3)

	// A client's report held for its check, then the scrubber's report
	// of the same chunk: the scrubber's replaces it, and it is rebuilt.
	path, good, _ = truncate("/both", 4)
	a, err := c.Stat(ctx, "/both")
	if err != nil {
		t.Fatal(err)
	}
	exts, err := cl.MDSStub(c).GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: a.Ino})
	if err != nil {
		t.Fatal(err)
	}
	e := exts.Extents[0].Extent
	for _, req := range []*mdspb.ReportCorruptRequest{
		{Chunks: []*mdspb.BadChunk{{Extent: e.Id, Index: 1, Ost: e.Osts[1], FromClient: true, Reason: "test: client"}}},
		{Ost: e.Osts[1], Chunks: []*mdspb.BadChunk{{Extent: e.Id, Index: 1, Reason: "test: scrub"}}},
	} {
		if _, err := stub.ReportCorrupt(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	repaired("client then scrub report", path, good, 4)
	fsckClean(t, stub, 30*time.Second)
}
