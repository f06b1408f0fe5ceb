package layout

import (
	"errors"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		l  Layout
		ok bool
	}{
		{Default, true},
		{Layout{K: 1, M: 2, Unit: 4096}, true},
		{Layout{K: 8, M: 0, Unit: 1 << 20}, true},
		{Layout{K: 0, M: 2, Unit: 1 << 20}, false},
		{Layout{K: 4, M: -1, Unit: 1 << 20}, false},
		{Layout{K: 30, M: 3, Unit: 1 << 20}, false},
		{Layout{K: 4, M: 2, Unit: 1000}, false},
		{Layout{K: 4, M: 2, Unit: 32 << 20}, false},
	} {
		err := tc.l.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%v: err=%v, want ok=%v", tc.l, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%v: %v is not ErrInvalid", tc.l, err)
		}
	}
}

func TestGeom(t *testing.T) {
	const MiB = 1 << 20
	for _, tc := range []struct {
		name                         string
		l                            Layout
		length                       int64
		fullRows, lastData, lastCell int64
		chunkLen                     int64
	}{
		{"empty", Default, 0, 0, 0, 0, 0},
		{"one byte", Default, 1, 0, 1, 4096, 4096},
		{"4 KiB", Default, 4096, 0, 4096, 4096, 4096},
		{"16 KiB+1", Default, 16*1024 + 1, 0, 16*1024 + 1, 8192, 8192},
		{"one full row", Default, 4 * MiB, 1, 0, 0, MiB},
		{"row and a bit", Default, 4*MiB + 5, 1, 5, 4096, MiB + 4096},
		{"16 rows", Default, 64 * MiB, 16, 0, 0, 16 * MiB},
		{"partial row just under full", Default, 8*MiB - 1, 1, 4*MiB - 1, MiB, 2 * MiB},
		{"replication", Layout{K: 1, M: 2, Unit: MiB}, 3*MiB + 100, 3, 100, 4096, 3*MiB + 4096},
		{"k=3 odd", Layout{K: 3, M: 1, Unit: 64 * 1024}, 200000, 1, 200000 - 3*65536, 4096, 65536 + 4096},
	} {
		g := tc.l.Geom(tc.length)
		if g.FullRows != tc.fullRows || g.LastData != tc.lastData || g.LastCell != tc.lastCell || g.ChunkLen() != tc.chunkLen {
			t.Errorf("%s: got rows=%d lastData=%d lastCell=%d chunk=%d, want %d %d %d %d", tc.name,
				g.FullRows, g.LastData, g.LastCell, g.ChunkLen(), tc.fullRows, tc.lastData, tc.lastCell, tc.chunkLen)
		}
		if g.LastCell*int64(g.K) < g.LastData {
			t.Errorf("%s: last row cells too small", tc.name)
		}
	}
}

// TestPiecesCoverEveryByte maps every byte of several extents through Pieces
// and checks that each data byte has one home and no two share one.
func TestPiecesCoverEveryByte(t *testing.T) {
	for _, l := range []Layout{{K: 4, M: 2, Unit: 8192}, {K: 3, M: 1, Unit: 4096}, {K: 1, M: 1, Unit: 4096}} {
		for _, length := range []int64{1, 4095, 4096, 12288, 3*8192*4 + 1, 5*4096*3 - 7, 100000} {
			g := l.Geom(length)
			seen := map[[2]int64]bool{}
			ps, err := g.Pieces(0, length)
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for _, p := range ps {
				if p.Chunk >= l.K || p.ChunkOff+p.Len > g.ChunkLen() {
					t.Fatalf("%v len %d: piece %+v outside chunk of %d", l, length, p, g.ChunkLen())
				}
				if p.BufOff != total {
					t.Fatalf("%v len %d: piece %+v at buf %d, want %d", l, length, p, p.BufOff, total)
				}
				for i := int64(0); i < p.Len; i++ {
					k := [2]int64{int64(p.Chunk), p.ChunkOff + i}
					if seen[k] {
						t.Fatalf("%v len %d: chunk byte %v used twice", l, length, k)
					}
					seen[k] = true
				}
				total += p.Len
			}
			if total != length {
				t.Fatalf("%v len %d: pieces cover %d bytes", l, length, total)
			}
			// A sub-range maps to the same places as the whole.
			for _, r := range [][2]int64{{0, 1}, {length / 3, length / 3}, {length - 1, 1}} {
				sub, err := g.Pieces(r[0], r[1])
				if err != nil {
					t.Fatal(err)
				}
				var n int64
				for _, p := range sub {
					n += p.Len
				}
				if n != r[1] {
					t.Fatalf("sub-range %v covered %d", r, n)
				}
			}
		}
	}
}

func TestPiecesOutOfRange(t *testing.T) {
	g := Default.Geom(100)
	for _, r := range [][2]int64{{-1, 1}, {0, 101}, {100, 1}, {5, -1}} {
		if _, err := g.Pieces(r[0], r[1]); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("Pieces(%v): %v, want ErrInvalid", r, err)
		}
	}
}

func TestRows(t *testing.T) {
	g := Default.Geom(9<<20 + 3)
	if g.Rows() != 3 {
		t.Fatalf("rows %d", g.Rows())
	}
	last := g.Row(2)
	if last.DataOff != 8<<20 || last.DataLen != 1<<20+3 || last.ChunkOff != 2<<20 || last.Cell != 266240 {
		t.Fatalf("last row %+v", last)
	}
}
