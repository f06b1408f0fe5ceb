package client

import (
	"bytes"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/mds/mdspb"
)

func ref(off, n, eoff, id uint64) *mdspb.ExtentRef {
	return &mdspb.ExtentRef{FileOff: off, Length: n, ExtentOff: eoff, Extent: &mdspb.Extent{Id: id, Length: 1 << 30}}
}

type span struct{ off, n, eoff, id uint64 }

func spans(m extentMap) []span {
	var s []span
	for _, r := range m {
		s = append(s, span{r.FileOff, r.Length, r.ExtentOff, r.Extent.Id})
	}
	return s
}

func TestExtentMapInsert(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    extentMap
		add  *mdspb.ExtentRef
		want []span
	}{
		{"empty", nil, ref(0, 10, 0, 1), []span{{0, 10, 0, 1}}},
		{"append", extentMap{ref(0, 10, 0, 1)}, ref(10, 5, 0, 2), []span{{0, 10, 0, 1}, {10, 5, 0, 2}}},
		{"middle split", extentMap{ref(0, 10, 0, 1)}, ref(3, 2, 0, 2), []span{{0, 3, 0, 1}, {3, 2, 0, 2}, {5, 5, 5, 1}}},
		{"cover all", extentMap{ref(0, 10, 0, 1), ref(10, 10, 0, 2)}, ref(0, 30, 0, 3), []span{{0, 30, 0, 3}}},
		{"trim both", extentMap{ref(0, 10, 0, 1), ref(10, 10, 0, 2)}, ref(5, 10, 0, 3), []span{{0, 5, 0, 1}, {5, 10, 0, 3}, {15, 5, 5, 2}}},
		{"hole before", extentMap{ref(100, 10, 0, 1)}, ref(0, 10, 0, 2), []span{{0, 10, 0, 2}, {100, 10, 0, 1}}},
	} {
		got := spans(tc.m.insert(tc.add))
		if len(got) != len(tc.want) {
			t.Fatalf("%s: got %v want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%s: got %v want %v", tc.name, got, tc.want)
			}
		}
	}
}

func TestExtentMapTruncateAndOverlap(t *testing.T) {
	m := extentMap{ref(0, 10, 0, 1), ref(10, 10, 0, 2), ref(30, 10, 0, 3)}
	if got := spans(m.truncate(15)); len(got) != 2 || got[1] != (span{10, 5, 0, 2}) {
		t.Fatalf("truncate: %v", got)
	}
	if got := m.overlapping(9, 31); len(got) != 3 {
		t.Fatalf("overlapping: %d", len(got))
	}
	if got := m.overlapping(20, 30); len(got) != 0 {
		t.Fatalf("overlapping hole: %d", len(got))
	}
	// The original is untouched (copy-on-write).
	if m[1].Length != 10 {
		t.Fatal("truncate changed its input")
	}
}

// TestClearHoles: only the bytes no extent covers are zeroed.
func TestClearHoles(t *testing.T) {
	ref := func(off, n uint64) *mdspb.ExtentRef { return &mdspb.ExtentRef{FileOff: off, Length: n} }
	for _, tc := range []struct {
		off  int64
		n    int
		refs []*mdspb.ExtentRef
		want string // z: zeroed, x: kept
	}{
		{0, 8, nil, "zzzzzzzz"},
		{0, 8, []*mdspb.ExtentRef{ref(0, 8)}, "xxxxxxxx"},
		{10, 8, []*mdspb.ExtentRef{ref(0, 12), ref(14, 2)}, "xxzzxxzz"},
		{10, 8, []*mdspb.ExtentRef{ref(12, 2), ref(16, 10)}, "zzxxzzxx"},
		{10, 4, []*mdspb.ExtentRef{ref(11, 1)}, "zxzz"},
	} {
		buf := bytes.Repeat([]byte{'x'}, tc.n)
		clearHoles(buf, tc.off, tc.refs)
		got := strings.ReplaceAll(string(buf), "\x00", "z")
		if got != tc.want {
			t.Errorf("off %d refs %v: %q, want %q", tc.off, tc.refs, got, tc.want)
		}
	}
}
