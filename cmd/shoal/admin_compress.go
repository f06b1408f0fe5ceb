package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/compress"
)

// compressFlags are setstripe's compression flags (docs/compression.md).
type compressFlags struct {
	spec      string
	minSaving uint32
	planes    uint32
}

func (f *compressFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.spec, "compress", "none", "compression of new extents: none, s2, zstd or zstd:LEVEL (1..22)")
	cmd.Flags().Uint32Var(&f.minSaving, "compress-min-saving", compress.DefaultMinSavingPct, "store an extent raw unless compression saves at least this percent")
	cmd.Flags().Uint32Var(&f.planes, "compress-planes", 0, "split blocks into byte planes of elements of this width (2, 4, 8: BF16/F16, F32, F64 data) before entropy coding")
}

// layout returns the compression attribute to set: the flags where given,
// else cur's.
func (f *compressFlags) layout(cmd *cobra.Command, cur client.Compression) (client.Compression, error) {
	ch := cmd.Flags().Changed
	if !ch("compress") && !ch("compress-min-saving") && !ch("compress-planes") {
		return cur, nil
	}
	out := cur
	if ch("compress") {
		c, lvl, err := compress.ParseSpec(f.spec)
		if err != nil {
			return client.Compression{}, err
		}
		out.Codec, out.Level = client.Codec(c), int32(lvl)
	}
	if ch("compress-min-saving") {
		if f.minSaving > 99 {
			return client.Compression{}, fmt.Errorf("--compress-min-saving %d: at most 99", f.minSaving)
		}
		out.MinSavingPct = f.minSaving
	}
	if ch("compress-planes") {
		switch f.planes {
		case 0, 1, 2, 4, 8:
		default:
			return client.Compression{}, fmt.Errorf("--compress-planes %d: want 0, 2, 4 or 8", f.planes)
		}
		out.ElemSize = f.planes
	}
	if out.Codec == client.CodecNone {
		return client.Compression{}, nil
	}
	return out, nil
}

// compressReport fills r's compression fields from c and returns the
// text getstripe appends to the layout ("" for none).
func compressReport(c client.Compression, r *stripeReport) string {
	r.Compress = compress.Codec(c.Codec).String()
	if c.Codec == client.CodecNone {
		return ""
	}
	if c.Codec == client.CodecZstd {
		lvl := int(c.Level)
		if lvl == 0 {
			lvl = compress.DefaultZstdLevel
		}
		r.Compress += ":" + strconv.Itoa(lvl)
	}
	r.CompressMinSaving = c.MinSavingPct
	if r.CompressMinSaving == 0 {
		r.CompressMinSaving = compress.DefaultMinSavingPct
	}
	s := fmt.Sprintf(", compress %s (stored raw unless it saves %d%%", r.Compress, r.CompressMinSaving)
	if w := c.ElemSize; w > 1 {
		r.CompressPlanes = w
		s += fmt.Sprintf("; byte planes of %d-byte elements", w)
	}
	return s + ")"
}
