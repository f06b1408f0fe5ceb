package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/test/cluster"
)

// End-to-end tests of the replicated MDS (docs/mds-raft.md): a group of
// three members in the cluster harness, real OSTs, the client library and
// a FUSE mount, with members killed (cluster.KillMDS), restarted, added
// and removed under load.

// raftSeeds returns the seeds of TestRaftStorm: 3 in CI, or
// SHOAL_RAFT_SEEDS of them (make soak runs 20) from SHOAL_RAFT_SEED
// (default 1).
func raftSeeds(t *testing.T) []uint64 { return raftSeedsN(t, 3) }

// raftSeedsN returns ci seeds, or SHOAL_RAFT_SEEDS of them, from
// SHOAL_RAFT_SEED (default 1).
func raftSeedsN(t *testing.T, ci int) []uint64 {
	n, first := ci, uint64(1)
	if v := os.Getenv("SHOAL_RAFT_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("SHOAL_RAFT_SEEDS=%q: want a count", v)
		}
	}
	if v := os.Getenv("SHOAL_RAFT_SEED"); v != "" {
		var err error
		if first, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("SHOAL_RAFT_SEED=%q: want a number", v)
		}
	}
	var out []uint64
	for i := 0; i < n; i++ {
		out = append(out, first+uint64(i))
	}
	return out
}

// fs is what a storm worker does its operations through: the client
// library or a FUSE mount. Every method returns once the operation is
// acknowledged (durable: data fsynced, namespace committed by the group).
type stormFS interface {
	// create makes a new file exclusively (O_EXCL) with data, fsynced.
	create(ctx context.Context, name string, data []byte) error
	// overwrite writes p at off of an existing file, fsynced.
	overwrite(ctx context.Context, name string, p []byte, off int64) error
	rename(ctx context.Context, from, to string) error
	unlink(ctx context.Context, name string) error
}

// libFS is a worker's directory through the client library.
type libFS struct {
	c   *client.Client
	dir uint64
}

func (l libFS) create(ctx context.Context, name string, data []byte) error {
	f, _, err := l.c.CreateFileIn(ctx, l.dir, name, client.CreateOptions{Mode: 0o644, Exclusive: true})
	if err != nil {
		return err
	}
	if len(data) > 0 {
		if _, err := f.WriteAt(ctx, data, 0); err != nil {
			f.Close(ctx)
			return err
		}
	}
	if err := f.Fsync(ctx); err != nil {
		f.Close(ctx)
		return err
	}
	return f.Close(ctx)
}

func (l libFS) overwrite(ctx context.Context, name string, p []byte, off int64) error {
	a, err := l.c.Lookup(ctx, l.dir, name)
	if err != nil {
		return err
	}
	f, err := l.c.OpenIno(ctx, a.Ino)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(ctx, p, off); err != nil {
		f.Close(ctx)
		return err
	}
	if err := f.Fsync(ctx); err != nil {
		f.Close(ctx)
		return err
	}
	return f.Close(ctx)
}

func (l libFS) rename(ctx context.Context, from, to string) error {
	return l.c.RenameIn(ctx, l.dir, from, l.dir, to, 0)
}

func (l libFS) unlink(ctx context.Context, name string) error { return l.c.UnlinkIn(ctx, l.dir, name) }

// mountFS is a worker's directory through a FUSE mount.
type mountFS struct{ dir string }

func (m mountFS) create(_ context.Context, name string, data []byte) error {
	f, err := os.OpenFile(filepath.Join(m.dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (m mountFS) overwrite(_ context.Context, name string, p []byte, off int64) error {
	f, err := os.OpenFile(filepath.Join(m.dir, name), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(p, off); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (m mountFS) rename(_ context.Context, from, to string) error {
	return os.Rename(filepath.Join(m.dir, from), filepath.Join(m.dir, to))
}

func (m mountFS) unlink(_ context.Context, name string) error {
	return os.Remove(filepath.Join(m.dir, name))
}

// stormWorker does random operations in its own directory and keeps the
// model of what it must find there afterwards: files whose last operation
// was acknowledged, with their bytes, and names whose last operation
// failed (uncertain: present or not, with either content).
type stormWorker struct {
	name    string
	fs      stormFS
	rng     *rand.Rand
	next    int
	files   map[string][]byte
	unsure  map[string]bool
	ops     int
	errs    []error // operations that failed (the outcome is then unknown)
	doubles []error // failures that mean an operation was applied twice
}

func newStormWorker(name string, f stormFS, seed uint64) *stormWorker {
	return &stormWorker{name: name, fs: f, rng: rand.New(rand.NewPCG(seed, 0x5eed)), files: map[string][]byte{}, unsure: map[string]bool{}}
}

func (w *stormWorker) newName() string {
	w.next++
	return fmt.Sprintf("f%05d", w.next)
}

func (w *stormWorker) pick() string {
	names := make([]string, 0, len(w.files))
	for n := range w.files {
		names = append(names, n)
	}
	slices.Sort(names)
	return names[w.rng.IntN(len(names))]
}

func (w *stormWorker) size() int {
	if w.rng.IntN(8) == 0 {
		return 1<<20 + w.rng.IntN(1<<20)
	}
	return w.rng.IntN(96 << 10)
}

// fail records a failed operation on names: their outcome is unknown.
// An EEXIST on a fresh name or an ENOENT on a name the worker holds
// means a retry was applied a second time.
func (w *stormWorker) fail(op string, err error, names ...string) {
	err = fmt.Errorf("%s %s %v: %w", w.name, op, names, err)
	if errors.Is(err, fs.ErrExist) || errors.Is(err, errs.ErrExists) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, errs.ErrNotFound) {
		w.doubles = append(w.doubles, err)
	}
	w.errs = append(w.errs, err)
	for _, n := range names {
		delete(w.files, n)
		w.unsure[n] = true
	}
}

// step does one operation.
func (w *stormWorker) step(ctx context.Context) {
	w.ops++
	op := w.rng.IntN(10)
	if len(w.files) < 3 {
		op = 0
	}
	switch {
	case op < 4: // create
		n := w.newName()
		data := randBytes(w.rng.Uint64(), w.size())
		if err := w.fs.create(ctx, n, data); err != nil {
			w.fail("create", err, n)
			return
		}
		w.files[n] = data
	case op < 6: // rename
		from, to := w.pick(), w.newName()
		if err := w.fs.rename(ctx, from, to); err != nil {
			w.fail("rename", err, from, to)
			return
		}
		w.files[to] = w.files[from]
		delete(w.files, from)
	case op < 8: // overwrite (possibly extending)
		n := w.pick()
		old := w.files[n]
		off := w.rng.IntN(len(old) + 1)
		p := randBytes(w.rng.Uint64(), 1+w.rng.IntN(64<<10))
		if err := w.fs.overwrite(ctx, n, p, int64(off)); err != nil {
			w.fail("overwrite", err, n)
			return
		}
		nw := make([]byte, max(len(old), off+len(p)))
		copy(nw, old)
		copy(nw[off:], p)
		w.files[n] = nw
	default: // unlink
		n := w.pick()
		if err := w.fs.unlink(ctx, n); err != nil {
			w.fail("unlink", err, n)
			return
		}
		delete(w.files, n)
	}
}

// check compares the worker's directory, read through c, with its model.
func (w *stormWorker) check(t *testing.T, ctx context.Context, c *client.Client, dir string) {
	t.Helper()
	ents, err := c.ReadDir(ctx, dir)
	if err != nil {
		t.Fatalf("%s: readdir: %v", w.name, err)
	}
	found := map[string]bool{}
	for _, e := range ents {
		n := string(e.Name)
		found[n] = true
		want, ok := w.files[n]
		if !ok {
			if !w.unsure[n] {
				t.Errorf("%s: %s exists but was never acknowledged (or was removed)", w.name, n)
			}
			if _, err := readFile(c, dir+"/"+n); err != nil {
				t.Errorf("%s: read %s (outcome unknown): %v", w.name, n, err)
			}
			continue
		}
		got, err := readFile(c, dir+"/"+n)
		if err != nil {
			t.Errorf("%s: read %s: %v", w.name, n, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %s: %d bytes read differ from the %d acknowledged", w.name, n, len(got), len(want))
		}
	}
	for n := range w.files {
		if !found[n] {
			t.Errorf("%s: acknowledged file %s is missing", w.name, n)
		}
	}
}

// stormResult is one seed's failover figures.
type stormResult struct {
	elect, write time.Duration // killed -> a member serves; killed -> first write acknowledged
	ops, errs    int
}

// TestRaftStorm kills the MDS leader during a storm of creates, renames,
// overwrites, unlinks and fsyncs from two clients (the client library
// and a FUSE mount; two library clients where FUSE is not usable): a new
// leader serves within seconds, every acknowledged operation is found
// afterwards with its bytes, none was applied twice (request ids: an
// exclusive create never fails with EEXIST, a rename or unlink never
// with ENOENT because of its own first try), the members converge to
// identical state machines, and fsck is clean. The killed member comes
// back and catches up. Seeds: raftSeeds.
func TestRaftStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	var results []stormResult
	for _, seed := range raftSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			results = append(results, raftStorm(t, seed))
		})
	}
	if len(results) == 0 {
		return
	}
	var el, wr []time.Duration
	ops, nerr := 0, 0
	for _, r := range results {
		el, wr = append(el, r.elect), append(wr, r.write)
		ops, nerr = ops+r.ops, nerr+r.errs
	}
	slices.Sort(el)
	slices.Sort(wr)
	t.Logf("failover over %d seeds: leader killed -> new leader serves: median %v, worst %v; -> first write acknowledged: median %v, worst %v; %d operations, %d failed",
		len(results), el[len(el)/2].Round(time.Millisecond), el[len(el)-1].Round(time.Millisecond),
		wr[len(wr)/2].Round(time.Millisecond), wr[len(wr)-1].Round(time.Millisecond), ops, nerr)
}

func raftStorm(t *testing.T, seed uint64) stormResult {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0xfa11))
	cl := cluster.Start(t, cluster.Options{MDSReplicas: 3, Dir: cluster.TmpfsDir(t), SyncNamespace: true})
	setup := cl.Client()
	var workers []*stormWorker
	var dirs []string
	addLib := func(c *client.Client, name string) {
		d := "/" + name
		if err := setup.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
		a, err := setup.Stat(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, newStormWorker(name, libFS{c, a.Ino}, seed*100+uint64(len(workers))))
		dirs = append(dirs, d)
	}
	libc := cl.Client()
	for i := 0; i < 2; i++ {
		addLib(libc, fmt.Sprintf("lib-%d", i))
	}
	if fuseUsable() {
		mnt := cl.Mount()
		for i := 0; i < 2; i++ {
			name := fmt.Sprintf("fuse-%d", i)
			if err := os.Mkdir(filepath.Join(mnt, name), 0o755); err != nil {
				t.Fatal(err)
			}
			workers = append(workers, newStormWorker(name, mountFS{filepath.Join(mnt, name)}, seed*100+uint64(len(workers))))
			dirs = append(dirs, "/"+name)
		}
	} else {
		t.Logf("no FUSE here: the second client is a second library client")
		c2 := cl.Client()
		for i := 0; i < 2; i++ {
			addLib(c2, fmt.Sprintf("lib2-%d", i))
		}
	}
	if err := setup.Mkdir(ctx, "/probe", 0o755); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				w.step(ctx)
			}
		}()
	}

	// Kill the leader at a seeded point of the storm.
	time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
	lead, err := cl.MDSLeader()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	cl.KillMDS(lead)
	var res stormResult
	if _, err := cl.MDSLeader(); err != nil {
		t.Fatalf("after killing member %d: %v", lead, err)
	}
	res.elect = time.Since(t0)
	if err := setup.Mkdir(ctx, fmt.Sprintf("/probe/p%d", seed), 0o755); err != nil {
		t.Fatalf("first write after the kill: %v", err)
	}
	res.write = time.Since(t0)
	if res.write > 5*time.Second {
		t.Errorf("first write acknowledged %v after the leader was killed, want a few seconds at most", res.write)
	}

	// The storm goes on under the new leader; the killed member comes
	// back and catches up.
	time.Sleep(time.Duration(500+rng.IntN(500)) * time.Millisecond)
	if err := cl.StartMDS(lead); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(300+rng.IntN(300)) * time.Millisecond)
	close(stop)
	wg.Wait()

	if err := cl.WaitMDSConverged(20 * time.Second); err != nil {
		t.Error(err)
	}
	check := cl.Client()
	for i, w := range workers {
		res.ops += w.ops
		res.errs += len(w.errs)
		for _, err := range w.errs {
			t.Logf("failed (outcome unknown): %v", err)
		}
		for _, err := range w.doubles {
			t.Errorf("applied twice? %v", err)
		}
		w.check(t, ctx, check, dirs[i])
	}
	fr, err := cl.MDSStub(check).Fsck(ctx, &mdspb.FsckRequest{})
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if !fr.GetClean() {
		t.Errorf("fsck: %d problems: %v", fr.GetProblemCount(), fr.GetProblems())
	}
	t.Logf("seed %d: killed leader %d; a member served %v later, the first write was acknowledged %v later; %d ops, %d failed",
		seed, lead, res.elect.Round(time.Millisecond), res.write.Round(time.Millisecond), res.ops, res.errs)
	return res
}

// fuseUsable reports whether this test can mount (cluster.RequireFUSE
// would skip).
func fuseUsable() bool {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return false
	}
	if os.Geteuid() != 0 {
		if _, err := os.Stat("/usr/bin/fusermount3"); err != nil {
			return false
		}
	}
	return true
}

// runStorm runs every worker until stop is closed; wait waits for them.
func runStorm(ctx context.Context, workers []*stormWorker) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				w.step(ctx)
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// libWorkers makes n storm workers on client c, each in a new directory
// /prefix-i, and returns them with their directories.
func libWorkers(t *testing.T, c *client.Client, prefix string, n int, seed uint64) ([]*stormWorker, []string) {
	t.Helper()
	ctx := context.Background()
	var ws []*stormWorker
	var dirs []string
	for i := 0; i < n; i++ {
		d := fmt.Sprintf("/%s-%d", prefix, i)
		if err := c.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
		a, err := c.Stat(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, newStormWorker(d[1:], libFS{c, a.Ino}, seed+uint64(i)))
		dirs = append(dirs, d)
	}
	return ws, dirs
}

// checkStorm checks every worker's directory with a new client, the
// members' convergence and fsck.
func checkStorm(t *testing.T, cl *cluster.Cluster, workers []*stormWorker, dirs []string) {
	t.Helper()
	ctx := context.Background()
	if err := cl.WaitMDSConverged(20 * time.Second); err != nil {
		t.Error(err)
	}
	c := cl.Client()
	ops, nerr := 0, 0
	for i, w := range workers {
		ops, nerr = ops+w.ops, nerr+len(w.errs)
		for _, err := range w.errs {
			t.Logf("failed (outcome unknown): %v", err)
		}
		for _, err := range w.doubles {
			t.Errorf("applied twice? %v", err)
		}
		w.check(t, ctx, c, dirs[i])
	}
	fr, err := cl.MDSStub(c).Fsck(ctx, &mdspb.FsckRequest{})
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if !fr.GetClean() {
		t.Errorf("fsck: %d problems: %v", fr.GetProblemCount(), fr.GetProblems())
	}
	t.Logf("%d operations, %d failed", ops, nerr)
}

// TestRaftRestartAll stops all three members at once (cluster.KillMDS
// each) during a storm from a client that stays up, and starts them
// again: every acknowledged operation is there, the client goes on
// (its calls retry through the outage; its session is replaced).
func TestRaftRestartAll(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	cl := cluster.Start(t, cluster.Options{MDSReplicas: 3, Dir: cluster.TmpfsDir(t)})
	workers, dirs := libWorkers(t, cl.Client(), "w", 3, 7)
	stop := runStorm(context.Background(), workers)
	time.Sleep(time.Second)
	t0 := time.Now()
	cl.RestartMDS()
	t.Logf("all members killed and started again; a member serves after %v", time.Since(t0).Round(time.Millisecond))
	time.Sleep(time.Second)
	stop()
	checkStorm(t, cl, workers, dirs)
}

// TestRaftMembership changes the group under a storm: a fourth member
// joins and catches up, leadership moves to it, the first member and
// then the leader itself are removed, a fifth joins, and one of the
// three left is killed; clients that only know the first three addresses
// follow throughout. Every acknowledged operation is found afterwards
// and the members converge.
func TestRaftMembership(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	// Small snapshots: a member that joins late catches up from one.
	cl := cluster.Start(t, cluster.Options{MDSReplicas: 3, Dir: cluster.TmpfsDir(t),
		MDSRaft: mds.RaftOptions{SnapshotEntries: 200, KeepEntries: 50}})
	workers, dirs := libWorkers(t, cl.Client(), "w", 2, 11)
	stop := runStorm(context.Background(), workers)
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	step := func(what string, fn func() error) {
		t.Helper()
		time.Sleep(400 * time.Millisecond)
		t0 := time.Now()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		lead, err := cl.MDSLeader()
		if err != nil {
			t.Fatalf("after %s: %v", what, err)
		}
		t.Logf("%s: done in %v; member %d leads", what, time.Since(t0).Round(time.Millisecond), lead)
	}
	var four, five uint64
	step("add a member", func() (err error) { four, err = cl.AddMDS(); return err })
	step("transfer leadership to it", func() error { return cl.TransferMDSLeader(four) })
	step("remove member 1", func() error { return cl.RemoveMDS(1) })
	step("remove the leader", func() error {
		lead, err := cl.MDSLeader()
		if err != nil {
			return err
		}
		return cl.RemoveMDS(lead)
	})
	step("add another member", func() (err error) { five, err = cl.AddMDS(); return err })
	step("kill a member of the first three", func() error {
		for _, m := range cl.MDSMembers() {
			if m.ID <= 3 && m.Server != nil {
				cl.KillMDS(m.ID)
				return nil
			}
		}
		return errors.New("none running")
	})
	time.Sleep(400 * time.Millisecond)
	stop()
	stop = nil
	var ids []uint64
	for _, m := range cl.MDSMembers() {
		if m.Server != nil {
			ids = append(ids, m.ID)
			st, _ := m.Server.MemberStatus()
			if len(st.Members) != 3 {
				t.Errorf("member %d sees members %v, want 3", m.ID, st.Members)
			}
		}
	}
	t.Logf("running members %v (added %d and %d)", ids, four, five)
	checkStorm(t, cl, workers, dirs)
}
