package ckpt

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/compress"
)

// TestShardCompression: blocks take the plane width of the float tensors
// that cover most of them, with those tensors' element boundary.
func TestShardCompression(t *testing.T) {
	s := &Store{}
	e := &ShardEntry{Tensors: []TensorEntry{
		{Name: "a", DType: safetensors.BF16, Offset: 4096, Length: 3 << 20},
		{Name: "b", DType: safetensors.F32, Offset: 4096 + 3<<20, Length: 2<<20 + 2},
		{Name: "c", DType: safetensors.I64, Offset: 4096 + 5<<20 + 2, Length: 4 << 20},
		{Name: "d", DType: safetensors.F64, Offset: 4096 + 9<<20 + 2, Length: 1 << 20},
	}}
	o := s.shardCompression(e, nil)
	if o == nil || o.Codec != compress.Zstd || o.Planes == nil {
		t.Fatalf("options %+v", o)
	}
	const mb = 1 << 20
	for _, c := range []struct {
		off, n   int64
		width    int
		boundary int64
	}{
		{0, mb, 2, 4096},             // mostly a
		{0, 4096, 0, 0},              // the header alone
		{3 * mb, mb, 4, 4096 + 3*mb}, // b
		{6 * mb, mb, 0, 0},           // c: an integer tensor
		{9*mb + 4096, mb, 8, 4096 + 9*mb + 2},
		{20 * mb, mb, 0, 0}, // past every tensor
	} {
		w, b := o.Planes(c.off, c.n)
		if w != c.width || (w != 0 && b != c.boundary) {
			t.Errorf("Planes(%d, %d) = %d, %d; want %d, %d", c.off, c.n, w, b, c.width, c.boundary)
		}
	}
	if (&Store{o: Options{NoCompression: true}}).shardCompression(e, nil) != nil {
		t.Error("NoCompression: a policy")
	}
}

// TestSampledRaw: tensors whose samples do not compress (random bits)
// are stored raw without being encoded; those that do (random-normal
// weights, zeros) and those too small to sample are left to the codec.
func TestSampledRaw(t *testing.T) {
	const mb = 1 << 20
	random := func(n int, seed uint64) []byte {
		r := rand.New(rand.NewPCG(seed, 1))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	normal := make([]byte, 4*mb)
	r := rand.New(rand.NewPCG(2, 2))
	for i := 0; i < len(normal); i += 2 {
		binary.LittleEndian.PutUint16(normal[i:], uint16(math.Float32bits(float32(r.NormFloat64()*0.02))>>16))
	}
	e := &ShardEntry{Tensors: []TensorEntry{
		{Name: "rand", DType: safetensors.F32, Offset: 4098, Length: 4 * mb},
		{Name: "normal", DType: safetensors.BF16, Offset: 4098 + 4*mb, Length: 4 * mb},
		{Name: "small", DType: safetensors.F32, Offset: 4098 + 8*mb, Length: mb / 2},
		{Name: "zeros", DType: safetensors.I64, Offset: 4098 + 8*mb + mb/2, Length: 2 * mb},
	}}
	writes := []write{{0, make([]byte, 4098)}, {4098, random(4*mb, 1)}, {4098 + 4*mb, normal},
		{4098 + 8*mb, random(mb/2, 3)}, {4098 + 8*mb + mb/2, make([]byte, 2*mb)}}
	s := &Store{}
	raw := s.rawSpans(e, writes)
	if len(raw) != 1 || raw[0].off != 4098 || len(raw[0].buf) != 4*mb {
		t.Fatalf("raw spans %v", raw)
	}
	o := s.shardCompression(e, raw)
	for _, c := range []struct {
		off, n int64
		raw    bool
	}{
		{0, mb, true},       // all but the header's 4098 bytes random
		{3 * mb, mb, true},  // random
		{4 * mb, mb, false}, // 4098 random bytes, the rest normal
		{5 * mb, mb, false},
		{8 * mb, mb, false}, // small and zeros
	} {
		if got := o.Raw(c.off, c.n); got != c.raw {
			t.Errorf("Raw(%d, %d) = %v, want %v", c.off, c.n, got, c.raw)
		}
	}
	if o := s.shardCompression(e, nil); o.Raw != nil {
		t.Error("a Raw hint with nothing sampled raw")
	}
	f32 := make([]byte, 4*mb)
	for i := 0; i < len(f32); i += 4 {
		binary.LittleEndian.PutUint32(f32[i:], math.Float32bits(float32(r.NormFloat64()*0.02)))
	}
	if incompressible(f32, 4, 10) {
		t.Error("random-normal F32 (0.83 with planes): incompressible")
	}
	// A blob that is compressed already, and text.
	if !incompressible(random(3*mb, 4), 0, 10) {
		t.Error("random blob: compressible")
	}
	if incompressible(bytes.Repeat([]byte("step 1200 loss 0.25\n"), 100_000), 0, 10) {
		t.Error("text: incompressible")
	}
}
