package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestSaveRank drives ckpt.Store.SaveRank (the Python package's sharded
// saves) from Go, without Python: ranks as separate clients, a rank that
// stops half way (Options.Hook), and the retry.
func TestSaveRank(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	c := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t), Layout: layout.Layout{K: 4, M: 2, Unit: 64 << 10}})
	ctx := context.Background()
	stop := errors.New("stopped")
	store := func(hook func(ckpt.Point) error) *ckpt.Store { return rankStore(t, c, hook) }
	data := func(rank int) []byte { return bytes.Repeat([]byte{byte(rank + 1)}, 300<<10) }
	shards := func(rank, world int) []ckpt.Shard {
		return []ckpt.Shard{{Name: fmt.Sprintf("model-%05d-of-%05d.safetensors", rank+1, world),
			Tensors: []ckpt.Tensor{{Name: "w", DType: safetensors.U8, Shape: []int64{300 << 10}, Data: data(rank)}}}}
	}
	const world = 3
	ranks := []*ckpt.Store{store(nil), store(nil), store(nil)}

	// All at once: one commits; the step has every rank's shard.
	var wg sync.WaitGroup
	res := make([]*ckpt.RankResult, world)
	errs3 := make([]error, world)
	for r := range world {
		wg.Go(func() { res[r], errs3[r] = ranks[r].SaveRank(ctx, "job", 1, r, world, "", shards(r, world)) })
	}
	wg.Wait()
	committed := 0
	for r := range world {
		if errs3[r] != nil {
			t.Fatalf("rank %d: %v", r, errs3[r])
		}
		if res[r].Committed {
			committed++
		}
	}
	if committed != 1 {
		t.Fatalf("%d ranks committed, want 1", committed)
	}
	cp, err := ranks[0].Restore(ctx, "job", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.Shards) != world {
		t.Fatalf("%d shards, want %d", len(cp.Shards), world)
	}
	for r := range world {
		if !bytes.Equal(cp.Shards[r].Tensors[0].Data, data(r)) {
			t.Fatalf("rank %d's tensor differs", r)
		}
	}
	if rep, err := ranks[0].Verify(ctx, "job", 1); err != nil || len(rep.Unlisted) != 0 {
		t.Fatalf("verify: %v, unlisted %v (the parts should be gone)", err, rep.Unlisted)
	}

	// Step 2: rank 1 stops after its shard, before its part; nothing visible.
	dead := store(func(p ckpt.Point) error {
		if p.Phase == ckpt.PhaseClose {
			return stop
		}
		return nil
	})
	for _, r := range []int{0, 2} {
		if out, err := ranks[r].SaveRank(ctx, "job", 2, r, world, "try1", shards(r, world)); err != nil || out.Committed {
			t.Fatalf("rank %d: %+v %v", r, out, err)
		}
	}
	if _, err := dead.SaveRank(ctx, "job", 2, 1, world, "try1", shards(1, world)); !errors.Is(err, stop) {
		t.Fatalf("stopped rank: %v", err)
	}
	if l, err := ranks[0].List(ctx, "job"); err != nil || len(l) != 1 {
		t.Fatalf("list after the dead rank: %v %v", l, err)
	}
	// Restarted under the same attempt: it clears its leftovers and commits.
	out, err := ranks[1].SaveRank(ctx, "job", 2, 1, world, "try1", shards(1, world))
	if err != nil || !out.Committed {
		t.Fatalf("restarted rank: %+v %v", out, err)
	}
	m, _, err := ranks[0].Manifest(ctx, "job", 2)
	if err != nil {
		t.Fatal(err)
	}
	if m.Shared != m.Bytes || m.Base == nil || *m.Base != 1 { // unchanged: every file whole
		t.Fatalf("step 2 shared %d of %d bytes with %v; want all of it with step 1", m.Shared, m.Bytes, m.Base)
	}

	// Bad arguments.
	for _, c := range []struct {
		rank, world int
		attempt     string
	}{{3, 3, ""}, {-1, 3, ""}, {0, 0, ""}, {0, 2, "a b"}, {0, 2, "../x"}} {
		if _, err := ranks[0].SaveRank(ctx, "job", 9, c.rank, c.world, c.attempt, shards(0, 2)); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("rank %d world %d attempt %q: %v, want ErrInvalid", c.rank, c.world, c.attempt, err)
		}
	}
	if _, err := ranks[0].SaveRank(ctx, "job", 9, 0, 2, "", []ckpt.Shard{{Name: ".rank-00000-of-00002.json", Blob: []byte("x")}}); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("a shard named as a part: %v, want ErrInvalid", err)
	}
	if _, err := ranks[0].SaveRank(ctx, "job", 2, 0, 2, "", shards(0, 2)); !errors.Is(err, errs.ErrExists) {
		t.Errorf("a committed step: %v, want ErrExists", err)
	}
}

// TestSaveRankLateMarker: a rank that listed every part but takes the
// commit marker only after another rank committed the step (and removed
// the marker) must not commit again, and must leave no marker behind in
// the committed step.
func TestSaveRankLateMarker(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	c := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t), Layout: layout.Layout{K: 4, M: 2, Unit: 64 << 10}})
	ctx := context.Background()
	shard := func(rank int) []ckpt.Shard {
		return []ckpt.Shard{{Name: fmt.Sprintf("model-%05d-of-00002.safetensors", rank+1),
			Tensors: []ckpt.Tensor{{Name: "w", DType: safetensors.U8, Shape: []int64{4096}, Data: bytes.Repeat([]byte{byte(rank + 1)}, 4096)}}}}
	}
	// Both parts in place, rank 1 lists them and stops before it takes
	// the marker; rank 0 then lists, commits and removes the marker.
	part0, atMarker, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	late := rankStore(t, c, func(p ckpt.Point) error {
		switch p.Phase {
		case ckpt.PhaseManifest:
			<-part0
		case ckpt.PhaseMarker:
			close(atMarker)
			<-release
		}
		return nil
	})
	first := rankStore(t, c, func(p ckpt.Point) error {
		if p.Phase == ckpt.PhaseManifest {
			close(part0)
			<-atMarker
		}
		return nil
	})
	var wg sync.WaitGroup
	var lateOut *ckpt.RankResult
	var lateErr error
	wg.Go(func() { lateOut, lateErr = late.SaveRank(ctx, "job", 1, 1, 2, "", shard(1)) })
	out, err := first.SaveRank(ctx, "job", 1, 0, 2, "", shard(0))
	close(release)
	wg.Wait()
	if err != nil || !out.Committed {
		t.Fatalf("rank 0: %+v %v, want it to commit", out, err)
	}
	if lateErr != nil || lateOut.Committed {
		t.Fatalf("rank 1 (late to the marker): %+v %v, want no error and no commit", lateOut, lateErr)
	}
	cp, err := first.Restore(ctx, "job", 1)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if len(cp.Shards) != 2 {
		t.Fatalf("restore: %d shards, want 2", len(cp.Shards))
	}
	if rep, err := first.Verify(ctx, "job", 1); err != nil || len(rep.Unlisted) != 0 {
		t.Fatalf("verify: %v, unlisted %v (the late marker should be gone)", err, rep.Unlisted)
	}
}

// rankStore is a checkpoint store of its own client of c (a rank), with
// hook, closed at the test's end.
func rankStore(t *testing.T, c *cluster.Cluster, hook func(ckpt.Point) error) *ckpt.Store {
	t.Helper()
	s, err := ckpt.New(c.Client(), ckpt.Options{Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
