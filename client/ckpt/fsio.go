package ckpt

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
)

// pieceSize is the largest single WriteAt or ReadAt of a shard: a
// client.File buffers whole writes, so a tensor of GiBs goes in pieces.
// 16 MiB is one full extent of the default layout (4 rows of RS 4+2 with
// 1 MiB cells).
const pieceSize = 16 << 20

// Modes of what the API creates.
const (
	dirMode  = 0o755
	fileMode = 0o644
)

// readDirPlus lists directory ino with attributes.
func (s *Store) readDirPlus(ctx context.Context, ino uint64) ([]client.DirEntry, error) {
	var all []client.DirEntry
	after := ""
	for {
		es, eof, err := s.c.ReadDirPlusPage(ctx, ino, after, 0)
		if err != nil {
			return nil, err
		}
		all = append(all, es...)
		if eof || len(es) == 0 {
			return all, nil
		}
		after = es[len(es)-1].Name
	}
}

// removeTree removes name from directory parent, with everything under
// it. A name that is already gone is not an error (another remover got
// there first).
func (s *Store) removeTree(ctx context.Context, parent uint64, name string) error {
	a, err := s.c.Lookup(ctx, parent, name)
	if errors.Is(err, errs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !client.IsDir(a) {
		return ignoreNotFound(s.c.UnlinkIn(ctx, parent, name))
	}
	es, err := s.c.ReadDirIno(ctx, a.Ino)
	if err != nil {
		return ignoreNotFound(err)
	}
	for _, e := range es {
		if err := s.removeTree(ctx, a.Ino, e.Name); err != nil {
			return err
		}
	}
	return ignoreNotFound(s.c.RmdirIn(ctx, parent, name))
}

func ignoreNotFound(err error) error {
	if errors.Is(err, errs.ErrNotFound) {
		return nil
	}
	return err
}

// trash renames name in dir to a new trash name (atomically: from then
// on it is neither a checkpoint nor a staging directory) and removes it.
// If the removal fails, the trash directory is left for GC.
func (s *Store) trash(ctx context.Context, dir uint64, name string) error {
	tn := trashName(name)
	if err := s.c.RenameIn(ctx, dir, name, dir, tn, client.RenameNoReplace); err != nil {
		return err
	}
	return s.removeTree(ctx, dir, tn)
}

// readSmallFile reads all of file ino, refusing more than limit bytes.
func (s *Store) readSmallFile(ctx context.Context, ino uint64, limit int64) ([]byte, error) {
	f, err := s.c.OpenIno(ctx, ino)
	if err != nil {
		return nil, err
	}
	defer f.Close(ctx)
	n := f.Size()
	if n > limit {
		return nil, fmt.Errorf("file of %d bytes (max %d): %w", n, limit, errs.ErrTooLarge)
	}
	b := make([]byte, n)
	if err := readFull(ctx, f, b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// writeNewFile creates name in parent (failing if it exists) with data,
// durably.
func (s *Store) writeNewFile(ctx context.Context, parent uint64, name string, data []byte) error {
	a, err := s.c.CreateIn(ctx, parent, name, client.CreateOptions{Mode: fileMode, Exclusive: true})
	if err != nil {
		return err
	}
	f, err := s.c.OpenIno(ctx, a.Ino)
	if err != nil {
		return err
	}
	err = writePieces(ctx, f, data, 0, nil)
	if cerr := f.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// writePieces writes p at off in pieces of at most pieceSize, calling
// each (if set) before every piece with its index.
func writePieces(ctx context.Context, f *client.File, p []byte, off int64, each func(i int) error) error {
	for i := 0; len(p) > 0; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if each != nil {
			if err := each(i); err != nil {
				return err
			}
		}
		n := min(len(p), pieceSize)
		// Every caller keeps p unchanged until it closes f: whole
		// extents go to the OSTs from p, not copied.
		if _, err := f.WriteAtStable(ctx, p[:n], off); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// readFull fills p from off with f.ReadAt, in pieces; a short file is an
// error.
func readFull(ctx context.Context, f *client.File, p []byte, off int64) error {
	return readFullWith(ctx, f.ReadAt, p, off)
}

// readFullWith is readFull with the File's read to use: ReadAt, or
// ReadAtUncached for bytes read once into their final buffer.
func readFullWith(ctx context.Context, read func(context.Context, []byte, int64) (int, error), p []byte, off int64) error {
	for len(p) > 0 {
		n := min(len(p), pieceSize)
		m, err := read(ctx, p[:n], off)
		if m < n {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("short read at %d: %d of %d bytes: %w", off, m, n, errs.ErrCorrupt)
			}
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// readerAt adapts a client.File to io.ReaderAt.
type readerAt struct {
	ctx context.Context
	f   *client.File
}

func (r readerAt) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(r.ctx, p, off) }
