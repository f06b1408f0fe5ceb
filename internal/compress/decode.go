package compress

import (
	"encoding/binary"
	"fmt"

	"github.com/klauspost/compress/s2"

	"github.com/shoalfs/shoal/internal/errs"
)

// DecodeBlock decodes block b of x from its stored bytes src (exactly
// x.Blocks[b].Len bytes) into dst (exactly x.BlockLen(b) bytes). A block
// that does not decode to exactly its logical length is ErrCorrupt.
func (x *Index) DecodeBlock(dst, src []byte, b int) error {
	if b < 0 || b >= len(x.Blocks) {
		return fmt.Errorf("compress: block %d of %d: %w", b, len(x.Blocks), errs.ErrInvalid)
	}
	k := x.Blocks[b]
	blen := x.blockLen(b)
	if int64(len(dst)) != blen || int64(len(src)) != k.Len {
		return fmt.Errorf("compress: block %d: buffers of %d and %d bytes for %d and %d: %w", b, len(dst), len(src), blen, k.Len, errs.ErrInvalid)
	}
	if k.Raw {
		copy(dst, src)
		return nil
	}
	// Format 2 plane blocks check their huff0 pieces instead.
	checked := k.Width <= 1 && x.Codec == S2 || k.Width > 1 && !k.Planes2
	var sum uint32
	if checked {
		if len(src) < 4 {
			return fmt.Errorf("compress: block %d of %d bytes: %w", b, len(src), errs.ErrCorrupt)
		}
		sum = binary.LittleEndian.Uint32(src[len(src)-4:])
		src = src[:len(src)-4]
	}
	var err error
	if k.Width > 1 {
		err = decodePlanes(dst, src, int(k.Width), int(k.Skip), k.Planes2)
	} else {
		err = decodeInto(dst, src, x.Codec)
	}
	if err != nil {
		return fmt.Errorf("compress: block %d: %w", b, err)
	}
	if checked && sum32(dst) != sum {
		return fmt.Errorf("compress: block %d: decoded bytes fail their check: %w", b, errs.ErrCorrupt)
	}
	return nil
}

// decodeInto decodes one encoded block into out, which it must fill
// exactly.
func decodeInto(out, src []byte, c Codec) error {
	switch c {
	case S2:
		n, err := s2.DecodedLen(src)
		if err != nil {
			return fmt.Errorf("s2: %v: %w", err, errs.ErrCorrupt)
		}
		if n != len(out) {
			return fmt.Errorf("s2 block of %d bytes, want %d: %w", n, len(out), errs.ErrCorrupt)
		}
		got, err := s2.Decode(out, src)
		if err != nil {
			return fmt.Errorf("s2: %v: %w", err, errs.ErrCorrupt)
		}
		if len(got) != len(out) || (len(got) > 0 && &got[0] != &out[0]) {
			return fmt.Errorf("s2 decoded %d bytes, want %d: %w", len(got), len(out), errs.ErrCorrupt)
		}
		return nil
	case Zstd:
		d, err := zstdDecoder()
		if err != nil {
			return err
		}
		// With the cap limit the decoder writes at most cap(out) bytes,
		// in place.
		got, err := d.DecodeAll(src, out[:0:len(out)])
		if err != nil {
			return fmt.Errorf("zstd: %v: %w", err, errs.ErrCorrupt)
		}
		if len(got) != len(out) || (len(got) > 0 && &got[0] != &out[0]) {
			return fmt.Errorf("zstd decoded %d bytes, want %d: %w", len(got), len(out), errs.ErrCorrupt)
		}
		return nil
	}
	return fmt.Errorf("codec %d: %w", c, errs.ErrCorrupt)
}

// Decode decodes logical bytes [off, off+len(dst)) of an extent from
// stored, the stored bytes of the blocks that hold them (as StoredRange
// gives them), block by block. It is the simple, sequential form of what
// the client does with a fetch and a decode per block in parallel.
func (x *Index) Decode(dst []byte, off int64, stored []byte) error {
	b0, b1, err := x.BlockRange(off, int64(len(dst)))
	if err != nil {
		return err
	}
	base, n := x.StoredRange(b0, b1)
	if int64(len(stored)) != n {
		return fmt.Errorf("compress: %d stored bytes for blocks [%d, %d) of %d: %w", len(stored), b0, b1, n, errs.ErrInvalid)
	}
	var tmp []byte
	for b := b0; b < b1; b++ {
		k := x.Blocks[b]
		src := stored[k.Off-base : k.Off-base+k.Len]
		bs := int64(b) * x.BlockSize
		blen := x.blockLen(b)
		s, e := max(bs, off), min(bs+blen, off+int64(len(dst)))
		if s == bs && e == bs+blen {
			if err := x.DecodeBlock(dst[s-off:e-off], src, b); err != nil {
				return err
			}
			continue
		}
		tmp = grow(tmp, int(blen))
		if err := x.DecodeBlock(tmp, src, b); err != nil {
			return err
		}
		copy(dst[s-off:e-off], tmp[s-bs:e-bs])
	}
	return nil
}
