package fuse

import (
	"context"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shoalfs/shoal/client"
)

// File locks.
//
// The mount asks the kernel to forward flock(2) and fcntl(2) locks
// (EnableLocks), and every lock request becomes an MDS call in the
// client's session, so locks hold between mounts. The kernel names the
// owner of a lock: for POSIX locks the process (its file table), for flock
// the open file description. SETLKW is a loop of non-blocking tries with
// a growing pause (lockRetryMin to lockRetryMax) until the lock is granted
// or the kernel interrupts the request (a signal: Ctrl-C, or the alarm of
// flock -w), which is answered EINTR. The kernel restarts the call itself
// when the signal's handler asks for it (SA_RESTART), so a Go program's own
// preemption signals do no harm here.
//
// Locks are released where POSIX says: close(2) of any descriptor of a file
// releases the POSIX locks of the closing process on it (the kernel sends
// FLUSH with the lock owner), the last close of an open file description
// releases its flock lock (RELEASE with FUSE_RELEASE_FLOCK_UNLOCK), the
// last close of the file in the mount releases all of the mount's locks on
// it (the MDS does it with the open handle), and the end of the client's
// session releases everything. go-fuse's node API does not pass the lock
// owner of FLUSH and RELEASE on, so lockRaw, wrapped around go-fuse's raw
// file system, records it for the node method serving the same request.

// Pauses between the tries of a blocking lock.
const (
	lockRetryMin = 10 * time.Millisecond
	lockRetryMax = 200 * time.Millisecond
)

var (
	_ gofs.NodeGetlker  = (*node)(nil)
	_ gofs.NodeSetlker  = (*node)(nil)
	_ gofs.NodeSetlkwer = (*node)(nil)
)

// lockRaw is go-fuse's raw file system with the lock owner of FLUSH and
// RELEASE recorded in Mounted.owners while the request is served.
type lockRaw struct {
	gofuse.RawFileSystem
	m *Mounted
}

// reqOwner is the lock owner of one FLUSH or RELEASE request.
type reqOwner struct {
	owner uint64
	flock bool // RELEASE: the open file held a flock lock
}

func (r *lockRaw) Flush(cancel <-chan struct{}, in *gofuse.FlushIn) gofuse.Status {
	r.m.owners.Store(cancel, reqOwner{owner: in.LockOwner})
	defer r.m.owners.Delete(cancel)
	return r.RawFileSystem.Flush(cancel, in)
}

// Write notes writes of dirty pages (a shared writable mapping written
// back): those carry the page's own offset, which Writev must keep even on
// an O_APPEND handle.
func (r *lockRaw) Write(cancel <-chan struct{}, in *gofuse.WriteIn, data []byte) (uint32, gofuse.Status) {
	if in.WriteFlags&gofuse.WRITE_CACHE != 0 {
		r.m.pageWrites.Store(cancel, true)
		defer r.m.pageWrites.Delete(cancel)
	}
	return r.RawFileSystem.Write(cancel, in, data)
}

// Writev is Write for requests go-fuse received in several buffers.
func (r *lockRaw) Writev(cancel <-chan struct{}, in *gofuse.WriteIn, data [][]byte) (uint32, gofuse.Status) {
	if in.WriteFlags&gofuse.WRITE_CACHE != 0 {
		r.m.pageWrites.Store(cancel, true)
		defer r.m.pageWrites.Delete(cancel)
	}
	return r.RawFileSystem.Writev(cancel, in, data)
}

// isPageWrite reports whether the request of ctx (go-fuse's request
// context, not detached) writes back page-cache pages.
func (m *Mounted) isPageWrite(ctx context.Context) bool {
	fc, ok := ctx.(*gofuse.Context)
	if !ok {
		return false
	}
	_, ok = m.pageWrites.Load(fc.Cancel)
	return ok
}

func (r *lockRaw) Release(cancel <-chan struct{}, in *gofuse.ReleaseIn) {
	if in.ReleaseFlags&gofuse.FUSE_RELEASE_FLOCK_UNLOCK != 0 {
		r.m.owners.Store(cancel, reqOwner{owner: in.LockOwner, flock: true})
		defer r.m.owners.Delete(cancel)
	}
	r.RawFileSystem.Release(cancel, in)
}

// requestOwner returns the lock owner lockRaw recorded for the request of
// ctx (go-fuse's request context, not detached).
func (m *Mounted) requestOwner(ctx context.Context) (reqOwner, bool) {
	fc, ok := ctx.(*gofuse.Context)
	if !ok {
		return reqOwner{}, false
	}
	v, ok := m.owners.Load(fc.Cancel)
	if !ok {
		return reqOwner{}, false
	}
	return v.(reqOwner), true
}

// serve mounts root on dir and serves it, as gofs.Mount does, with the
// raw file system wrapped in lockRaw. It returns once the kernel answered
// INIT.
func (m *Mounted) serve(dir string, root gofs.InodeEmbedder, o *gofs.Options) (*gofuse.Server, error) {
	var raw gofuse.RawFileSystem = &lockRaw{RawFileSystem: gofs.NewNodeFS(root, o), m: m}
	if m.met != nil {
		raw = &meteredRaw{RawFileSystem: raw, m: m.met}
	}
	s, err := gofuse.NewServer(raw, dir, &o.MountOptions)
	if err != nil {
		return nil, err
	}
	go s.Serve()
	if err := s.WaitMount(); err != nil {
		return nil, err
	}
	return s, nil
}

// fileLocks records the POSIX lock owners that took a lock on an open file
// of the mount, so that a close by any other process costs no MDS call.
type fileLocks struct {
	mu    sync.Mutex
	posix map[uint64]bool // guarded by mu
}

func (l *fileLocks) add(owner uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.posix == nil {
		l.posix = make(map[uint64]bool)
	}
	l.posix[owner] = true
}

// take reports whether owner may hold POSIX locks, and forgets it.
func (l *fileLocks) take(owner uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	had := l.posix[owner]
	delete(l.posix, owner)
	return had
}

// wireLock converts a lock request from the kernel: fcntl types, inclusive
// byte range, FUSE_LK_FLOCK for flock(2).
func wireLock(lk *gofuse.FileLock, flags uint32) (*client.FileLock, syscall.Errno) {
	l := &client.FileLock{Kind: client.LockPOSIX, Start: lk.Start, End: lk.End, Pid: lk.Pid}
	if flags&gofuse.FUSE_LK_FLOCK != 0 {
		l.Kind = client.LockFlock
	}
	switch lk.Typ {
	case syscall.F_RDLCK:
		l.Type = client.LockRead
	case syscall.F_WRLCK:
		l.Type = client.LockWrite
	case syscall.F_UNLCK:
		l.Type = client.LockUnlock
	default:
		return nil, syscall.EINVAL
	}
	if l.Start > l.End {
		return nil, syscall.EINVAL
	}
	return l, 0
}

// Getlk reports a lock, of any client, that would stand in the way of lk
// (F_GETLK, F_OFD_GETLK); none is reported as type F_UNLCK.
func (n *node) Getlk(ctx context.Context, f gofs.FileHandle, owner uint64, lk *gofuse.FileLock, flags uint32, out *gofuse.FileLock) syscall.Errno {
	ctx = n.m.detach(ctx)
	l, errno := wireLock(lk, flags)
	if errno != 0 {
		return errno
	}
	if l.Type == client.LockUnlock {
		return syscall.EINVAL
	}
	c, err := n.m.c.GetLock(ctx, n.ino(), owner, l)
	if err != nil {
		return n.m.errno("getlk", n.ino(), err)
	}
	*out = *lk
	if c == nil {
		out.Typ = syscall.F_UNLCK
		return 0
	}
	out.Start, out.End, out.Pid = c.Start, c.End, c.Pid
	out.Typ = syscall.F_RDLCK
	if c.Type == client.LockWrite {
		out.Typ = syscall.F_WRLCK
	}
	return 0
}

// Setlk sets, changes or releases a lock without waiting: EAGAIN when
// another owner's lock is in the way.
func (n *node) Setlk(ctx context.Context, f gofs.FileHandle, owner uint64, lk *gofuse.FileLock, flags uint32) syscall.Errno {
	granted, errno := n.setlk(n.m.detach(ctx), f, owner, lk, flags)
	if errno == 0 && !granted {
		return syscall.EAGAIN
	}
	return errno
}

// Setlkw is Setlk that waits for the lock, until the request is
// interrupted (EINTR).
func (n *node) Setlkw(ctx context.Context, f gofs.FileHandle, owner uint64, lk *gofuse.FileLock, flags uint32) syscall.Errno {
	delay := lockRetryMin
	for {
		granted, errno := n.setlk(n.m.detach(ctx), f, owner, lk, flags)
		if errno != 0 || granted {
			return errno
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return syscall.EINTR
		case <-t.C:
		}
		delay = min(2*delay, lockRetryMax)
	}
}

// setlk makes one try at a lock request.
func (n *node) setlk(ctx context.Context, f gofs.FileHandle, owner uint64, lk *gofuse.FileLock, flags uint32) (bool, syscall.Errno) {
	l, errno := wireLock(lk, flags)
	if errno != 0 {
		return false, errno
	}
	if h := handleOf(f); h != nil && l.Type != client.LockUnlock {
		// The MDS keeps locks with the session's opens of the file.
		if err := h.of.f.EnsureHandle(ctx); err != nil {
			return false, n.m.errno("setlk", n.ino(), err)
		}
		if l.Kind == client.LockPOSIX {
			h.of.locks.add(owner) // before the call: a close meanwhile must unlock
		}
	}
	granted, _, err := n.m.c.SetLock(ctx, n.ino(), owner, l)
	if err != nil {
		return false, n.m.errno("setlk", n.ino(), err)
	}
	return granted, 0
}

// unlockAll releases every lock of one kind that owner holds on ino.
func (m *Mounted) unlockAll(ctx context.Context, ino, owner uint64, kind client.LockKind) error {
	_, _, err := m.c.SetLock(ctx, ino, owner, &client.FileLock{
		Kind: kind, Type: client.LockUnlock, Start: 0, End: ^uint64(0),
	})
	return err
}
