package ckpt

import (
	"context"
	"fmt"
	"path"
	"sort"

	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/compress"
)

// The checkpoint codec (docs/compression.md, "Checkpoints").
//
// Shards stay plain safetensors files: compression happens below the
// file, in the extents (internal/compress), so any reader of the mount
// sees the same bytes. A save gives each shard's File a policy: zstd, with
// every block of a float tensor (F64, F32, F16, BF16, C64) split into
// byte planes of its element width and entropy coded; an extent is stored
// compressed only where that saves at least Options.CompressMinSaving
// percent. Restore reads through the same File API: each block is fetched
// and decoded on its own, so a rank that restores a slice decodes only
// the blocks that hold it.
//
// Before a shard is written, every piece of data the save writes of at
// least sampleMin bytes (a tensor, a blob) is sampled (incompressible): a
// few pieces of sampleSize bytes across it, encoded as its blocks would
// be. A piece whose samples save less than half of CompressMinSaving has
// its blocks stored raw without being encoded (compress.Options.Raw), so
// that random weights, or blobs that are compressed already, cost a few
// 64 KiB encodes each instead of the first two blocks of every extent
// (Encode's own probe, which still decides for everything not sampled or
// sampled as compressible).

// planeWidth is the byte-plane width of a dtype: its element size for
// float types (a complex64 is two F32s), else 0.
func planeWidth(d safetensors.DType) int {
	switch d {
	case safetensors.F64:
		return 8
	case safetensors.F32, safetensors.C64:
		return 4
	case safetensors.F16, safetensors.BF16:
		return 2
	}
	return 0
}

// Sampling: pieces of data shorter than sampleMin are left to Encode's
// probe; longer ones get one sample of sampleSize bytes per sampleEvery,
// at least 2 and at most sampleMax, spread evenly from the first byte to
// the last.
const (
	sampleMin   = 1 << 20
	sampleSize  = 64 << 10
	sampleEvery = 2 << 20
	sampleMax   = 8
)

// incompressible reports whether data, elements of plane width w (0: no
// planes), saves less than half of minSaving percent in its samples.
func incompressible(data []byte, w, minSaving int) bool {
	if len(data) < sampleMin {
		return false
	}
	if minSaving <= 0 {
		minSaving = compress.DefaultMinSavingPct
	}
	n := min(sampleMax, max(2, len(data)/sampleEvery))
	step := (len(data) - sampleSize) / (n - 1)
	buf := make([]byte, 0, sampleSize)
	var stored int64
	for i := range n {
		off := i * step
		if w > 1 {
			off -= off % w
		}
		r, ok, err := compress.Encode(buf, data[off:off+sampleSize], compress.Options{
			Codec: compress.Zstd, BlockSize: sampleSize, ElemSize: w, Base: int64(off), MinSavingPct: -1})
		if err == nil && ok {
			stored += r.Index.Stored
		} else {
			stored += sampleSize
		}
	}
	logical := int64(n) * sampleSize
	return (logical-stored)*200 < logical*int64(minSaving)
}

// rawSpans returns the file ranges of writes that sample as
// incompressible (sorted by offset, as writes are), e describing the
// shard (each tensor's dtype gives its plane width).
func (s *Store) rawSpans(e *ShardEntry, writes []write) []span {
	width := make(map[int64]int, len(e.Tensors))
	for _, t := range e.Tensors {
		width[t.Offset] = planeWidth(t.DType)
	}
	var out []span
	for _, w := range writes {
		if incompressible(w.data, width[w.off], s.o.CompressMinSaving) {
			out = append(out, span{off: w.off, buf: w.data})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].off < out[j].off })
	return out
}

// shardCompression returns the compression policy for the shard e
// describes (nil with Options.NoCompression: the layout decides); raw are
// the ranges sampled as incompressible (rawSpans; sorted, apart), whose
// blocks are stored raw without being encoded.
func (s *Store) shardCompression(e *ShardEntry, raw []span) *compress.Options {
	if s.o.NoCompression {
		return nil
	}
	o := &compress.Options{Codec: compress.Zstd, MinSavingPct: s.o.CompressMinSaving}
	if len(raw) > 0 {
		// A block that lies mostly in such ranges is stored raw.
		o.Raw = func(off, n int64) bool {
			end := off + n
			i := sort.Search(len(raw), func(i int) bool { return raw[i].off+int64(len(raw[i].buf)) > off })
			var in int64
			for ; i < len(raw) && raw[i].off < end; i++ {
				in += min(end, raw[i].off+int64(len(raw[i].buf))) - max(off, raw[i].off)
			}
			return in*2 > n
		}
	}
	type span struct {
		off, end int64
		width    int
	}
	var spans []span
	for _, t := range e.Tensors {
		if w := planeWidth(t.DType); w > 0 && t.Length > 0 {
			spans = append(spans, span{t.Offset, t.Offset + t.Length, w})
		}
	}
	if len(spans) == 0 {
		return o
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].off < spans[j].off })
	// A block takes the width of the float tensors that cover most of it,
	// with the element boundary of the largest of them; a block mostly of
	// other bytes (the header, integer tensors) gets no planes.
	o.Planes = func(off, n int64) (int, int64) {
		end := off + n
		i := sort.Search(len(spans), func(i int) bool { return spans[i].end > off })
		var by [9]int64
		var best [9]span
		var bestLen [9]int64
		for ; i < len(spans) && spans[i].off < end; i++ {
			sp := spans[i]
			in := min(end, sp.end) - max(off, sp.off)
			by[sp.width] += in
			if in > bestLen[sp.width] {
				bestLen[sp.width], best[sp.width] = in, sp
			}
		}
		w := 0
		for _, c := range []int{2, 4, 8} {
			if by[c] > by[w] {
				w = c
			}
		}
		if w == 0 || by[w]*2 < n {
			return 0, 0
		}
		return w, best[w].off
	}
	return o
}

// TensorStorage is how one tensor is stored.
type TensorStorage struct {
	Name string
	// Logical is the tensor's size; Stored the bytes its part of the
	// extents takes (each compressed block counted in proportion to the
	// part of it the tensor holds), before erasure coding.
	Logical int64
	Stored  int64
}

// Ratio is Stored / Logical (1 when nothing is stored).
func (t TensorStorage) Ratio() float64 {
	if t.Logical == 0 {
		return 1
	}
	return float64(t.Stored) / float64(t.Logical)
}

// ShardStorage is how one shard is stored.
type ShardStorage struct {
	Name            string
	Logical, Stored int64
	Tensors         []TensorStorage // safetensors shards: in manifest order
}

// Storage reports how a checkpoint's shards and tensors are stored, from
// the extent maps alone (no data is read): what `shoal ckpt show` prints
// as the compression ratio.
func (s *Store) Storage(ctx context.Context, job string, step int64) ([]ShardStorage, error) {
	m, in, err := s.Manifest(ctx, job, step)
	if err != nil {
		return nil, err
	}
	out := make([]ShardStorage, 0, len(m.Shards))
	for _, e := range m.Shards {
		f, err := s.c.Open(ctx, path.Join(s.jobDir(in.Job), in.Name, e.Name))
		if err != nil {
			return nil, fmt.Errorf("ckpt: %s step %d shard %q: %w", job, step, e.Name, err)
		}
		ss := ShardStorage{Name: e.Name}
		l, st := f.StoredBytes(0, f.Size())
		ss.Logical, ss.Stored = l, int64(st)
		for _, t := range e.Tensors {
			l, st := f.StoredBytes(t.Offset, t.Length)
			ss.Tensors = append(ss.Tensors, TensorStorage{Name: t.Name, Logical: l, Stored: int64(st + 0.5)})
		}
		f.Close(ctx)
		out = append(out, ss)
	}
	return out, nil
}
