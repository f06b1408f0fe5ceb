package mds

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// TestRaftPowerCut runs a group of three members, each with its state
// machine and Raft log on a crashable in-memory file system of its own
// (vfs.NewCrashableMem), while three clients create, rename and unlink
// through the group; it power-cuts a follower, then the leader: the
// member's Ready loop stops between two Ready batches, its server drops
// every connection, and its file system is cloned as a power cut leaves
// it (vfs.CrashClone: what was not synced is lost, or, for odd seeds, a
// random part of it is kept, as a disk may have written some back). The
// member restarts on the clone. Then: a leader serves, every member
// reaches the same applied index with identical state, the invariants
// hold on each, and every acknowledged operation is there on each (and
// none that was acknowledged undone); no retried create failed with
// EEXIST and no retried rename or unlink with ENOENT. The log is
// compacted every 200 entries, so a member may come back behind a
// snapshot. Last, every member is cut at once (as a power loss of the
// whole rack): only what each member synced before acknowledging is left,
// so an acknowledgement ahead of its fsync would show. SHOAL_RAFT_POWER_CUTS
// sets the number of seeds (default 3; each cuts three times).
func TestRaftPowerCut(t *testing.T) {
	seeds := 3
	if v, err := strconv.Atoi(os.Getenv("SHOAL_RAFT_POWER_CUTS")); err == nil && v > 0 {
		seeds = v
	}
	if testing.Short() {
		seeds = 1
	}
	for seed := 0; seed < seeds; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { powerCutOnce(t, uint64(seed)) })
	}
}

// cutGroup is a group whose members live on crashable in-memory file
// systems.
type cutGroup struct {
	*group
	fs map[uint64]*vfs.MemFS
}

func startCutGroup(t *testing.T, n int) *cutGroup {
	t.Helper()
	cg := &cutGroup{group: &group{t: t, dirs: map[uint64]string{}, addrs: map[uint64]string{}, srv: map[uint64]*Server{}, g: map[uint64]*wire.Server{}},
		fs: map[uint64]*vfs.MemFS{}}
	binds := map[uint64]*wire.Server{}
	for id := uint64(1); id <= uint64(n); id++ {
		b, err := wire.Bind("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		binds[id] = b
		cg.addrs[id] = b.Addr()
		cg.dirs[id] = "/mds"
		cg.fs[id] = vfs.NewCrashableMem()
	}
	for id := uint64(1); id <= uint64(n); id++ {
		cg.start(id, binds[id])
	}
	t.Cleanup(func() {
		for id := range cg.srv {
			cg.stop(id)
		}
	})
	return cg
}

func (cg *cutGroup) start(id uint64, b *wire.Server) {
	cg.t.Helper()
	if b == nil {
		var err error
		if b, err = wire.Bind(cg.addrs[id]); err != nil {
			cg.t.Fatal(err)
		}
	}
	o := Options{Dir: cg.dirs[id], FS: cg.fs[id], GCInterval: time.Hour, GCGrace: time.Minute}
	o.Raft = &RaftOptions{ID: id, Peers: cg.addrs, TickInterval: 20 * time.Millisecond, SnapshotEntries: 200, KeepEntries: 50}
	s, err := Open(context.Background(), o)
	if err != nil {
		cg.t.Fatalf("start member %d: %v", id, err)
	}
	b.Serve(s.Register)
	cg.srv[id], cg.g[id] = s, b
}

// powerCut cuts the power of the members ids at once and starts them
// again on what their disks kept. cfg(id) is the clone's configuration.
func (cg *cutGroup) powerCut(cfg func(id uint64) vfs.CrashCloneCfg, ids ...uint64) {
	cg.t.Helper()
	before := map[uint64]uint64{}
	for _, id := range ids {
		cg.g[id].Kill() // no answer to anyone from here on
	}
	for _, id := range ids {
		s := cg.srv[id]
		s.raft.stopLoop() // nothing more persisted or sent
		st, _ := s.MemberStatus()
		before[id] = st.Applied
		crashed := cg.fs[id].CrashClone(cfg(id))
		s.Close() // writes only to the old file system, now discarded
		delete(cg.srv, id)
		delete(cg.g, id)
		cg.fs[id] = crashed
	}
	for _, id := range ids {
		cg.start(id, nil)
		st, _ := cg.srv[id].MemberStatus()
		cg.t.Logf("member %d: applied %d before the cut, %d in its state machine after it", id, before[id], st.Applied)
	}
}

// cutModel is what one client knows: names whose last operation was
// acknowledged (present, with their inode, or gone), and names whose
// last operation failed (either way).
type cutModel struct {
	present map[string]uint64
	gone    map[string]bool
	unknown map[string]bool
	acked   int
	failed  int
}

func powerCutOnce(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xc0ffee))
	cg := startCutGroup(t, 3)
	cg.leader()
	var addrs []string
	for id := uint64(1); id <= 3; id++ {
		addrs = append(addrs, cg.addrs[id])
	}
	gc, err := wire.DialGroup(strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	cli := mdspb.NewMdsClient(gc)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	models := make([]*cutModel, 3)
	for w := range models {
		m := &cutModel{present: map[string]uint64{}, gone: map[string]bool{}, unknown: map[string]bool{}}
		models[w] = m
		wrng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			powerCutWorker(t, cli, w, wrng, m, stop)
		}()
	}
	cfg := func(id uint64) vfs.CrashCloneCfg {
		if seed%2 == 0 {
			return vfs.CrashCloneCfg{}
		}
		return vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(seed, rng.Uint64()))}
	}
	cut := func(what string, ids ...uint64) {
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		t.Logf("seed %d: power cut of %s %v", seed, what, ids)
		cg.powerCut(cfg, ids...)
	}
	lead := cg.leader()
	cut("follower", lead%3+1)
	cut("leader", cg.leader())
	cut("every member", 1, 2, 3)
	time.Sleep(time.Duration(100+rng.IntN(200)) * time.Millisecond)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	cg.leader()
	cg.converge()

	acked, failed := 0, 0
	for _, m := range models {
		acked += m.acked
		failed += m.failed
	}
	t.Logf("seed %d: %d operations acknowledged, %d failed", seed, acked, failed)
	if acked < 50 {
		t.Fatalf("seed %d: only %d operations acknowledged", seed, acked)
	}
	for id, s := range cg.srv {
		err := s.snapshot(func(r reader) error {
			for _, m := range models {
				for name, ino := range m.present {
					v, err := getValue(r, dentryKey(rootIno, []byte(name)))
					if err != nil {
						return fmt.Errorf("acknowledged %s lost: %w", name, err)
					}
					if got, _, err := decodeDentry(v); err != nil || got != ino {
						return fmt.Errorf("%s is inode %d (%v), acknowledged as %d", name, got, err, ino)
					}
				}
				for name := range m.gone {
					if _, err := getValue(r, dentryKey(rootIno, []byte(name))); !errors.Is(err, errs.ErrNotFound) {
						return fmt.Errorf("%s, acknowledged gone, is there (%v)", name, err)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("seed %d: member %d: %v", seed, id, err)
		}
	}
}

// powerCutWorker creates, renames and unlinks names of its own until
// stop, and records what was acknowledged in m.
func powerCutWorker(t *testing.T, cli mdspb.MdsClient, w int, rng *rand.Rand, m *cutModel, stop chan struct{}) {
	var live []string // names believed present
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		switch op := rng.IntN(10); {
		case op < 6 || len(live) == 0:
			name := fmt.Sprintf("w%d-%d", w, i)
			r, err := cli.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(name), Mode: sIFREG | 0o644, Exclusive: true})
			switch {
			case errors.Is(err, errs.ErrExists):
				t.Errorf("create %s: %v (applied twice)", name, err)
			case err != nil:
				m.failed++
				m.unknown[name] = true
			default:
				m.acked++
				m.present[name] = r.GetAttr().GetIno()
				live = append(live, name)
			}
		case op < 8:
			j := rng.IntN(len(live))
			old := live[j]
			nn := fmt.Sprintf("w%d-%d", w, i)
			ino := m.present[old]
			delete(m.present, old)
			_, err := cli.Rename(ctx, &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte(old), NewParent: rootIno, NewName: []byte(nn)})
			switch {
			case errors.Is(err, errs.ErrNotFound):
				t.Errorf("rename %s: %v (applied twice)", old, err)
			case err != nil:
				m.failed++
				m.unknown[old], m.unknown[nn] = true, true
				live = append(live[:j], live[j+1:]...)
			default:
				m.acked++
				m.gone[old] = true
				m.present[nn] = ino
				live[j] = nn
			}
		default:
			j := rng.IntN(len(live))
			name := live[j]
			delete(m.present, name)
			live = append(live[:j], live[j+1:]...)
			_, err := cli.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte(name)})
			switch {
			case errors.Is(err, errs.ErrNotFound):
				t.Errorf("unlink %s: %v (applied twice)", name, err)
			case err != nil:
				m.failed++
				m.unknown[name] = true
			default:
				m.acked++
				m.gone[name] = true
			}
		}
		cancel()
		if t.Failed() {
			return
		}
	}
}
