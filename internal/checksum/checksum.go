// Package checksum computes, encodes and decodes the per-block CRC32C table
// that an OST keeps beside each chunk (the ".crc" sidecar).
//
// Encoded form, all integers little endian:
//
//	offset  size  field
//	0       4     magic "SHCK"
//	4       2     format version (1)
//	6       2     reserved, 0
//	8       4     block size in bytes
//	12      8     data length in bytes
//	20      4*n   CRC32C (Castagnoli) of each block, n = ceil(length/blocksize);
//	              the last block may be short
//	20+4n   4     CRC32C of bytes [0, 20+4n): the header and the table
//
// Decode checks every field and the trailing CRC before it allocates, and it
// accepts only an input whose size is exactly what the header implies, so a
// corrupt length field can never make it allocate more than its input.
package checksum

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/shoalfs/shoal/internal/errs"
)

const (
	// Magic opens every encoded table.
	Magic = "SHCK"
	// Version is the format version Encode writes and Decode accepts.
	Version = 1
	// HeaderSize is the size of the fixed header before the CRC table.
	HeaderSize = 20
	// TrailerSize is the size of the CRC that closes the encoding.
	TrailerSize = 4

	// MinBlockSize and MaxBlockSize bound the block size.
	MinBlockSize = 512
	MaxBlockSize = 16 << 20
	// MaxBlocks bounds the number of blocks of one table (a sanity limit:
	// a 64 MiB chunk has 1024 blocks of 64 KiB).
	MaxBlocks = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sum returns the CRC32C (Castagnoli) of p.
func Sum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// Table is the block checksums of one byte range starting at offset 0.
type Table struct {
	BlockSize uint32   // bytes per block; the last block may be short
	Length    uint64   // bytes covered
	Sums      []uint32 // CRC32C of each block, len = NumBlocks(Length, BlockSize)
}

// NumBlocks is the number of blocks that cover length bytes.
func NumBlocks(length uint64, blockSize uint32) uint64 {
	if blockSize == 0 {
		return 0
	}
	n := length / uint64(blockSize)
	if length%uint64(blockSize) != 0 {
		n++
	}
	return n
}

// EncodedSize is the size of the encoding of a table for length bytes in
// blocks of blockSize.
func EncodedSize(length uint64, blockSize uint32) uint64 {
	return HeaderSize + 4*NumBlocks(length, blockSize) + TrailerSize
}

// CheckBlockSize reports whether blockSize is one this package accepts.
func CheckBlockSize(blockSize int) error {
	if blockSize < MinBlockSize || blockSize > MaxBlockSize {
		return fmt.Errorf("checksum: block size %d outside [%d, %d]: %w",
			blockSize, MinBlockSize, MaxBlockSize, errs.ErrInvalid)
	}
	return nil
}

// Compute returns the table of data in blocks of blockSize.
func Compute(data []byte, blockSize int) (Table, error) {
	if err := CheckBlockSize(blockSize); err != nil {
		return Table{}, err
	}
	n := NumBlocks(uint64(len(data)), uint32(blockSize))
	if n > MaxBlocks {
		return Table{}, fmt.Errorf("checksum: %d bytes make %d blocks of %d, over %d: %w",
			len(data), n, blockSize, MaxBlocks, errs.ErrTooLarge)
	}
	t := Table{BlockSize: uint32(blockSize), Length: uint64(len(data)), Sums: make([]uint32, n)}
	for i := range t.Sums {
		start, end := t.BlockRange(i)
		t.Sums[i] = Sum(data[start:end])
	}
	return t, nil
}

// BlockRange is the byte range [start, end) of block i. The caller keeps i
// in [0, len(t.Sums)).
func (t Table) BlockRange(i int) (start, end uint64) {
	start = uint64(i) * uint64(t.BlockSize)
	end = min(start+uint64(t.BlockSize), t.Length)
	return start, end
}

// MismatchError reports a block whose bytes do not match its checksum. It
// wraps errs.ErrCorrupt.
type MismatchError struct {
	Block     int
	Want, Got uint32
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("block %d: crc32c %08x, want %08x: %v", e.Block, e.Got, e.Want, errs.ErrCorrupt)
}

func (e *MismatchError) Unwrap() error { return errs.ErrCorrupt }

// Verify checks p, the whole of block i, against the table. It returns a
// *MismatchError on a mismatch, or an errs.ErrInvalid error when i is out of
// range or p has the wrong length for block i.
func (t Table) Verify(i int, p []byte) error {
	if i < 0 || i >= len(t.Sums) {
		return fmt.Errorf("checksum: block %d of %d: %w", i, len(t.Sums), errs.ErrInvalid)
	}
	start, end := t.BlockRange(i)
	if uint64(len(p)) != end-start {
		return fmt.Errorf("checksum: block %d is %d bytes, got %d: %w", i, end-start, len(p), errs.ErrInvalid)
	}
	if got := Sum(p); got != t.Sums[i] {
		return &MismatchError{Block: i, Want: t.Sums[i], Got: got}
	}
	return nil
}

// AppendEncode appends the encoding of t to dst.
func (t Table) AppendEncode(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, Magic...)
	dst = binary.LittleEndian.AppendUint16(dst, Version)
	dst = binary.LittleEndian.AppendUint16(dst, 0)
	dst = binary.LittleEndian.AppendUint32(dst, t.BlockSize)
	dst = binary.LittleEndian.AppendUint64(dst, t.Length)
	for _, s := range t.Sums {
		dst = binary.LittleEndian.AppendUint32(dst, s)
	}
	return binary.LittleEndian.AppendUint32(dst, Sum(dst[start:]))
}

// Encode returns the encoding of t.
func (t Table) Encode() []byte {
	return t.AppendEncode(make([]byte, 0, HeaderSize+4*len(t.Sums)+TrailerSize))
}

// Decode parses an encoded table. Every error wraps errs.ErrCorrupt.
func Decode(b []byte) (Table, error) {
	if len(b) < HeaderSize+TrailerSize {
		return Table{}, corrupt("%d bytes, shorter than header and trailer", len(b))
	}
	if string(b[0:4]) != Magic {
		return Table{}, corrupt("bad magic %q", b[0:4])
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != Version {
		return Table{}, corrupt("unknown format version %d", v)
	}
	if r := binary.LittleEndian.Uint16(b[6:8]); r != 0 {
		return Table{}, corrupt("reserved field is %d", r)
	}
	bs := binary.LittleEndian.Uint32(b[8:12])
	if bs < MinBlockSize || bs > MaxBlockSize {
		return Table{}, corrupt("block size %d outside [%d, %d]", bs, MinBlockSize, MaxBlockSize)
	}
	length := binary.LittleEndian.Uint64(b[12:20])
	n := NumBlocks(length, bs)
	if n > MaxBlocks {
		return Table{}, corrupt("length %d makes %d blocks, over %d", length, n, MaxBlocks)
	}
	if want := HeaderSize + 4*n + TrailerSize; uint64(len(b)) != want {
		return Table{}, corrupt("%d bytes, want %d for length %d in blocks of %d", len(b), want, length, bs)
	}
	body := b[:len(b)-TrailerSize]
	if want, got := binary.LittleEndian.Uint32(b[len(body):]), Sum(body); want != got {
		return Table{}, corrupt("table crc32c %08x, want %08x", got, want)
	}
	t := Table{BlockSize: bs, Length: length, Sums: make([]uint32, n)}
	for i := range t.Sums {
		t.Sums[i] = binary.LittleEndian.Uint32(body[HeaderSize+4*i:])
	}
	return t, nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("checksum table: "+format+": %w", append(args, errs.ErrCorrupt)...)
}

// ReadError is a failed read of block Block in ReadVerified.
type ReadError struct {
	Block int
	Err   error
}

func (e *ReadError) Error() string { return fmt.Sprintf("block %d: read: %v", e.Block, e.Err) }
func (e *ReadError) Unwrap() error { return e.Err }

// ReadVerified fills dst with bytes [off, off+len(dst)) of r, whose blocks
// t describes, and verifies every block the range touches. Runs of whole
// blocks are read straight into dst, in one ReadAt per run of at most
// maxRun bytes (or one block), so that they are still in the CPU's cache
// when their checksums are computed; a partly wanted block at either end
// is read whole into a buffer from get (of exactly the block's length,
// Align-aligned where r is open with O_DIRECT) and given back with put.
//
// Errors: a *ReadError for a failed ReadAt (a short read is
// io.ErrUnexpectedEOF), a *MismatchError for a block that does not match
// its checksum, errs.ErrInvalid for a range past t.Length. On an error dst
// holds garbage.
func (t Table) ReadVerified(r io.ReaderAt, off uint64, dst []byte, maxRun uint64, get func(int) []byte, put func([]byte)) error {
	end := off + uint64(len(dst))
	if end < off || end > t.Length {
		return fmt.Errorf("checksum: range [%d, %d) outside %d bytes: %w", off, end, t.Length, errs.ErrInvalid)
	}
	bs := uint64(t.BlockSize)
	for pos := off; pos < end; {
		b := int(pos / bs)
		bstart, bend := t.BlockRange(b)
		if pos == bstart && bend <= end {
			last := b
			for last+1 < len(t.Sums) {
				_, e := t.BlockRange(last + 1)
				if e > end || e-pos > maxRun {
					break
				}
				last++
			}
			_, runEnd := t.BlockRange(last)
			run := dst[pos-off : runEnd-off]
			if err := readFull(r, run, pos); err != nil {
				return &ReadError{Block: b, Err: err}
			}
			for i := b; i <= last; i++ {
				s, e := t.BlockRange(i)
				if err := t.Verify(i, run[s-pos:e-pos]); err != nil {
					return err
				}
			}
			pos = runEnd
			continue
		}
		blk := get(int(bend - bstart))
		if err := readFull(r, blk, bstart); err != nil {
			put(blk)
			return &ReadError{Block: b, Err: err}
		}
		if err := t.Verify(b, blk); err != nil {
			put(blk)
			return err
		}
		stop := min(bend, end)
		copy(dst[pos-off:stop-off], blk[pos-bstart:stop-bstart])
		put(blk)
		pos = stop
	}
	return nil
}

// readFull is ReadAt of all of p at off, with a short read reported as
// io.ErrUnexpectedEOF.
func readFull(r io.ReaderAt, p []byte, off uint64) error {
	n, err := r.ReadAt(p, int64(off))
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
