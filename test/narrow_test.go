package test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost"
	"github.com/shoalfs/shoal/test/cluster"
)

// Writes while OSTs are down or full (docs/reliability.md, "Writes while
// OSTs are down or full"): RS 4+2 on six OSTs keeps accepting writes
// with one or two OSTs down, places them narrow, and widens them when the
// OSTs return; with fewer than k up, or fewer than k with room, writes
// fail with the reason and EIO or ENOSPC. SHOAL_NARROW_SEEDS seeds (default
// 1) from SHOAL_NARROW_SEED (default 1) choose the OSTs, kill or clean
// stop, the sizes and the pauses; make soak runs several.
// SHOAL_NARROW_VERBOSE=1 puts the servers' and clients' logs in the test
// log.

func narrowSeeds(t *testing.T) []uint64 {
	n, first := 1, uint64(1)
	if v, err := strconv.Atoi(os.Getenv("SHOAL_NARROW_SEEDS")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.ParseUint(os.Getenv("SHOAL_NARROW_SEED"), 10, 64); err == nil {
		first = v
	}
	var out []uint64
	for i := range n {
		out = append(out, first+uint64(i))
	}
	t.Logf("seeds %v (SHOAL_NARROW_SEED, SHOAL_NARROW_SEEDS)", out)
	return out
}

// narrowCluster is adminCluster on tmpfs, with options.
func narrowCluster(t *testing.T, o cluster.Options) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	o.Layout = adminLayout // extents of 1 MiB, chunks of 256 KiB
	o.GCGrace = 2 * time.Second
	o.Admin = mds.AdminOptions{Interval: 100 * time.Millisecond, RetireGrace: time.Second, RepairAfter: -1, CallTimeout: 10 * time.Second}
	o.Scrub = ost.ScrubOptions{Rate: -1}
	o.Dir = cluster.TmpfsDir(t)
	o.Verbose = os.Getenv("SHOAL_NARROW_VERBOSE") != ""
	return cluster.Start(t, o)
}

// tryWrite writes a file through the client and returns the first error.
func tryWrite(c *client.Client, path string, data []byte) error {
	ctx := context.Background()
	f, err := c.Create(ctx, path, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.WriteAt(ctx, data, 0)
	return errors.Join(werr, f.Close(ctx))
}

// listOsts returns the MDS's view of the OSTs.
func listOsts(t *testing.T, stub mdspb.MdsClient) *mdspb.ListOstsReply {
	t.Helper()
	r, err := stub.ListOsts(context.Background(), &mdspb.ListOstsRequest{})
	if err != nil {
		t.Fatalf("list OSTs: %v", err)
	}
	return r
}

// placements returns every extent of the files, as committed.
func placements(t *testing.T, cl *cluster.Cluster, c *client.Client, files map[string][]byte) []*mdspb.Extent {
	t.Helper()
	ctx := context.Background()
	var out []*mdspb.Extent
	for p := range files {
		a, err := c.Stat(ctx, p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		r, err := cl.MDSStub(c).GetExtents(ctx, mdsGetExtents(a.Ino))
		if err != nil {
			t.Fatalf("extents of %s: %v", p, err)
		}
		for _, ref := range r.GetExtents() {
			out = append(out, ref.GetExtent())
		}
	}
	return out
}

// narrowOf counts the extents with unplaced chunks, and checks that no
// OST holds two chunks of one extent.
func narrowOf(t *testing.T, exts []*mdspb.Extent) int {
	t.Helper()
	n := 0
	for _, e := range exts {
		var ids []uint32
		for _, o := range e.GetOsts() {
			if o != 0 {
				ids = append(ids, o)
			}
		}
		if len(ids) < len(e.GetOsts()) {
			n++
		}
		slices.Sort(ids)
		if len(slices.Compact(ids)) != len(ids) {
			t.Fatalf("extent %d: two chunks on one OST: %v", e.GetId(), e.GetOsts())
		}
		if len(ids) < int(e.GetLayout().GetK()) {
			t.Fatalf("extent %d: %d chunks placed, fewer than k: %v", e.GetId(), len(ids), e.GetOsts())
		}
	}
	return n
}

func verifyFiles(t *testing.T, c *client.Client, files map[string][]byte) {
	t.Helper()
	for p, want := range files {
		got, err := readFile(c, p)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		mustEqual(t, p, got, want)
	}
}

// TestWritesWhileOSTsDown: RS 4+2 on six OSTs. With one OST down, then
// two (killed or stopped, writes right after the fault, while the MDS
// still counts the OST up, and after it counts it down), every write
// completes and reads back, on narrow extents; with three down, a write
// fails with "need 4 OSTs up for RS 4+2, have 3" (ErrUnavailable, EIO
// through the mount). When the OSTs return, the MDS widens every extent
// to k+m chunks on distinct OSTs, and the rebuilt chunks are real: with
// two other OSTs down everything still reads.
func TestWritesWhileOSTsDown(t *testing.T) {
	for _, seed := range narrowSeeds(t) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { testWritesWhileOSTsDown(t, seed) })
	}
}

func testWritesWhileOSTsDown(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 17))
	cl := narrowCluster(t, cluster.Options{})
	c := cl.Client()
	stub := adminStub(t, cl)
	mnt := cl.Mount()
	ctx := context.Background()
	if err := c.MkdirAll(ctx, "/w", 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	write := func(what string, n int) {
		t.Helper()
		for range n {
			p := fmt.Sprintf("/w/f%03d", len(files))
			data := randBytes(seed*1000+uint64(len(files)), 100<<10+rng.IntN(3<<20))
			start := time.Now()
			writeFile(t, c, p, data)
			t.Logf("%s: wrote %s (%d bytes) in %v", what, p, len(data), time.Since(start).Round(time.Millisecond))
			files[p] = data
		}
	}
	kind := map[bool]string{true: "killed", false: "stopped"}
	fault := func(i int) {
		t.Helper()
		kill := rng.IntN(2) == 0
		if kill {
			cl.KillOST(i)
		} else {
			cl.StopOST(i)
		}
		t.Logf("OST index %d %s", i, kind[kill])
	}
	waitUp := func(n int) {
		t.Helper()
		if err := cl.WaitOSTsUp(n); err != nil {
			t.Fatal(err)
		}
	}

	write("all up", 2)
	order := rng.Perm(6)
	fault(order[0])
	write("one down, not yet noticed", 1+rng.IntN(2))
	waitUp(5)
	write("one down", 2)
	fault(order[1])
	if rng.IntN(2) == 0 {
		write("two down, the second not yet noticed", 1)
	}
	waitUp(4)
	write("two down", 3)
	verifyFiles(t, c, files)
	narrow := listOsts(t, stub).GetNarrowExtents()
	if got := narrowOf(t, placements(t, cl, c, files)); got == 0 || narrow == 0 {
		t.Fatalf("%d narrow extents in the files, %d at the MDS: want some", got, narrow)
	}
	t.Logf("%d narrow extents", narrow)

	// Three down, fewer than k: refused with the reason.
	fault(order[2])
	waitUp(3)
	err := tryWrite(c, "/w/refused", randBytes(seed, 1<<20))
	if !errors.Is(err, errs.ErrUnavailable) || !strings.Contains(fmt.Sprint(err), "need 4 OSTs up for RS 4+2, have 3") {
		t.Fatalf("write with 3 OSTs up: %v, want ErrUnavailable saying \"need 4 OSTs up for RS 4+2, have 3\"", err)
	}
	err = os.WriteFile(filepath.Join(mnt, "w", "refused-mnt"), randBytes(seed, 1<<20), 0o644)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("write through the mount with 3 OSTs up: %v, want EIO", err)
	}

	// They return, in some order, with pauses: every extent widened.
	for _, i := range []int{order[2], order[0], order[1]} {
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		if err := cl.StartOST(i); err != nil {
			t.Fatal(err)
		}
	}
	waitUp(6)
	back := time.Now()
	deadline := back.Add(time.Minute)
	for {
		n := narrowOf(t, placements(t, cl, c, files))
		left := listOsts(t, stub).GetNarrowExtents()
		if n == 0 && left == 0 {
			t.Logf("%d narrow extents widened %v after every OST was back", narrow, time.Since(back).Round(10*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute, %d extents of the files still narrow (%d at the MDS)", n, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, e := range placements(t, cl, c, files) {
		// k+m of the extent's own layout: RS 4+2, or 1+2 for a small
		// extent the MDS mirrored (a file's tail).
		if l := e.GetLayout(); slices.Contains(e.GetOsts(), 0) || len(e.GetOsts()) != int(l.GetK()+l.GetM()) || l.GetM() != 2 {
			t.Fatalf("extent %d (k=%d m=%d) not widened: %v", e.GetId(), l.GetK(), l.GetM(), e.GetOsts())
		}
	}
	verifyFiles(t, c, files)
	fsckClean(t, stub, 30*time.Second)

	// The rebuilt chunks are real: two OSTs that were up all along go
	// down, and every byte still reads (from a new client, which has no
	// cached rows).
	cl.KillOST(order[3])
	cl.KillOST(order[4])
	verifyFiles(t, cl.Client(), files)
}

// TestWritesFullOST: one of six OSTs is small. Writes fill it to the MDS's
// full ratio and then go on, narrow, on the others, without an error; the
// small OST never holds more than its capacity; `shoal admin status` says
// HEALTH_ERR naming it. With two more full, fewer than k OSTs have room:
// a write fails with ErrNoSpace, ENOSPC through the mount, and the data
// already written still reads.
func TestWritesFullOST(t *testing.T) {
	const small = 6 << 20
	cl := narrowCluster(t, cluster.Options{OSTCapacity: []uint64{0, 0, 0, 0, 0, small}})
	c := cl.Client()
	stub := adminStub(t, cl)
	mnt := cl.Mount()
	ctx := context.Background()
	if err := c.MkdirAll(ctx, "/f", 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	// 40 MiB in extents of 1 MiB: 10 MiB of chunks per OST at full width.
	for i := range 20 {
		p := fmt.Sprintf("/f/f%02d", i)
		files[p] = randBytes(uint64(100+i), 2<<20)
		writeFile(t, c, p, files[p])
	}
	smallID := cl.OST(5).Server.ID()
	inf, err := ostInfo(cl, 5)
	if err != nil {
		t.Fatal(err)
	}
	if inf.GetUsed() > small || inf.GetUsed() < small*9/10 {
		t.Fatalf("small OST holds %d bytes of chunks: want at most its capacity %d, and most of it", inf.GetUsed(), small)
	}
	verifyFiles(t, c, files)
	if n := narrowOf(t, placements(t, cl, c, files)); n == 0 {
		t.Fatal("no narrow extent: the small OST never filled")
	}
	waitFull := func(want int) *mdspb.ListOstsReply {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := listOsts(t, stub)
			full := 0
			for _, o := range r.GetOsts() {
				if o.GetFull() {
					full++
				}
			}
			if full == want {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d OSTs full, want %d: %v", full, want, r.GetOsts())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	r := waitFull(1)
	if o := r.GetOsts()[5]; o.GetId() != smallID || !o.GetFull() || !o.GetNearfull() {
		t.Fatalf("the small OST as the MDS sees it: %v", o)
	}

	// `shoal admin status`: HEALTH_ERR, naming the full OST.
	bin := filepath.Join(t.TempDir(), "shoal")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/shoalfs/shoal/cmd/shoal").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "admin", "status")
	cmd.Env = append(append(os.Environ(), "SHOAL_MDS="+cl.MDSAddr()), cl.TLSEnv()...)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.HasPrefix(string(out), "HEALTH_ERR") ||
		!strings.Contains(string(out), fmt.Sprintf("OST %d (%s) is full", smallID, cl.OST(5).Addr)) {
		t.Fatalf("shoal admin status: %v\n%s", err, out)
	}

	// Two more OSTs fill up (restarted with a capacity of what they
	// hold): fewer than k OSTs have room.
	for _, i := range []int{0, 1} {
		inf, err := ostInfo(cl, i)
		if err != nil {
			t.Fatal(err)
		}
		cl.StopOST(i)
		cl.OST(i).Capacity = inf.GetUsed()
		if err := cl.StartOST(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.WaitOSTsUp(6); err != nil {
		t.Fatal(err)
	}
	waitFull(3)
	err = tryWrite(c, "/f/nospace", randBytes(7, 1<<20))
	if !errors.Is(err, errs.ErrNoSpace) || !strings.Contains(fmt.Sprint(err), "need 4 OSTs with room for a chunk of 262144 bytes for RS 4+2, have 3 of 6 up") {
		t.Fatalf("write with 3 OSTs full: %v, want ErrNoSpace with the reason", err)
	}
	err = os.WriteFile(filepath.Join(mnt, "f", "nospace-mnt"), randBytes(8, 1<<20), 0o644)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write through the mount with 3 OSTs full: %v, want ENOSPC", err)
	}
	verifyFiles(t, c, files)
}
