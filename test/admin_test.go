package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost"
	"github.com/shoalfs/shoal/ost/ostpb"
	"github.com/shoalfs/shoal/test/cluster"
)

// Administration tests (docs/admin.md): repair, drain and remove, scrub,
// fsck, rebalance and its interruption, on real servers on loopback. Sizes
// are modest for CI; SHOAL_ADMIN_MIB scales the data, SHOAL_ADMIN_SEEDS the
// number of interrupted rebalances.

// adminLayout has small cells so that modest data makes many extents: an
// extent is 4 rows of 4 x 64 KiB = 1 MiB.
var adminLayout = layout.Layout{K: 4, M: 2, Unit: 64 << 10}

func adminMiB(def int) int {
	if v, err := strconv.Atoi(os.Getenv("SHOAL_ADMIN_MIB")); err == nil && v > 0 {
		return v
	}
	return def
}

// adminWithin scales a time limit d, set for def MiB of data, to the
// size SHOAL_ADMIN_MIB asks for (never below d).
func adminWithin(d time.Duration, def int) time.Duration {
	return d * time.Duration(max(1, (adminMiB(def)+def-1)/def))
}

func adminCluster(t *testing.T, osts int) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	return cluster.Start(t, cluster.Options{
		OSTs: osts, Layout: adminLayout,
		GCGrace: 2 * time.Second,
		Admin: mds.AdminOptions{
			Interval: 100 * time.Millisecond, RetireGrace: time.Second,
			RepairAfter: -1, CallTimeout: 10 * time.Second,
		},
		Scrub: ost.ScrubOptions{Rate: -1}, // tests start passes themselves
	})
}

// dataset is files written by a test and what they hold.
type dataset struct {
	mu    sync.Mutex
	files map[string][]byte
}

func writeDataset(t *testing.T, c *client.Client, dir string, files, size int, seed uint64) *dataset {
	t.Helper()
	ctx := context.Background()
	if err := c.MkdirAll(ctx, dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ds := &dataset{files: map[string][]byte{}}
	for i := 0; i < files; i++ {
		p := fmt.Sprintf("%s/f%03d", dir, i)
		n := size + int(seed+uint64(i))%(size/4+1) // uneven sizes: partial rows
		b := randBytes(seed*1000+uint64(i), n)
		writeFile(t, c, p, b)
		ds.files[p] = b
	}
	return ds
}

func (ds *dataset) verify(t *testing.T, c *client.Client) {
	t.Helper()
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for p, want := range ds.files {
		got, err := readFile(c, p)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		mustEqual(t, p, got, want)
	}
}

func adminStub(t *testing.T, cl *cluster.Cluster) mdspb.MdsClient {
	t.Helper()
	cc, err := cl.DialMDS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return mdspb.NewMdsClient(cc)
}

// waitJob waits until a job is no longer running and returns it.
func waitJob(t *testing.T, stub mdspb.MdsClient, kind string, within time.Duration) *mdspb.AdminJob {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := stub.GetJob(context.Background(), &mdspb.JobRequest{Kind: kind})
		if err == nil && j.State != mds.JobRunning {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s job still running after %v: %v %v", kind, within, j, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func startJob(t *testing.T, stub mdspb.MdsClient, req *mdspb.StartJobRequest) {
	t.Helper()
	if _, err := stub.StartJob(context.Background(), req); err != nil {
		t.Fatalf("start %s: %v", req.Kind, err)
	}
}

// fsckClean runs fsck until it is clean (moves settle, old copies and
// orphans age) or fails after within.
func fsckClean(t *testing.T, stub mdspb.MdsClient, within time.Duration) *mdspb.FsckReply {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		stub.RunGC(context.Background(), &mdspb.GCRequest{})
		r, err := stub.Fsck(context.Background(), &mdspb.FsckRequest{OrphanGraceNs: int64(3 * time.Second)})
		if err != nil {
			t.Fatalf("fsck: %v", err)
		}
		if r.Clean {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("fsck not clean after %v: %d problems, first %v", within, r.ProblemCount, r.Problems[0])
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ostIndex maps OST ids to cluster indexes.
func ostIndex(cl *cluster.Cluster, n int) map[uint32]int {
	out := map[uint32]int{}
	for i := 0; i < n; i++ {
		if s := cl.OST(i).Server; s != nil {
			out[s.ID()] = i
		}
	}
	return out
}

// load runs a reader and a writer until stop: the reader reads the
// dataset's files and compares, the writer writes new files, reads them
// back, and adds them to the dataset. Errors go to errc.
func load(t *testing.T, c *client.Client, ds *dataset, dir string, stop <-chan struct{}) (wait func() []error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		if len(errs) < 10 {
			errs = append(errs, err)
		}
		mu.Unlock()
	}
	var reads, writes atomic.Int64
	wg.Add(2)
	go func() { // reader
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ds.mu.Lock()
			var p string
			var want []byte
			for p, want = range ds.files {
				break
			}
			ds.mu.Unlock()
			got, err := readFile(c, p)
			if err != nil {
				fail(fmt.Errorf("reader: %s: %w", p, err))
				continue
			}
			if string(got) != string(want) {
				fail(fmt.Errorf("reader: %s: wrong bytes", p))
			}
			reads.Add(1)
		}
	}()
	go func() { // writer
		defer wg.Done()
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := fmt.Sprintf("%s/w%04d", dir, i)
			b := randBytes(uint64(7000+i), 700_000+i*4096)
			f, err := c.Create(ctx, p, 0o644)
			if err == nil {
				_, err = f.WriteAt(ctx, b, 0)
				if cerr := f.Close(ctx); err == nil {
					err = cerr
				}
			}
			if err != nil {
				fail(fmt.Errorf("writer: %s: %w", p, err))
				continue
			}
			got, err := readFile(c, p)
			if err != nil || string(got) != string(b) {
				fail(fmt.Errorf("writer: read back %s: %v", p, err))
				continue
			}
			ds.mu.Lock()
			ds.files[p] = b
			ds.mu.Unlock()
			writes.Add(1)
		}
	}()
	return func() []error {
		wg.Wait()
		t.Logf("load: %d reads, %d writes", reads.Load(), writes.Load())
		return errs
	}
}

// TestAdminRepairAfterLoss kills one OST for good, repairs, removes it,
// checks fsck, then loses a second OST: nothing is lost.
func TestAdminRepairAfterLoss(t *testing.T) {
	cl := adminCluster(t, 8)
	c := cl.Client()
	stub := adminStub(t, cl)
	ds := writeDataset(t, c, "/r", 16, adminMiB(64)<<20/16, 1)

	idx := ostIndex(cl, 8)
	victim := cl.OST(2).Server.ID()
	cl.KillOST(2)
	if err := cl.WaitOSTsUp(7); err != nil {
		t.Fatal(err)
	}
	startJob(t, stub, &mdspb.StartJobRequest{Kind: mds.JobRepair})
	j := waitJob(t, stub, mds.JobRepair, 2*time.Minute)
	if j.State != mds.JobDone || j.DoneChunks == 0 || j.LostExtents != 0 {
		t.Fatalf("repair: %v", j)
	}
	t.Logf("repair: %d chunks, %d bytes", j.DoneChunks, j.DoneBytes)
	// Nothing references the dead OST any more: it can be removed.
	if _, err := stub.SetOstState(context.Background(), &mdspb.SetOstStateRequest{Id: victim, State: "removed"}); err != nil {
		t.Fatalf("remove after repair: %v", err)
	}
	fsckClean(t, stub, 30*time.Second)
	ds.verify(t, c)

	// A second loss: every extent still has k+m-1 chunks.
	second := -1
	for id, i := range idx {
		if id != victim {
			second = i
			break
		}
	}
	cl.KillOST(second)
	ds.verify(t, cl.Client())
}

// TestAdminDrainRemove drains an OST under a reader and a writer, then
// removes it: all data readable, the OST holds nothing.
func TestAdminDrainRemove(t *testing.T) {
	cl := adminCluster(t, 7)
	c := cl.Client()
	stub := adminStub(t, cl)
	ds := writeDataset(t, c, "/d", 16, adminMiB(64)<<20/16, 2)
	target := cl.OST(0).Server
	id := target.ID()

	// Removing is refused while it holds chunks.
	if _, err := stub.SetOstState(context.Background(), &mdspb.SetOstStateRequest{Id: id, State: "removed"}); err == nil {
		t.Fatal("remove of a full OST succeeded")
	}
	stop := make(chan struct{})
	wait := load(t, cl.Client(), ds, "/d", stop)
	time.Sleep(300 * time.Millisecond)
	o, err := stub.SetOstState(context.Background(), &mdspb.SetOstStateRequest{Id: id, State: "draining"})
	if err != nil || o.State != mds.StateDraining {
		t.Fatalf("drain: %v %v", o, err)
	}
	j := waitJob(t, stub, mds.JobDrain, 2*time.Minute)
	close(stop)
	if errs := wait(); len(errs) > 0 {
		t.Fatalf("load during drain: %v", errs)
	}
	if j.State != mds.JobDone || j.DoneChunks == 0 {
		t.Fatalf("drain: %v", j)
	}
	if _, err := stub.SetOstState(context.Background(), &mdspb.SetOstStateRequest{Id: id, State: "removed"}); err != nil {
		t.Fatalf("remove after drain: %v", err)
	}
	ds.verify(t, c)
	// The old copies go after the retire grace; extents freed before
	// the drain after the GC grace.
	deadline := time.Now().Add(30 * time.Second)
	for {
		stub.RunGC(context.Background(), &mdspb.GCRequest{})
		inf, err := ostInfo(cl, 0)
		if err != nil {
			t.Fatal(err)
		}
		if inf.Chunks == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("drained OST still holds %d chunks", inf.Chunks)
		}
		time.Sleep(300 * time.Millisecond)
	}
	fsckClean(t, stub, 30*time.Second)
}

func ostInfo(cl *cluster.Cluster, i int) (*ostpb.InfoReply, error) {
	cc, err := cl.DialOST(i)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	return ostpb.NewOstClient(cc).Info(context.Background(), &ostpb.InfoRequest{})
}

// flipChunks flips a byte in n chunks, at most m per extent, across OSTs,
// and returns how many it flipped.
func flipChunks(t *testing.T, cl *cluster.Cluster, c *client.Client, ds *dataset, nOsts, n int) int {
	t.Helper()
	idx := ostIndex(cl, nOsts)
	ctx := context.Background()
	flipped := 0
	r := rand.New(rand.NewPCG(3, 3))
	for p := range ds.files {
		a, err := c.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ext, err := cl.MDSStub(c).GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: a.Ino})
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range ext.Extents {
			e := ref.Extent
			// Up to m chunks of this extent, at random positions.
			perm := r.Perm(len(e.Osts))
			for _, j := range perm[:e.Layout.M] {
				if flipped == n {
					return flipped
				}
				path := cl.OST(idx[e.Osts[j]]).Server.ChunkPath(e.Id, uint32(j))
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)/2] ^= 0x5a
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
				flipped++
			}
		}
	}
	return flipped
}

// TestAdminScrubRepairs flips bytes in 100 chunks (at most m per extent):
// reads in between return the right bytes, and scrub finds all 100 and
// rebuilds them. (The reads in between go through a client that does not
// report the bad chunks it meets: one that does gets them repaired before
// the scrub, TestClientReportsCorruptChunk.)
func TestAdminScrubRepairs(t *testing.T) {
	cl := adminCluster(t, 6)
	c := cl.Client()
	stub := adminStub(t, cl)
	ds := writeDataset(t, c, "/s", 16, adminMiB(64)<<20/16, 3)
	n := flipChunks(t, cl, c, ds, 6, 100)
	if n != 100 {
		t.Fatalf("flipped %d chunks, want 100", n)
	}
	ds.verify(t, cl.ClientWith(client.Options{NoCorruptReports: true}))

	startJob(t, stub, &mdspb.StartJobRequest{Kind: mds.JobScrub})
	j := waitJob(t, stub, mds.JobScrub, 2*time.Minute)
	if j.State != mds.JobDone || j.CorruptFound != 100 || j.DoneChunks != 100 {
		t.Fatalf("scrub: %v", j)
	}
	// A second pass finds nothing.
	startJob(t, stub, &mdspb.StartJobRequest{Kind: mds.JobScrub})
	j = waitJob(t, stub, mds.JobScrub, 2*time.Minute)
	if j.State != mds.JobDone || j.CorruptFound != 0 {
		t.Fatalf("second scrub: %v", j)
	}
	ds.verify(t, cl.Client())
	fsckClean(t, stub, 30*time.Second)
}

// TestAdminBackgroundScrub: the continuous scrubber finds a flipped chunk
// on its own and the MDS rebuilds it.
func TestAdminBackgroundScrub(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	cl := cluster.Start(t, cluster.Options{
		OSTs: 6, Layout: adminLayout,
		Admin: mds.AdminOptions{Interval: 100 * time.Millisecond, RepairAfter: -1},
		Scrub: ost.ScrubOptions{Rate: 64 << 20, PassInterval: 100 * time.Millisecond},
	})
	c := cl.Client()
	ds := writeDataset(t, c, "/b", 4, 2<<20, 4)
	flipChunks(t, cl, c, ds, 6, 3)
	deadline := time.Now().Add(60 * time.Second)
	for {
		bad := 0
		for i := 0; i < 6; i++ {
			st, err := cl.OST(i).Server.ScrubStatus()
			if err != nil {
				t.Fatal(err)
			}
			bad += int(st.BackgroundCorrupt)
		}
		if bad >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background scrub found %d of 3 bad chunks", bad)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The MDS rebuilds them: an admin pass soon finds nothing.
	stub := adminStub(t, cl)
	for {
		startJob(t, stub, &mdspb.StartJobRequest{Kind: mds.JobScrub})
		j := waitJob(t, stub, mds.JobScrub, time.Minute)
		if j.State == mds.JobDone && j.CorruptFound == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scrub after background repair: %v", j)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ds.verify(t, c)
}

// TestAdminFsckOrphan: an unreferenced chunk is an orphan once old
// enough; fsck --repair deletes it.
func TestAdminFsckOrphan(t *testing.T) {
	cl := adminCluster(t, 6)
	c := cl.Client()
	stub := adminStub(t, cl)
	writeDataset(t, c, "/o", 2, 1<<20, 5)
	cc, err := cl.DialOST(1)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stray := &ostpb.ChunkId{Extent: 1 << 40, Index: 0}
	if _, err := ostpb.NewOstClient(cc).WriteChunk(context.Background(), &ostpb.WriteChunkRequest{Id: stray, Data: make([]byte, 4096)}); err != nil {
		t.Fatal(err)
	}
	r, err := stub.Fsck(context.Background(), &mdspb.FsckRequest{})
	if err != nil || !r.Clean {
		t.Fatalf("fsck with a young orphan: %v %v", r, err)
	}
	time.Sleep(50 * time.Millisecond)
	r, err = stub.Fsck(context.Background(), &mdspb.FsckRequest{OrphanGraceNs: int64(10 * time.Millisecond)})
	if err != nil || r.Clean || r.ProblemCount != 1 || r.Problems[0].Kind != "orphan" || r.Problems[0].Extent != 1<<40 {
		t.Fatalf("fsck: %v %v", r, err)
	}
	r, err = stub.Fsck(context.Background(), &mdspb.FsckRequest{OrphanGraceNs: int64(10 * time.Millisecond), Repair: true})
	if err != nil || r.Fixed != 1 {
		t.Fatalf("fsck --repair: %v %v", r, err)
	}
	r, err = stub.Fsck(context.Background(), &mdspb.FsckRequest{OrphanGraceNs: int64(10 * time.Millisecond)})
	if err != nil || !r.Clean {
		t.Fatalf("fsck after repair: %v %v", r, err)
	}
}

// TestAdminLayouts: setstripe on a directory is inherited; a file with
// data keeps its layout; df reports states.
func TestAdminLayouts(t *testing.T) {
	cl := adminCluster(t, 6)
	c := cl.Client()
	stub := adminStub(t, cl)
	ctx := context.Background()
	if err := c.Mkdir(ctx, "/wide", 0o755); err != nil {
		t.Fatal(err)
	}
	d, _ := c.Stat(ctx, "/wide")
	if _, err := stub.SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: d.Ino, Layout: &mdspb.Layout{K: 1, M: 2, Unit: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	b := randBytes(9, 3<<20+5)
	writeFile(t, c, "/wide/f", b)
	a, _ := c.Stat(ctx, "/wide/f")
	if l := a.Layout; l.K != 1 || l.M != 2 {
		t.Fatalf("inherited layout %v", l)
	}
	got, err := readFile(c, "/wide/f")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "replicated file", got, b)
	if _, err := stub.SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: a.Ino, Layout: &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}}); err == nil {
		t.Fatal("setstripe on a file with data succeeded")
	}
	if _, err := stub.SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: d.Ino, Layout: &mdspb.Layout{K: 4, M: 2, Unit: 1000}}); err == nil {
		t.Fatal("unaligned unit accepted")
	}
	r, err := stub.ListOsts(ctx, &mdspb.ListOstsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range r.Osts {
		if o.State != mds.StateUp {
			t.Fatalf("OST %d state %q", o.Id, o.State)
		}
	}
}

// TestAdminRebalance adds 3 empty OSTs to 6 and rebalances under a
// reader and a writer: every OST ends within 10% of the mean, every file
// byte-identical.
func TestAdminRebalance(t *testing.T) {
	cl := adminCluster(t, 6)
	c := cl.Client()
	stub := adminStub(t, cl)
	// 32 files at the CI size; at a spec size (make admin-spec: 1 GiB)
	// files of 8 MiB.
	files := max(32, adminMiB(96)/8)
	ds := writeDataset(t, c, "/rb", files, adminMiB(96)<<20/files, 6)
	for range 3 {
		if _, err := cl.AddOST(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.WaitOSTsUp(9); err != nil {
		t.Fatal(err)
	}
	plan, err := stub.PlanRebalance(context.Background(), &mdspb.StartJobRequest{ThresholdPct: 5})
	if err != nil || plan.Moves == 0 {
		t.Fatalf("plan: %v %v", plan, err)
	}
	t.Logf("plan: %d moves, %d bytes, imbalance %.1f%% -> %.1f%%", plan.Moves, plan.Bytes, plan.ImbalancePct, plan.ImbalanceAfterPct)
	stop := make(chan struct{})
	wait := load(t, cl.Client(), ds, "/rb", stop)
	startJob(t, stub, &mdspb.StartJobRequest{Kind: mds.JobRebalance, ThresholdPct: 5})
	j := waitJob(t, stub, mds.JobRebalance, adminWithin(3*time.Minute, 96))
	close(stop)
	if errs := wait(); len(errs) > 0 {
		t.Fatalf("load during rebalance: %v", errs)
	}
	if j.State != mds.JobDone {
		t.Fatalf("rebalance: %v", j)
	}
	checkBalanced(t, stub, 10)
	ds.verify(t, c)
	fsckClean(t, stub, 30*time.Second)
}

// checkBalanced checks that every up OST's referenced bytes are within
// pct of the mean.
func checkBalanced(t *testing.T, stub mdspb.MdsClient, pct float64) {
	t.Helper()
	plan, err := stub.PlanRebalance(context.Background(), &mdspb.StartJobRequest{ThresholdPct: 5})
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, o := range plan.Osts {
		sum += o.Bytes
	}
	mean := float64(sum) / float64(len(plan.Osts))
	for _, o := range plan.Osts {
		if d := (float64(o.Bytes) - mean) / mean * 100; d > pct || d < -pct {
			t.Fatalf("OST %d holds %d bytes, %.1f%% from the mean %.0f", o.Id, o.Bytes, d, mean)
		}
	}
}

// TestAdminRebalanceInterrupted kills the MDS and an OST at random points
// of a rebalance (one seed per run; SHOAL_ADMIN_SEEDS for more): nothing
// is lost, and the rebalance resumes and finishes.
func TestAdminRebalanceInterrupted(t *testing.T) {
	seeds := 3
	if v, err := strconv.Atoi(os.Getenv("SHOAL_ADMIN_SEEDS")); err == nil && v > 0 {
		seeds = v
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			cl := adminCluster(t, 6)
			c := cl.Client()
			ds := writeDataset(t, c, "/ri", 16, adminMiB(48)<<20/16, uint64(100+seed))
			for range 3 {
				if _, err := cl.AddOST(); err != nil {
					t.Fatal(err)
				}
			}
			if err := cl.WaitOSTsUp(9); err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(seed), 42))
			stub := adminStub(t, cl)
			startJob(t, stub, &mdspb.StartJobRequest{Kind: mds.JobRebalance, ThresholdPct: 5})
			for kill := 0; kill < 3; kill++ {
				time.Sleep(time.Duration(r.IntN(1500)) * time.Millisecond)
				victim := r.IntN(9)
				cl.KillOST(victim)
				cl.RestartMDS()
				if err := cl.StartOST(victim); err != nil {
					t.Fatal(err)
				}
				if err := cl.WaitOSTsUp(9); err != nil {
					t.Fatal(err)
				}
				ds.verify(t, cl.Client())
			}
			stub = adminStub(t, cl)
			// The job survived the restarts (it is in Pebble) and goes on.
			j := waitJob(t, stub, mds.JobRebalance, adminWithin(3*time.Minute, 48))
			if j.State != mds.JobDone {
				t.Fatalf("rebalance: %v", j)
			}
			checkBalanced(t, stub, 10)
			ds.verify(t, cl.Client())
			fsckClean(t, stub, 30*time.Second)
		})
	}
}
