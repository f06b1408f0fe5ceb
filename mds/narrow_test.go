package mds

import (
	"slices"
	"testing"
	"time"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// A move of a chunk of a narrow extent with two unplaced slots switches
// (the unplaced slots are not two chunks on "OST 0"), and a widening
// switch keeps the extent listed as narrow until no slot is unplaced.
func TestSwitchNarrowExtent(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(7)
	f := e.create(rootIno, "f")
	r, err := e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 1, ExcludeOsts: []uint32{5, 6, 7}})
	wantErr(t, "alloc", err, nil)
	ex := written(r.Extents[0], 4*mib)
	if !slices.Equal(ex.Osts, []uint32{1, 2, 3, 4, 0, 0}) {
		t.Fatalf("placement %v", ex.Osts)
	}
	e.commit(f.Ino, ref(0, 4*mib, 0, ex))
	keysOf := func() [][]byte {
		k, err := e.s.mapKeysOf(map[uint64]bool{ex.Id: true})
		if err != nil {
			t.Fatal(err)
		}
		return k[ex.Id]
	}
	// A drain moves chunk 0 from OST 1 to OST 7.
	switched, err := e.s.switchPlacements([]placementSwitch{moveSwitch(movedExtent{old: ex, moves: []chunkMove{{extent: ex.Id, index: 0, from: 1, to: 7}}}, keysOf(), e.s.now()+int64(time.Second))})
	ok := err == nil && switched[0]
	if err != nil || !ok {
		t.Fatalf("switch: %v %v", ok, err)
	}
	cur, _ := e.s.extentOf(ex.Id)
	if !slices.Equal(cur.Osts, []uint32{7, 2, 3, 4, 0, 0}) {
		t.Fatalf("after the move: %v", cur.Osts)
	}
	// Widened by one slot: still narrow; by both: not.
	for i, fill := range []map[int]uint32{{4: 5}, {5: 6}} {
		switched, err = e.s.switchPlacements([]placementSwitch{widenSwitch(widening{e: cur, fill: fill}, keysOf())})
		ok = err == nil && switched[0]
		if err != nil || !ok {
			t.Fatalf("widen %v: %v %v", fill, ok, err)
		}
		cur, _ = e.s.extentOf(ex.Id)
		if want := uint64(1 - i); e.s.narrowCount() != want {
			t.Fatalf("after widening %v (%v): %d narrow, want %d", fill, cur.Osts, e.s.narrowCount(), want)
		}
	}
	if !slices.Equal(cur.Osts, []uint32{7, 2, 3, 4, 5, 6}) {
		t.Fatalf("widened: %v", cur.Osts)
	}
	g, err := e.c.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: f.Ino})
	if err != nil || !slices.Equal(g.Extents[0].Extent.Osts, cur.Osts) {
		t.Fatalf("map entry: %v %v", g.GetExtents(), err)
	}
	e.check()
}
