package compress

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
)

// oldFormatSource is the logical content of testdata/planes-huff0-v1.bin:
// 64 KiB blocks of BF16, F32, F16 and F64 random-normal values, one of
// them starting off an element boundary, and a short last block.
func oldFormatSource() []byte {
	var b []byte
	b = append(b, floatBytes("BF16", 2*MinBlockSize, 11)...)
	b = append(b, floatBytes("F32", 2*MinBlockSize, 12)...)
	b = append(b, floatBytes("F16", MinBlockSize, 13)...)
	b = append(b, floatBytes("F64", MinBlockSize, 14)...)
	b = append(b, floatBytes("BF16", 5000, 15)...)
	return b
}

// oldFormatPlanes gives each block of oldFormatSource its width; the
// second F32 block is split at an element boundary 2 bytes in.
func oldFormatPlanes(off, n int64) (int, int64) {
	switch off / MinBlockSize {
	case 0, 1, 6:
		return 2, off
	case 2:
		return 4, off
	case 3:
		return 4, off + 2
	case 4:
		return 2, off
	}
	return 8, off
}

// TestOldFormat: blocks of byte planes written by the encoder of
// 2026-12-02 (pieces coded with huff0, piece mode 2), committed in
// testdata, decode bit for bit: a guard on the on-disk format, which
// checkpoints outlive.
func TestOldFormat(t *testing.T) {
	src := oldFormatSource()
	x, stored := readGolden(t, "testdata/planes-huff0-v1.bin", src)
	modes := map[byte]int{}
	for bi, blk := range x.Blocks {
		if blk.Raw || blk.Width <= 1 || blk.Planes2 {
			t.Fatalf("block %d: not format 1 byte planes", bi)
		}
		modes[pieceModes(t, x, stored, bi)]++
	}
	if modes[pieceHuff] == 0 {
		t.Fatalf("no huff0 piece in the old-format file: %v", modes)
	}
	decodesTo(t, x, stored, src)
}

// readGolden reads a committed extent (testdata: uvarint index length,
// index, stored bytes) of the logical content src and parses its index.
func readGolden(t *testing.T, file string, src []byte) (*Index, []byte) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		t.Fatalf("%s: bad file", file)
	}
	idx, stored := b[k:k+int(n)], b[k+int(n):]
	x, err := ParseIndex(idx, int64(len(stored)), int64(len(src)))
	if err != nil {
		t.Fatal(err)
	}
	return x, stored
}

// decodesTo checks that the whole extent decodes to src, bit for bit.
func decodesTo(t *testing.T, x *Index, stored, src []byte) {
	t.Helper()
	got := make([]byte, len(src))
	if err := x.Decode(got, 0, stored); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("the committed blocks decode to different bytes")
	}
}

// pieceModes returns the highest piece mode of block b (a plane block).
func pieceModes(t *testing.T, x *Index, stored []byte, b int) byte {
	t.Helper()
	k := x.Blocks[b]
	src := stored[k.Off : k.Off+k.Len-4]
	blen := int(x.BlockLen(b))
	w, skip := int(k.Width), int(k.Skip)
	n := (blen - skip) / w
	src = src[blen-n*w:]
	var hi byte
	for e0 := 0; e0 < n; e0 += pieceElems {
		for range w {
			mode := src[0]
			ln, k := binary.Uvarint(src[1:])
			src = src[1+k+int(ln):]
			hi = max(hi, mode)
		}
	}
	if len(src) != 0 {
		t.Fatalf("block %d: %d bytes left over", b, len(src))
	}
	return hi
}
