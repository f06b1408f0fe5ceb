package mds

import (
	"fmt"
	"sort"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// candidate is one OST that could take a chunk, as placement sees it.
type candidate struct {
	id       uint32
	capacity uint64
	free     uint64
}

// place picks the k+m distinct OSTs of one extent from cands (live OSTs
// not excluded by the client). It is pure: the same inputs give the same
// placement.
//
// Policy: OSTs that report a capacity but less than one unit free are full
// and skipped. Of the rest, those with at least half the free space of the
// emptiest one form the pool (topped up by free space when the pool is
// smaller than k+m); the pool is ordered by id and the placement is the k+m
// consecutive OSTs starting at rot mod len(pool). Advancing rot by one per
// extent gives consecutive extents of a file different placements and
// rotates which OST holds which chunk (parity included), so every OST gets
// data, while OSTs far fuller than the rest are left alone.
func place(cands []candidate, l *mdspb.Layout, rot uint64) ([]uint32, error) {
	need := int(l.GetK() + l.GetM())
	if need == 0 {
		return nil, fmt.Errorf("placement for empty layout: %w", errs.ErrInvalid)
	}
	if len(cands) < need {
		return nil, fmt.Errorf("need %d OSTs up, have %d: %w", need, len(cands), errs.ErrUnavailable)
	}
	var usable []candidate
	for _, c := range cands {
		if c.capacity > 0 && c.free < uint64(l.GetUnit()) {
			continue
		}
		usable = append(usable, c)
	}
	if len(usable) < need {
		return nil, fmt.Errorf("need %d OSTs with free space, have %d: %w", need, len(usable), errs.ErrNoSpace)
	}
	// Emptiest first; ids break ties so the order is deterministic.
	sort.Slice(usable, func(i, j int) bool {
		if usable[i].free != usable[j].free {
			return usable[i].free > usable[j].free
		}
		return usable[i].id < usable[j].id
	})
	n := need
	for n < len(usable) && usable[n].free >= usable[0].free/2 {
		n++
	}
	pool := usable[:n]
	sort.Slice(pool, func(i, j int) bool { return pool[i].id < pool[j].id })
	out := make([]uint32, need)
	start := int(rot % uint64(len(pool)))
	for j := range out {
		out[j] = pool[(start+j)%len(pool)].id
	}
	return out, nil
}
