package datanet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/klauspost/compress/s2"

	"github.com/shoalfs/shoal/internal/errs"
)

// Wire compression (docs/compression.md, "Wire compression"): a payload
// sent compressed is an s2 frame, an s2 block of the payload's bytes
// followed by the CRC-32C (Castagnoli) of those bytes, little endian. The
// CRC makes a frame that decodes, but to other bytes, fail as surely as
// one that does not decode: the s2 block format carries no checksum of
// its own.

// crcSize is the length of a frame's CRC-32C.
const crcSize = 4

// MinCompress is the smallest payload a sender tries to compress: below
// it the header and the frame's overhead eat what s2 saves.
const MinCompress = 2048

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptPayload is the error of a compressed payload that does not
// decode to the length and CRC-32C it claims. It is the transfer that
// failed, not the chunk (which the OST checked against its own checksums),
// so errors of it also wrap errs.ErrUnavailable, as a failed connection
// is: a client tries again, or reads from parity, and does not report the
// chunk as corrupt.
var ErrCorruptPayload = errors.New("datanet: corrupt compressed payload")

// maxFrameLen is the largest frame of n bytes: the buffer encodeFrame
// needs.
func maxFrameLen(n int) int { return s2.MaxEncodedLen(n) + crcSize }

// worthIt reports whether a frame of f bytes is worth sending for n bytes
// of payload: under 97% of them (n - n/32 is 96.9%).
func worthIt(f, n int) bool { return f < n-n/32 }

// encodeFrame compresses src into dst (at least maxFrameLen(len(src))
// bytes) and returns the frame, or nil when the frame would not be under
// 97% of src (random or already compressed data: s2 notices quickly and
// emits its input nearly as is).
func encodeFrame(dst, src []byte) []byte {
	if len(src) < MinCompress {
		return nil
	}
	blk := s2.Encode(dst[:cap(dst)], src)
	n := len(blk)
	if !worthIt(n+crcSize, len(src)) {
		return nil
	}
	if &blk[0] != &dst[:1][0] {
		// dst was too small and s2 allocated: a caller's bug, but the
		// frame is still right.
		dst = append(blk, 0, 0, 0, 0)[:n]
	}
	f := dst[:n+crcSize]
	binary.LittleEndian.PutUint32(f[n:], crc32.Checksum(src, castagnoli))
	return f
}

// encodeFrameOf is encodeFrame of the concatenation of data (n bytes),
// which it gathers into a buffer of bufs first when it is in more than one
// piece. The caller gives the frame back with bufs.Put when it is sent;
// nil: not worth it.
func encodeFrameOf(bufs *BufPool, data [][]byte, n int) []byte {
	if n < MinCompress || n > MaxLength {
		return nil
	}
	src := data[0]
	var gathered []byte
	if len(data) > 1 || len(src) != n {
		gathered = bufs.Get(n)
		defer bufs.Put(gathered)
		src = gathered[:0]
		for _, b := range data {
			src = append(src, b...)
		}
	}
	dst := bufs.Get(maxFrameLen(n))
	f := encodeFrame(dst, src)
	if f == nil {
		bufs.Put(dst)
	}
	return f
}

// decodeFrame decodes frame into dst, whose slices' lengths add up to
// the length the frame must decode to, and checks its CRC-32C. A single
// destination slice is decoded into in place; several are decoded into a
// buffer of bufs, then copied. Its errors wrap ErrCorruptPayload and
// errs.ErrUnavailable.
func decodeFrame(dst [][]byte, frame []byte, bufs *BufPool) error {
	want := 0
	for _, b := range dst {
		want += len(b)
	}
	if len(frame) <= crcSize {
		return fmt.Errorf("%w: frame of %d bytes (%w)", ErrCorruptPayload, len(frame), errs.ErrUnavailable)
	}
	blk, sum := frame[:len(frame)-crcSize], binary.LittleEndian.Uint32(frame[len(frame)-crcSize:])
	n, err := s2.DecodedLen(blk)
	if err != nil {
		return fmt.Errorf("%w: %v (%w)", ErrCorruptPayload, err, errs.ErrUnavailable)
	}
	if n != want {
		return fmt.Errorf("%w: decodes to %d bytes, want %d (%w)", ErrCorruptPayload, n, want, errs.ErrUnavailable)
	}
	if n == 0 {
		return fmt.Errorf("%w: empty frame (%w)", ErrCorruptPayload, errs.ErrUnavailable)
	}
	out := dst[0]
	if len(dst) > 1 {
		out = bufs.Get(n)
		defer bufs.Put(out)
	}
	got, err := s2.Decode(out, blk)
	if err != nil {
		return fmt.Errorf("%w: %v (%w)", ErrCorruptPayload, err, errs.ErrUnavailable)
	}
	if len(got) != n || &got[0] != &out[0] {
		return fmt.Errorf("%w: decoded %d bytes elsewhere (%w)", ErrCorruptPayload, len(got), errs.ErrUnavailable)
	}
	if c := crc32.Checksum(got, castagnoli); c != sum {
		return fmt.Errorf("%w: CRC-32C %08x, frame says %08x (%w)", ErrCorruptPayload, c, sum, errs.ErrUnavailable)
	}
	if len(dst) > 1 {
		for _, b := range dst {
			got = got[copy(b, got):]
		}
	}
	return nil
}
