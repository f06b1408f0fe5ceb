package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// MaxFileSize is the largest file offset Shoal accepts (2^62 bytes).
const MaxFileSize = int64(1) << 62

// File is an open regular file. Writes are buffered and cut into extents of
// up to ExtentRows full rows; each extent is encoded and uploaded in the
// background, then committed to the MDS in write order. Reads see the
// file's own unflushed writes. A File is safe for concurrent use; share one
// File per inode within a process so that every reader sees every write.
//
// Lock order: mu before rows.mu.
type File struct {
	c      *Client
	ino    uint64
	lo     layout.Layout
	extMax int64

	ctx    context.Context // uploads and read-ahead; cancelled by Close
	cancel context.CancelFunc
	// handle is the open as announced to the MDS; one with id 0 (an
	// open under a content lease) gets one from EnsureHandle, under
	// handleMu.
	handle       *handle
	handleMu     sync.Mutex
	handleClosed bool // Close took the handle (guarded by handleMu)

	lastEnd  atomic.Int64 // end of the last read, for sequential detection
	openedTo atomic.Int64 // file offset up to which chunks were opened ahead (openahead.go)
	// writeNs is the time of the last WriteAt (0: none since open): the
	// file's mtime once its writes commit.
	writeNs atomic.Int64
	// atimeDue is set at open when the first read must update atime
	// (relatime rules); the first read clears it and updates the MDS.
	atimeDue atomic.Bool
	rows     rowCache
	comp     compressPolicy // SetCompression (compress.go); unset: the layout's

	// mu guards the fields below. Reads hold it shared for their whole
	// duration, so a commit can never move data between the committed map
	// and the buffers while a read looks at both.
	mu   sync.RWMutex
	cond *sync.Cond // on mu (exclusive); broadcast when inflight shrinks
	ext  extentMap  // committed extent map
	size int64      // logical size, unflushed writes included
	// dirty is the write buffer: file bytes [dirtyOff, dirtyOff+len(dirty)).
	dirtyOff   int64
	dirty      []byte
	wend       int64     // end of the last write: a write starting there streams
	inflight   []*upload // cut from dirty, not yet committed; in write order
	committing bool
	err        error // first write error, reported by the next Fsync/Close
	closed     bool
	// sizeEarly: a size change was acknowledged before it was durable
	// (Options.EarlyNamespaceReplies); the next Fsync or Close makes it
	// durable (SyncNamespace).
	sizeEarly bool
	// cut counts the bytes cut into uploads; spare, smallSyncs: spare.go.
	cut        int64
	spares     []*spareAlloc
	smallSyncs int
}

type upload struct {
	off  int64
	data []byte
	buf  []byte // the pooled buffer data lies in, given back once committed
	done bool
	ref  *mdspb.ExtentRef
	err  error
}

// OpenIno opens the regular file ino.
//
// The open is announced to the MDS (in the client's session) before the
// extent map is read, and released by Close: while it is open, removing
// the file's last name keeps its data, which stays readable and writable
// through the File.
func (c *Client) OpenIno(ctx context.Context, ino uint64) (_ *File, err error) {
	f, _, err := c.openAt(ctx, &mdspb.OpenRequest{Ino: ino, Extents: true})
	return f, err
}

// openAt opens a File at the MDS with req (extents set): one call
// registers the open handle and returns the extent map.
func (c *Client) openAt(ctx context.Context, req *mdspb.OpenRequest) (*File, *mdspb.OpenReply, error) {
	ino := req.GetIno()
	h, r, err := c.openHandleWith(ctx, req)
	if err != nil {
		return nil, nil, fmt.Errorf("open inode %d: %w", ino, err)
	}
	f, err := c.newFile(ctx, ino, h, attrOf(r.GetAttr()), r.GetExtents())
	if err != nil {
		c.releaseHandle(ctx, h)
		return nil, nil, fmt.Errorf("open inode %d: %w", ino, err)
	}
	return f, r, nil
}

// CreateFileIn creates the regular file name in parent as CreateIn does
// and opens it in the same MDS call: one round trip instead of three. A
// non-exclusive create that finds a regular file opens it.
func (c *Client) CreateFileIn(ctx context.Context, parent uint64, name string, o CreateOptions) (*File, *Attr, error) {
	h := &handle{}
	id := c.sessionID()
	req := o.createRequest(parent, name, sIFREG|o.Mode&0o7777, o.Exclusive)
	req.OpenSession = id
	req.Lease = o.Lease && !c.leases.off
	ask := c.leases.asking()
	seq := c.dirs.begin()
	c.leases.begin(parent)
	reply, err := c.mds.Create(c.changeCtx(ctx), req)
	c.leases.end(err, added(name, reply.GetAttr().GetIno()), parent)
	c.dirs.answered(seq, parent, reply.GetParent(), err)
	switch {
	case errors.Is(err, errs.ErrStale):
		// The session is gone and nothing was created: create without
		// it and open the file through a new session.
		a, err := c.CreateIn(ctx, parent, name, o)
		if err != nil {
			return nil, nil, err
		}
		f, err := c.OpenIno(ctx, a.Ino)
		return f, a, err
	case err != nil:
		return nil, nil, err
	}
	ino, a := reply.GetAttr().GetIno(), attrOf(reply.GetAttr())
	if reply.GetCreated() {
		c.leases.keepFile(ino, reply.GetLeaseGen(), reply.GetLeaseMs(), reply.GetAttr(), nil, ask)
	}
	c.sess.mu.Lock()
	if c.sess.mu.id != id {
		// The session was replaced during the call: the handle went with
		// the old one. Open the created file in the new session.
		c.sess.mu.Unlock()
		f, err := c.OpenIno(ctx, ino)
		return f, a, err
	}
	h.ino, h.session, h.id = ino, id, reply.GetHandle()
	c.sess.mu.opens[h] = struct{}{}
	c.sess.mu.Unlock()
	if !reply.GetCreated() {
		// An existing file: its extent map is not in the reply.
		c.releaseHandle(ctx, h)
		f, err := c.OpenIno(ctx, ino)
		return f, a, err
	}
	f, err := c.newFile(ctx, ino, h, a, nil)
	if err != nil {
		c.releaseHandle(ctx, h)
		return nil, nil, fmt.Errorf("create %q: %w", name, err)
	}
	return f, a, nil
}

// newFile makes the File of regular file ino, open as h, from its
// attributes and extent map.
func (c *Client) newFile(ctx context.Context, ino uint64, h *handle, a *Attr, refs []*mdspb.ExtentRef) (*File, error) {
	if a == nil {
		return nil, fmt.Errorf("the MDS sent no attributes: %w", errs.ErrCorrupt)
	}
	if a.Mode&sIFMT == sIFDIR {
		return nil, errs.ErrIsDir
	}
	if a.Mode&sIFMT != sIFREG {
		return nil, fmt.Errorf("not a regular file: %w", errs.ErrInvalid)
	}
	lo, err := layoutOf(a.Layout.wire())
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &File{
		c: c, ino: ino, lo: lo, extMax: int64(c.opts.ExtentRows) * lo.RowData(),
		ctx: fctx, cancel: cancel, handle: h,
		ext: extentMap(refs), size: int64(a.Size),
	}
	f.cond = sync.NewCond(&f.mu)
	f.rows.init(c.opts.ReadCacheRows)
	f.atimeDue.Store(relatimeDue(a, time.Now()))
	return f, nil
}

// WriteTimeNs returns the time of the last write since the file was
// opened (0: none), which becomes its mtime when the write commits.
func (f *File) WriteTimeNs() int64 { return f.writeNs.Load() }

// TimesSet tells the file that its mtime was set explicitly after its
// writes were flushed: WriteTimeNs no longer applies until the next write.
func (f *File) TimesSet() { f.writeNs.Store(0) }

// Ino returns the file's inode number.
func (f *File) Ino() uint64 { return f.ino }

// Layout returns the file's layout.
func (f *File) Layout() layout.Layout { return f.lo }

// Size returns the file's size as this client sees it, unflushed writes
// included.
func (f *File) Size() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.size
}

// WriteAt buffers p at off. Errors of the background upload are returned by
// a later WriteAt, Fsync or Close.
func (f *File) WriteAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 || off > MaxFileSize-int64(len(p)) {
		return 0, fmt.Errorf("write at %d+%d: %w", off, len(p), errs.ErrTooLarge)
	}
	if len(p) == 0 {
		return 0, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, fmt.Errorf("write to closed file: %w", errs.ErrInvalid)
	}
	if f.err != nil {
		err := f.err
		f.err = nil
		return 0, err
	}
	// A write that does not touch or extend the buffer cuts it first. The
	// cut may wait (releasing f.mu) while other writers fill the buffer
	// again, so check again after it.
	for len(f.dirty) > 0 && (off < f.dirtyOff || off > f.dirtyOff+int64(len(f.dirty))) {
		f.cutLocked(cutAll)
	}
	if len(f.dirty) == 0 {
		f.dirtyOff = off
		if f.dirty == nil {
			f.dirty = f.c.bufs.Get(int(f.bufCap(off, len(p))))[:0]
		}
	}
	rel := off - f.dirtyOff
	if need := rel + int64(len(p)); need > int64(len(f.dirty)) {
		if need > int64(cap(f.dirty)) {
			nb := f.c.bufs.Get(int(max(need, min(f.extMax, 2*int64(cap(f.dirty))))))[:len(f.dirty)]
			copy(nb, f.dirty)
			f.c.bufs.Put(f.dirty)
			f.dirty = nb
		}
		// Pooled buffers hold old bytes, but no write leaves a gap: one
		// that does not touch the buffer cut it above, so rel is at
		// most len(f.dirty) and the copy below covers the new length.
		f.dirty = f.dirty[:need]
	}
	copy(f.dirty[rel:], p)
	f.size = max(f.size, off+int64(len(p)))
	f.wend = off + int64(len(p))
	f.writeNs.Store(time.Now().UnixNano())
	for int64(len(f.dirty)) >= f.extMax {
		f.cutLocked(f.extMax)
	}
	return len(p), nil
}

// bufCap is the capacity of a new write buffer for a write of n bytes at
// off: a whole extent for a writer that streams (the write continues the
// previous one), else room for the write rounded up to 64 KiB, grown by
// doubling as later writes extend it. Buffers come from the client's
// pool (not zeroed, not faulted in again) and go back to it once their
// upload is committed; a random small write must still not hold a whole
// extent's worth (16 MiB for RS 4+2 with 1 MiB cells).
func (f *File) bufCap(off int64, n int) int64 {
	if off == f.wend {
		return f.extMax
	}
	const step = 64 << 10
	return min(f.extMax, (int64(n)+step-1)/step*step)
}

// cutAll tells cutLocked to cut the whole write buffer.
const cutAll = -1

// cutLocked moves the first n dirty bytes (all of them for cutAll, and at
// most all) into a new upload, waiting while too many uploads are in
// flight. The wait releases f.mu, and other writes, cuts and flushes may
// change the buffer meanwhile, so n is applied to the buffer as it is
// after the wait: a length taken before it could be stale (past the end
// of a buffer cut meanwhile, or short of bytes written meanwhile). f.mu
// must be held exclusively.
func (f *File) cutLocked(n int64) {
	for len(f.inflight) >= f.c.opts.UploadsPerFile {
		f.cond.Wait()
	}
	if n == cutAll || n > int64(len(f.dirty)) {
		n = int64(len(f.dirty))
	}
	if n == 0 {
		return
	}
	// The upload owns the whole buffer from here; what is left of it is
	// copied to a new one.
	data, buf := f.dirty[:n:n], f.dirty
	off := f.dirtyOff
	rest := f.dirty[n:]
	f.dirtyOff += n
	if len(rest) == 0 {
		f.dirty = nil
	} else {
		f.dirty = append(f.c.bufs.Get(int(max(f.extMax, int64(len(rest)))))[:0], rest...)
	}
	f.startUploadLocked(off, data, buf)
}

// startUploadLocked queues the upload of data at file offset off and
// starts it; buf (nil for bytes the file does not own) goes back to the
// pool once the upload is committed. The caller has waited for room in
// f.inflight. f.mu must be held exclusively.
func (f *File) startUploadLocked(off int64, data, buf []byte) {
	n := int64(len(data))
	u := &upload{off: off, data: data, buf: buf}
	sp := f.takeSpareLocked(n)
	f.cut += n
	f.inflight = append(f.inflight, u)
	go func() {
		ref, err := f.c.uploadExtent(f.ctx, f.ino, u.off, u.data, f.comp.Load(), sp)
		f.mu.Lock()
		defer f.mu.Unlock()
		u.done, u.ref, u.err = true, ref, err
		f.commitLocked()
	}()
}

// commitLocked commits the finished uploads at the head of the queue to the
// MDS, in write order, one batch at a time. f.mu must be held exclusively;
// it is released during the MDS call.
func (f *File) commitLocked() {
	for !f.committing {
		n := 0
		for n < len(f.inflight) && f.inflight[n].done {
			n++
		}
		if n == 0 {
			return
		}
		batch := f.inflight[:n]
		var refs []*mdspb.ExtentRef
		for _, u := range batch {
			if u.err != nil {
				if f.err == nil {
					f.err = u.err
				}
				continue
			}
			refs = append(refs, u.ref)
		}
		var err error
		if len(refs) > 0 {
			f.committing = true
			f.mu.Unlock()
			_, err = f.c.mds.CommitExtents(f.ctx, &mdspb.CommitExtentsRequest{Ino: f.ino, Extents: refs, MtimeNs: f.writeNs.Load()})
			f.mu.Lock()
			f.committing = false
		}
		if err != nil {
			if f.err == nil {
				f.err = fmt.Errorf("commit extents of inode %d: %w", f.ino, err)
			}
		} else {
			for _, r := range refs {
				f.ext = f.ext.insert(r)
				f.c.metrics.writeBytes.Add(float64(r.GetLength()))
			}
		}
		// Committed or failed, the uploads are done with their buffers,
		// and readers overlay only those still in f.inflight (under
		// f.mu, held here exclusively).
		for _, u := range batch {
			if u.buf != nil {
				f.c.bufs.Put(u.buf)
			}
			u.buf, u.data = nil, nil
		}
		f.inflight = f.inflight[n:]
		f.cond.Broadcast()
	}
}

// flushLocked uploads the write buffer and waits until every upload is
// committed. f.mu must be held exclusively.
func (f *File) flushLocked() error {
	if len(f.dirty) > 0 {
		f.cutLocked(cutAll)
	}
	for len(f.inflight) > 0 || f.committing {
		f.cond.Wait()
	}
	err := f.err
	f.err = nil
	return err
}

// Fsync makes every write durable: the chunks fsynced on their OSTs and the
// extent map and size synced in the MDS.
func (f *File) Fsync(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	before := f.cut
	if err := f.flushLocked(); err != nil {
		return err
	}
	f.fsyncedLocked(f.cut - before)
	return f.syncSizeLocked(ctx)
}

// syncSizeLocked makes a size change acknowledged early durable.
func (f *File) syncSizeLocked(ctx context.Context) error {
	if !f.sizeEarly {
		return nil
	}
	if err := f.c.SyncNamespace(ctx); err != nil {
		return fmt.Errorf("sync the size of inode %d: %w", f.ino, err)
	}
	f.sizeEarly = false
	return nil
}

// Truncate sets the file's size; bytes past a grown size read as zeros.
// With Options.EarlyNamespaceReplies the change is visible to every
// client when Truncate returns and durable after the next Fsync or
// Close, as a namespace change is; otherwise durable at once.
func (f *File) Truncate(ctx context.Context, size int64) error {
	_, err := f.TruncateAttr(ctx, size)
	return err
}

// TruncateAttr is Truncate, returning the file's attributes after it.
func (f *File) TruncateAttr(ctx context.Context, size int64) (*Attr, error) {
	if size < 0 || size > MaxFileSize {
		return nil, fmt.Errorf("truncate to %d: %w", size, errs.ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.flushLocked(); err != nil {
		return nil, err
	}
	r, err := f.c.mds.SetAttr(f.c.nsCtx(ctx), &mdspb.SetAttrRequest{Ino: f.ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_SIZE), Size: uint64(size)})
	if err != nil {
		return nil, fmt.Errorf("truncate inode %d: %w", f.ino, err)
	}
	f.sizeEarly = f.sizeEarly || f.c.opts.EarlyNamespaceReplies
	f.ext = f.ext.truncate(uint64(size))
	f.size = size
	return attrOf(r.GetAttr()), nil
}

// Close flushes the file and releases its buffers. It returns the first
// write error not yet reported.
func (f *File) Close(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	err := f.flushLocked()
	if err == nil {
		err = f.syncSizeLocked(ctx)
	}
	f.closed = true
	f.cancel()
	f.dropSparesLocked()
	f.rows.clear()
	f.handleMu.Lock()
	h := f.handle
	f.handleClosed = true
	f.handleMu.Unlock()
	f.c.leases.closeLeased(f)
	if rerr := f.c.releaseHandle(ctx, h); rerr != nil {
		err = errors.Join(err, fmt.Errorf("release inode %d: %w", f.ino, rerr))
	}
	return err
}

// ReadAt reads len(p) bytes at off. It returns io.EOF when the read ends at
// or past the end of the file; holes read as zeros.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return f.readRetry(ctx, p, off, true)
}

// ReadAtUncached reads as ReadAt does, but straight into p: neither
// through the File's row cache nor with read-ahead, so a large read costs
// no row buffers and no copy out of them. It is for callers that keep
// their own reads in flight and read each byte once (a checkpoint
// restore). Where p's address is congruent to off modulo datanet.Align
// (datanet.AlignedAt), the whole checksum blocks of a chunk on this host
// are read into p with O_DIRECT.
func (f *File) ReadAtUncached(ctx context.Context, p []byte, off int64) (int, error) {
	return f.readRetry(ctx, p, off, false)
}

func (f *File) readRetry(ctx context.Context, p []byte, off int64, cached bool) (int, error) {
	n, err := f.readAt(ctx, p, off, cached)
	if err == nil || errors.Is(err, io.EOF) || ctx.Err() != nil {
		return n, err
	}
	// Chunks may have moved since the map was read (rebalance, drain,
	// repair: docs/admin.md), and their old copies been retired: read
	// again with the current placements.
	if rerr := f.refreshPlacements(ctx); rerr != nil {
		return n, err
	}
	return f.readAt(ctx, p, off, cached)
}

// refreshPlacements reloads the placements of the extents in the file's
// map from the MDS. The map itself (which extents hold which bytes) stays
// as this File knows it.
func (f *File) refreshPlacements(ctx context.Context) error {
	r, err := f.c.mds.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: f.ino})
	if err != nil {
		return err
	}
	fresh := make(map[uint64]*mdspb.Extent, len(r.GetExtents()))
	for _, ref := range r.GetExtents() {
		fresh[ref.GetExtent().GetId()] = ref.GetExtent()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := false
	next := make(extentMap, len(f.ext))
	for i, ref := range f.ext {
		next[i] = ref
		if e, ok := fresh[ref.GetExtent().GetId()]; ok && !slices.Equal(e.GetOsts(), ref.GetExtent().GetOsts()) {
			c := proto.Clone(ref).(*mdspb.ExtentRef)
			c.Extent = e
			next[i] = c
			changed = true
		}
	}
	if !changed {
		return fmt.Errorf("no extent of inode %d moved: %w", f.ino, errs.ErrNotFound)
	}
	f.ext = next
	return nil
}

// readAt reads p at off; cached says whether sequential reads go through
// the row cache with read-ahead (ReadAt) or every read straight into p
// (ReadAtUncached).
func (f *File) readAt(ctx context.Context, p []byte, off int64, cached bool) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: %w", off, errs.ErrInvalid)
	}
	f.touchAtime(ctx)
	f.mu.RLock()
	defer f.mu.RUnlock()
	if off >= f.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), f.size-off))
	buf := p[:n]
	end := off + int64(n)
	seq := cached && f.noteRead(off, end, int64(n))

	refs := f.ext.overlapping(uint64(off), uint64(end))
	clearHoles(buf, off, refs)
	var eg errgroup.Group
	for _, r := range refs {
		s := max(off, int64(r.GetFileOff()))
		e := min(end, int64(refEnd(r)))
		eoff := int64(r.GetExtentOff()) + s - int64(r.GetFileOff())
		dst := buf[s-off : e-off]
		eg.Go(func() error {
			if compressed(r.GetExtent()) { // compress.go
				return f.readCompressed(ctx, r.GetExtent(), eoff, dst, seq, n)
			}
			if seq {
				return f.readRowsCached(ctx, r.GetExtent(), eoff, dst)
			}
			return f.c.readExact(ctx, r.GetExtent(), eoff, dst)
		})
	}
	wait := eg.Wait
	if seq {
		wait = func() error { return f.withReadAhead(off, end, eg.Wait) }
	}
	if err := wait(); err != nil {
		return 0, fmt.Errorf("read inode %d at %d: %w", f.ino, off, err)
	}
	for _, u := range f.inflight {
		overlay(buf, off, u.data, u.off)
	}
	overlay(buf, off, f.dirty, f.dirtyOff)
	f.c.metrics.readBytes.Add(float64(n))
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// withReadAhead runs read, the sequential read of file bytes ending at
// end, and starts the read-ahead past end (f.mu held, shared is enough).
// Over the network, a read at the start of a file starts it at once:
// nothing is in flight yet, and a reader of many files (a data loader)
// would otherwise begin each with only this read's rows, from k OSTs
// (docs/scale.md). Otherwise the read-ahead starts after the read, whose
// rows the fetches ahead would queue before on a shared disk (one host:
// 12% slower single streams); a failed read starts none.
func (f *File) withReadAhead(off, end int64, read func() error) error {
	early := off == 0 && f.c.load.network() // balance.go
	if early {
		f.readAheadLocked(end)
	}
	if err := read(); err != nil {
		return err
	}
	if !early {
		f.readAheadLocked(end)
	}
	return nil
}

// touchAtime updates the file's atime at its first read when relatime
// asks for it (relatimeDue).
func (f *File) touchAtime(ctx context.Context) {
	if f.atimeDue.Load() && f.atimeDue.CompareAndSwap(true, false) {
		// Best effort, as a local file system's atime is: a failure here
		// must not fail the read.
		// With the session: the client's own lease on the file stays.
		f.c.mds.SetAttr(f.c.changeCtx(ctx), &mdspb.SetAttrRequest{Ino: f.ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_ATIME_READ)})
	}
}

// clearHoles zeroes the bytes of buf (file bytes at off) that no extent of
// refs (sorted by file offset, not overlapping) covers: the holes, which
// read as zeros. The rest is overwritten by the extents' bytes.
func clearHoles(buf []byte, off int64, refs []*mdspb.ExtentRef) {
	end := off + int64(len(buf))
	pos := off
	for _, r := range refs {
		if s := min(end, int64(r.GetFileOff())); s > pos {
			clear(buf[pos-off : s-off])
		}
		pos = max(pos, min(end, int64(refEnd(r))))
	}
	if pos < end {
		clear(buf[pos-off:])
	}
}

// overlay copies the part of src (file bytes at srcOff) that falls inside
// dst (file bytes at dstOff).
func overlay(dst []byte, dstOff int64, src []byte, srcOff int64) {
	s := max(dstOff, srcOff)
	e := min(dstOff+int64(len(dst)), srcOff+int64(len(src)))
	if s < e {
		copy(dst[s-dstOff:e-dstOff], src[s-srcOff:e-srcOff])
	}
}

// noteRead records a read of file bytes [off, end) (n of them) and
// reports whether it continues a sequential stream: it starts at most two
// rows (at least 1 MiB) past the furthest end of the stream so far, or
// behind it by no more than the read-ahead (whose rows are cached or in
// flight), or it is large (half a row or more). The kernel sends a FUSE
// reader's read-ahead as several READs at once, up to two of its windows,
// which reach the file in any order: a READ 6 MiB behind or 5 MiB ahead
// of the one before it is the same stream, and treating it as random
// read its bytes twice (once exactly, once in the rows fetched ahead: 29%
// more disk reads for a 4-reader mount read, 2026-12-07). The stream's end only moves forward
// while the reads are sequential, and starts again at a read that is not.
func (f *File) noteRead(off, end, n int64) bool {
	for {
		last := f.lastEnd.Load()
		seq := f.continuesStream(last, off, n)
		next := end
		if seq {
			next = max(last, end)
		}
		if next == last || f.lastEnd.CompareAndSwap(last, next) {
			return seq
		}
	}
}

// continuesStream is noteRead's test of a read of n bytes at off against
// the stream's end last.
func (f *File) continuesStream(last, off, n int64) bool {
	row := f.lo.RowData()
	fwd := max(1<<20, 2*row)
	back := max(fwd, int64(f.c.opts.ReadAheadRows)*row)
	return (off <= last+fwd && off >= last-back) || n >= row/2
}

// readRowsCached reads extent bytes through the row cache.
func (f *File) readRowsCached(ctx context.Context, ext *mdspb.Extent, eoff int64, dst []byte) error {
	g, err := extentGeom(ext)
	if err != nil {
		return err
	}
	for len(dst) > 0 {
		row := g.RowOf(eoff)
		data, release, err := f.rows.get(ctx, f.c, ext, row.Index)
		if err != nil {
			return err
		}
		n := copy(dst, data[eoff-row.DataOff:])
		release()
		dst = dst[n:]
		eoff += int64(n)
	}
	return nil
}

// readAheadLocked starts fetching the rows after file offset end. f.mu must
// be held (shared is enough).
func (f *File) readAheadLocked(end int64) {
	ahead := int64(f.c.opts.ReadAheadRows) * f.lo.RowData()
	if ahead == 0 {
		return
	}
	limit := min(end+ahead, f.size)
	// The chunks of the next two windows' extents are opened now, so
	// that their rows, fetched ahead later, do not wait for the opens.
	f.openAheadLocked(limit, min(limit+2*ahead, f.size))
	for _, r := range f.ext.overlapping(uint64(end), uint64(limit)) {
		if compressed(r.GetExtent()) { // compress.go
			s := max(end, int64(r.GetFileOff()))
			f.prefetchCompressed(r.GetExtent(), int64(r.GetExtentOff())+s-int64(r.GetFileOff()), min(limit, int64(refEnd(r)))-s)
			continue
		}
		g, err := extentGeom(r.GetExtent())
		if err != nil {
			continue
		}
		s := max(end, int64(r.GetFileOff()))
		e := min(limit, int64(refEnd(r)))
		for x := s; x < e; {
			eoff := int64(r.GetExtentOff()) + x - int64(r.GetFileOff())
			row := g.RowOf(eoff)
			f.rows.prefetch(f.ctx, f.c, r.GetExtent(), row.Index)
			x += row.DataOff + row.DataLen - eoff
		}
	}
}

// relatimeDue reports whether a read should update atime, by Linux's
// relatime rules: atime is not newer than mtime or ctime, or is more than a
// day old.
func relatimeDue(a *Attr, now time.Time) bool {
	at := a.AtimeNs
	return at <= a.MtimeNs || at <= a.CtimeNs || now.UnixNano()-at > int64(24*time.Hour)
}
