package compress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

// Test data, deterministic.

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

var words = []string{"the", "model", "loss", "token", "gradient", "of", "and", "batch", "epoch", "learning",
	"rate", "checkpoint", "shard", "tensor", "layer", "attention", "is", "a", "to", "in", "{\"text\":", "\"id\":", "},"}

func textBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(12) == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.Bytes()[:n]
}

// floatBytes returns n bytes of random-normal values (std 0.02, as weights
// are initialized) in dtype F64, F32, F16 or BF16, little endian.
func floatBytes(dtype string, n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for i := 0; ; {
		v := r.NormFloat64() * 0.02
		switch dtype {
		case "F64":
			if i+8 > n {
				return b
			}
			binary.LittleEndian.PutUint64(b[i:], math.Float64bits(v))
			i += 8
		case "F32":
			if i+4 > n {
				return b
			}
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(v)))
			i += 4
		case "BF16":
			if i+2 > n {
				return b
			}
			binary.LittleEndian.PutUint16(b[i:], uint16(math.Float32bits(float32(v))>>16))
			i += 2
		case "F16":
			if i+2 > n {
				return b
			}
			binary.LittleEndian.PutUint16(b[i:], f16(float32(v)))
			i += 2
		default:
			panic(dtype)
		}
	}
}

// f16 converts to IEEE half precision, truncating (enough for test data).
func f16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int((u>>23)&0xff) - 127 + 15
	mant := uint16(u>>13) & 0x3ff
	switch {
	case exp <= 0:
		return sign
	case exp >= 31:
		return sign | 0x7c00
	}
	return sign | uint16(exp)<<10 | mant
}

func elemSize(dtype string) int {
	switch dtype {
	case "F64":
		return 8
	case "F32":
		return 4
	}
	return 2
}

func roundTrip(t *testing.T, src []byte, o Options) (Result, bool) {
	t.Helper()
	r, ok, err := Encode(nil, src, o)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return r, false
	}
	x, err := ParseIndex(r.Index.Marshal(), int64(len(r.Stored)), int64(len(src)))
	if err != nil {
		t.Fatalf("parse own index: %v", err)
	}
	got := make([]byte, len(src))
	if err := x.Decode(got, 0, r.Stored); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("round trip differs")
	}
	// Random ranges decode from only the blocks they need.
	rr := rand.New(rand.NewPCG(uint64(len(src)), 9))
	for range 20 {
		off := rr.Int64N(int64(len(src)))
		n := 1 + rr.Int64N(int64(len(src))-off)
		b0, b1, err := x.BlockRange(off, n)
		if err != nil {
			t.Fatal(err)
		}
		so, sn := x.StoredRange(b0, b1)
		part := make([]byte, n)
		if err := x.Decode(part, off, r.Stored[so:so+sn]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(part, src[off:off+n]) {
			t.Fatalf("range %d+%d differs", off, n)
		}
	}
	return r, true
}

func TestRoundTrip(t *testing.T) {
	const size = 3<<20 + 12345 // a partial last block
	type data struct {
		name string
		b    []byte
		elem int
	}
	sets := []data{
		{"random", randomBytes(size, 1), 0},
		{"constant", bytes.Repeat([]byte{7}, size), 0},
		{"zeros", make([]byte, size), 0},
		{"text", textBytes(size, 1), 0},
	}
	for _, dt := range []string{"F64", "F32", "F16", "BF16"} {
		sets = append(sets, data{dt, floatBytes(dt, size, 2), elemSize(dt)})
	}
	for _, d := range sets {
		for _, o := range []Options{
			{Codec: S2}, {Codec: Zstd}, {Codec: Zstd, Level: 1}, {Codec: Zstd, Level: 9},
			{Codec: Zstd, ElemSize: d.elem}, {Codec: Zstd, ElemSize: d.elem, Base: 3},
			{Codec: Zstd, ElemSize: d.elem, BlockSize: MinBlockSize, MinSavingPct: -1},
		} {
			t.Run(fmt.Sprintf("%s/%v-%d-e%d-b%d-%d", d.name, o.Codec, o.Level, o.ElemSize, o.Base, o.BlockSize), func(t *testing.T) {
				r, ok := roundTrip(t, d.b, o)
				switch d.name {
				case "random":
					if ok && o.MinSavingPct >= 0 {
						t.Fatalf("random data compressed to %d of %d", len(r.Stored), len(d.b))
					}
				case "constant", "zeros", "text":
					if !ok {
						t.Fatal("compressible data stored raw")
					}
				}
				if ok {
					t.Logf("ratio %.3f", r.Index.Ratio())
				}
			})
		}
	}
}

// TestFloatSavings checks the savings the issue targets on random-normal
// tensors: BF16 >= 25%, F32 >= 12% with byte planes and zstd.
func TestFloatSavings(t *testing.T) {
	for _, c := range []struct {
		dtype string
		want  float64 // largest ratio accepted
	}{{"BF16", 0.75}, {"F32", 0.88}, {"F16", 0.95}, {"F64", 0.95}} {
		src := floatBytes(c.dtype, 4<<20, 5)
		r, ok := roundTrip(t, src, Options{Codec: Zstd, ElemSize: elemSize(c.dtype)})
		if !ok {
			t.Fatalf("%s: not compressed", c.dtype)
		}
		t.Logf("%s: ratio %.3f with planes", c.dtype, r.Index.Ratio())
		if r.Index.Ratio() > c.want {
			t.Errorf("%s: ratio %.3f, want <= %.2f", c.dtype, r.Index.Ratio(), c.want)
		}
		if _, ok := roundTrip(t, src, Options{Codec: Zstd}); ok && c.dtype != "BF16" {
			t.Logf("%s: compressed without planes", c.dtype)
		}
	}
}

func TestThreshold(t *testing.T) {
	src := append(randomBytes(900<<10, 3), make([]byte, 124<<10)...) // ~12% zeros
	if _, ok, _ := Encode(nil, src, Options{Codec: Zstd, MinSavingPct: 10}); !ok {
		t.Error("12% saving refused at a 10% threshold")
	}
	if _, ok, _ := Encode(nil, src, Options{Codec: Zstd, MinSavingPct: 20}); ok {
		t.Error("12% saving accepted at a 20% threshold")
	}
	if _, ok, _ := Encode(nil, src, Options{Codec: None}); ok {
		t.Error("codec none compressed")
	}
}

// TestPlanesHint: a per-block hint with element boundaries anywhere.
func TestPlanesHint(t *testing.T) {
	src := append(floatBytes("BF16", 1<<20+6, 1), floatBytes("F32", 2<<20, 2)...)
	boundary := int64(1<<20 + 6 + 100) // the F32 tensor at an offset 2 mod 4
	o := Options{Codec: Zstd, BlockSize: MinBlockSize, Base: 100, Planes: func(off, n int64) (int, int64) {
		if off+n/2 < boundary {
			return 2, 100
		}
		return 4, boundary
	}}
	r, ok := roundTrip(t, src, o)
	if !ok {
		t.Fatal("not compressed")
	}
	widths := map[uint8]int{}
	for _, b := range r.Index.Blocks {
		widths[b.Width]++
	}
	t.Logf("ratio %.3f, widths %v", r.Index.Ratio(), widths)
	if widths[2] == 0 || widths[4] == 0 {
		t.Errorf("widths %v", widths)
	}
}

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in    string
		codec Codec
		level int
		bad   bool
	}{{"none", None, 0, false}, {"s2", S2, 0, false}, {"zstd", Zstd, 0, false}, {"ZSTD:7", Zstd, 7, false},
		{"zstd:0", 0, 0, true}, {"zstd:23", 0, 0, true}, {"s2:3", 0, 0, true}, {"lz4", 0, 0, true}, {"zstd:x", 0, 0, true}} {
		c2, l, err := ParseSpec(c.in)
		if (err != nil) != c.bad || c2 != c.codec || l != c.level {
			t.Errorf("ParseSpec(%q) = %v, %d, %v", c.in, c2, l, err)
		}
	}
}

// TestCorrupt: every way an index or block can be wrong is ErrCorrupt.
func TestCorrupt(t *testing.T) {
	src := textBytes(300<<10, 4)
	r, ok, err := Encode(nil, src, Options{Codec: Zstd, BlockSize: MinBlockSize, ElemSize: 2})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	idx := r.Index.Marshal()
	stored, logical := int64(len(r.Stored)), int64(len(src))
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), idx...)) }
	cases := map[string]struct {
		idx             []byte
		stored, logical int64
	}{
		"empty":          {nil, stored, logical},
		"version":        {mod(func(b []byte) []byte { b[0] = 2; return b }), stored, logical},
		"codec":          {mod(func(b []byte) []byte { b[1] = 9; return b }), stored, logical},
		"block size":     {mod(func(b []byte) []byte { b[2] = 30; return b }), stored, logical},
		"truncated":      {idx[:len(idx)-1], stored, logical},
		"trailing":       {append(append([]byte(nil), idx...), 0), stored, logical},
		"logical":        {idx, stored, logical + 1},
		"stored":         {idx, stored + 1, logical},
		"stored > log":   {idx, logical + 1, logical},
		"flags":          {mod(func(b []byte) []byte { b[len(b)-1] = 0x33; return b }), stored, logical},
		"raw flag bits":  {mod(func(b []byte) []byte { b[len(b)-1] = 0x90; return b }), stored, logical},
		"format 2 width": {mod(func(b []byte) []byte { b[len(b)-1] = 0x83; return b }), stored, logical},
	}
	for name, c := range cases {
		if _, err := ParseIndex(c.idx, c.stored, c.logical); !errors.Is(err, errs.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Flipped stored bytes: an error (zstd checks its frame CRC), never a
	// panic or a silent wrong length.
	x, err := ParseIndex(idx, stored, logical)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(r.Stored); i += 997 {
		bad := append([]byte(nil), r.Stored...)
		bad[i] ^= 0x5a
		got := make([]byte, len(src))
		if err := x.Decode(got, 0, bad); err == nil {
			if bytes.Equal(got, src) {
				continue // a flip in a part the decoder ignores
			}
			t.Fatalf("flip at %d: decoded wrong bytes without an error", i)
		} else if !errors.Is(err, errs.ErrCorrupt) {
			t.Fatalf("flip at %d: %v", i, err)
		}
	}
}

// FuzzDecode feeds arbitrary indexes and stored bytes to the decoder: it
// must return an error or bytes of the promised length, never panic or
// allocate beyond the caps.
func FuzzDecode(f *testing.F) {
	for _, o := range []Options{{Codec: S2, BlockSize: MinBlockSize}, {Codec: Zstd, BlockSize: MinBlockSize, ElemSize: 4}} {
		src := append(textBytes(70<<10, 1), floatBytes("F32", 64<<10, 1)...)
		r, ok, err := Encode(nil, src, o)
		if err != nil || !ok {
			f.Fatal(ok, err)
		}
		f.Add(r.Index.Marshal(), r.Stored, uint32(len(src)))
	}
	f.Fuzz(func(t *testing.T, idx, stored []byte, logical uint32) {
		x, err := ParseIndex(idx, int64(len(stored)), int64(logical))
		if err != nil {
			if !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("ParseIndex error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if x.Logical > 8<<20 {
			return // a valid index of a large extent: the caps are checked above
		}
		for b := range x.Blocks {
			k := x.Blocks[b]
			dst := make([]byte, x.BlockLen(b))
			if err := x.DecodeBlock(dst, stored[k.Off:k.Off+k.Len], b); err != nil && !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("block %d: error does not wrap ErrCorrupt: %v", b, err)
			}
		}
	})
}

// TestProbe: an extent that does not compress at its start is given up
// after the first blocks.
func TestProbe(t *testing.T) {
	src := append(randomBytes(2<<20, 1), make([]byte, 14<<20)...)
	if _, ok, _ := Encode(nil, src, Options{Codec: Zstd}); ok {
		t.Error("an extent with 2 incompressible blocks first was compressed")
	}
	if _, ok, _ := Encode(nil, src, Options{Codec: Zstd, MinSavingPct: -1}); !ok {
		t.Error("no threshold: not compressed")
	}
	src = append(randomBytes(1<<20, 1), make([]byte, 15<<20)...)
	if _, ok, _ := Encode(nil, src, Options{Codec: Zstd}); !ok {
		t.Error("an extent whose second block compresses was given up")
	}
}

// TestRawHint: blocks that Options.Raw names are stored raw without
// being encoded (even where they would compress), the others as usual;
// an extent whose first blocks it names is given up.
func TestRawHint(t *testing.T) {
	src := floatBytes("BF16", 4*MinBlockSize, 1)
	o := Options{Codec: Zstd, BlockSize: MinBlockSize, ElemSize: 2, Base: 1000, Raw: func(off, n int64) bool {
		return off == 1000+MinBlockSize
	}}
	r, ok := roundTrip(t, src, o)
	if !ok {
		t.Fatal("not compressed")
	}
	for i, b := range r.Index.Blocks {
		if b.Raw != (i == 1) {
			t.Errorf("block %d: raw %v", i, b.Raw)
		}
	}
	o.Raw = func(off, n int64) bool { return off < 1000+2*MinBlockSize }
	if _, ok, _ := Encode(nil, src, o); ok {
		t.Error("an extent whose first blocks are named raw was compressed")
	}
	o.Raw = func(int64, int64) bool { return true }
	if _, ok, _ := Encode(nil, src[:MinBlockSize], o); ok {
		t.Error("a block named raw was compressed")
	}
}
