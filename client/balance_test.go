package client

import (
	"slices"
	"testing"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// TestBalancePlan: a data chunk is read from a parity chunk only when its
// OST has balanceSlack more reads in flight, each parity chunk at most
// once, the least busy first; never for a narrow extent's unplaced
// chunks or without parity.
func TestBalancePlan(t *testing.T) {
	ext := &mdspb.Extent{Osts: []uint32{1, 2, 3, 4, 5, 6}} // RS 4+2
	for _, tc := range []struct {
		name    string
		load    map[uint32]int
		osts    []uint32
		k, m    int
		out, in []int
	}{
		{"idle", nil, nil, 4, 2, nil, nil},
		{"even", map[uint32]int{1: 3, 2: 3, 3: 3, 4: 3, 5: 3, 6: 3}, nil, 4, 2, nil, nil},
		{"one busy by 1", map[uint32]int{1: 1}, nil, 4, 2, []int{0}, []int{4}},
		{"one busy by 2", map[uint32]int{1: 2}, nil, 4, 2, []int{0}, []int{4}},
		{"least busy parity", map[uint32]int{2: 5, 5: 2, 6: 1}, nil, 4, 2, []int{1}, []int{5}},
		{"three busy, two parity", map[uint32]int{1: 4, 2: 4, 3: 4}, nil, 4, 2, []int{0, 1}, []int{4, 5}},
		{"parity as busy", map[uint32]int{1: 4, 5: 4, 6: 4}, nil, 4, 2, nil, nil},
		{"parity less busy", map[uint32]int{1: 4, 5: 3, 6: 3}, nil, 4, 2, []int{0}, []int{4}},
		{"parity unplaced", map[uint32]int{1: 4}, []uint32{1, 2, 3, 4, 0, 6}, 4, 2, []int{0}, []int{5}},
		{"data unplaced", map[uint32]int{2: 0}, []uint32{0, 2, 3, 4, 5, 6}, 4, 2, nil, nil},
		{"no parity", map[uint32]int{1: 9}, []uint32{1, 2, 3, 4}, 4, 0, nil, nil},
		{"mirror", map[uint32]int{1: 3}, []uint32{1, 2, 3}, 1, 2, []int{0}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l ostLoad
			for id, n := range tc.load {
				l.add(id, n)
			}
			e := ext
			if tc.osts != nil {
				e = &mdspb.Extent{Osts: tc.osts}
			}
			out, in := l.balancePlan(e, tc.k, tc.m)
			if !slices.Equal(out, tc.out) || !slices.Equal(in, tc.in) {
				t.Fatalf("plan %v -> %v, want %v -> %v", out, in, tc.out, tc.in)
			}
		})
	}
	var l ostLoad
	l.add(7, 1)
	l.add(7, -1)
	if len(l.n) != 0 {
		t.Fatalf("counts after the reads ended: %v", l.n)
	}
}
