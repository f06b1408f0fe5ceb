package fuse

// Kernel passthrough of files complete in the node-local cache
// (docs/fuse.md, "Node-local cache"). The kernel holds each inode in one
// I/O mode at a time: while any open file of the inode is served by
// passthrough, an open the daemon serves itself fails with EIO, and while
// any open file is served by the daemon (its page cache), a passthrough
// open fails with EIO; every passthrough open must also name the same
// backing file. The kernel leaves a mode when the last open file of that
// mode is put, just before it sends that file's RELEASE, so the daemon
// keeps the same count from OPEN to RELEASE and only offers what the
// kernel will take:
//
//   - a read-only open while passthrough handles are outstanding shares
//     their backing file, unless the file changed through this mount
//     since (then it is served by the daemon, and the kernel refuses it
//     only if a passthrough reader is really still open);
//   - a new backing file only while no handle of either kind is
//     outstanding;
//   - anything else is served by the daemon.
//
// The mount registers and unregisters the backing file itself: go-fuse's
// FilePassthroughFder counts an inode's backing users up on passthrough
// opens but down on every release, passthrough or not, so a failed open
// for writing beside a passthrough reader made it unregister the backing
// file early, and the next reader was handed a second one (EIO).

import (
	"context"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
)

// passthrough is an open file's kernel passthrough state, guarded by
// openFile.cmu.
type passthrough struct {
	plain int      // handles served by the daemon, opened and not yet released
	users int      // passthrough handles opened and not yet released
	file  *os.File // the backing file (a cache file) while users > 0
	id    int32    // its backing id, registered with the kernel
	stale bool     // the file changed through this mount since file was registered
}

// ptSlot is where the node's Open leaves the backing id of a passthrough
// open for lockRaw.Open to put in the reply.
type ptSlot struct{ id int32 }

// Init keeps the server, which registers backing files.
func (r *lockRaw) Init(s *gofuse.Server) {
	r.m.srv.Store(s)
	r.RawFileSystem.Init(s)
}

// Open answers a passthrough open (the node's Open filled the request's
// slot) with its backing file, and counts it.
func (r *lockRaw) Open(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) gofuse.Status {
	if r.m.o.Cache == nil {
		return r.RawFileSystem.Open(cancel, in, out)
	}
	var slot ptSlot
	r.m.ptOpens.Store(cancel, &slot)
	st := r.RawFileSystem.Open(cancel, in, out)
	r.m.ptOpens.Delete(cancel)
	if st == gofuse.OK && slot.id != 0 {
		out.BackingID = slot.id
		out.OpenFlags |= gofuse.FOPEN_PASSTHROUGH
		out.OpenFlags &^= gofuse.FOPEN_KEEP_CACHE // the kernel refuses it with passthrough
		r.m.o.Cache.CountPassthroughOpen()
	}
	return st
}

// openHandle returns the handle of an open of of with flags (rctx is
// the OPEN request's own context): a passthrough handle for a read-only
// open the kernel can serve from the cache file, else a plain one.
func (m *Mounted) openHandle(rctx, ctx context.Context, of *openFile, flags uint32) gofs.FileHandle {
	if m.o.Cache == nil {
		return &fileHandle{of: of, flags: flags}
	}
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		// The file is about to be written: its cached copy goes. A
		// passthrough reader still open keeps its backing file, and
		// the kernel refuses this open.
		m.invalidateCache(of, of.ino)
		return m.plainHandle(of, flags)
	}
	var slot *ptSlot
	if fc, ok := rctx.(*gofuse.Context); ok {
		if v, ok := m.ptOpens.Load(fc.Cancel); ok {
			slot = v.(*ptSlot)
		}
	}
	of.cmu.Lock()
	defer of.cmu.Unlock()
	pt := &of.cache.pt
	ok := slot != nil && !m.o.CacheNoPassthrough && !m.noPassthrough.Load()
	if ok && pt.users > 0 {
		// Share the backing file the kernel already has.
		ok = !pt.stale
	} else if ok {
		ok = pt.plain == 0 && of.cache.h != nil && of.cache.h.Complete(ctx) && m.registerBacking(of)
	}
	if !ok {
		return m.plainHandleLocked(of, flags)
	}
	pt.users++
	slot.id = pt.id
	return &ptHandle{fileHandle{of: of, flags: flags, pt: pt.file}}
}

// registerBacking opens of's complete cache file and registers it as the
// kernel's backing file; false (with passthrough off for the mount where
// the kernel or privileges do not allow it) when it cannot.
func (m *Mounted) registerBacking(of *openFile) bool {
	srv := m.srv.Load()
	if srv == nil {
		return false
	}
	f, err := of.cache.h.OpenData()
	if err != nil {
		m.log.Debug("open cache file for passthrough", "ino", of.ino, "err", err)
		return false
	}
	id, errno := srv.RegisterBackingFd(&gofuse.BackingMap{Fd: int32(f.Fd())})
	if errno != 0 {
		f.Close()
		if !m.noPassthrough.Swap(true) {
			m.log.Info("kernel passthrough not available; cached files are served by the daemon", "err", errno)
		}
		return false
	}
	of.cache.pt = passthrough{plain: of.cache.pt.plain, file: f, id: id}
	return true
}

// plainHandle returns a handle of of served by the daemon, counted until
// its release.
func (m *Mounted) plainHandle(of *openFile, flags uint32) *fileHandle {
	if m.o.Cache == nil {
		return &fileHandle{of: of, flags: flags}
	}
	of.cmu.Lock()
	defer of.cmu.Unlock()
	return m.plainHandleLocked(of, flags)
}

func (m *Mounted) plainHandleLocked(of *openFile, flags uint32) *fileHandle {
	of.cache.pt.plain++
	return &fileHandle{of: of, flags: flags}
}

// releaseHandle ends the count of a handle at its RELEASE; the last
// passthrough handle unregisters the backing file.
func (m *Mounted) releaseHandle(f gofs.FileHandle) {
	if m.o.Cache == nil {
		return
	}
	switch h := f.(type) {
	case *ptHandle:
		of := h.of
		of.cmu.Lock()
		if of.cache.pt.users--; of.cache.pt.users == 0 {
			m.dropBacking(of)
		}
		of.cmu.Unlock()
	case *fileHandle:
		h.of.cmu.Lock()
		h.of.cache.pt.plain--
		h.of.cmu.Unlock()
	}
}

// dropBacking unregisters and closes of's backing file, if it has one;
// of.cmu is held.
func (m *Mounted) dropBacking(of *openFile) {
	pt := &of.cache.pt
	if pt.file == nil {
		return
	}
	if srv := m.srv.Load(); srv != nil {
		if errno := srv.UnregisterBackingFd(pt.id); errno != 0 {
			m.log.Debug("unregister backing file", "ino", of.ino, "id", pt.id, "err", errno)
		}
	}
	pt.file.Close()
	*pt = passthrough{plain: pt.plain}
}

// noteChanged marks of as changed through this mount: no new open shares
// its backing file.
func (of *openFile) noteChanged() {
	of.cmu.Lock()
	of.cache.pt.stale = true
	of.cmu.Unlock()
}
