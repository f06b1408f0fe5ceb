// Package safetensors reads and writes the header of safetensors files
// (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON, then the tensor data.
//
//	offset      size  field
//	0           8     N, the JSON header's length in bytes (uint64, little endian)
//	8           N     {"__metadata__": {"k": "v", ...},
//	                   "name": {"dtype": "BF16", "shape": [4096, 4096], "data_offsets": [BEGIN, END]}, ...}
//	                  padded at its end with spaces (0x20)
//	8+N         ...   data: tensor "name" is bytes [8+N+BEGIN, 8+N+END) of the file
//
// The data offsets are relative to the start of the data. Tensors are
// stored row major, little endian, and cover the data exactly: no gaps, no
// overlaps, nothing after the last one.
//
// Encode pads the header with spaces so that the data starts at a multiple
// of Align (4 KiB), as Shoal's checkpoints do: any safetensors reader opens
// the file, and each tensor that starts on a 4 KiB boundary can be read
// with aligned I/O. Decode accepts any padding, so files from other writers
// (8-byte alignment) read too.
//
// Decode is strict, since it reads bytes from disks and networks: it
// checks the length before it allocates, rejects duplicate keys, unknown
// dtypes, shapes whose byte size overflows or disagrees with the offsets,
// overlapping, gapped or out-of-range tensors and trailing data, and
// returns an error wrapping errs.ErrCorrupt for each; it never panics
// (FuzzDecode).
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/shoalfs/shoal/internal/errs"
)

const (
	// Align is the data alignment that Encode produces.
	Align = 4096
	// MaxHeaderSize bounds N (the reference implementation's limit).
	MaxHeaderSize = 100_000_000
	// MaxTensors bounds the number of tensors of one file.
	MaxTensors = 1 << 20
	// MaxRank bounds the number of dimensions of one tensor.
	MaxRank = 64
	// MaxNameLen bounds a tensor name and a metadata key, in bytes.
	MaxNameLen = 64 << 10
	// MetadataKey is the reserved key of the free-form string map.
	MetadataKey = "__metadata__"
)

// DType is a tensor element type, spelled as safetensors spells it.
type DType string

// The element types safetensors defines.
const (
	BOOL    DType = "BOOL"
	U8      DType = "U8"
	I8      DType = "I8"
	F8E5M2  DType = "F8_E5M2"
	F8E4M3  DType = "F8_E4M3"
	F8E8M0  DType = "F8_E8M0"
	I16     DType = "I16"
	U16     DType = "U16"
	F16     DType = "F16"
	BF16    DType = "BF16"
	I32     DType = "I32"
	U32     DType = "U32"
	F32     DType = "F32"
	F64     DType = "F64"
	I64     DType = "I64"
	U64     DType = "U64"
	C64     DType = "C64"
	F4      DType = "F4"
	F6E2M3  DType = "F6_E2M3"
	F6E3M2  DType = "F6_E3M2"
	dtypeNA DType = ""
)

var dtypeBits = map[DType]uint64{
	BOOL: 8, U8: 8, I8: 8, F8E5M2: 8, F8E4M3: 8, F8E8M0: 8,
	I16: 16, U16: 16, F16: 16, BF16: 16,
	I32: 32, U32: 32, F32: 32,
	F64: 64, I64: 64, U64: 64, C64: 64,
	F4: 4, F6E2M3: 6, F6E3M2: 6,
}

// Bits returns the size of one element in bits; ok is false for a dtype
// safetensors does not define.
func (d DType) Bits() (n uint64, ok bool) {
	n, ok = dtypeBits[d]
	return n, ok
}

// ByteSize returns the bytes a tensor of this dtype and shape takes; an
// error if the dtype is unknown, a dimension negative, the size overflows
// or sub-byte elements do not fill whole bytes.
func ByteSize(d DType, shape []int64) (int64, error) {
	b, ok := d.Bits()
	if !ok {
		return 0, fmt.Errorf("unknown dtype %q: %w", d, errs.ErrInvalid)
	}
	if len(shape) > MaxRank {
		return 0, fmt.Errorf("rank %d (max %d): %w", len(shape), MaxRank, errs.ErrInvalid)
	}
	n := uint64(1)
	for _, s := range shape {
		if s < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v: %w", shape, errs.ErrInvalid)
		}
		hi, lo := bits.Mul64(n, uint64(s))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v overflows: %w", shape, errs.ErrInvalid)
		}
		n = lo
	}
	hi, lo := bits.Mul64(n, b)
	if hi != 0 || lo/8 > math.MaxInt64 {
		return 0, fmt.Errorf("shape %v of %s overflows: %w", shape, d, errs.ErrInvalid)
	}
	if lo%8 != 0 {
		return 0, fmt.Errorf("shape %v of %s (%d bits each) is not a whole number of bytes: %w", shape, d, b, errs.ErrInvalid)
	}
	return int64(lo / 8), nil
}

// TensorInfo describes one tensor of a file. Begin and End are offsets
// relative to the start of the data, as in the header.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	Begin int64
	End   int64
}

// Size returns the tensor's length in bytes.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// Header is a decoded (or laid out) safetensors header.
type Header struct {
	// Metadata is the "__metadata__" map; nil when absent.
	Metadata map[string]string
	// Tensors in data order (by Begin).
	Tensors []TensorInfo
	// HeaderLen is N, the JSON's length with its padding.
	HeaderLen int64
	// DataLen is the length of the data: the End of the last tensor.
	DataLen int64
}

// DataStart is the file offset of the data: 8 + N.
func (h *Header) DataStart() int64 { return 8 + h.HeaderLen }

// FileSize is the size of the whole file.
func (h *Header) FileSize() int64 { return h.DataStart() + h.DataLen }

// Tensor returns the tensor called name.
func (h *Header) Tensor(name string) (TensorInfo, bool) {
	for _, t := range h.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// Spec is a tensor to lay out: its name, dtype and shape.
type Spec struct {
	Name  string
	DType DType
	Shape []int64
}

// Layout places tensors one after the other in the given order and
// returns the header, with N padded so that the data starts at a multiple
// of Align, and its encoding (8+N bytes: the length and the JSON).
func Layout(metadata map[string]string, specs []Spec) (*Header, []byte, error) {
	if len(specs) > MaxTensors {
		return nil, nil, fmt.Errorf("%d tensors (max %d): %w", len(specs), MaxTensors, errs.ErrInvalid)
	}
	h := &Header{Metadata: metadata}
	seen := make(map[string]bool, len(specs))
	var off int64
	for _, s := range specs {
		if err := validName(s.Name); err != nil {
			return nil, nil, err
		}
		if seen[s.Name] {
			return nil, nil, fmt.Errorf("tensor %q twice: %w", s.Name, errs.ErrInvalid)
		}
		seen[s.Name] = true
		n, err := ByteSize(s.DType, s.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", s.Name, err)
		}
		if off > math.MaxInt64/2-n {
			return nil, nil, fmt.Errorf("tensor %q: data too large: %w", s.Name, errs.ErrInvalid)
		}
		h.Tensors = append(h.Tensors, TensorInfo{Name: s.Name, DType: s.DType, Shape: slices.Clone(s.Shape), Begin: off, End: off + n})
		off += n
	}
	h.DataLen = off
	for k := range metadata {
		if err := validName(k); err != nil {
			return nil, nil, fmt.Errorf("metadata key: %w", err)
		}
	}
	b, err := h.Encode()
	if err != nil {
		return nil, nil, err
	}
	return h, b, nil
}

func validName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty tensor name: %w", errs.ErrInvalid)
	case len(s) > MaxNameLen:
		return fmt.Errorf("name of %d bytes (max %d): %w", len(s), MaxNameLen, errs.ErrInvalid)
	case s == MetadataKey:
		return fmt.Errorf("tensor name %q is reserved: %w", s, errs.ErrInvalid)
	case !utf8.ValidString(s):
		return fmt.Errorf("name %q is not UTF-8: %w", s, errs.ErrInvalid)
	}
	return nil
}

// Encode returns the header's encoding: the 8-byte length and the JSON,
// padded with spaces so that the data starts at a multiple of Align. It
// sets h.HeaderLen. Tensors are written in data order, after the metadata.
func (h *Header) Encode() ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(make([]byte, 8))
	buf.WriteByte('{')
	first := true
	comma := func() {
		if !first {
			buf.WriteByte(',')
		}
		first = false
	}
	str := func(s string) error {
		b, err := json.Marshal(s)
		if err != nil {
			return err
		}
		buf.Write(b)
		return nil
	}
	if h.Metadata != nil {
		comma()
		str(MetadataKey)
		buf.WriteString(":{")
		keys := make([]string, 0, len(h.Metadata))
		for k := range h.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := str(k); err != nil {
				return nil, err
			}
			buf.WriteByte(':')
			if err := str(h.Metadata[k]); err != nil {
				return nil, err
			}
		}
		buf.WriteByte('}')
	}
	for _, t := range h.Tensors {
		comma()
		if err := str(t.Name); err != nil {
			return nil, err
		}
		buf.WriteString(`:{"dtype":`)
		str(string(t.DType))
		buf.WriteString(`,"shape":[`)
		for i, s := range t.Shape {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(strconv.FormatInt(s, 10))
		}
		fmt.Fprintf(&buf, `],"data_offsets":[%d,%d]}`, t.Begin, t.End)
	}
	buf.WriteByte('}')
	if pad := (Align - buf.Len()%Align) % Align; pad > 0 {
		buf.Write(bytes.Repeat([]byte{' '}, pad))
	}
	b := buf.Bytes()
	n := int64(len(b) - 8)
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header of %d bytes (max %d): %w", n, MaxHeaderSize, errs.ErrInvalid)
	}
	binary.LittleEndian.PutUint64(b, uint64(n))
	h.HeaderLen = n
	return b, nil
}

// HeaderLen reads N from the first 8 bytes of a file of fileSize bytes and
// checks it against the file and MaxHeaderSize, so that a caller can read
// the header without trusting N.
func HeaderLen(first8 []byte, fileSize int64) (int64, error) {
	if len(first8) < 8 || fileSize < 8 {
		return 0, fmt.Errorf("safetensors: file of %d bytes has no header length: %w", fileSize, errs.ErrCorrupt)
	}
	n := binary.LittleEndian.Uint64(first8)
	switch {
	case n < 2:
		return 0, fmt.Errorf("safetensors: header length %d: %w", n, errs.ErrCorrupt)
	case n > MaxHeaderSize:
		return 0, fmt.Errorf("safetensors: header length %d exceeds %d: %w", n, MaxHeaderSize, errs.ErrCorrupt)
	case n > uint64(fileSize-8):
		return 0, fmt.Errorf("safetensors: header length %d past the end of a %d-byte file: %w", n, fileSize, errs.ErrCorrupt)
	}
	return int64(n), nil
}

// ReadHeader reads and decodes the header of a file of size bytes.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	var first [8]byte
	if _, err := r.ReadAt(first[:], 0); err != nil && !(err == io.EOF && size >= 8) {
		return nil, fmt.Errorf("safetensors: read header length: %w", err)
	}
	n, err := HeaderLen(first[:], size)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 8+n)
	copy(buf, first[:])
	if m, err := r.ReadAt(buf[8:], 8); m != len(buf)-8 {
		return nil, fmt.Errorf("safetensors: read header: %d of %d bytes: %w", m, n, err)
	}
	return Decode(buf, size)
}

// rawTensor is a tensor entry as JSON has it. Its keys are matched
// exactly (encoding/json alone would accept "DType"); other keys are
// ignored, as the reference reader ignores them.
type rawTensor struct {
	DType       string
	Shape       []int64
	DataOffsets []uint64
}

func decodeTensor(v json.RawMessage) (rawTensor, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		return rawTensor{}, err
	}
	var rt rawTensor
	for _, f := range []struct {
		key string
		dst any
	}{{"dtype", &rt.DType}, {"shape", &rt.Shape}, {"data_offsets", &rt.DataOffsets}} {
		raw, ok := m[f.key]
		if !ok || string(raw) == "null" {
			return rawTensor{}, fmt.Errorf("dtype, shape and data_offsets are required")
		}
		if err := json.Unmarshal(raw, f.dst); err != nil {
			return rawTensor{}, fmt.Errorf("%s: %v", f.key, err)
		}
	}
	return rt, nil
}

// Decode decodes a header. prefix holds at least the first 8+N bytes of
// the file (more is ignored); fileSize is the whole file's size, against
// which the tensors are checked.
func Decode(prefix []byte, fileSize int64) (*Header, error) {
	n, err := HeaderLen(prefix, fileSize)
	if err != nil {
		return nil, err
	}
	if int64(len(prefix)) < 8+n {
		return nil, fmt.Errorf("safetensors: %d header bytes, want %d: %w", len(prefix)-8, n, errs.ErrCorrupt)
	}
	js := prefix[8 : 8+n]
	if js[0] != '{' {
		return nil, fmt.Errorf("safetensors: header does not start with '{': %w", errs.ErrCorrupt)
	}
	if !utf8.Valid(js) {
		return nil, fmt.Errorf("safetensors: header is not UTF-8: %w", errs.ErrCorrupt)
	}
	h := &Header{HeaderLen: n}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("safetensors: "+format+": %w", append(args, errs.ErrCorrupt)...)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return nil, bad("header: %v", err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("header: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, bad("header: key %v is not a string", tok)
		}
		if seen[key] {
			return nil, bad("key %q twice", key)
		}
		seen[key] = true
		if key == MetadataKey {
			var m map[string]string
			if err := dec.Decode(&m); err != nil {
				return nil, bad("%s: %v", MetadataKey, err)
			}
			if m == nil {
				m = map[string]string{}
			}
			h.Metadata = m
			continue
		}
		if len(h.Tensors) >= MaxTensors {
			return nil, bad("more than %d tensors", MaxTensors)
		}
		if err := validName(key); err != nil {
			return nil, bad("tensor name %.64q: %v", key, err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, bad("tensor %q: %v", key, err)
		}
		rt, err := decodeTensor(v)
		if err != nil {
			return nil, bad("tensor %q: %v", key, err)
		}
		if len(rt.DataOffsets) != 2 {
			return nil, bad("tensor %q: data_offsets has %d values, want 2", key, len(rt.DataOffsets))
		}
		b, e := rt.DataOffsets[0], rt.DataOffsets[1]
		if b > e || e > uint64(fileSize) {
			return nil, bad("tensor %q: data_offsets [%d, %d] out of order or past the end of the file", key, b, e)
		}
		size, err := ByteSize(DType(rt.DType), rt.Shape)
		if err != nil {
			return nil, bad("tensor %q: %v", key, err)
		}
		if uint64(size) != e-b {
			return nil, bad("tensor %q: %s%v is %d bytes, data_offsets [%d, %d] hold %d", key, rt.DType, rt.Shape, size, b, e, e-b)
		}
		h.Tensors = append(h.Tensors, TensorInfo{Name: key, DType: DType(rt.DType), Shape: rt.Shape, Begin: int64(b), End: int64(e)})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, bad("header: %v", err)
	}
	// Only padding may follow the object.
	rest := js[dec.InputOffset():]
	if len(bytes.Trim(rest, " \t\r\n")) != 0 {
		return nil, bad("%d bytes after the header's JSON object", len(bytes.TrimRight(rest, " \t\r\n")))
	}
	// The tensors cover the data exactly, in order.
	sort.SliceStable(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		return a.Begin < b.Begin || a.Begin == b.Begin && a.End < b.End
	})
	var end int64
	for _, t := range h.Tensors {
		switch {
		case t.Begin < end:
			return nil, bad("tensor %q [%d, %d] overlaps the tensor before it (ends at %d)", t.Name, t.Begin, t.End, end)
		case t.Begin > end:
			return nil, bad("gap of %d bytes before tensor %q at %d", t.Begin-end, t.Name, t.Begin)
		}
		end = t.End
	}
	h.DataLen = end
	if h.FileSize() != fileSize {
		return nil, bad("data ends at %d but the file has %d bytes", h.FileSize(), fileSize)
	}
	return h, nil
}
