package ost

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"syscall"

	"github.com/shoalfs/shoal/internal/errs"
)

// SidecarBlock is CorruptError.Block when the checksum sidecar itself is bad
// (missing, unreadable, failing its own CRC, or not matching the data file's
// length) rather than one data block.
const SidecarBlock = -1

// CorruptError reports a chunk whose bytes or checksums are damaged. It
// wraps errs.ErrCorrupt; across gRPC only the sentinel and the message
// survive.
type CorruptError struct {
	Extent uint64
	Index  uint32
	Block  int    // the bad block, or SidecarBlock
	Detail string // what was found
}

func (e *CorruptError) Error() string {
	where := fmt.Sprintf("block %d", e.Block)
	if e.Block == SidecarBlock {
		where = "checksum sidecar"
	}
	return fmt.Sprintf("ost: chunk %s %s: %s: %v",
		chunkID{e.Extent, e.Index}, where, e.Detail, errs.ErrCorrupt)
}

func (e *CorruptError) Unwrap() error { return errs.ErrCorrupt }

func corruptErr(c chunkID, block int, format string, args ...any) *CorruptError {
	return &CorruptError{Extent: c.extent, Index: c.index, Block: block, Detail: fmt.Sprintf(format, args...)}
}

// diskErr wraps an error from the file system with op and chunk, adding the
// sentinel it stands for: ENOSPC and EDQUOT are errs.ErrNoSpace, a missing
// file errs.ErrNotFound. Other errors keep only their own chain.
func diskErr(op string, c chunkID, err error) error {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("ost: %s chunk %s: %w (%w)", op, c, errs.ErrNoSpace, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("ost: %s chunk %s: %w", op, c, errs.ErrNotFound)
	}
	return fmt.Errorf("ost: %s chunk %s: %w", op, c, err)
}

// readErr classifies an error from reading a chunk's bytes: a short file or
// a media error (EIO) makes the chunk unreadable, so it is reported as
// corrupt and the client reconstructs it from the other chunks.
func readErr(c chunkID, block int, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EIO) {
		return corruptErr(c, block, "read: %v", err)
	}
	return diskErr("read", c, err)
}
