package client

import (
	"testing"

	"github.com/shoalfs/shoal/internal/compress"
)

// TestRunsOf: the blocks of a large read are cut into runs of at most
// runBytes stored bytes (or one block), up to runsInFlight of them or
// more, each at least minRunBytes when there are blocks enough, in order,
// leaving out the cached blocks.
func TestRunsOf(t *testing.T) {
	x := &compress.Index{BlockSize: 1 << 20, Logical: 40 << 20}
	var off int64
	for range 40 {
		n := int64(700 << 10)
		x.Blocks = append(x.Blocks, compress.Block{Off: off, Len: n, Width: 2})
		off += n
	}
	x.Stored = off
	for _, tc := range []struct {
		b0, b1 int
		cached map[int]bool
		want   []run
	}{
		{0, 1, nil, []run{{0, 1}}},
		// 4 blocks of 700 KiB: two runs of 1.4 MiB (3 would pass 2 MiB).
		{0, 4, nil, []run{{0, 2}, {2, 4}}},
		{0, 8, nil, []run{{0, 2}, {2, 4}, {4, 6}, {6, 8}}},
		// 40 blocks of 700 KiB: runs of 5 (3.4 MiB; 6 would pass 4 MiB).
		{0, 40, nil, []run{{0, 5}, {5, 10}, {10, 15}, {15, 20}, {20, 25}, {25, 30}, {30, 35}, {35, 40}}},
		{3, 8, map[int]bool{3: true, 5: true}, []run{{4, 5}, {6, 8}}},
		{0, 2, map[int]bool{0: true, 1: true}, nil},
	} {
		got := runsOf(x, tc.b0, tc.b1, func(b int) bool { return tc.cached[b] })
		if len(got) != len(tc.want) {
			t.Fatalf("runsOf(%d, %d, %v) = %v, want %v", tc.b0, tc.b1, tc.cached, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("runsOf(%d, %d, %v) = %v, want %v", tc.b0, tc.b1, tc.cached, got, tc.want)
			}
		}
	}
}
