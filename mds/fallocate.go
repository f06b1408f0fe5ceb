package mds

import (
	"context"
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Linux fallocate(2) mode bits (linux/falloc.h).
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

// Fallocate punches a hole in a file, or zeroes a range of it, on its
// extent map (mdspb.FallocateRequest says which modes and how). A hole is
// the absence of entries: it reads as zeros, and the extents no entry
// names any more are queued for GC in the same transaction.
func (s *Server) handleFallocate(ctx context.Context, req *mdspb.FallocateRequest) (_ *mdspb.AttrReply, err error) {
	mode, off, length := req.GetMode(), req.GetOffset(), req.GetLength()
	switch mode {
	case fallocPunchHole | fallocKeepSize, fallocZeroRange, fallocZeroRange | fallocKeepSize:
	case fallocPunchHole:
		return nil, fmt.Errorf("fallocate: FALLOC_FL_PUNCH_HOLE needs FALLOC_FL_KEEP_SIZE: %w", errs.ErrNotSupported)
	default:
		return nil, fmt.Errorf("fallocate mode %#x: %w", mode, errs.ErrNotSupported)
	}
	if length == 0 {
		return nil, fmt.Errorf("fallocate of 0 bytes: %w", errs.ErrInvalid)
	}
	if off > maxFileSize || length > maxFileSize-off {
		return nil, fmt.Errorf("fallocate of %d+%d: %w", off, length, errs.ErrTooLarge)
	}
	cl := s.callerOf(ctx)
	var out *mdspb.AttrReply
	err = s.commit(ctx, func(t *txn) error {
		n, err := t.fileData(cl, req.GetIno(), mayWrite, "fallocate")
		if err != nil {
			return err
		}
		end := off + length
		if err := t.punch(n.Attr.Ino, off, end); err != nil {
			return err
		}
		if mode&fallocKeepSize == 0 {
			n.Attr.Size = max(n.Attr.Size, end)
		}
		t.dataChanged(n, req.GetMtimeNs())
		out = attrReply(n)
		return t.setReply(out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
