package ckpt

import (
	"errors"
	"testing"

	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
)

// TestDigester: a file fed in pieces of any size is checked range by
// range (header, tensors, an empty tensor); a changed byte names its
// tensor, and a file that ends early is caught.
func TestDigester(t *testing.T) {
	file := make([]byte, 100)
	for i := range file {
		file[i] = byte(i * 7)
	}
	e := &ShardEntry{Name: "s", Kind: KindSafetensors, Size: 100, DataStart: 16, HeaderDigest: sumBytes(file[:16]),
		Tensors: []TensorEntry{
			{Name: "a", DType: safetensors.U8, Offset: 16, Length: 40, Digest: sumBytes(file[16:56])},
			{Name: "empty", DType: safetensors.U8, Offset: 56, Length: 0, Digest: sumBytes(nil)},
			{Name: "b", DType: safetensors.U8, Offset: 56, Length: 44, Digest: sumBytes(file[56:])},
		}}
	feed := func(b []byte, piece int) error {
		d := newDigester(Info{Job: "j", Step: 1}, e)
		for off := 0; off < len(b); off += piece {
			d.write(int64(off), b[off:min(off+piece, len(b))])
		}
		return d.finish()
	}
	for _, piece := range []int{1, 3, 16, 40, 56, 100} {
		if err := feed(file, piece); err != nil {
			t.Errorf("pieces of %d: %v", piece, err)
		}
	}
	bad := append([]byte(nil), file...)
	bad[60]++
	var ce *CorruptError
	if err := feed(bad, 7); !errors.As(err, &ce) || ce.Tensor != "b" || !errors.Is(err, errs.ErrCorrupt) {
		t.Errorf("a changed byte of b: %v", err)
	}
	if err := feed(file[:50], 10); !errors.As(err, &ce) || ce.Tensor != "a" {
		t.Errorf("a short file: %v", err)
	}
	blob := &ShardEntry{Name: "b", Kind: KindBlob, Size: 100, Digest: sumBytes(file)}
	d := newDigester(Info{}, blob)
	d.write(0, file[:30])
	d.write(30, file[30:])
	if err := d.finish(); err != nil {
		t.Errorf("blob: %v", err)
	}
}
