package compress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

// rowInfo describes one piece row of a format 2 plane block.
type rowInfo struct {
	exp     bool  // an exponent row
	table   int   // its table length
	escapes int   // its escapes
	huff    []int // offsets (in the block's stored bytes) of its huff0 payloads
}

// rowsOf walks format 2 block b of x in stored and describes its rows.
func rowsOf(t *testing.T, x *Index, stored []byte, b int) []rowInfo {
	t.Helper()
	k := x.Blocks[b]
	if k.Raw || !k.Planes2 {
		t.Fatalf("block %d: not a format 2 plane block: %+v", b, k)
	}
	blk := stored[k.Off : k.Off+k.Len]
	blen := int(x.BlockLen(b))
	w, skip := int(k.Width), int(k.Skip)
	n := (blen - skip) / w
	pos := blen - n*w
	piece := func(r *rowInfo) {
		mode := blk[pos]
		ln, k := binary.Uvarint(blk[pos+1:])
		if mode == pieceHuffSum {
			r.huff = append(r.huff, pos+1+k)
		}
		pos += 1 + k + int(ln)
	}
	var rows []rowInfo
	for e0 := 0; e0 < n; e0 += pieceElems {
		var r rowInfo
		if blk[pos] == pieceExp {
			r.exp = true
			r.table = int(blk[pos+1])
			pos += 2 + r.table
			if r.table < 16 {
				e, k := binary.Uvarint(blk[pos:])
				pos += k
				r.escapes = int(e)
				for range e {
					_, k := binary.Uvarint(blk[pos:])
					pos += k + 1
				}
			}
			piece(&r)
			for range w - 1 {
				piece(&r)
			}
		} else {
			for range w {
				piece(&r)
			}
		}
		rows = append(rows, r)
	}
	if pos != len(blk) {
		t.Fatalf("block %d: walked %d of %d bytes", b, pos, len(blk))
	}
	return rows
}

// encodeRT round trips src (roundTrip: whole and by ranges), which must
// compress, and returns its index and stored bytes.
func encodeRT(t *testing.T, src []byte, o Options) (*Index, []byte) {
	t.Helper()
	r, ok := roundTrip(t, src, o)
	if !ok {
		t.Fatal("stored raw")
	}
	return r.Index, r.Stored
}

// TestExponentRows: BF16 and F32 blocks are coded as exponent rows and
// decode bit for bit, at any length (odd element counts, partial groups
// of 32) and element offset; F16, F64 and width-2 text are not, and
// round trip as byte planes.
func TestExponentRows(t *testing.T) {
	for _, c := range []struct {
		dtype string
		size  int
		base  int64
		exp   bool
	}{
		{"BF16", 3<<20 + 4098, 0, true},
		{"BF16", MinBlockSize + 62, 0, true},
		{"BF16", 1<<20 + 2, 1, true},
		{"F32", 3<<20 + 4100, 0, true},
		{"F32", 1<<20 + 4, 2, true},
		{"F16", 1 << 20, 0, false},
		{"F64", 1 << 20, 0, false},
	} {
		w := elemSize(c.dtype)
		// The elements lie on the file's element boundaries: the extent
		// starts pad bytes before one.
		pad := (w - int(c.base)%w) % w
		src := append(randomBytes(pad, 4), floatBytes(c.dtype, c.size, 5)...)
		for _, bs := range []int{MinBlockSize, 0} {
			x, stored := encodeRT(t, src, Options{Codec: Zstd, ElemSize: w, Base: c.base, BlockSize: bs, MinSavingPct: -1})
			exp, rows := 0, 0
			for b := range x.Blocks {
				if x.Blocks[b].Raw {
					continue
				}
				for _, r := range rowsOf(t, x, stored, b) {
					rows++
					if r.exp {
						exp++
					}
				}
			}
			if c.exp && exp != rows || !c.exp && exp != 0 {
				t.Errorf("%s %d bytes from %d, blocks of %d: %d of %d rows exponent rows", c.dtype, c.size, c.base, bs, exp, rows)
			}
			t.Logf("%s block %d: ratio %.4f, %d/%d exponent rows", c.dtype, bs, x.Ratio(), exp, rows)
		}
	}
	text := textBytes(1<<20, 3)
	x, stored := encodeRT(t, text, Options{Codec: Zstd, ElemSize: 2, MinSavingPct: -1})
	for b := range x.Blocks {
		if !x.Blocks[b].Raw {
			for _, r := range rowsOf(t, x, stored, b) {
				if r.exp {
					t.Error("text coded as an exponent row")
				}
			}
		}
	}
}

// bf16Mixed is n bytes of BF16 random-normal values with a share of
// elements replaced by values of any exponent.
func bf16Mixed(n int, share float64, seed uint64) []byte {
	b := floatBytes("BF16", n, seed)
	r := rand.New(rand.NewPCG(seed, 9))
	for i := 0; i+2 <= n; i += 2 {
		if r.Float64() < share {
			binary.LittleEndian.PutUint16(b[i:], uint16(r.Uint32()))
		}
	}
	return b
}

// TestExponentEscapes: exponents outside the table are escapes, patched
// after the join; a row with too many is coded as byte planes; a row of
// 16 exponents or fewer has no escapes.
func TestExponentEscapes(t *testing.T) {
	const size = 2 * pieceElems * 2
	check := func(name string, src []byte, wantExp bool, wantEscapes bool, wantTable int) {
		t.Helper()
		x, stored := encodeRT(t, src, Options{Codec: Zstd, ElemSize: 2, BlockSize: 1 << 20, MinSavingPct: -1})
		for b := range x.Blocks {
			if x.Blocks[b].Raw {
				t.Fatalf("%s: block %d raw", name, b)
			}
			for i, r := range rowsOf(t, x, stored, b) {
				if r.exp != wantExp || wantExp && (r.escapes > 0) != wantEscapes || wantTable > 0 && r.table != wantTable {
					t.Errorf("%s: block %d row %d: %+v", name, b, i, r)
				}
			}
		}
	}
	check("1/200 any", bf16Mixed(size, 1.0/200, 1), true, true, 15)
	check("1/20 any", bf16Mixed(size, 1.0/20, 2), false, false, 0)
	// 16 exponents exactly: the table holds them all.
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < size; i += 2 {
		e := 100 + r.IntN(16)
		binary.LittleEndian.PutUint16(b[i:], uint16(r.IntN(2))<<15|uint16(e)<<7|uint16(r.IntN(128)))
	}
	check("16 exponents", b, true, false, 16)
	// One value: a table of one.
	one := make([]byte, size)
	for i := 0; i < size; i += 2 {
		binary.LittleEndian.PutUint16(one[i:], uint16(math.Float32bits(0.5)>>16)|uint16(i/2%128))
	}
	check("one exponent", one, true, false, 1)
}

// TestJoinExp: the assembly and the Go exponent joins agree, at every
// length around the 32-element groups.
func TestJoinExp(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, w := range []int{2, 4} {
		for _, m := range []int{1, 2, 31, 32, 33, 63, 64, 65, 1000, 4097} {
			planes := make([][]byte, w-1)
			for j := range planes {
				planes[j] = make([]byte, m)
				for i := range planes[j] {
					planes[j][i] = byte(r.Uint32())
				}
			}
			pairs := make([]byte, (m+1)/2)
			for i := range pairs {
				pairs[i] = byte(r.Uint32())
			}
			var table [16]byte
			for i := range table {
				table[i] = byte(r.Uint32())
			}
			got, want := make([]byte, w*m), make([]byte, w*m)
			joinExp(got, planes, pairs, &table, m)
			joinExpGeneric(want, planes, pairs, &table, m)
			if !bytes.Equal(got, want) {
				t.Fatalf("w %d m %d: joinExp differs from joinExpGeneric", w, m)
			}
		}
	}
}

// TestFormat2Corrupt: a flipped byte in any huff0 piece of a format 2
// block is ErrCorrupt (each carries the check of what it decodes to),
// never wrong bytes.
func TestFormat2Corrupt(t *testing.T) {
	for _, dtype := range []string{"BF16", "F32", "F16"} {
		src := floatBytes(dtype, 1<<20, 7)
		x, stored := encodeRT(t, src, Options{Codec: Zstd, ElemSize: elemSize(dtype), MinSavingPct: -1})
		flips := 0
		for b := range x.Blocks {
			k := x.Blocks[b]
			for _, r := range rowsOf(t, x, stored, b) {
				for _, off := range r.huff {
					for _, d := range []int{0, 1, 7, 100, 1000} {
						bad := append([]byte(nil), stored...)
						bad[int(k.Off)+off+d] ^= 0x21
						got := make([]byte, len(src))
						err := x.Decode(got, 0, bad)
						if err == nil && !bytes.Equal(got, src) {
							t.Fatalf("%s: flip at %d+%d of a huff0 piece: wrong bytes, no error", dtype, off, d)
						}
						if err != nil && !errors.Is(err, errs.ErrCorrupt) {
							t.Fatalf("%s: %v", dtype, err)
						}
						flips++
					}
				}
			}
		}
		if flips == 0 {
			t.Fatalf("%s: no huff0 piece", dtype)
		}
	}
}

// formatTwoSource is the logical content of testdata/planes-v2.bin: 64
// KiB blocks of BF16 (one with escapes), F32 (one off an element
// boundary), F16 and F64 values, and a short last block, laid out as
// oldFormatSource's (its widths: oldFormatPlanes).
func formatTwoSource() []byte {
	var b []byte
	b = append(b, floatBytes("BF16", MinBlockSize, 21)...)
	b = append(b, bf16Mixed(MinBlockSize, 1.0/200, 22)...)
	b = append(b, floatBytes("F32", 2*MinBlockSize, 23)...)
	b = append(b, floatBytes("F16", MinBlockSize, 24)...)
	b = append(b, floatBytes("F64", MinBlockSize, 25)...)
	b = append(b, floatBytes("BF16", 5001, 26)...)
	return b
}

// TestFormat2File: format 2 blocks as the encoder of 2026-12-03 wrote
// them, committed in testdata, decode bit for bit (a guard on the
// on-disk format: checkpoints outlive the code). SHOAL_WRITE_GOLDEN=1
// writes the file anew, for a deliberate format change only.
func TestFormat2File(t *testing.T) {
	const file = "testdata/planes-v2.bin"
	src := formatTwoSource()
	if os.Getenv("SHOAL_WRITE_GOLDEN") == "1" {
		r, ok, err := Encode(nil, src, Options{Codec: Zstd, BlockSize: MinBlockSize, Planes: oldFormatPlanes, MinSavingPct: -1})
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		idx := r.Index.Marshal()
		out := binary.AppendUvarint(nil, uint64(len(idx)))
		out = append(append(out, idx...), r.Stored...)
		if err := os.WriteFile(file, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	x, stored := readGolden(t, file, src)
	exp, escapes := 0, 0
	for bi := range x.Blocks {
		for _, r := range rowsOf(t, x, stored, bi) {
			if r.exp {
				exp++
			}
			escapes += r.escapes
		}
	}
	if exp == 0 || escapes == 0 {
		t.Fatalf("the file has %d exponent rows, %d escapes", exp, escapes)
	}
	decodesTo(t, x, stored, src)
}
