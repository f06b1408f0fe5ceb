package compress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/huff0"

	"github.com/shoalfs/shoal/internal/errs"
)

// Byte planes.
//
// A block of elements of w bytes (w = 2, 4, 8) is stored as its byte
// planes: plane j holds byte j of every element. Float tensors compress
// that way because the plane of the sign and exponent bits takes only a
// handful of values while the mantissa planes are close to random.
//
// The planes are entropy coded, not LZ coded: they have no long matches,
// only skewed byte frequencies, and zstd's match finder on them cost 3-7x
// in decode speed for a worse ratio than its own literal coder alone
// (docs/compression.md). A plane block is:
//
//	skip bytes      the bytes before the first element boundary, as they are
//	tail bytes      the bytes after the last whole element ((len-skip) % w), as they are
//	piece rows      for each run of up to pieceElems elements, one piece per plane:
//	                byte mode (0 raw, 1 one repeated byte, 2 huff0 4X),
//	                uvarint payload length, payload
//
// Each piece is coded on its own (huff0, zstd's literal coder, with 4
// streams), or kept raw when that does not make it smaller. Decoding a
// piece row yields w plane slices of the same elements, which are
// interleaved straight into the output: a raw piece is read where it lies
// in the stored bytes, never copied into a plane buffer first.
const pieceElems = 128 << 10

const (
	pieceRaw  = 0
	pieceRLE  = 1
	pieceHuff = 2
)

// huffTableLog is the longest Huffman code the encoder makes (huff0's
// default is 11).
const huffTableLog = 8

var huffScratch = sync.Pool{New: func() any { return &huff0.Scratch{Reuse: huff0.ReusePolicyNone} }}

// planeBufs holds scratch for the pieces of one row (w * pieceElems).
var planeBufs = sync.Pool{New: func() any { return new([]byte) }}

// encodePlanes appends the plane encoding of blk (elements of w bytes
// from offset skip) to out.
func encodePlanes(out, blk []byte, w, skip int) ([]byte, error) {
	n := (len(blk) - skip) / w
	tail := skip + n*w
	out = append(out, blk[:skip]...)
	out = append(out, blk[tail:]...)
	body := blk[skip:tail]
	s := huffScratch.Get().(*huff0.Scratch)
	defer huffScratch.Put(s)
	// Codes of at most 8 bits: the decoder then takes its 8-bit table
	// path, ~10% faster, for planes 0.2% larger on F32, F16 and BF16
	// exponents. F64 planes lost 0.6% of their size that way: they keep
	// huff0's default (0: 11 bits).
	s.TableLog = 0
	if w <= 4 {
		s.TableLog = huffTableLog
	}
	sp := planeBufs.Get().(*[]byte)
	defer planeBufs.Put(sp)
	*sp = grow(*sp, w*pieceElems)
	for e0 := 0; e0 < n; e0 += pieceElems {
		m := min(pieceElems, n-e0)
		planes := (*sp)[:w*m]
		split(planes, body[e0*w:(e0+m)*w], w)
		for j := range w {
			p := planes[j*m : (j+1)*m]
			s.Out = s.Out[:0]
			enc, _, err := huff0.Compress4X(p, s)
			switch {
			case err == nil && len(enc) < len(p):
				out = append(out, pieceHuff)
				out = binary.AppendUvarint(out, uint64(len(enc)))
				out = append(out, enc...)
			case errors.Is(err, huff0.ErrUseRLE) && bytes.Count(p, p[:1]) == len(p):
				out = append(out, pieceRLE, 1, p[0])
			case err == nil || errors.Is(err, huff0.ErrIncompressible) || errors.Is(err, huff0.ErrUseRLE):
				out = append(out, pieceRaw)
				out = binary.AppendUvarint(out, uint64(len(p)))
				out = append(out, p...)
			default:
				return nil, err
			}
		}
	}
	return out, nil
}

// decodePlanes decodes a plane block src into dst (the block: it must
// fill it exactly) of elements of w bytes from offset skip.
func decodePlanes(dst, src []byte, w, skip int) error {
	n := (len(dst) - skip) / w
	tail := skip + n*w
	if len(src) < len(dst)-n*w {
		return fmt.Errorf("planes: %d bytes: %w", len(src), errs.ErrCorrupt)
	}
	copy(dst[:skip], src[:skip])
	copy(dst[tail:], src[skip:skip+len(dst)-tail])
	src = src[skip+len(dst)-tail:]
	body := dst[skip:tail]
	sp := planeBufs.Get().(*[]byte)
	defer planeBufs.Put(sp)
	*sp = grow(*sp, w*pieceElems)
	var planes [8][]byte
	for e0 := 0; e0 < n; e0 += pieceElems {
		m := min(pieceElems, n-e0)
		for j := range w {
			if len(src) < 2 {
				return fmt.Errorf("planes: piece %d.%d truncated: %w", e0/pieceElems, j, errs.ErrCorrupt)
			}
			mode := src[0]
			ln, k := binary.Uvarint(src[1:])
			if k <= 0 || ln > uint64(len(src)-1-k) {
				return fmt.Errorf("planes: piece %d.%d: bad length: %w", e0/pieceElems, j, errs.ErrCorrupt)
			}
			payload := src[1+k : 1+k+int(ln)]
			src = src[1+k+int(ln):]
			scratch := (*sp)[j*m : (j+1)*m]
			switch mode {
			case pieceRaw:
				if len(payload) != m {
					return fmt.Errorf("planes: raw piece %d.%d of %d bytes, want %d: %w", e0/pieceElems, j, len(payload), m, errs.ErrCorrupt)
				}
				planes[j] = payload
			case pieceRLE:
				if len(payload) != 1 {
					return fmt.Errorf("planes: repeat piece %d.%d of %d bytes: %w", e0/pieceElems, j, len(payload), errs.ErrCorrupt)
				}
				for i := range scratch {
					scratch[i] = payload[0]
				}
				planes[j] = scratch
			case pieceHuff:
				if err := huffDecode(scratch, payload); err != nil {
					return fmt.Errorf("planes: piece %d.%d: %w", e0/pieceElems, j, err)
				}
				planes[j] = scratch
			default:
				return fmt.Errorf("planes: piece %d.%d mode %d: %w", e0/pieceElems, j, mode, errs.ErrCorrupt)
			}
		}
		join(body[e0*w:(e0+m)*w], planes[:w], m)
	}
	if len(src) != 0 {
		return fmt.Errorf("planes: %d bytes after the last piece: %w", len(src), errs.ErrCorrupt)
	}
	return nil
}

func huffDecode(p, payload []byte) error {
	s := huffScratch.Get().(*huff0.Scratch)
	defer huffScratch.Put(s)
	s.MaxDecodedSize = pieceElems
	s, rem, err := huff0.ReadTable(payload, s)
	if err != nil {
		return fmt.Errorf("huff0 table: %v: %w", err, errs.ErrCorrupt)
	}
	got, err := s.Decoder().Decompress4X(p[:0:len(p)], rem)
	if err != nil {
		return fmt.Errorf("huff0: %v: %w", err, errs.ErrCorrupt)
	}
	if len(got) != len(p) || &got[0] != &p[0] {
		return fmt.Errorf("huff0 decoded %d bytes, want %d: %w", len(got), len(p), errs.ErrCorrupt)
	}
	return nil
}

// split writes the m elements of w bytes of body into planes: plane j,
// planes[j*m:(j+1)*m], gets byte j of every element.
func split(planes, body []byte, w int) {
	m := len(body) / w
	switch w {
	case 2:
		p0, p1 := planes[:m], planes[m:2*m]
		for i := range m {
			v := binary.LittleEndian.Uint16(body[2*i:])
			p0[i], p1[i] = byte(v), byte(v>>8)
		}
	case 4:
		p0, p1, p2, p3 := planes[:m], planes[m:2*m], planes[2*m:3*m], planes[3*m:4*m]
		for i := range m {
			v := binary.LittleEndian.Uint32(body[4*i:])
			p0[i], p1[i], p2[i], p3[i] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
	default:
		for j := range w {
			p := planes[j*m : (j+1)*m]
			for i := range m {
				p[i] = body[i*w+j]
			}
		}
	}
}

// spread2 moves the 4 bytes of x to the even bytes of the result.
func spread2(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	return (v | v<<8) & 0x00ff00ff00ff00ff
}

// spread4 moves the 2 bytes of x to bytes 0 and 4 of the result.
func spread4(x uint16) uint64 {
	v := uint64(x)
	return (v | v<<24) & 0x000000ff000000ff
}

// joinGeneric interleaves planes (w slices of m bytes) into out (m
// elements of w bytes): the inverse of split, in Go (join: with SSE2 on
// amd64, join_amd64.go).
func joinGeneric(out []byte, planes [][]byte, m int) {
	switch len(planes) {
	case 2:
		p0, p1 := planes[0][:m], planes[1][:m]
		i := 0
		for ; i+4 <= m; i += 4 {
			v := spread2(binary.LittleEndian.Uint32(p0[i:])) | spread2(binary.LittleEndian.Uint32(p1[i:]))<<8
			binary.LittleEndian.PutUint64(out[2*i:], v)
		}
		for ; i < m; i++ {
			out[2*i], out[2*i+1] = p0[i], p1[i]
		}
	case 4:
		p0, p1, p2, p3 := planes[0][:m], planes[1][:m], planes[2][:m], planes[3][:m]
		i := 0
		for ; i+2 <= m; i += 2 {
			v := spread4(binary.LittleEndian.Uint16(p0[i:])) | spread4(binary.LittleEndian.Uint16(p1[i:]))<<8 |
				spread4(binary.LittleEndian.Uint16(p2[i:]))<<16 | spread4(binary.LittleEndian.Uint16(p3[i:]))<<24
			binary.LittleEndian.PutUint64(out[4*i:], v)
		}
		for ; i < m; i++ {
			out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = p0[i], p1[i], p2[i], p3[i]
		}
	default:
		w := len(planes)
		for j, p := range planes {
			for i := range m {
				out[i*w+j] = p[i]
			}
		}
	}
}
