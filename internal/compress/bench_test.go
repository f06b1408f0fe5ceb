package compress

import (
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkEncode and BenchmarkDecode measure one goroutine on 16 MiB
// (an extent of the default layout) of each kind of data, per codec:
//
//	go test ./internal/compress/ -run '^$' -bench . -benchtime 10x
func benchData() []struct {
	name string
	b    []byte
	elem int
} {
	const n = 16 << 20
	return []struct {
		name string
		b    []byte
		elem int
	}{
		{"random", randomBytes(n, 1), 0},
		{"constant", bytes.Repeat([]byte{1}, n), 0},
		{"text", textBytes(n, 1), 0},
		{"F32", floatBytes("F32", n, 1), 4},
		{"BF16", floatBytes("BF16", n, 1), 2},
	}
}

func benchOptions(elem int) []struct {
	name string
	o    Options
} {
	return []struct {
		name string
		o    Options
	}{
		{"s2", Options{Codec: S2, MinSavingPct: -1}},
		{"zstd1", Options{Codec: Zstd, Level: 1, MinSavingPct: -1}},
		{"zstd3", Options{Codec: Zstd, MinSavingPct: -1}},
		{"zstd3-planes", Options{Codec: Zstd, ElemSize: elem, MinSavingPct: -1}},
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, d := range benchData() {
		for _, c := range benchOptions(d.elem) {
			if c.o.ElemSize == 0 && c.name == "zstd3-planes" {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s", d.name, c.name), func(b *testing.B) {
				dst := make([]byte, 0, len(d.b)+len(d.b)/8)
				b.SetBytes(int64(len(d.b)))
				var r Result
				for b.Loop() {
					var err error
					r, _, err = Encode(dst, d.b, c.o)
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(r.Index.Ratio(), "ratio")
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, d := range benchData() {
		for _, c := range benchOptions(d.elem) {
			if c.o.ElemSize == 0 && c.name == "zstd3-planes" {
				continue
			}
			r, _, err := Encode(nil, d.b, c.o)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%s", d.name, c.name), func(b *testing.B) {
				out := make([]byte, len(d.b))
				b.SetBytes(int64(len(d.b)))
				for b.Loop() {
					if err := r.Index.Decode(out, 0, r.Stored); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(r.Index.Ratio(), "ratio")
			})
		}
	}
}
