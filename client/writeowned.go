package client

import (
	"context"
	"fmt"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

// WriteAtStable is WriteAt for a caller that keeps p's bytes unchanged
// until the file's next Fsync, Flush or Close returns (a checkpoint's
// tensors during a save, a snapshot it owns): whole extents of p are
// uploaded from p itself instead of being copied into the write buffer
// first, with the same pipelining (up to Options.UploadsPerFile extents
// in flight) and the same read-your-writes. Bytes already in the write
// buffer are uploaded first as an extent of their own (however short),
// so that p's extents start at off; the tail of p shorter than an
// extent is buffered as WriteAt buffers it. Changing p before that
// return may store either bytes, or a mix, and reads may see the
// changed bytes.
func (f *File) WriteAtStable(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 || off > MaxFileSize-int64(len(p)) {
		return 0, fmt.Errorf("write at %d+%d: %w", off, len(p), errs.ErrTooLarge)
	}
	total := len(p)
	for int64(len(p)) >= f.extMax {
		if ok, err := f.uploadStable(p[:f.extMax], off); err != nil {
			return total - len(p), err
		} else if !ok {
			break // the buffer holds bytes again: write the rest through it
		}
		p, off = p[f.extMax:], off+f.extMax
	}
	if len(p) > 0 {
		if _, err := f.WriteAt(ctx, p, off); err != nil {
			return total - len(p), err
		}
	}
	return total, nil
}

// uploadStable starts the upload of one extent's worth of the caller's
// bytes p at off, after the write buffer's bytes, when the buffer is
// still empty once there is room in flight (ok false otherwise: another
// writer filled it meanwhile).
func (f *File) uploadStable(p []byte, off int64) (ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false, fmt.Errorf("write to closed file: %w", errs.ErrInvalid)
	}
	if f.err != nil {
		err := f.err
		f.err = nil
		return false, err
	}
	// Buffered bytes go first, as an extent of their own.
	for len(f.dirty) > 0 {
		f.cutLocked(cutAll)
	}
	for len(f.inflight) >= f.c.opts.UploadsPerFile {
		f.cond.Wait()
	}
	if len(f.dirty) > 0 {
		return false, nil
	}
	f.startUploadLocked(off, p[:len(p):len(p)], nil)
	f.size = max(f.size, off+int64(len(p)))
	f.wend = off + int64(len(p))
	f.writeNs.Store(time.Now().UnixNano())
	return true, nil
}
