package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestRaftCrashMembers kills members of a replicated MDS (cluster.KillMDS:
// the nearest thing to kill -9 in one process) at seeded points of a
// storm of creates, renames, overwrites and unlinks from three library
// workers, and starts them again: a follower, the leader, and a follower
// then the leader while the follower is still down (the group has no
// quorum until they come back), each once, then one at random. The log
// is compacted every 300 entries, so that a member restarted far behind
// may have to catch up from a snapshot.
// Afterwards every member has caught up (same applied index, identical
// state machines), every acknowledged operation is found with its bytes,
// nothing was applied twice, and fsck is clean. Seeds: 2 in CI,
// SHOAL_RAFT_SEEDS in make soak.
func TestRaftCrashMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	for _, seed := range raftSeedsN(t, 2) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { raftCrashMembers(t, seed) })
	}
}

func raftCrashMembers(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xc4a5))
	cl := cluster.Start(t, cluster.Options{MDSReplicas: 3, Dir: cluster.TmpfsDir(t),
		MDSRaft: mds.RaftOptions{SnapshotEntries: 300, KeepEntries: 100}})
	workers, dirs := libWorkers(t, cl.Client(), "c", 3, seed*1000)
	stop := runStorm(context.Background(), workers)
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	pause := func(lo, n int) { time.Sleep(time.Duration(lo+rng.IntN(n)) * time.Millisecond) }
	follower := func(lead uint64) uint64 {
		var ids []uint64
		for _, m := range cl.MDSMembers() {
			if m.ID != lead && m.Server != nil {
				ids = append(ids, m.ID)
			}
		}
		return ids[rng.IntN(len(ids))]
	}
	var did []string
	for round := 0; round < 4; round++ {
		pause(200, 500)
		lead, err := cl.MDSLeader()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var victims []uint64
		kind := round // each kind once, then a random one
		if kind > 2 {
			kind = rng.IntN(3)
		}
		switch kind {
		case 0:
			victims = []uint64{follower(lead)}
		case 1:
			victims = []uint64{lead}
		default:
			victims = []uint64{follower(lead), lead}
		}
		for i, v := range victims {
			if i > 0 {
				pause(0, 300)
			}
			cl.KillMDS(v)
		}
		pause(100, 600)
		for _, v := range victims {
			if err := cl.StartMDS(v); err != nil {
				t.Fatalf("round %d: start member %d: %v", round, v, err)
			}
		}
		if _, err := cl.MDSLeader(); err != nil {
			t.Fatalf("round %d, after restarting %v: %v", round, victims, err)
		}
		did = append(did, fmt.Sprintf("killed %v (leader %d)", victims, lead))
	}
	pause(200, 300)
	stop()
	stop = nil
	t.Logf("seed %d: %v", seed, did)
	checkStorm(t, cl, workers, dirs)
}
