package gds

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/layout"
)

// extentMap builds a file of extents of the given lengths under lo, with
// gap bytes of hole before each, on OSTs 1..k+m rotated per extent.
func extentMap(lo layout.Layout, lengths []int64, gap int64) ([]client.ExtentRef, int64) {
	var refs []client.ExtentRef
	var off int64
	for i, n := range lengths {
		off += gap
		osts := make([]uint32, lo.Shards())
		for j := range osts {
			osts[j] = uint32((i+j)%lo.Shards() + 1)
		}
		ext := &client.Extent{ID: uint64(0x100 + i), Length: n, OSTs: osts,
			Layout: client.Layout{K: uint32(lo.K), M: uint32(lo.M), Unit: uint32(lo.Unit)}}
		refs = append(refs, client.ExtentRef{FileOff: off, Length: n, Extent: ext})
		off += n
	}
	return refs, off
}

// checkPlan checks that spans and holes tile [dstOff, dstOff+n) in order,
// that every span's chunk offset holds the extent bytes it claims, and
// that direct spans are local and aligned.
func checkPlan(t *testing.T, refs []client.ExtentRef, spans []span, holes []hole, off, n int64, base uintptr, dstOff int64, localOST func(uint32) bool) {
	t.Helper()
	type iv struct {
		start, n int64
		sp       *span
	}
	var all []iv
	for i := range spans {
		all = append(all, iv{spans[i].dstOff, spans[i].n, &spans[i]})
	}
	for _, h := range holes {
		all = append(all, iv{h.dstOff, h.n, nil})
	}
	// sort by start
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j].start < all[j-1].start; j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
	pos := dstOff
	for _, x := range all {
		if x.start != pos || x.n <= 0 {
			t.Fatalf("dst [%d,+%d) does not continue at %d", x.start, x.n, pos)
		}
		pos += x.n
		if x.sp == nil {
			continue
		}
		sp := x.sp
		g, err := geometry(sp.ext)
		if err != nil {
			t.Fatal(err)
		}
		// the file offset of the span's first byte
		var ref *client.ExtentRef
		for i := range refs {
			if refs[i].Extent == sp.ext {
				ref = &refs[i]
			}
		}
		fileOff := ref.FileOff + sp.extOff - ref.ExtentOff
		if fileOff != off+sp.dstOff-dstOff {
			t.Fatalf("span at dst %d reads file %d, want %d", sp.dstOff, fileOff, off+sp.dstOff-dstOff)
		}
		for _, i := range []int64{0, sp.n / 2, sp.n - 1} {
			c := sp.chunkOff + i
			row := g.Row(c / g.Unit)
			in := c - row.ChunkOff
			if in >= row.Cell {
				t.Fatalf("chunk offset %d is past row %d's cell of %d", c, row.Index, row.Cell)
			}
			data := row.DataOff + int64(sp.chunk)*row.Cell + in
			if data != sp.extOff+i {
				t.Fatalf("chunk %d offset %d holds extent byte %d, span says %d", sp.chunk, c, data, sp.extOff+i)
			}
		}
		isLocal := localOST(sp.ext.OSTs[sp.chunk])
		if (sp.local != "") != isLocal {
			t.Fatalf("span local=%q, OST %d local=%v", sp.local, sp.ext.OSTs[sp.chunk], isLocal)
		}
		if sp.direct {
			if !isLocal || sp.chunkOff%Align != 0 || sp.n%Align != 0 || (base+uintptr(sp.dstOff))%Align != 0 {
				t.Fatalf("direct span not local and aligned: %+v base %d", *sp, base)
			}
		}
	}
	if pos != dstOff+n {
		t.Fatalf("plan covers to %d, want %d", pos, dstOff+n)
	}
}

func TestPlanLayouts(t *testing.T) {
	layouts := []layout.Layout{
		{K: 4, M: 2, Unit: 16 << 10},
		{K: 1, M: 2, Unit: 8 << 10},
		{K: 3, M: 0, Unit: 4 << 10},
		{K: 4, M: 2, Unit: 1 << 20},
		{K: 10, M: 4, Unit: 64 << 10},
	}
	for _, lo := range layouts {
		rd := lo.RowData()
		shapes := map[string][]int64{
			"full extents":       {4 * rd, 4 * rd},
			"partial last row":   {4 * rd, 2*rd + 5000},
			"tiny file":          {100},
			"tail under a cell":  {rd + 1},
			"many small extents": {rd / 3, 7, rd + 4096, 3*rd - 1},
		}
		for name, lengths := range shapes {
			for _, gap := range []int64{0, 12345} {
				refs, size := extentMap(lo, lengths, gap)
				rnd := rand.New(rand.NewPCG(uint64(lo.K), uint64(size)))
				for trial := 0; trial < 40; trial++ {
					off, n := int64(0), size
					switch {
					case trial == 1:
						off, n = 1, size-1
					case trial > 1:
						off = rnd.Int64N(size)
						n = 1 + rnd.Int64N(size-off)
						if trial%3 == 0 { // aligned reads
							off = off / Align * Align
							n = (size - off)
						}
					}
					base := uintptr(1 << 30)
					dstOff := int64(0)
					if trial%4 == 1 {
						dstOff = 512
					}
					if trial%5 == 2 {
						base += 4096 - uintptr(off%Align) // destination lines up with the chunks
					}
					localSet := func(id uint32) bool { return id%2 == 1 || trial%7 == 0 }
					local := func(id uint32) (string, bool) {
						if localSet(id) {
							return fmt.Sprintf("/ost%d", id), true
						}
						return "", false
					}
					spans, holes, err := plan(refs, off, n, base, dstOff, local)
					if err != nil {
						t.Fatalf("%v %s: %v", lo, name, err)
					}
					t.Run("", func(t *testing.T) {
						checkPlan(t, refs, spans, holes, off, n, base, dstOff, localSet)
					})
				}
			}
		}
	}
}

// An aligned read of whole extents into an aligned buffer with every OST
// local is all direct, one span per cell (or per run of a chunk, k = 1).
func TestPlanAlignedIsDirect(t *testing.T) {
	for _, lo := range []layout.Layout{{K: 4, M: 2, Unit: 64 << 10}, {K: 1, M: 1, Unit: 4 << 10}} {
		refs, size := extentMap(lo, []int64{4 * lo.RowData(), 3*lo.RowData() + 3*Align}, 0)
		all := func(id uint32) (string, bool) { return "/d", true }
		spans, holes, err := plan(refs, 0, size, 1<<20, 0, all)
		if err != nil {
			t.Fatal(err)
		}
		if len(holes) != 0 {
			t.Fatalf("holes %v", holes)
		}
		for _, sp := range spans {
			if !sp.direct {
				t.Fatalf("%v: span %+v not direct", lo, sp)
			}
		}
		if lo.K == 1 && len(spans) != 2 {
			t.Fatalf("k=1: %d spans, want one per extent", len(spans))
		}
	}
}

// A destination that cannot line up with the chunk offsets goes by bounce.
func TestPlanMisalignedDestination(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 64 << 10}
	refs, size := extentMap(lo, []int64{4 * lo.RowData()}, 0)
	all := func(id uint32) (string, bool) { return "/d", true }
	spans, _, err := plan(refs, 0, size, 1<<20+8, 0, all)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range spans {
		if sp.direct {
			t.Fatalf("span %+v direct into a misaligned destination", sp)
		}
	}
	// A read starting 100 bytes into a cell, into a destination 100 bytes
	// past a page: the aligned middle is direct, head and tail bounce.
	spans, _, err = plan(refs, 100, 3*Align, 1<<20+100, 0, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 3 || spans[0].direct || !spans[1].direct || spans[2].direct ||
		spans[0].n != Align-100 || spans[1].n != 2*Align || spans[2].n != 100 {
		t.Fatalf("spans %+v", spans)
	}
}

func TestChunkPath(t *testing.T) {
	if got, want := chunkPath("/o", 0xab, 3), "/o/chunks/ab/00000000000000ab.3"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}
