package compress

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/shoalfs/shoal/internal/errs"
)

// Index describes the stored bytes of a compressed extent.
//
// Its encoding (Marshal, ParseIndex), kept in the extent's metadata:
//
//	byte     version (1)
//	byte     codec (1 s2, 2 zstd)
//	byte     log2 of the block size (16..24)
//	uvarint  logical length (1..2^32)
//	uvarint  number of blocks: ceil(logical / block size)
//	per block:
//	  uvarint  stored length
//	  byte     flags: bits 0-3 plane width (0, 2, 4, 8), bits 4-6 skip
//	           (bytes before the first element, < width), bit 7 raw
//	           when the rest is 0, else plane block format 2 (planes.go)
//
// A raw block is stored as it is: its stored length is its logical
// length, and it has no planes. An encoded block is shorter than its
// logical length (Encode keeps a block raw otherwise). Blocks lie back to
// back in the stored bytes in order; their stored lengths add up to the
// extent's stored length.
type Index struct {
	Codec     Codec
	BlockSize int64
	Logical   int64 // file bytes the extent holds
	Stored    int64 // bytes stored: the sum of the blocks' lengths
	Blocks    []Block
}

// Block is one block of an Index.
type Block struct {
	Off, Len int64 // where the block lies in the stored bytes
	Width    uint8 // byte-plane width: 0 or 2, 4, 8
	Skip     uint8 // bytes before the first element boundary, < Width
	Raw      bool  // stored as is
	Planes2  bool  // plane block format 2 (planes.go); Width > 1
}

const (
	indexVersion = 1
	flagRaw      = 0x80
	// MaxIndexLen bounds an encoded index: 3 header bytes, two varints,
	// and at most 11 bytes per block.
	MaxIndexLen = 3 + 2*binary.MaxVarintLen64 + (MaxLogical/MinBlockSize)*(binary.MaxVarintLen32+1)
)

// Marshal encodes x.
func (x *Index) Marshal() []byte {
	b := make([]byte, 0, 3+2*binary.MaxVarintLen64+len(x.Blocks)*4)
	b = append(b, indexVersion, byte(x.Codec), byte(bits.TrailingZeros64(uint64(x.BlockSize))))
	b = binary.AppendUvarint(b, uint64(x.Logical))
	b = binary.AppendUvarint(b, uint64(len(x.Blocks)))
	for _, k := range x.Blocks {
		b = binary.AppendUvarint(b, uint64(k.Len))
		f := k.Width&0x0f | (k.Skip&0x07)<<4
		if k.Planes2 {
			f |= flagRaw
		}
		if k.Raw {
			f = flagRaw
		}
		b = append(b, f)
	}
	return b
}

func corrupt(format string, a ...any) error {
	return fmt.Errorf("compress: "+format+": %w", append(a, errs.ErrCorrupt)...)
}

// ParseIndex decodes an index and checks it against the extent's stored
// and logical lengths as its metadata record gives them. Nothing is
// allocated before the sizes are checked.
func ParseIndex(b []byte, stored, logical int64) (*Index, error) {
	if len(b) < 3 {
		return nil, corrupt("index of %d bytes", len(b))
	}
	if len(b) > MaxIndexLen {
		return nil, corrupt("index of %d bytes, over %d", len(b), MaxIndexLen)
	}
	if b[0] != indexVersion {
		return nil, corrupt("index version %d", b[0])
	}
	x := &Index{Codec: Codec(b[1])}
	if x.Codec != S2 && x.Codec != Zstd {
		return nil, corrupt("index codec %d", b[1])
	}
	if b[2] < 16 || b[2] > 24 {
		return nil, corrupt("index block size 2^%d", b[2])
	}
	x.BlockSize = 1 << b[2]
	p := b[3:]
	uv := func(what string) (uint64, error) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, corrupt("index: bad varint for %s", what)
		}
		p = p[n:]
		return v, nil
	}
	l, err := uv("logical length")
	if err != nil {
		return nil, err
	}
	if l == 0 || l > MaxLogical {
		return nil, corrupt("index: logical length %d", l)
	}
	if int64(l) != logical {
		return nil, corrupt("index says %d logical bytes, the extent %d", l, logical)
	}
	if stored <= 0 || stored > logical {
		return nil, corrupt("extent of %d logical bytes stores %d", logical, stored)
	}
	x.Logical = int64(l)
	nb, err := uv("block count")
	if err != nil {
		return nil, err
	}
	want := (l + uint64(x.BlockSize) - 1) / uint64(x.BlockSize)
	if nb != want {
		return nil, corrupt("index has %d blocks for %d bytes in blocks of %d", nb, l, x.BlockSize)
	}
	// Each block takes at least two bytes: the count is bounded by the
	// index's length before the slice is made.
	if nb > uint64(len(p)/2) {
		return nil, corrupt("index of %d bytes cannot hold %d blocks", len(b), nb)
	}
	x.Blocks = make([]Block, nb)
	var off int64
	for i := range x.Blocks {
		n, err := uv("block length")
		if err != nil {
			return nil, err
		}
		if len(p) == 0 {
			return nil, corrupt("index: block %d has no flags", i)
		}
		f := p[0]
		p = p[1:]
		blen := x.blockLen(i)
		k := Block{Off: off, Len: int64(n), Raw: f == flagRaw, Planes2: f&flagRaw != 0 && f != flagRaw, Width: f & 0x0f, Skip: f >> 4 & 0x07}
		switch {
		case k.Raw && k.Len != blen:
			return nil, corrupt("index: raw block %d of %d bytes stores %d (flags %#x)", i, blen, k.Len, f)
		case !k.Raw && (k.Len == 0 || k.Len >= blen):
			return nil, corrupt("index: block %d of %d bytes encoded in %d", i, blen, k.Len)
		case !k.Raw && k.Width != 0 && k.Width != 2 && k.Width != 4 && k.Width != 8:
			return nil, corrupt("index: block %d plane width %d", i, k.Width)
		case k.Planes2 && k.Width == 0:
			return nil, corrupt("index: block %d flags %#x: format 2 without planes", i, f)
		case !k.Raw && k.Skip != 0 && k.Skip >= k.Width:
			return nil, corrupt("index: block %d skip %d for width %d", i, k.Skip, k.Width)
		case k.Len > stored-off:
			return nil, corrupt("index: block %d at %d+%d beyond %d stored bytes", i, off, k.Len, stored)
		}
		x.Blocks[i] = k
		off += k.Len
	}
	if len(p) != 0 {
		return nil, corrupt("index: %d bytes after the last block", len(p))
	}
	if off != stored {
		return nil, corrupt("index blocks store %d bytes, the extent %d", off, stored)
	}
	x.Stored = stored
	return x, nil
}

// blockLen is the logical length of block i.
func (x *Index) blockLen(i int) int64 {
	return min(x.BlockSize, x.Logical-int64(i)*x.BlockSize)
}

// BlockLen is the logical length of block i.
func (x *Index) BlockLen(i int) int64 { return x.blockLen(i) }

// BlockRange returns the blocks [b0, b1) that hold logical bytes
// [off, off+n) (n > 0, within the extent).
func (x *Index) BlockRange(off, n int64) (b0, b1 int, err error) {
	if off < 0 || n <= 0 || off > x.Logical || n > x.Logical-off {
		return 0, 0, fmt.Errorf("compress: range %d+%d outside extent of %d bytes: %w", off, n, x.Logical, errs.ErrInvalid)
	}
	return int(off / x.BlockSize), int((off+n-1)/x.BlockSize) + 1, nil
}

// StoredRange returns where blocks [b0, b1) lie in the stored bytes.
func (x *Index) StoredRange(b0, b1 int) (off, n int64) {
	off = x.Blocks[b0].Off
	last := x.Blocks[b1-1]
	return off, last.Off + last.Len - off
}

// Ratio is stored / logical bytes.
func (x *Index) Ratio() float64 { return float64(x.Stored) / float64(x.Logical) }

// StoredOf estimates the stored bytes of logical range [off, off+n): each
// block counts in proportion to the part of it inside the range.
func (x *Index) StoredOf(off, n int64) float64 {
	b0, b1, err := x.BlockRange(off, n)
	if err != nil {
		return 0
	}
	var s float64
	for b := b0; b < b1; b++ {
		bs := int64(b) * x.BlockSize
		be := bs + x.blockLen(b)
		in := min(be, off+n) - max(bs, off)
		s += float64(x.Blocks[b].Len) * float64(in) / float64(be-bs)
	}
	return s
}
