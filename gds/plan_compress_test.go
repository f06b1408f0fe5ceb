package gds

import (
	"testing"

	"github.com/shoalfs/shoal/internal/layout"
)

// TestPlanCompressedExtent: a compressed extent's bytes come through the
// client (decoded), never from a chunk file, as one span per extent range
// in logical offsets.
func TestPlanCompressedExtent(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 64 << 10}
	refs, size := extentMap(lo, []int64{4 * lo.RowData(), 2 * lo.RowData()}, 0)
	ext := refs[0].Extent
	ext.LogicalLength, ext.Length = ext.Length, ext.Length/3 // stored bytes: a third
	all := func(id uint32) (string, bool) { return "/d", true }
	off := int64(5000)
	spans, holes, err := plan(refs, off, size-off, 1<<20, 0, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(holes) != 0 {
		t.Fatalf("holes %v", holes)
	}
	first := spans[0]
	if first.ext != ext || first.local != "" || first.direct || first.chunk != -1 || first.extOff != off || first.n != int64(ext.LogicalLength)-off || first.dstOff != 0 {
		t.Fatalf("compressed span %+v", first)
	}
	for _, sp := range spans[1:] {
		if sp.ext == ext {
			t.Fatalf("compressed extent in more than one span: %+v", sp)
		}
		if sp.local == "" {
			t.Fatalf("raw extent span %+v not local", sp)
		}
	}
}
