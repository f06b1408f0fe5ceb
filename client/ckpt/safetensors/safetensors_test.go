package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

// file builds a safetensors file by hand: the length, the JSON as given
// (padded with pad spaces) and data bytes.
func file(js string, pad int, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)+pad))
	b = append(b, js...)
	b = append(b, bytes.Repeat([]byte(" "), pad)...)
	return append(b, data...)
}

func TestDecodeHandBuilt(t *testing.T) {
	// Two tensors, written in reverse order in the JSON, with metadata,
	// 8-byte aligned as the reference writer pads.
	js := `{"b":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}`
	pad := (8 - (8+len(js))%8) % 8
	data := make([]byte, 24)
	for i := range data {
		data[i] = byte(i)
	}
	b := file(js, pad, data)
	h, err := Decode(b, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["format"] != "pt" || len(h.Tensors) != 2 {
		t.Fatalf("header %+v", h)
	}
	a, b2 := h.Tensors[0], h.Tensors[1]
	if a.Name != "a" || a.DType != BF16 || a.Begin != 0 || a.End != 8 || b2.Name != "b" || b2.Begin != 8 || b2.End != 24 {
		t.Fatalf("tensors %+v", h.Tensors)
	}
	if h.DataStart() != int64(8+len(js)+pad) || h.FileSize() != int64(len(b)) {
		t.Fatalf("data start %d file size %d", h.DataStart(), h.FileSize())
	}
	got, ok := h.Tensor("b")
	if !ok || got.Size() != 16 || fmt.Sprint(got.Shape) != "[2 2]" {
		t.Fatalf("Tensor(b) = %+v %v", got, ok)
	}
	// Through ReadHeader too.
	h2, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil || len(h2.Tensors) != 2 {
		t.Fatalf("ReadHeader: %v %+v", err, h2)
	}
}

func TestLayoutEncodeRoundTrip(t *testing.T) {
	specs := []Spec{
		{"embed", BF16, []int64{1000, 64}},
		{"scalar", F32, nil},
		{"empty", F16, []int64{0, 5}},
		{"ln.bias", F32, []int64{7}},
		{"nibbles", F4, []int64{6}},
		{"name with \"quotes\" and ünïcode", U8, []int64{3}},
	}
	h, enc, err := Layout(map[string]string{"step": "12", "format": "pt"}, specs)
	if err != nil {
		t.Fatal(err)
	}
	// The data starts on a 4 KiB boundary; the padding is spaces.
	if h.DataStart()%Align != 0 || int64(len(enc)) != h.DataStart() {
		t.Fatalf("data start %d, encoding %d bytes", h.DataStart(), len(enc))
	}
	if !bytes.HasSuffix(bytes.TrimRight(enc, " "), []byte("}")) {
		t.Fatal("header not padded with spaces after the JSON")
	}
	wantSizes := []int64{128000, 4, 0, 28, 3, 3}
	var off int64
	for i, tt := range h.Tensors {
		if tt.Begin != off || tt.Size() != wantSizes[i] || tt.Name != specs[i].Name {
			t.Fatalf("tensor %d: %+v, want begin %d size %d", i, tt, off, wantSizes[i])
		}
		off = tt.End
	}
	file := append(enc, make([]byte, h.DataLen)...)
	d, err := Decode(file, int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if d.HeaderLen != h.HeaderLen || d.DataLen != h.DataLen || len(d.Tensors) != len(h.Tensors) || d.Metadata["step"] != "12" {
		t.Fatalf("decoded %+v, want %+v", d, h)
	}
	for i := range d.Tensors {
		if fmt.Sprint(d.Tensors[i]) != fmt.Sprint(h.Tensors[i]) {
			t.Fatalf("tensor %d: %+v, want %+v", i, d.Tensors[i], h.Tensors[i])
		}
	}
	// A header that is already 4 KiB long is not padded further.
	h3, enc3, err := Layout(nil, []Spec{{"x", U8, []int64{1}}})
	if err != nil || len(enc3) != Align || h3.Metadata != nil {
		t.Fatalf("small layout: %v, %d bytes", err, len(enc3))
	}
}

func TestLayoutErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []Spec
	}{
		{"unknown dtype", []Spec{{"a", "F128", []int64{1}}}},
		{"negative dim", []Spec{{"a", F32, []int64{-1}}}},
		{"overflow", []Spec{{"a", F64, []int64{1 << 40, 1 << 40}}}},
		{"sub-byte remainder", []Spec{{"a", F4, []int64{3}}}},
		{"duplicate", []Spec{{"a", U8, nil}, {"a", U8, nil}}},
		{"empty name", []Spec{{"", U8, nil}}},
		{"reserved name", []Spec{{MetadataKey, U8, nil}}},
	} {
		if _, _, err := Layout(nil, tc.specs); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	ok := `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`
	data4 := []byte{1, 2, 3, 4}
	huge := binary.LittleEndian.AppendUint64(nil, 1<<62)
	tests := []struct {
		name string
		in   []byte
		want string // part of the message
	}{
		{"empty file", nil, "no header length"},
		{"short length", []byte{1, 2, 3}, "no header length"},
		{"huge length", append(huge, "{}"...), "exceeds"},
		{"length past end", file(ok, 0, nil)[:20], "past the end"},
		{"length 0", binary.LittleEndian.AppendUint64(nil, 0), "header length 0"},
		{"not an object", file(`["a"]`, 0, nil), "does not start"},
		{"bad json", file(`{"a":`, 0, nil), "EOF"},
		{"trailing garbage", file(ok+`x`, 0, data4), "after the header"},
		{"duplicate key", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, 0, nil), "twice"},
		{"missing field", file(`{"a":{"dtype":"U8","shape":[4]}}`, 0, data4), "required"},
		{"key case", file(`{"a":{"DType":"U8","shape":[4],"data_offsets":[0,4]}}`, 0, data4), "required"},
		{"null field", file(`{"a":{"dtype":null,"shape":[4],"data_offsets":[0,4]}}`, 0, data4), "required"},
		{"tensor not an object", file(`{"a":[1]}`, 0, data4), "tensor"},
		{"unknown dtype", file(`{"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,4]}}`, 0, data4), "unknown dtype"},
		{"negative offset", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[-1,3]}}`, 0, data4), "tensor"},
		{"float offset", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0.5,4]}}`, 0, data4), "tensor"},
		{"three offsets", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4,4]}}`, 0, data4), "3 values"},
		{"reversed offsets", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}}`, 0, data4), "out of order"},
		{"offset past file", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,18446744073709551615]}}`, 0, data4), "past the end"},
		{"size mismatch", file(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,4]}}`, 0, data4), "hold 4"},
		{"shape overflow", file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}}`, 0, data4), "overflows"},
		{"negative dim", file(`{"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}}`, 0, data4), "negative"},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, 0, data4), "overlaps"},
		{"gap", file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, 0, data4), "gap"},
		{"trailing data", file(ok, 0, append(data4, 9)), "file has"},
		{"missing data", file(ok, 0, data4[:3]), "file has"},
		{"metadata not strings", file(`{"__metadata__":{"a":1}}`, 0, nil), "__metadata__"},
		{"reserved name as metadata twice", file(`{"__metadata__":{},"__metadata__":{}}`, 0, nil), "twice"},
		{"empty name", file(`{"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, 0, nil), "empty"},
		{"invalid utf8", file("{\"\xff\":{}}", 0, nil), "UTF-8"},
		{"rank too high", file(`{"a":{"dtype":"U8","shape":[`+strings.Repeat("1,", 70)+`1],"data_offsets":[0,1]}}`, 0, []byte{1}), "rank"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.in, int64(len(tc.in)))
			if !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("Decode = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// FuzzDecode: no input panics or allocates beyond its size; whatever
// decodes satisfies every invariant and re-lays out identically.
func FuzzDecode(f *testing.F) {
	_, enc, _ := Layout(map[string]string{"k": "v"}, []Spec{{"a", F32, []int64{2, 3}}, {"b", BF16, []int64{5}}})
	f.Add(append(enc, make([]byte, 34)...))
	f.Add(file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 3, []byte{1, 2, 3, 4}))
	f.Add(file(`{}`, 0, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b, int64(len(b)))
		if err != nil {
			if !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if h.FileSize() != int64(len(b)) {
			t.Fatalf("file size %d, input %d", h.FileSize(), len(b))
		}
		var end int64
		for _, tt := range h.Tensors {
			if tt.Begin != end || tt.End < tt.Begin {
				t.Fatalf("tensor %+v after %d", tt, end)
			}
			n, err := ByteSize(tt.DType, tt.Shape)
			if err != nil || n != tt.Size() {
				t.Fatalf("tensor %+v: size %d, %v", tt, n, err)
			}
			end = tt.End
		}
		// The same tensors lay out at the same offsets.
		specs := make([]Spec, len(h.Tensors))
		for i, tt := range h.Tensors {
			specs[i] = Spec{tt.Name, tt.DType, tt.Shape}
		}
		l, _, err := Layout(h.Metadata, specs)
		if err != nil {
			t.Fatalf("decoded header does not lay out: %v", err)
		}
		for i := range l.Tensors {
			if l.Tensors[i].Begin != h.Tensors[i].Begin || l.Tensors[i].End != h.Tensors[i].End {
				t.Fatalf("tensor %d laid out at %+v, decoded %+v", i, l.Tensors[i], h.Tensors[i])
			}
		}
	})
}
