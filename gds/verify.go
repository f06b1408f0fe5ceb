package gds

import (
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/errs"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// loadTable reads and decodes the checksum sidecar of the chunk file at
// path, whose data file is size bytes (docs/ost-format.md). It refuses a
// sidecar larger than the largest valid one for size, and one that does
// not cover exactly size bytes.
func loadTable(path string, size int64) (checksum.Table, error) {
	f, err := os.Open(path + ".crc")
	if err != nil {
		return checksum.Table{}, fmt.Errorf("gds: checksum sidecar of %s: %v: %w", path, err, errs.ErrCorrupt)
	}
	defer f.Close()
	limit := int64(checksum.EncodedSize(uint64(size), checksum.MinBlockSize))
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return checksum.Table{}, fmt.Errorf("gds: checksum sidecar of %s: %v: %w", path, err, errs.ErrCorrupt)
	}
	if int64(len(b)) > limit {
		return checksum.Table{}, fmt.Errorf("gds: checksum sidecar of %s is too large for %d bytes: %w", path, size, errs.ErrCorrupt)
	}
	t, err := checksum.Decode(b)
	if err != nil {
		return checksum.Table{}, fmt.Errorf("gds: %s: %w", path, err)
	}
	if int64(t.Length) != size {
		return checksum.Table{}, fmt.Errorf("gds: checksum sidecar of %s covers %d bytes, the file has %d: %w", path, t.Length, size, errs.ErrCorrupt)
	}
	return t, nil
}

// verifyRange checks data, the chunk bytes [co, co+len(data)), against
// the table. Blocks only partly inside the range are completed with bytes
// read from f (at most one block before and one after), so that every
// block's CRC covers the bytes actually delivered plus the rest of the
// block as stored. It returns a *checksum.MismatchError (wrapping
// errs.ErrCorrupt) for the first bad block.
func verifyRange(t checksum.Table, co int64, data []byte, f io.ReaderAt) error {
	n := int64(len(data))
	if n == 0 {
		return nil
	}
	if co < 0 || co+n > int64(t.Length) {
		return fmt.Errorf("gds: range [%d,+%d) outside %d checksummed bytes: %w", co, n, t.Length, errs.ErrCorrupt)
	}
	bs := int64(t.BlockSize)
	end := co + n
	for b := co / bs; b*bs < end; b++ {
		bStart, bEnd := b*bs, min((b+1)*bs, int64(t.Length))
		var crc uint32
		if bStart < co {
			head := make([]byte, co-bStart)
			if err := readFull(f, head, bStart); err != nil {
				return err
			}
			crc = crc32.Update(crc, castagnoli, head)
		}
		crc = crc32.Update(crc, castagnoli, data[max(bStart, co)-co:min(bEnd, end)-co])
		if bEnd > end {
			tail := make([]byte, bEnd-end)
			if err := readFull(f, tail, end); err != nil {
				return err
			}
			crc = crc32.Update(crc, castagnoli, tail)
		}
		if crc != t.Sums[b] {
			return &checksum.MismatchError{Block: int(b), Want: t.Sums[b], Got: crc}
		}
	}
	return nil
}

func readFull(f io.ReaderAt, p []byte, off int64) error {
	m, err := f.ReadAt(p, off)
	if m == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("gds: read %d bytes at %d: %v: %w", len(p), off, err, errs.ErrCorrupt)
}
