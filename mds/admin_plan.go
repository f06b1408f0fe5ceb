package mds

import (
	"slices"
	"sort"
)

// Planners of the administration worker: pure functions from a view of
// the extents and OSTs to a list of chunk moves. They never place two
// chunks of one extent on one OST, and are deterministic (extents in id
// order, ties broken by OST id), so the same view gives the same plan.

// planExtent is one committed extent as the planners see it.
type planExtent struct {
	id    uint64
	m     int      // parity chunks: how many may be unreadable
	chunk uint64   // bytes of each chunk
	osts  []uint32 // placement
}

// chunkMove moves chunk index of extent from OST from to OST to.
type chunkMove struct {
	extent uint64
	index  uint32
	from   uint32
	to     uint32
	bytes  uint64
}

// planView is the input of the planners.
type planView struct {
	extents []planExtent      // ordered by id
	load    map[uint32]uint64 // chunk bytes on each OST (the extents' view)
	dest    map[uint32]bool   // OSTs that may receive chunks (up, active)
}

// loadOf sums the chunk bytes each OST holds in extents.
func loadOf(extents []planExtent) map[uint32]uint64 {
	load := make(map[uint32]uint64)
	for _, e := range extents {
		for _, o := range e.osts {
			load[o] += e.chunk
		}
	}
	return load
}

// evacuation is the result of planEvacuate.
type evacuation struct {
	moves  []chunkMove
	lost   []uint64 // extents with more than m unreadable chunks: cannot be rebuilt
	stuck  int      // chunks with no OST to go to (every destination holds a chunk of the extent)
	chunks int      // chunks found on evacuated OSTs
}

// planEvacuate moves every chunk on an OST in evac to a destination OST,
// the least loaded one not already in the extent's placement (loads count
// the moves planned so far). unreadable OSTs (down or lost) cannot serve
// their chunks: an extent with more than m chunks on them is lost and left
// alone.
func planEvacuate(v planView, evac, unreadable map[uint32]bool) evacuation {
	load := make(map[uint32]uint64, len(v.load))
	for id, b := range v.load {
		load[id] = b
	}
	dests := sortedIDs(v.dest)
	var out evacuation
	for _, e := range v.extents {
		bad := 0
		var idx []int
		for j, o := range e.osts {
			if unreadable[o] {
				bad++
			}
			if evac[o] {
				idx = append(idx, j)
			}
		}
		if len(idx) == 0 {
			continue
		}
		out.chunks += len(idx)
		if bad > e.m {
			out.lost = append(out.lost, e.id)
			continue
		}
		placed := slices.Clone(e.osts)
		for _, j := range idx {
			to, ok := leastLoaded(dests, load, placed)
			if !ok {
				out.stuck++
				continue
			}
			out.moves = append(out.moves, chunkMove{extent: e.id, index: uint32(j), from: e.osts[j], to: to, bytes: e.chunk})
			load[to] += e.chunk
			load[e.osts[j]] -= min(load[e.osts[j]], e.chunk)
			placed[j] = to
		}
	}
	return out
}

// leastLoaded returns the destination with the least load that is not in
// placed.
func leastLoaded(dests []uint32, load map[uint32]uint64, placed []uint32) (uint32, bool) {
	best, found := uint32(0), false
	for _, d := range dests {
		if slices.Contains(placed, d) {
			continue
		}
		if !found || load[d] < load[best] {
			best, found = d, true
		}
	}
	return best, found
}

func sortedIDs(set map[uint32]bool) []uint32 {
	var out []uint32
	for id, ok := range set {
		if ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// rebalance is the result of planRebalance.
type rebalance struct {
	moves  []chunkMove
	before map[uint32]uint64
	after  map[uint32]uint64
}

// spread is (max - min) / mean of the loads of ids, in percent.
func spread(load map[uint32]uint64, ids []uint32) float64 {
	if len(ids) == 0 {
		return 0
	}
	var sum, lo, hi uint64
	for i, id := range ids {
		b := load[id]
		sum += b
		if i == 0 || b < lo {
			lo = b
		}
		if b > hi {
			hi = b
		}
	}
	if sum == 0 {
		return 0
	}
	mean := float64(sum) / float64(len(ids))
	return float64(hi-lo) / mean * 100
}

// planRebalance moves chunks from the fullest to the emptiest OSTs of
// v.dest until every one is within thresholdPct of the mean load of those
// OSTs, or no move brings them closer. Chunks on OSTs outside v.dest
// (down, draining, removed) stay where they are, and count for no one.
// A move goes from the fullest OST to the emptiest one that does not hold
// a chunk of the same extent, and only when it narrows the gap between
// the two (the chunk is smaller than the gap); bigger chunks go first, so
// that a plan has few moves.
func planRebalance(v planView, thresholdPct float64) rebalance {
	ids := sortedIDs(v.dest)
	load := make(map[uint32]uint64, len(ids))
	for _, id := range ids {
		load[id] = v.load[id]
	}
	out := rebalance{before: make(map[uint32]uint64, len(ids))}
	for id, b := range load {
		out.before[id] = b
	}
	if len(ids) < 2 {
		out.after = load
		return out
	}
	var sum uint64
	for _, id := range ids {
		sum += load[id]
	}
	mean := float64(sum) / float64(len(ids))
	tol := mean * thresholdPct / 100

	// The chunks of each OST, biggest first (extent id, then index, break
	// ties), and the current placement of each extent.
	type chunk struct {
		ext   int // index in v.extents
		index int
		moved bool
	}
	byOst := make(map[uint32][]*chunk)
	placed := make([][]uint32, len(v.extents))
	for i, e := range v.extents {
		placed[i] = slices.Clone(e.osts)
		for j, o := range e.osts {
			if _, ok := load[o]; ok {
				byOst[o] = append(byOst[o], &chunk{ext: i, index: j})
			}
		}
	}
	for _, cs := range byOst {
		sort.SliceStable(cs, func(a, b int) bool { return v.extents[cs[a].ext].chunk > v.extents[cs[b].ext].chunk })
	}
	exhausted := make(map[uint32]bool) // sources with no useful move left
	for {
		// The fullest source not exhausted, and the OSTs by load.
		order := slices.Clone(ids)
		sort.SliceStable(order, func(a, b int) bool { return load[order[a]] < load[order[b]] })
		lo, hi := load[order[0]], load[order[len(order)-1]]
		if float64(hi) <= mean+tol && float64(lo) >= mean-tol {
			break
		}
		src := uint32(0)
		for i := len(order) - 1; i >= 0; i-- {
			if !exhausted[order[i]] {
				src = order[i]
				break
			}
		}
		if src == 0 || float64(load[src]) <= mean {
			break
		}
		moved := false
		for _, dst := range order {
			if load[dst] >= load[src] {
				break
			}
			gap := load[src] - load[dst]
			for _, c := range byOst[src] {
				e := v.extents[c.ext]
				if c.moved || e.chunk >= gap || slices.Contains(placed[c.ext], dst) {
					continue
				}
				// Do not push the destination far above the mean either.
				if float64(load[dst]+e.chunk) > mean+tol && float64(load[src]) <= mean+tol {
					continue
				}
				c.moved = true
				placed[c.ext][c.index] = dst
				load[src] -= e.chunk
				load[dst] += e.chunk
				byOst[dst] = append(byOst[dst], &chunk{ext: c.ext, index: c.index, moved: true})
				out.moves = append(out.moves, chunkMove{extent: e.id, index: uint32(c.index), from: src, to: dst, bytes: e.chunk})
				moved = true
				break
			}
			if moved {
				break
			}
		}
		if !moved {
			exhausted[src] = true
		}
	}
	out.after = load
	return out
}

// groupMoves groups moves by extent, in extent order.
func groupMoves(moves []chunkMove) [][]chunkMove {
	sorted := slices.Clone(moves)
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].extent < sorted[b].extent })
	var out [][]chunkMove
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j].extent == sorted[i].extent {
			j++
		}
		out = append(out, sorted[i:j])
		i = j
	}
	return out
}
