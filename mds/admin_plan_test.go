package mds

import (
	"slices"
	"testing"
)

// placementsValid checks that no extent has two chunks on one OST after
// applying moves, and that every move starts where the chunk is.
func applyMoves(t *testing.T, v planView, moves []chunkMove) map[uint64][]uint32 {
	t.Helper()
	placed := map[uint64][]uint32{}
	for _, e := range v.extents {
		placed[e.id] = slices.Clone(e.osts)
	}
	for _, m := range moves {
		p := placed[m.extent]
		if p[m.index] != m.from {
			t.Fatalf("move %+v: chunk is on OST %d", m, p[m.index])
		}
		p[m.index] = m.to
	}
	for id, p := range placed {
		seen := map[uint32]bool{}
		for _, o := range p {
			if seen[o] {
				t.Fatalf("extent %d: two chunks on OST %d: %v", id, o, p)
			}
			seen[o] = true
		}
	}
	return placed
}

func viewOf(n int, osts []uint32, dest []uint32, chunk uint64) planView {
	var exts []planExtent
	for i := 0; i < n; i++ {
		p := make([]uint32, 6)
		for j := range p {
			p[j] = osts[(i+j)%len(osts)]
		}
		exts = append(exts, planExtent{id: uint64(i + 1), m: 2, chunk: chunk, osts: p})
	}
	d := map[uint32]bool{}
	for _, id := range dest {
		d[id] = true
	}
	return planView{extents: exts, load: loadOf(exts), dest: d}
}

func TestPlanRebalance(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extent int
		chunk  uint64
		old    []uint32
		dest   []uint32
		thr    float64
	}{
		{"add 3 to 6", 200, 1 << 20, []uint32{1, 2, 3, 4, 5, 6}, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 5},
		{"add 1 to 6", 100, 4096, []uint32{1, 2, 3, 4, 5, 6}, []uint32{1, 2, 3, 4, 5, 6, 7}, 5},
		{"balanced", 60, 1 << 20, []uint32{1, 2, 3, 4, 5, 6}, []uint32{1, 2, 3, 4, 5, 6}, 5},
		{"one extent", 1, 1 << 20, []uint32{1, 2, 3, 4, 5, 6}, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, 5},
		{"down OST left alone", 120, 1 << 20, []uint32{1, 2, 3, 4, 5, 6, 7}, []uint32{1, 2, 3, 4, 5, 6, 8, 9}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := viewOf(tc.extent, tc.old, tc.dest, tc.chunk)
			r := planRebalance(v, tc.thr)
			placed := applyMoves(t, v, r.moves)
			for _, m := range r.moves {
				if !v.dest[m.from] || !v.dest[m.to] {
					t.Fatalf("move %+v touches an OST outside the destinations", m)
				}
			}
			after := loadOf(func() []planExtent {
				var out []planExtent
				for _, e := range v.extents {
					out = append(out, planExtent{id: e.id, chunk: e.chunk, osts: placed[e.id]})
				}
				return out
			}())
			ids := sortedIDs(v.dest)
			for _, id := range ids {
				if after[id] != r.after[id] {
					t.Fatalf("OST %d: plan says %d bytes after, moves give %d", id, r.after[id], after[id])
				}
			}
			if tc.extent >= 100 {
				if s := spread(after, ids); s > 2*tc.thr+1 {
					t.Fatalf("spread after %.1f%% (before %.1f%%), %d moves", s, spread(r.before, ids), len(r.moves))
				}
			}
			if tc.name == "balanced" && len(r.moves) != 0 {
				t.Fatalf("%d moves on a balanced cluster", len(r.moves))
			}
			// Deterministic.
			if r2 := planRebalance(v, tc.thr); !slices.Equal(r.moves, r2.moves) {
				t.Fatal("two plans of one view differ")
			}
		})
	}
}

func TestPlanEvacuate(t *testing.T) {
	v := viewOf(50, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, []uint32{1, 2, 4, 5, 6, 7, 8}, 1<<20)
	ev := planEvacuate(v, map[uint32]bool{3: true}, map[uint32]bool{3: true})
	if ev.stuck != 0 || len(ev.lost) != 0 || len(ev.moves) != ev.chunks || ev.chunks == 0 {
		t.Fatalf("evacuate: %d moves of %d chunks, %d stuck, %d lost", len(ev.moves), ev.chunks, ev.stuck, len(ev.lost))
	}
	placed := applyMoves(t, v, ev.moves)
	for id, p := range placed {
		if slices.Contains(p, 3) {
			t.Fatalf("extent %d still on OST 3", id)
		}
	}
	// Spread over the destinations: no OST gets more than its share + 1.
	per := map[uint32]int{}
	for _, m := range ev.moves {
		per[m.to]++
	}
	for id, n := range per {
		if n > ev.chunks/5+2 {
			t.Fatalf("OST %d got %d of %d chunks", id, n, ev.chunks)
		}
	}

	// Three of six unreadable with m = 2: lost, left alone.
	v = viewOf(1, []uint32{1, 2, 3, 4, 5, 6}, []uint32{4, 5, 6, 7, 8, 9}, 1<<20)
	ev = planEvacuate(v, map[uint32]bool{1: true, 2: true, 3: true}, map[uint32]bool{1: true, 2: true, 3: true})
	if len(ev.lost) != 1 || len(ev.moves) != 0 {
		t.Fatalf("3 lost of 4+2: %+v", ev)
	}
	// No destination outside the placement: stuck.
	v = viewOf(1, []uint32{1, 2, 3, 4, 5, 6}, []uint32{1, 2, 3, 4, 5}, 1<<20)
	ev = planEvacuate(v, map[uint32]bool{6: true}, map[uint32]bool{6: true})
	if ev.stuck != 1 || len(ev.moves) != 0 {
		t.Fatalf("no destination: %+v", ev)
	}
}
