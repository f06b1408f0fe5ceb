package ckpt

import (
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
	o := s.shardCompression(e)
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
	if (&Store{o: Options{NoCompression: true}}).shardCompression(e) != nil {
		t.Error("NoCompression: a policy")
	}
}
