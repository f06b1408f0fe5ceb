package fuse

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/client"
)

// openFile is the one client.File of an inode open in this mount, shared
// by all its handles.
type openFile struct {
	ino   uint64
	ready chan struct{} // closed when f and err are set
	f     *client.File  // set before ready is closed; nil when err is set
	err   error         // open failed; the entry is gone from the table

	// appendMu serialises O_APPEND writes of this mount, so that two
	// appenders never read the same size.
	appendMu sync.Mutex
	// locks remembers the POSIX lock owners of this mount on the file.
	locks fileLocks

	// cmu guards cache (cache.go).
	cmu   sync.Mutex
	cache fileCache
	// wrote is set by the first change through the mount: the cache is
	// dropped then, once.
	wrote atomic.Bool

	// Guarded by Mounted.mu.
	refs    int
	closing chan struct{} // non-nil once the last reference is gone; closed when f is closed
}

// fileHandle is the FUSE file handle of one open(2).
type fileHandle struct {
	of    *openFile
	flags uint32   // open flags
	pt    *os.File // the cache file of a passthrough open (cache.go); nil otherwise
}

// acquire returns the open file of ino with one more reference, opening it
// when this mount has no handle on it. A file being closed by its last
// Release is waited for, so that its buffered writes are committed before
// it is opened again.
func (m *Mounted) acquire(ctx context.Context, ino uint64) (*openFile, error) {
	return m.acquireAs(ctx, ino, false)
}

// acquireAs is acquire; with leased, a file this mount does not have open
// is opened under an inode lease (client.OpenInoLeased): for reading.
func (m *Mounted) acquireAs(ctx context.Context, ino uint64, leased bool) (*openFile, error) {
	for {
		m.mu.Lock()
		of := m.mu.files[ino]
		switch {
		case of == nil:
			of = &openFile{ino: ino, ready: make(chan struct{}), refs: 1}
			m.mu.files[ino] = of
			m.mu.Unlock()
			var f *client.File
			var err error
			if leased {
				f, err = m.c.OpenInoLeased(ctx, ino)
			} else {
				f, err = m.c.OpenIno(ctx, ino)
			}
			if err != nil {
				m.mu.Lock()
				if m.mu.files[ino] == of {
					delete(m.mu.files, ino)
				}
				m.mu.Unlock()
			}
			of.f, of.err = f, err
			m.openCache(of)
			close(of.ready)
			return of, err
		case of.closing != nil:
			closing := of.closing
			m.mu.Unlock()
			select {
			case <-closing:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		default:
			of.refs++
			m.mu.Unlock()
			select {
			case <-of.ready:
			case <-ctx.Done():
				m.release(ctx, of)
				return nil, ctx.Err()
			}
			if of.err != nil {
				// The opener removed the failed entry; nothing to close.
				return nil, of.err
			}
			return of, nil
		}
	}
}

// adopt is acquire for a File the caller has just opened (by a create):
// it becomes the mount's open file of its inode, or, when the mount
// already has one, is closed (it holds no writes) in favour of it.
func (m *Mounted) adopt(ctx context.Context, f *client.File) (*openFile, error) {
	ino := f.Ino()
	m.mu.Lock()
	if m.mu.files[ino] == nil {
		of := &openFile{ino: ino, ready: make(chan struct{}), refs: 1, f: f}
		close(of.ready)
		m.mu.files[ino] = of
		m.mu.Unlock()
		return of, nil
	}
	m.mu.Unlock()
	if err := f.Close(ctx); err != nil {
		m.log.Warn("close a second open of a created file", "ino", ino, "err", err)
	}
	return m.acquire(ctx, ino)
}

// pin returns the open file of ino with one more reference when this mount
// has it open, or nil. Callers that must act on the open file rather than
// on the MDS (truncate, fsync without a handle) use it and release it when
// done.
func (m *Mounted) pin(ctx context.Context, ino uint64) *openFile {
	m.mu.Lock()
	of := m.mu.files[ino]
	if of == nil || of.closing != nil {
		m.mu.Unlock()
		if of != nil {
			// Let the close finish, so that the MDS has its writes.
			select {
			case <-of.closing:
			case <-ctx.Done():
			}
		}
		return nil
	}
	of.refs++
	m.mu.Unlock()
	select {
	case <-of.ready:
	case <-ctx.Done():
	}
	select {
	case <-of.ready:
		if of.err == nil {
			return of
		}
		return nil
	default:
		m.release(ctx, of)
		return nil
	}
}

// release drops one reference to of; the last one closes the client File,
// which flushes its buffered writes.
func (m *Mounted) release(ctx context.Context, of *openFile) {
	m.mu.Lock()
	of.refs--
	if of.refs > 0 {
		m.mu.Unlock()
		return
	}
	of.closing = make(chan struct{})
	m.mu.Unlock()

	<-of.ready
	if of.f != nil {
		if err := of.f.Close(ctx); err != nil {
			// Release has no caller to tell: close(2) already got the
			// result of its FLUSH. This is a write lost since then.
			m.log.Warn("close file", "ino", of.ino, "err", err)
		}
	}
	m.closeCache(of)
	m.mu.Lock()
	if m.mu.files[of.ino] == of {
		delete(m.mu.files, of.ino)
	}
	m.mu.Unlock()
	close(of.closing)
}

// Open opens the regular file n.
func (n *node) Open(rctx context.Context, flags uint32) (fh gofs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	ctx := n.m.detach(rctx)
	ino := n.ino()
	// A read-only open may be answered under an inode lease, without
	// the MDS; any other needs the MDS to know the file is open (a shared
	// open file opened under a lease gets a handle now).
	readOnly := flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_TRUNC == 0
	of, err := n.m.acquireAs(ctx, ino, readOnly)
	if err != nil {
		return nil, 0, n.m.errno("open", ino, err)
	}
	if !readOnly {
		if err := of.f.EnsureHandle(ctx); err != nil {
			n.m.release(ctx, of)
			return nil, 0, n.m.errno("open", ino, err)
		}
	}
	// The kernel strips O_TRUNC from OPEN (go-fuse does not ask for
	// atomic O_TRUNC) and sends a SETATTR instead, but honour it if it
	// ever arrives.
	if flags&syscall.O_TRUNC != 0 && of.f.Size() > 0 {
		if err := of.f.Truncate(ctx, 0); err != nil {
			n.m.release(ctx, of)
			return nil, 0, n.m.errno("open", ino, err)
		}
	}
	n.opens.Add(1)
	return n.m.openHandle(rctx, ctx, of, flags), 0, 0
}

// handleOf returns the open file behind a FUSE file handle, or nil when f
// is not a file handle of this package.
func handleOf(f gofs.FileHandle) *fileHandle {
	switch h := f.(type) {
	case *fileHandle:
		return h
	case *ptHandle:
		return &h.fileHandle
	}
	return nil
}

// noteWrite drops the cached copy of of's file at its first change
// through the mount.
func (m *Mounted) noteWrite(of *openFile) {
	if m.o.Cache != nil && !of.wrote.Swap(true) {
		of.noteChanged()
		m.invalidateCache(of, of.ino)
	}
}

// Read reads from the shared client File; bytes written through this
// mount and not yet flushed are included.
func (n *node) Read(ctx context.Context, f gofs.FileHandle, dest []byte, off int64) (gofuse.ReadResult, syscall.Errno) {
	ctx = n.m.detach(ctx)
	h := handleOf(f)
	if h == nil {
		return nil, syscall.EBADF
	}
	if r, err := n.m.fillCached(ctx, h, len(dest), off); r != nil || err != nil {
		if err != nil {
			return nil, n.m.errno("read", n.ino(), err)
		}
		return r, 0
	}
	if r := n.m.readRef(ctx, h, len(dest), off); r != nil {
		return r, 0
	}
	nr, err := n.m.readCached(ctx, h, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, n.m.errno("read", n.ino(), err)
	}
	return gofuse.ReadResultData(dest[:nr]), 0
}

// Write buffers data in the shared client File. With O_APPEND the data
// goes at the end of the file as this mount sees it, whatever offset the
// kernel computed from its cached size.
func (n *node) Write(ctx context.Context, f gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	return n.Writev(ctx, f, [][]byte{data}, off)
}

// Writev is Write for data the kernel split into several buffers.
func (n *node) Writev(ctx context.Context, f gofs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	pageWrite := n.m.isPageWrite(ctx)
	ctx = n.m.detach(ctx)
	h := handleOf(f)
	if h == nil {
		return 0, syscall.EBADF
	}
	n.m.noteWrite(h.of)
	if h.flags&syscall.O_APPEND != 0 && !pageWrite {
		h.of.appendMu.Lock()
		defer h.of.appendMu.Unlock()
		off = h.of.f.Size()
	}
	var written uint32
	for _, d := range data {
		w, err := h.of.f.WriteAt(ctx, d, off)
		written += uint32(w)
		off += int64(w)
		if err != nil {
			if written > 0 {
				return written, 0 // a short write; the next one reports the error
			}
			return 0, n.m.errno("write", n.ino(), err)
		}
	}
	return written, 0
}

// Flush runs at every close(2) of a descriptor: it makes the file's
// writes durable, so that an open on any client sees them (close-to-open),
// and releases the POSIX locks of the closing process on the file.
func (n *node) Flush(ctx context.Context, f gofs.FileHandle) syscall.Errno {
	ro, hasOwner := n.m.requestOwner(ctx)
	ctx = n.m.detach(ctx)
	h := handleOf(f)
	if h == nil {
		return 0
	}
	err := h.of.f.Fsync(ctx)
	if hasOwner && h.of.locks.take(ro.owner) {
		if uerr := n.m.unlockAll(ctx, n.ino(), ro.owner, client.LockPOSIX); uerr != nil {
			n.m.log.Warn("release POSIX locks at close", "ino", n.ino(), "err", uerr)
		}
	}
	if err != nil {
		return n.m.errno("flush", n.ino(), err)
	}
	return 0
}

// Fsync makes the file's writes durable, and every namespace change this
// mount made before it (the file's own create among them: with early
// namespace replies, docs/fuse.md "Durability"). On a directory only the
// latter.
func (n *node) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	ctx = n.m.detach(ctx)
	var of *openFile
	if h := handleOf(f); h != nil {
		of = h.of
	} else if of = n.m.pin(ctx, n.ino()); of != nil {
		defer n.m.release(ctx, of)
	}
	if of != nil {
		if err := of.f.Fsync(ctx); err != nil {
			return n.m.errno("fsync", n.ino(), err)
		}
	}
	if err := n.m.c.SyncNamespace(ctx); err != nil {
		return n.m.errno("fsync", n.ino(), err)
	}
	return 0
}

// Release drops the handle's reference to the shared client File; the last
// one closes it.
func (n *node) Release(ctx context.Context, f gofs.FileHandle) syscall.Errno {
	if h := handleOf(f); h != nil {
		if ro, ok := n.m.requestOwner(ctx); ok && ro.flock {
			// The last close of an open file description that took a
			// flock lock.
			if err := n.m.unlockAll(context.WithoutCancel(ctx), n.ino(), ro.owner, client.LockFlock); err != nil {
				n.m.log.Warn("release flock lock at close", "ino", n.ino(), "err", err)
			}
		}
		n.opens.Add(-1)
		n.m.releaseHandle(f)
		// RELEASE cannot be interrupted and its result reaches nobody:
		// close with a context that outlives it.
		n.m.release(context.WithoutCancel(ctx), h.of)
	}
	return 0
}

// Allocate implements fallocate(2). Mode 0 grows the file to off+size
// (the new bytes read as zeros; Shoal has no preallocation, so no space
// is reserved) and KEEP_SIZE alone does nothing. Doing so keeps
// posix_fallocate(3) from falling back to writing zeros over the network.
// PUNCH_HOLE|KEEP_SIZE and ZERO_RANGE (with or without KEEP_SIZE) take
// the range out of the extent map: it reads as zeros, and extents no file
// names any more are collected. Collapsing and inserting ranges are
// EOPNOTSUPP.
func (n *node) Allocate(ctx context.Context, f gofs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	ctx = n.m.detach(ctx)
	h := handleOf(f)
	if h == nil {
		return syscall.EBADF
	}
	end := off + size
	if end < off || end > uint64(client.MaxFileSize) {
		return syscall.EFBIG
	}
	n.m.noteWrite(h.of)
	switch mode {
	case 0:
		if int64(end) <= h.of.f.Size() {
			return 0
		}
		if err := h.of.f.Truncate(ctx, int64(end)); err != nil {
			return n.m.errno("fallocate", n.ino(), err)
		}
		return 0
	case unix.FALLOC_FL_KEEP_SIZE:
		return 0
	case unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_ZERO_RANGE, unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE:
		if err := h.of.f.Fallocate(ctx, mode, int64(off), int64(size)); err != nil {
			return n.m.errno("fallocate", n.ino(), err)
		}
		return 0
	}
	return syscall.EOPNOTSUPP
}

// Lseek answers SEEK_DATA and SEEK_HOLE (the kernel handles the other
// whences itself) from the extent map: ranges no extent covers, punched
// holes and the gaps of sparse writes, are holes.
func (n *node) Lseek(ctx context.Context, f gofs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	ctx = n.m.detach(ctx)
	if whence != unix.SEEK_DATA && whence != unix.SEEK_HOLE {
		return 0, syscall.EINVAL
	}
	if int64(off) < 0 {
		return 0, syscall.ENXIO
	}
	file := n.m.openFile(n.ino())
	if h := handleOf(f); h != nil {
		file = h.of.f
	}
	if file == nil {
		of, err := n.m.acquire(ctx, n.ino())
		if err != nil {
			return 0, n.m.errno("lseek", n.ino(), err)
		}
		defer n.m.release(ctx, of)
		file = of.f
	}
	pos, err := file.SeekHole(int64(off), whence == unix.SEEK_HOLE)
	if errors.Is(err, io.EOF) {
		return 0, syscall.ENXIO
	}
	if err != nil {
		return 0, n.m.errno("lseek", n.ino(), err)
	}
	return uint64(pos), 0
}

// CopyFileRange implements copy_file_range(2) between files of this mount
// as an extent clone at the MDS (client.CopyRange): no data moves, so a
// copy of a checkpoint takes milliseconds and no new space, and later
// writes to either file do not show in the other. A short count at the
// source's end is the copy's end, as for a local file system.
func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	ctx = n.m.detach(ctx)
	if flags != 0 {
		return 0, syscall.EINVAL
	}
	in, dst := handleOf(fhIn), handleOf(fhOut)
	if in == nil || dst == nil {
		return 0, syscall.EBADF
	}
	// The reply counts bytes in 32 bits; the kernel asks again for the
	// rest. Keep to whole MiB so each call stays aligned.
	length = min(length, 1<<31)
	if int64(offIn) < 0 || int64(offOut) < 0 || offOut+length < offOut || offOut+length > uint64(client.MaxFileSize) {
		return 0, syscall.EFBIG
	}
	n.m.noteWrite(dst.of)
	copied, err := n.m.c.CopyRange(ctx, in.of.f, int64(offIn), dst.of.f, int64(offOut), int64(length))
	if err != nil {
		return 0, n.m.errno("copy_file_range", n.ino(), err)
	}
	return uint32(copied), 0
}
