package ost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/errs"
)

// CreateChunk serves datanet's OpCreate on the local endpoint: a chunk
// written by a client on this host straight into a temporary file of the
// store (datanet's localwrite.go), after the same capability check as a
// write.
func (h dataHandler) CreateChunk(ctx context.Context, req datanet.Request) (datanet.PendingChunk, error) {
	c, err := checkChunkID(req.Extent, req.Index)
	if err != nil {
		return nil, err
	}
	if err := h.s.checkToken(req.Cap, c.extent, capability.Write); err != nil {
		return nil, err
	}
	if req.Length > MaxChunkSize {
		return nil, fmt.Errorf("ost: write chunk %s: %d bytes, over %d: %w", c, req.Length, MaxChunkSize, errs.ErrTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := h.s.st.createPending(c, int64(req.Length), req.Flags&datanet.FlagDirect != 0)
	if err != nil {
		return nil, err
	}
	p.created = func() { h.s.m.writeBytes.Add(float64(req.Length)) }
	return p, nil
}

// pendingChunk is a chunk a local client is writing into a temp file.
type pendingChunk struct {
	st      *store
	c       chunkID
	path    string // the temp file
	f       *os.File
	n       int64
	created func() // counts a new chunk
}

// createPending reserves n bytes for chunk c and creates the temp file a
// local client writes them to, with O_DIRECT when direct and the store
// writes with it.
func (st *store) createPending(c chunkID, n int64, direct bool) (*pendingChunk, error) {
	if !st.raw {
		return nil, fmt.Errorf("ost: write chunk %s by file: the store is not on the OS's file system: %w", c, errs.ErrNotSupported)
	}
	if err := st.reserve(n); err != nil {
		return nil, diskErr("write", c, err)
	}
	direct = direct && st.directWrites.Load() && n%directAlign == 0
	f, path, err := st.newTemp(&direct)
	if err != nil {
		st.reserved.Add(-n)
		return nil, diskErr("write", c, err)
	}
	return &pendingChunk{st: st, c: c, path: path, f: f.(osFile).File, n: n}, nil
}

func (p *pendingChunk) File() *os.File    { return p.f }
func (p *pendingChunk) BlockSize() uint32 { return uint32(p.st.blockSize) }

// Abort removes the temp file and releases the reservation.
func (p *pendingChunk) Abort() {
	p.f.Close()
	p.st.fs.Remove(p.path)
	p.st.reserved.Add(-p.n)
}

// Commit makes the temp file chunk c, as store.write does with bytes
// received: durable (fdatasync), its sidecar of table (the client's
// checksums of what it wrote, checked against the file's size), renamed
// into place. A chunk that exists already must have the same bytes.
func (p *pendingChunk) Commit(ctx context.Context, table []byte) (err error) {
	st, c := p.st, p.c
	placed := false
	defer func() {
		if !placed {
			p.f.Close()
			st.fs.Remove(p.path)
		}
		st.reserved.Add(-p.n)
	}()
	tab, err := checksum.Decode(table)
	if err != nil {
		return fmt.Errorf("ost: write chunk %s by file: checksum table: %w", c, err)
	}
	fi, err := p.f.Stat()
	if err != nil {
		return diskErr("write", c, err)
	}
	if tab.Length != uint64(p.n) || fi.Size() != p.n {
		return fmt.Errorf("ost: write chunk %s by file: %d bytes written and %d checksummed, want %d: %w", c, fi.Size(), tab.Length, p.n, errs.ErrInvalid)
	}
	if err := fdatasync(p.f); err != nil {
		return diskErr("write", c, err)
	}
	if err := p.f.Close(); err != nil {
		return diskErr("write", c, err)
	}
	mu := st.stripe(c)
	mu.Lock()
	defer mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if logged, ok := st.clog.get(c); ok {
		return p.sameAs(logged)
	}
	path := st.dataPath(c)
	switch fi, err := st.lstat(path); {
	case err == nil:
		data, rerr := os.ReadFile(p.path)
		if rerr != nil {
			return diskErr("compare", c, rerr)
		}
		return st.sameChunk(c, path, fi, data)
	case !errors.Is(err, fs.ErrNotExist):
		return diskErr("write", c, err)
	}
	placed, err = st.placeFiles(c, tab, p.path, true)
	if placed {
		st.used.Add(p.n)
		st.chunks.Add(1)
		p.created()
	}
	return err
}

// sameAs compares the temp file with the bytes of the chunk in the log.
func (p *pendingChunk) sameAs(logged []byte) error {
	f, err := os.Open(p.path)
	if err != nil {
		return diskErr("compare", p.c, err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return diskErr("compare", p.c, err)
	}
	if !bytes.Equal(data, logged) {
		return fmt.Errorf("ost: write chunk %s: stored with different bytes: %w", p.c, errs.ErrExists)
	}
	return nil
}
