package fuse

// Metrics of the mount: every request the kernel sends, counted and timed
// by operation, the bytes read and written through it, and the errors it
// returned by errno (docs/deploy.md, "Watching it").
//
// They are taken around go-fuse's raw file system (meteredRaw), so they
// see each kernel request once, whichever node method serves it, and the
// status the kernel gets. The hot path costs two clock reads and three
// atomic adds: the counters and histograms of each operation are resolved
// when the mount starts, and an error's counter (by operation and errno)
// once, the first time it occurs.

import (
	"errors"
	"strconv"
	"sync"
	"syscall"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// fuseOp is an operation of the kernel's FUSE protocol.
type fuseOp uint8

const (
	opLookup fuseOp = iota
	opForget
	opGetattr
	opSetattr
	opMknod
	opMkdir
	opUnlink
	opRmdir
	opRename
	opLink
	opSymlink
	opReadlink
	opAccess
	opGetxattr
	opListxattr
	opSetxattr
	opRemovexattr
	opCreate
	opTmpfile
	opOpen
	opRead
	opLseek
	opGetlk
	opSetlk
	opSetlkw
	opRelease
	opWrite
	opCopyFileRange
	opIoctl
	opFlush
	opFsync
	opFallocate
	opOpendir
	opReaddir
	opReaddirplus
	opReleasedir
	opFsyncdir
	opStatfs
	opStatx
	numOps
)

// opNames are the values of the "op" label.
var opNames = [numOps]string{
	opLookup: "lookup", opForget: "forget", opGetattr: "getattr", opSetattr: "setattr",
	opMknod: "mknod", opMkdir: "mkdir", opUnlink: "unlink", opRmdir: "rmdir",
	opRename: "rename", opLink: "link", opSymlink: "symlink", opReadlink: "readlink",
	opAccess: "access", opGetxattr: "getxattr", opListxattr: "listxattr",
	opSetxattr: "setxattr", opRemovexattr: "removexattr", opCreate: "create",
	opTmpfile: "tmpfile", opOpen: "open", opRead: "read", opLseek: "lseek",
	opGetlk: "getlk", opSetlk: "setlk", opSetlkw: "setlkw", opRelease: "release",
	opWrite: "write", opCopyFileRange: "copy_file_range", opIoctl: "ioctl",
	opFlush: "flush", opFsync: "fsync", opFallocate: "fallocate", opOpendir: "opendir",
	opReaddir: "readdir", opReaddirplus: "readdirplus", opReleasedir: "releasedir",
	opFsyncdir: "fsyncdir", opStatfs: "statfs", opStatx: "statx",
}

// maxErrno bounds the errnos counted by number; larger ones (none on
// Linux) share one counter.
const maxErrno = 256

// metrics are the mount's Prometheus metrics.
type metrics struct {
	ops       [numOps]prometheus.Counter
	durations [numOps]prometheus.Observer
	readBytes prometheus.Counter
	written   prometheus.Counter
	errorsVec *prometheus.CounterVec

	// errs caches the error counter of each operation and errno.
	errs struct {
		sync.Mutex
		c map[errKey]prometheus.Counter
	}
}

type errKey struct {
	op    fuseOp
	errno uint16
}

// newMetrics makes the metrics and registers them on reg (nil: nowhere).
// Metrics already registered there, by another mount of the process, are
// shared with it.
func newMetrics(reg prometheus.Registerer) *metrics {
	opsVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_fuse_ops_total", Help: "FUSE requests served, by operation."}, []string{"op"})
	durVec := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shoal_fuse_op_duration_seconds", Help: "Time to serve a FUSE request, by operation.",
		Buckets: prometheus.ExponentialBuckets(20e-6, 4, 10)}, []string{"op"})
	readBytes := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_fuse_read_bytes_total", Help: "Bytes returned to the kernel by FUSE reads."})
	written := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_fuse_written_bytes_total", Help: "Bytes accepted from the kernel by FUSE writes."})
	errorsVec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_fuse_errors_total", Help: "FUSE requests answered with an error, by operation and errno (ENOENT of a lookup included)."},
		[]string{"op", "errno"})
	if reg != nil {
		opsVec = register(reg, opsVec)
		durVec = register(reg, durVec)
		readBytes = register(reg, readBytes)
		written = register(reg, written)
		errorsVec = register(reg, errorsVec)
	}
	m := &metrics{readBytes: readBytes, written: written, errorsVec: errorsVec}
	for op := range numOps {
		m.ops[op] = opsVec.WithLabelValues(opNames[op])
		m.durations[op] = durVec.WithLabelValues(opNames[op])
	}
	m.errs.c = map[errKey]prometheus.Counter{}
	return m
}

// register registers c on reg, or returns the collector of the same
// description already there.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
		// A different metric of the same name: count without exporting
		// rather than fail the mount.
	}
	return c
}

// done records one request of op that started at start and ended with st.
// doneSince is done for a deferred call, with the status the call
// returned.
func (m *metrics) doneSince(op fuseOp, start time.Time, st *gofuse.Status) { m.done(op, start, *st) }

func (m *metrics) done(op fuseOp, start time.Time, st gofuse.Status) {
	m.durations[op].Observe(time.Since(start).Seconds())
	m.ops[op].Inc()
	if st != gofuse.OK {
		m.failed(op, st)
	}
}

// failed counts an error of op.
func (m *metrics) failed(op fuseOp, st gofuse.Status) {
	e := uint16(maxErrno)
	if st > 0 && st < maxErrno {
		e = uint16(st)
	}
	k := errKey{op, e}
	m.errs.Lock()
	c := m.errs.c[k]
	if c == nil {
		name := "other"
		if e < maxErrno {
			if name = unix.ErrnoName(syscall.Errno(e)); name == "" {
				name = "errno_" + strconv.Itoa(int(e))
			}
		}
		c = m.errorsVec.WithLabelValues(opNames[op], name)
		m.errs.c[k] = c
	}
	m.errs.Unlock()
	c.Inc()
}

// meteredRaw is a raw file system that measures every request it passes
// on to the one it wraps.
type meteredRaw struct {
	gofuse.RawFileSystem
	m *metrics
}

func (r *meteredRaw) Lookup(cancel <-chan struct{}, h *gofuse.InHeader, name string, out *gofuse.EntryOut) (st gofuse.Status) {
	defer r.m.doneSince(opLookup, time.Now(), &st)
	return r.RawFileSystem.Lookup(cancel, h, name, out)
}

func (r *meteredRaw) Forget(nodeid, nlookup uint64) {
	t := time.Now()
	r.RawFileSystem.Forget(nodeid, nlookup)
	r.m.done(opForget, t, gofuse.OK)
}

func (r *meteredRaw) GetAttr(cancel <-chan struct{}, in *gofuse.GetAttrIn, out *gofuse.AttrOut) (st gofuse.Status) {
	defer r.m.doneSince(opGetattr, time.Now(), &st)
	return r.RawFileSystem.GetAttr(cancel, in, out)
}

func (r *meteredRaw) SetAttr(cancel <-chan struct{}, in *gofuse.SetAttrIn, out *gofuse.AttrOut) (st gofuse.Status) {
	defer r.m.doneSince(opSetattr, time.Now(), &st)
	return r.RawFileSystem.SetAttr(cancel, in, out)
}

func (r *meteredRaw) Mknod(cancel <-chan struct{}, in *gofuse.MknodIn, name string, out *gofuse.EntryOut) (st gofuse.Status) {
	defer r.m.doneSince(opMknod, time.Now(), &st)
	return r.RawFileSystem.Mknod(cancel, in, name, out)
}

func (r *meteredRaw) Mkdir(cancel <-chan struct{}, in *gofuse.MkdirIn, name string, out *gofuse.EntryOut) (st gofuse.Status) {
	defer r.m.doneSince(opMkdir, time.Now(), &st)
	return r.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (r *meteredRaw) Unlink(cancel <-chan struct{}, h *gofuse.InHeader, name string) (st gofuse.Status) {
	defer r.m.doneSince(opUnlink, time.Now(), &st)
	return r.RawFileSystem.Unlink(cancel, h, name)
}

func (r *meteredRaw) Rmdir(cancel <-chan struct{}, h *gofuse.InHeader, name string) (st gofuse.Status) {
	defer r.m.doneSince(opRmdir, time.Now(), &st)
	return r.RawFileSystem.Rmdir(cancel, h, name)
}

func (r *meteredRaw) Rename(cancel <-chan struct{}, in *gofuse.RenameIn, oldName, newName string) (st gofuse.Status) {
	defer r.m.doneSince(opRename, time.Now(), &st)
	return r.RawFileSystem.Rename(cancel, in, oldName, newName)
}

func (r *meteredRaw) Link(cancel <-chan struct{}, in *gofuse.LinkIn, name string, out *gofuse.EntryOut) (st gofuse.Status) {
	defer r.m.doneSince(opLink, time.Now(), &st)
	return r.RawFileSystem.Link(cancel, in, name, out)
}

func (r *meteredRaw) Symlink(cancel <-chan struct{}, h *gofuse.InHeader, target, name string, out *gofuse.EntryOut) (st gofuse.Status) {
	defer r.m.doneSince(opSymlink, time.Now(), &st)
	return r.RawFileSystem.Symlink(cancel, h, target, name, out)
}

func (r *meteredRaw) Readlink(cancel <-chan struct{}, h *gofuse.InHeader) ([]byte, gofuse.Status) {
	t := time.Now()
	b, st := r.RawFileSystem.Readlink(cancel, h)
	r.m.done(opReadlink, t, st)
	return b, st
}

func (r *meteredRaw) Access(cancel <-chan struct{}, in *gofuse.AccessIn) (st gofuse.Status) {
	defer r.m.doneSince(opAccess, time.Now(), &st)
	return r.RawFileSystem.Access(cancel, in)
}

func (r *meteredRaw) GetXAttr(cancel <-chan struct{}, h *gofuse.InHeader, attr string, dest []byte) (uint32, gofuse.Status) {
	t := time.Now()
	n, st := r.RawFileSystem.GetXAttr(cancel, h, attr, dest)
	r.m.done(opGetxattr, t, st)
	return n, st
}

func (r *meteredRaw) ListXAttr(cancel <-chan struct{}, h *gofuse.InHeader, dest []byte) (uint32, gofuse.Status) {
	t := time.Now()
	n, st := r.RawFileSystem.ListXAttr(cancel, h, dest)
	r.m.done(opListxattr, t, st)
	return n, st
}

func (r *meteredRaw) SetXAttr(cancel <-chan struct{}, in *gofuse.SetXAttrIn, attr string, data []byte) (st gofuse.Status) {
	defer r.m.doneSince(opSetxattr, time.Now(), &st)
	return r.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

func (r *meteredRaw) RemoveXAttr(cancel <-chan struct{}, h *gofuse.InHeader, attr string) (st gofuse.Status) {
	defer r.m.doneSince(opRemovexattr, time.Now(), &st)
	return r.RawFileSystem.RemoveXAttr(cancel, h, attr)
}

func (r *meteredRaw) Create(cancel <-chan struct{}, in *gofuse.CreateIn, name string, out *gofuse.CreateOut) (st gofuse.Status) {
	defer r.m.doneSince(opCreate, time.Now(), &st)
	return r.RawFileSystem.Create(cancel, in, name, out)
}

func (r *meteredRaw) Tmpfile(cancel <-chan struct{}, in *gofuse.CreateIn, out *gofuse.CreateOut) (st gofuse.Status) {
	defer r.m.doneSince(opTmpfile, time.Now(), &st)
	return r.RawFileSystem.Tmpfile(cancel, in, out)
}

func (r *meteredRaw) Open(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) (st gofuse.Status) {
	defer r.m.doneSince(opOpen, time.Now(), &st)
	return r.RawFileSystem.Open(cancel, in, out)
}

func (r *meteredRaw) Read(cancel <-chan struct{}, in *gofuse.ReadIn, buf []byte) (gofuse.ReadResult, gofuse.Status) {
	t := time.Now()
	res, st := r.RawFileSystem.Read(cancel, in, buf)
	if st == gofuse.OK && res != nil {
		r.m.readBytes.Add(float64(res.Size()))
	}
	r.m.done(opRead, t, st)
	return res, st
}

func (r *meteredRaw) Lseek(cancel <-chan struct{}, in *gofuse.LseekIn, out *gofuse.LseekOut) (st gofuse.Status) {
	defer r.m.doneSince(opLseek, time.Now(), &st)
	return r.RawFileSystem.Lseek(cancel, in, out)
}

func (r *meteredRaw) GetLk(cancel <-chan struct{}, in *gofuse.LkIn, out *gofuse.LkOut) (st gofuse.Status) {
	defer r.m.doneSince(opGetlk, time.Now(), &st)
	return r.RawFileSystem.GetLk(cancel, in, out)
}

func (r *meteredRaw) SetLk(cancel <-chan struct{}, in *gofuse.LkIn) (st gofuse.Status) {
	defer r.m.doneSince(opSetlk, time.Now(), &st)
	return r.RawFileSystem.SetLk(cancel, in)
}

func (r *meteredRaw) SetLkw(cancel <-chan struct{}, in *gofuse.LkIn) (st gofuse.Status) {
	defer r.m.doneSince(opSetlkw, time.Now(), &st)
	return r.RawFileSystem.SetLkw(cancel, in)
}

func (r *meteredRaw) Release(cancel <-chan struct{}, in *gofuse.ReleaseIn) {
	t := time.Now()
	r.RawFileSystem.Release(cancel, in)
	r.m.done(opRelease, t, gofuse.OK)
}

func (r *meteredRaw) Write(cancel <-chan struct{}, in *gofuse.WriteIn, data []byte) (uint32, gofuse.Status) {
	t := time.Now()
	n, st := r.RawFileSystem.Write(cancel, in, data)
	r.m.written.Add(float64(n))
	r.m.done(opWrite, t, st)
	return n, st
}

func (r *meteredRaw) Writev(cancel <-chan struct{}, in *gofuse.WriteIn, data [][]byte) (uint32, gofuse.Status) {
	t := time.Now()
	n, st := r.RawFileSystem.Writev(cancel, in, data)
	r.m.written.Add(float64(n))
	r.m.done(opWrite, t, st)
	return n, st
}

func (r *meteredRaw) CopyFileRange(cancel <-chan struct{}, in *gofuse.CopyFileRangeIn) (uint32, gofuse.Status) {
	t := time.Now()
	n, st := r.RawFileSystem.CopyFileRange(cancel, in)
	r.m.done(opCopyFileRange, t, st)
	return n, st
}

func (r *meteredRaw) Ioctl(cancel <-chan struct{}, in *gofuse.IoctlIn, inbuf []byte, out *gofuse.IoctlOut, outbuf []byte) (st gofuse.Status) {
	defer r.m.doneSince(opIoctl, time.Now(), &st)
	return r.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
}

func (r *meteredRaw) Flush(cancel <-chan struct{}, in *gofuse.FlushIn) (st gofuse.Status) {
	defer r.m.doneSince(opFlush, time.Now(), &st)
	return r.RawFileSystem.Flush(cancel, in)
}

func (r *meteredRaw) Fsync(cancel <-chan struct{}, in *gofuse.FsyncIn) (st gofuse.Status) {
	defer r.m.doneSince(opFsync, time.Now(), &st)
	return r.RawFileSystem.Fsync(cancel, in)
}

func (r *meteredRaw) Fallocate(cancel <-chan struct{}, in *gofuse.FallocateIn) (st gofuse.Status) {
	defer r.m.doneSince(opFallocate, time.Now(), &st)
	return r.RawFileSystem.Fallocate(cancel, in)
}

func (r *meteredRaw) OpenDir(cancel <-chan struct{}, in *gofuse.OpenIn, out *gofuse.OpenOut) (st gofuse.Status) {
	defer r.m.doneSince(opOpendir, time.Now(), &st)
	return r.RawFileSystem.OpenDir(cancel, in, out)
}

func (r *meteredRaw) ReadDir(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) (st gofuse.Status) {
	defer r.m.doneSince(opReaddir, time.Now(), &st)
	return r.RawFileSystem.ReadDir(cancel, in, out)
}

func (r *meteredRaw) ReadDirPlus(cancel <-chan struct{}, in *gofuse.ReadIn, out *gofuse.DirEntryList) (st gofuse.Status) {
	defer r.m.doneSince(opReaddirplus, time.Now(), &st)
	return r.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (r *meteredRaw) ReleaseDir(in *gofuse.ReleaseIn) {
	t := time.Now()
	r.RawFileSystem.ReleaseDir(in)
	r.m.done(opReleasedir, t, gofuse.OK)
}

func (r *meteredRaw) FsyncDir(cancel <-chan struct{}, in *gofuse.FsyncIn) (st gofuse.Status) {
	defer r.m.doneSince(opFsyncdir, time.Now(), &st)
	return r.RawFileSystem.FsyncDir(cancel, in)
}

func (r *meteredRaw) StatFs(cancel <-chan struct{}, in *gofuse.InHeader, out *gofuse.StatfsOut) (st gofuse.Status) {
	defer r.m.doneSince(opStatfs, time.Now(), &st)
	return r.RawFileSystem.StatFs(cancel, in, out)
}

func (r *meteredRaw) Statx(cancel <-chan struct{}, in *gofuse.StatxIn, out *gofuse.StatxOut) (st gofuse.Status) {
	defer r.m.doneSince(opStatx, time.Now(), &st)
	return r.RawFileSystem.Statx(cancel, in, out)
}
