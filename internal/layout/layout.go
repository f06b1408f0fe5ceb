// Package layout is the stripe math of Shoal extents.
//
// An extent of L logical bytes under layout {K, M, Unit} is cut into rows.
// Every row but possibly the last holds K*Unit data bytes as K cells of Unit
// bytes; the last, partial row holds the remaining R bytes as K cells of
// LastCell = roundup(ceil(R/K), Align) bytes (zero padded). Each row also has
// M parity cells of the same size. Chunk j (0 <= j < K+M) is cell j of every
// row, back to back, so row r always starts at chunk offset r*Unit and every
// chunk of an extent has the same length:
//
//	ChunkLen = FullRows*Unit + LastCell
//
// Data byte x of the extent lives in row x/(K*Unit) (or the last row), cell
// (x mod row)/cellSize, at chunk offset row*Unit + (x mod row) mod cellSize.
package layout

import (
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
)

// Align is the alignment of every cell, so chunk data is O_DIRECT friendly.
const Align = 4096

// Limits on a layout.
const (
	MaxShards = 32
	MinUnit   = Align
	MaxUnit   = 16 << 20
)

// Layout is K data cells and M parity cells of Unit bytes per row.
type Layout struct {
	K, M int
	Unit int64
}

// Default is RS 4+2 with 1 MiB cells.
var Default = Layout{K: 4, M: 2, Unit: 1 << 20}

// Validate checks the layout's bounds.
func (l Layout) Validate() error {
	switch {
	case l.K < 1:
		return fmt.Errorf("layout %v: k must be >= 1: %w", l, errs.ErrInvalid)
	case l.M < 0:
		return fmt.Errorf("layout %v: m must be >= 0: %w", l, errs.ErrInvalid)
	case l.K+l.M > MaxShards:
		return fmt.Errorf("layout %v: k+m must be <= %d: %w", l, MaxShards, errs.ErrInvalid)
	case l.Unit < MinUnit || l.Unit > MaxUnit || l.Unit%Align != 0:
		return fmt.Errorf("layout %v: unit must be a multiple of %d in [%d, %d]: %w", l, Align, MinUnit, MaxUnit, errs.ErrInvalid)
	}
	return nil
}

func (l Layout) String() string { return fmt.Sprintf("RS(%d+%d)/%d", l.K, l.M, l.Unit) }

// Shards is K+M, the number of chunks of an extent.
func (l Layout) Shards() int { return l.K + l.M }

// RowData is the data bytes in a full row.
func (l Layout) RowData() int64 { return int64(l.K) * l.Unit }

// Geometry is the shape of one extent.
type Geometry struct {
	Layout
	Length   int64 // logical bytes
	FullRows int64 // rows of K*Unit data bytes
	LastData int64 // data bytes in the last, partial row (0: none)
	LastCell int64 // cell size of the partial row (0: none)
}

// Geom returns the geometry of an extent of length bytes.
func (l Layout) Geom(length int64) Geometry {
	g := Geometry{Layout: l, Length: length}
	g.FullRows = length / l.RowData()
	g.LastData = length % l.RowData()
	if g.LastData > 0 {
		c := (g.LastData + int64(l.K) - 1) / int64(l.K)
		g.LastCell = (c + Align - 1) / Align * Align
	}
	return g
}

// Rows is the number of rows, the partial one included.
func (g Geometry) Rows() int64 {
	if g.LastData > 0 {
		return g.FullRows + 1
	}
	return g.FullRows
}

// ChunkLen is the length of every chunk of the extent.
func (g Geometry) ChunkLen() int64 { return g.FullRows*g.Unit + g.LastCell }

// StoredLen is the bytes the extent takes on all OSTs together.
func (g Geometry) StoredLen() int64 { return g.ChunkLen() * int64(g.Shards()) }

// Row describes row r: where its data starts in the extent, how many data
// bytes it holds, its cell size and where it starts in every chunk.
type Row struct {
	Index    int64
	DataOff  int64 // extent offset of the row's first data byte
	DataLen  int64 // data bytes in the row
	Cell     int64 // cell size
	ChunkOff int64 // chunk offset of the row's cells
}

// Row returns row r; r must be < Rows().
func (g Geometry) Row(r int64) Row {
	if r < g.FullRows {
		return Row{Index: r, DataOff: r * g.RowData(), DataLen: g.RowData(), Cell: g.Unit, ChunkOff: r * g.Unit}
	}
	return Row{Index: r, DataOff: r * g.RowData(), DataLen: g.LastData, Cell: g.LastCell, ChunkOff: r * g.Unit}
}

// RowOf returns the row holding extent offset off (0 <= off < Length).
func (g Geometry) RowOf(off int64) Row { return g.Row(off / g.RowData()) }

// Piece is a contiguous run of extent data inside one cell.
type Piece struct {
	Row      int64
	Chunk    int   // data chunk index, < K
	ChunkOff int64 // offset in the chunk
	Len      int64
	BufOff   int64 // offset of the piece in the caller's buffer
}

// Pieces cuts the extent range [off, off+n) into per-cell pieces, in extent
// order. The range must lie inside the extent.
func (g Geometry) Pieces(off, n int64) ([]Piece, error) {
	if off < 0 || n < 0 || off+n > g.Length {
		return nil, fmt.Errorf("range [%d,+%d) outside extent of %d bytes: %w", off, n, g.Length, errs.ErrInvalid)
	}
	var ps []Piece
	var buf int64
	for n > 0 {
		row := g.RowOf(off)
		in := off - row.DataOff
		cell := in / row.Cell
		co := in % row.Cell
		l := min(row.Cell-co, n)
		ps = append(ps, Piece{Row: row.Index, Chunk: int(cell), ChunkOff: row.ChunkOff + co, Len: l, BufOff: buf})
		off += l
		n -= l
		buf += l
	}
	return ps, nil
}
