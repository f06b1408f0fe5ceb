package compress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
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
//	                mode byte, uvarint payload length, payload
//
// Two block formats exist, told apart by the index (Block.Planes2):
//
// Format 1 (written until 2026-12-03, still read): piece modes 0 (raw), 1
// (one repeated byte), 2 (huff0 4X); the block ends with a 4-byte check
// of its decoded bytes (compress.go).
//
// Format 2 (written now): no block trailer; instead each huff0 piece
// carries the check of what huff0 decoded (mode 4: huff0 4X, then the low
// 32 bits of the xxHash64 of the decoded plane), the only bytes a bug or
// damage under a rewritten chunk checksum could make wrong. Raw and
// repeated pieces are covered by the chunk checksums like any stored
// byte. And a row of 2- or 4-byte elements may be an exponent row (mode
// 3 in place of its first piece; exponentRow below), which decodes about
// twice as fast for the same or better ratio on float tensors.
//
// Each piece is coded on its own (huff0, zstd's own literal coder, with 4
// streams), or kept raw when that does not make it smaller. Decoding a
// piece row yields w plane slices of the same elements, which are
// interleaved straight into the output: a raw piece is read where it lies
// in the stored bytes, never copied into a plane buffer first.
const pieceElems = 128 << 10

const (
	pieceRaw     = 0
	pieceRLE     = 1
	pieceHuff    = 2 // format 1 only
	pieceExp     = 3 // format 2: an exponent row
	pieceHuffSum = 4 // format 2: huff0 4X and a check of the decoded bytes
)

// Exponent rows.
//
// The top two bytes of a BF16 or F32 element hold the sign (bit 15 of
// the pair), the 8 exponent bits (14-7) and 7 mantissa bits (6-0). An
// exponent row stores the exponent byte E = bits 14-7 apart and the sign
// with the 7 mantissa bits as one byte R = bit 15 | bits 6-0; the lower
// bytes of an F32 stay planes as they are. R is close to random and
// stays raw. A tensor's exponents take a few values, so the row codes
// each exponent as a 4-bit code into a table of up to 16 values, and
// pairs of codes as one byte: huff0 then decodes one symbol per two
// elements, where the byte planes cost it one per element, and the pair
// symbols code the exponents as tightly (BF16 random-normal: 0.324 bytes
// per element against 0.340 for the sign-and-exponent plane). Exponents
// outside the table (more than 16 distinct values) are escapes, code 15,
// listed with their element's position and patched after the join. A row
// with more escapes than 1/64 of its elements is coded as byte planes.
//
// An exponent row of m elements:
//
//	byte     pieceExp
//	byte     table length t, 1..16
//	t bytes  the table: code c stands for exponent table[c]
//	uvarint  escapes k (when t < 16), then k times:
//	         uvarint position - next (next: 0, then position+1), byte exponent
//	piece    the (m+1)/2 code pairs: code of element 2i | code of 2i+1 << 4
//	pieces   planes 0..w-3 (F32), then R
const (
	maxEscapeShare = 64 // at most m/maxEscapeShare escapes in an exponent row
	escapeCode     = 15
)

// huffTableLog is the longest Huffman code the encoder makes for planes
// of 2- and 4-byte elements (huff0's default is 11).
const huffTableLog = 8

var huffScratch = sync.Pool{New: func() any { return &huff0.Scratch{Reuse: huff0.ReusePolicyNone} }}

// planeBufs holds scratch for the pieces of one row.
var planeBufs = sync.Pool{New: func() any { return new([]byte) }}

// encodePlanes appends the plane encoding (format 2) of blk (elements of
// w bytes from offset skip) to out.
func encodePlanes(out, blk []byte, w, skip int) ([]byte, error) {
	n := (len(blk) - skip) / w
	tail := skip + n*w
	out = append(out, blk[:skip]...)
	out = append(out, blk[tail:]...)
	body := blk[skip:tail]
	s := huffScratch.Get().(*huff0.Scratch)
	defer huffScratch.Put(s)
	// Codes of at most 8 bits for 2- and 4-byte elements: planes 0.2%
	// larger on F32, F16 and BF16 exponents. F64 planes lost 0.6% of their
	// size that way: they keep huff0's default (0: 11 bits).
	tableLog := uint8(0)
	if w <= 4 {
		tableLog = huffTableLog
	}
	sp := planeBufs.Get().(*[]byte)
	defer planeBufs.Put(sp)
	*sp = grow(*sp, (w+3)*pieceElems)
	for e0 := 0; e0 < n; e0 += pieceElems {
		m := min(pieceElems, n-e0)
		planes := (*sp)[:w*m]
		split(planes, body[e0*w:(e0+m)*w], w)
		if w == 2 || w == 4 {
			var ok bool
			var err error
			out, ok, err = appendExponentRow(out, planes, w, m, (*sp)[w*pieceElems:], s)
			if err != nil {
				return nil, err
			}
			if ok {
				continue
			}
		}
		for j := range w {
			s.TableLog = tableLog
			var err error
			if out, err = appendPiece(out, planes[j*m:(j+1)*m], s); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// appendPiece appends p as a format 2 piece: huff0 with its check when
// that is smaller, one repeated byte, or raw.
func appendPiece(out, p []byte, s *huff0.Scratch) ([]byte, error) {
	s.Out = s.Out[:0]
	enc, _, err := huff0.Compress4X(p, s)
	switch {
	case err == nil && len(enc)+4 < len(p):
		out = append(out, pieceHuffSum)
		out = binary.AppendUvarint(out, uint64(len(enc)+4))
		out = append(out, enc...)
		return binary.LittleEndian.AppendUint32(out, sum32(p)), nil
	case errors.Is(err, huff0.ErrUseRLE) && bytes.Count(p, p[:1]) == len(p):
		return append(out, pieceRLE, 1, p[0]), nil
	case err == nil || errors.Is(err, huff0.ErrIncompressible) || errors.Is(err, huff0.ErrUseRLE):
		out = append(out, pieceRaw)
		out = binary.AppendUvarint(out, uint64(len(p)))
		return append(out, p...), nil
	}
	return nil, err
}

// appendExponentRow appends planes (w planes of m elements, w = 2 or 4)
// as an exponent row, or reports false (out unchanged) when the row has
// too many escapes for one. scratch holds at least 3*pieceElems bytes.
func appendExponentRow(out, planes []byte, w, m int, scratch []byte, s *huff0.Scratch) ([]byte, bool, error) {
	lo, hi := planes[(w-2)*m:(w-1)*m], planes[(w-1)*m:w*m]
	exp, r := scratch[:m], scratch[pieceElems:pieceElems+m]
	pairs := scratch[2*pieceElems : 2*pieceElems+(m+1)/2]
	// The exponents and R, 8 elements at a time, and their histogram
	// (four of them, against store-to-load stalls on repeated values).
	var counts [4][256]int32
	i := 0
	for ; i+8 <= m; i += 8 {
		h, l := binary.LittleEndian.Uint64(hi[i:]), binary.LittleEndian.Uint64(lo[i:])
		e := h<<1&0xfefefefefefefefe | l>>7&0x0101010101010101
		binary.LittleEndian.PutUint64(exp[i:], e)
		binary.LittleEndian.PutUint64(r[i:], h&0x8080808080808080|l&0x7f7f7f7f7f7f7f7f)
		counts[0][byte(e)]++
		counts[1][byte(e>>8)]++
		counts[2][byte(e>>16)]++
		counts[3][byte(e>>24)]++
		counts[0][byte(e>>32)]++
		counts[1][byte(e>>40)]++
		counts[2][byte(e>>48)]++
		counts[3][byte(e>>56)]++
	}
	for ; i < m; i++ {
		e := hi[i]<<1 | lo[i]>>7
		exp[i], r[i] = e, hi[i]&0x80|lo[i]&0x7f
		counts[0][e]++
	}
	var count [256]int
	for v := range count {
		count[v] = int(counts[0][v] + counts[1][v] + counts[2][v] + counts[3][v])
	}
	// The table: the most frequent exponents, ties by value (the encoding
	// is deterministic).
	var vals [256]byte
	distinct := 0
	for v := range 256 {
		if count[v] > 0 {
			vals[distinct] = byte(v)
			distinct++
		}
	}
	order := vals[:distinct]
	slices.SortStableFunc(order, func(a, b byte) int { return count[b] - count[a] })
	t := min(distinct, 16)
	escapes := 0
	if distinct > 16 {
		t = escapeCode
		for _, v := range order[t:] {
			escapes += count[v]
		}
		if escapes > m/maxEscapeShare {
			return out, false, nil
		}
	}
	var code [256]byte
	for i := range code {
		code[i] = escapeCode
	}
	for c, v := range order[:t] {
		code[v] = byte(c)
	}
	start := len(out)
	out = append(out, pieceExp, byte(t))
	out = append(out, order[:t]...)
	if t < 16 {
		out = binary.AppendUvarint(out, uint64(escapes))
	}
	even := m &^ 1
	if escapes == 0 {
		for i := 0; i < even; i += 2 {
			pairs[i/2] = code[exp[i]] | code[exp[i+1]]<<4
		}
	} else {
		next := 0
		escape := func(i int) {
			out = binary.AppendUvarint(out, uint64(i-next))
			out = append(out, exp[i])
			next = i + 1
		}
		for i := 0; i < even; i += 2 {
			c0, c1 := code[exp[i]], code[exp[i+1]]
			pairs[i/2] = c0 | c1<<4
			if c0 == escapeCode {
				escape(i)
			}
			if c1 == escapeCode {
				escape(i + 1)
			}
		}
		if m%2 == 1 && code[exp[m-1]] == escapeCode {
			escape(m - 1)
		}
	}
	if m%2 == 1 {
		pairs[m/2] = code[exp[m-1]]
	}
	var err error
	s.TableLog = 0 // pair symbols: huff0's default
	if out, err = appendPiece(out, pairs, s); err != nil {
		return out[:start], false, err
	}
	s.TableLog = huffTableLog
	for j := range w - 2 {
		if out, err = appendPiece(out, planes[j*m:(j+1)*m], s); err != nil {
			return out[:start], false, err
		}
	}
	if out, err = appendPiece(out, r, s); err != nil {
		return out[:start], false, err
	}
	return out, true, nil
}

// decodePlanes decodes a plane block src (format 2, or 1 when old) into
// dst (the block: it must fill it exactly) of elements of w bytes from
// offset skip.
func decodePlanes(dst, src []byte, w, skip int, format2 bool) error {
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
	*sp = grow(*sp, (w+1)*pieceElems)
	var planes [8][]byte
	for e0 := 0; e0 < n; e0 += pieceElems {
		m := min(pieceElems, n-e0)
		row := e0 / pieceElems
		if format2 && (w == 2 || w == 4) && len(src) > 0 && src[0] == pieceExp {
			var err error
			if src, err = decodeExponentRow(body[e0*w:(e0+m)*w], src, w, m, *sp); err != nil {
				return fmt.Errorf("planes: row %d: %w", row, err)
			}
			continue
		}
		for j := range w {
			var err error
			planes[j], src, err = decodePiece(src, (*sp)[j*pieceElems:j*pieceElems+m], format2)
			if err != nil {
				return fmt.Errorf("planes: piece %d.%d: %w", row, j, err)
			}
		}
		join(body[e0*w:(e0+m)*w], planes[:w], m)
	}
	if len(src) != 0 {
		return fmt.Errorf("planes: %d bytes after the last piece: %w", len(src), errs.ErrCorrupt)
	}
	return nil
}

// decodePiece decodes the piece at the start of src into scratch (its
// length is the plane's) and returns the plane (scratch, or a raw
// piece's bytes where they lie in src) and the rest of src.
func decodePiece(src, scratch []byte, format2 bool) (plane, rest []byte, err error) {
	if len(src) < 2 {
		return nil, nil, fmt.Errorf("truncated: %w", errs.ErrCorrupt)
	}
	mode := src[0]
	ln, k := binary.Uvarint(src[1:])
	if k <= 0 || ln > uint64(len(src)-1-k) {
		return nil, nil, fmt.Errorf("bad length: %w", errs.ErrCorrupt)
	}
	payload := src[1+k : 1+k+int(ln)]
	rest = src[1+k+int(ln):]
	switch {
	case mode == pieceRaw:
		if len(payload) != len(scratch) {
			return nil, nil, fmt.Errorf("raw piece of %d bytes, want %d: %w", len(payload), len(scratch), errs.ErrCorrupt)
		}
		return payload, rest, nil
	case mode == pieceRLE:
		if len(payload) != 1 {
			return nil, nil, fmt.Errorf("repeat piece of %d bytes: %w", len(payload), errs.ErrCorrupt)
		}
		for i := range scratch {
			scratch[i] = payload[0]
		}
		return scratch, rest, nil
	case mode == pieceHuff && !format2:
		if err := huffDecode(scratch, payload); err != nil {
			return nil, nil, err
		}
		return scratch, rest, nil
	case mode == pieceHuffSum && format2:
		if len(payload) < 4 {
			return nil, nil, fmt.Errorf("huff0 piece of %d bytes: %w", len(payload), errs.ErrCorrupt)
		}
		sum := binary.LittleEndian.Uint32(payload[len(payload)-4:])
		if err := huffDecode(scratch, payload[:len(payload)-4]); err != nil {
			return nil, nil, err
		}
		if sum32(scratch) != sum {
			return nil, nil, fmt.Errorf("huff0 piece fails its check: %w", errs.ErrCorrupt)
		}
		return scratch, rest, nil
	}
	return nil, nil, fmt.Errorf("mode %d: %w", mode, errs.ErrCorrupt)
}

// decodeExponentRow decodes the exponent row at the start of src into
// out (m elements of w bytes) and returns the rest of src. sp is scratch
// of at least (w+1)*pieceElems bytes.
func decodeExponentRow(out, src []byte, w, m int, sp []byte) ([]byte, error) {
	if len(src) < 2 {
		return nil, fmt.Errorf("exponent row truncated: %w", errs.ErrCorrupt)
	}
	t := int(src[1])
	if t < 1 || t > 16 || len(src) < 2+t {
		return nil, fmt.Errorf("exponent table of %d: %w", t, errs.ErrCorrupt)
	}
	var table [16]byte
	copy(table[:], src[2:2+t])
	src = src[2+t:]
	// The escapes are checked now and patched after the join.
	var escapes []byte
	if t < 16 {
		k, n := binary.Uvarint(src)
		if n <= 0 || k > uint64(m/maxEscapeShare) {
			return nil, fmt.Errorf("exponent row: bad escape count: %w", errs.ErrCorrupt)
		}
		list := src[n:]
		next := uint64(0)
		p := list
		for range k {
			d, n := binary.Uvarint(p)
			if n <= 0 || len(p) < n+1 || d >= uint64(m)-next {
				return nil, fmt.Errorf("exponent row: bad escape: %w", errs.ErrCorrupt)
			}
			next += d + 1
			p = p[n+1:]
		}
		escapes = list[:len(list)-len(p)]
		src = p
	}
	pairs, src, err := decodePiece(src, sp[w*pieceElems:w*pieceElems+(m+1)/2], true)
	if err != nil {
		return nil, fmt.Errorf("exponent codes: %w", err)
	}
	var planes [4][]byte
	for j := range w - 1 {
		if planes[j], src, err = decodePiece(src, sp[j*pieceElems:j*pieceElems+m], true); err != nil {
			return nil, fmt.Errorf("exponent row plane %d: %w", j, err)
		}
	}
	joinExp(out, planes[:w-1], pairs, &table, m)
	for pos := 0; len(escapes) > 0; pos++ {
		d, n := binary.Uvarint(escapes)
		pos += int(d)
		e := escapes[n]
		escapes = escapes[n+1:]
		hi, lo := &out[pos*w+w-1], &out[pos*w+w-2]
		*hi = *hi&0x80 | e>>1
		*lo = *lo&0x7f | e<<7
	}
	return src, nil
}

// joinExpGeneric is joinExp in Go: it interleaves m elements of w bytes
// (w-1 = len(planes): planes 0..w-3 as they are, then R) with the
// exponents the code pairs give, through table.
func joinExpGeneric(out []byte, planes [][]byte, pairs []byte, table *[16]byte, m int) {
	w := len(planes) + 1
	r := planes[w-2][:m]
	for i := range m {
		e := table[pairs[i/2]>>(4*(i&1))&15]
		x := r[i]
		o := out[i*w : i*w+w]
		for j := range w - 2 {
			o[j] = planes[j][i]
		}
		o[w-2] = e<<7 | x&0x7f
		o[w-1] = x&0x80 | e>>1
	}
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
