package fsx

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fileName is the one file of File mode.
const fileName = "f"

// The open flags of File mode's descriptors, by weight.
var reopenFlags = []struct {
	flags  int
	weight int
}{
	{os.O_RDWR, 45},
	{os.O_RDWR | os.O_APPEND, 20},
	{os.O_RDONLY, 15},
	{os.O_WRONLY, 8},
	{os.O_RDWR | os.O_TRUNC, 4},
	{os.O_WRONLY | os.O_APPEND | os.O_TRUNC, 2},
	{os.O_RDWR | os.O_CREATE, 6},
}

func (c *checker) setup() string {
	if c.cfg.Mode != File {
		return ""
	}
	// Slot 0 creates the file; the others open it with varied flags, so
	// that an appender, a reader and plain writers share it from the start.
	initial := []int{os.O_RDWR | os.O_CREATE | os.O_EXCL, os.O_RDWR | os.O_APPEND, os.O_RDONLY}
	for k := range c.slots {
		fl := os.O_RDWR
		if k < len(initial) {
			fl = initial[k]
		}
		c.log = append(c.log, rec{i: -1, desc: fmt.Sprintf("open slot %d %s", k, flagString(fl))})
		if msg := c.openSlot(k, fileName, fl, 0o644); msg != "" {
			return msg
		}
	}
	return ""
}

func (c *checker) step() string {
	if c.cfg.Mode == Tree {
		return c.treeStep()
	}
	return c.fileStep()
}

// File mode operations.
const (
	fWrite = iota
	fFarWrite
	fAppend
	fRead
	fMmapRead
	fMmapWrite
	fShrink
	fGrow
	fFalloc
	fFallocKeep
	fPunch
	fZero
	fCopy
	fFsync
	fFdatasync
	fReopen
	fNum
)

func (c *checker) fileStep() string {
	w := make([]int, fNum)
	w[fWrite], w[fFarWrite], w[fAppend], w[fRead] = 18, 2, 6, 18
	w[fMmapRead], w[fMmapWrite] = 3, 3
	w[fShrink], w[fGrow], w[fFalloc], w[fFallocKeep] = 4, 2, 2, 2
	w[fPunch], w[fZero], w[fCopy] = 2, 1, 2
	w[fFsync], w[fFdatasync], w[fReopen] = 2, 2, 6
	if c.cfg.NoMmap {
		w[fMmapRead], w[fMmapWrite] = 0, 0
	}
	size := int64(0)
	for k, s := range c.slots {
		if s.open {
			size = c.refSize(k)
			break
		}
	}
	if size > c.cfg.MaxSize {
		w[fShrink] += 12
	}
	op := c.weighted(w)

	// A descriptor that can do op; none: reopen one instead.
	var can func(slot) bool
	switch op {
	case fWrite, fFarWrite:
		can = func(s slot) bool { return s.writable() && !s.appends() }
	case fAppend:
		can = slot.appends
	case fRead:
		can = slot.readable
	case fMmapRead:
		can = func(s slot) bool { return s.readable() && size > 0 }
	case fMmapWrite:
		can = func(s slot) bool { return s.readable() && s.writable() && size > 0 }
	case fCopy:
		can = func(s slot) bool { return s.readable() && s.writable() && !s.appends() && size > 0 }
	case fReopen:
		can = func(slot) bool { return true }
	default:
		can = slot.writable
	}
	k := c.pickSlot(can)
	if k < 0 {
		op, k = fReopen, c.rng.IntN(len(c.slots))
	}
	switch op {
	case fWrite:
		off := c.rng.Int64N(min(size, c.cfg.MaxSize) + 64<<10)
		return c.write(k, off, c.length())
	case fFarWrite:
		off := size + c.rng.Int64N(max(1, c.cfg.FarSize-size))
		return c.write(k, off, c.length())
	case fAppend:
		return c.appendWrite(k, c.length())
	case fRead:
		n := c.length()
		var off int64
		if c.rng.IntN(5) == 0 { // around the end
			off = max(0, size-int64(n)/2)
		} else {
			off = c.rng.Int64N(size + 128<<10)
		}
		return c.read(k, off, n)
	case fMmapRead, fMmapWrite:
		off := c.rng.Int64N(size)
		n := int(min(int64(1+c.rng.IntN(64<<10)), size-off))
		if op == fMmapRead {
			return c.mmapRead(k, off, n)
		}
		return c.mmapWrite(k, off, n)
	case fShrink:
		return c.truncate(k, c.rng.Int64N(size+1))
	case fGrow:
		grow := 1 + c.rng.Int64N(int64(2*c.cfg.MaxLen))
		if c.rng.IntN(5) == 0 {
			grow = 1 + c.rng.Int64N(max(1, c.cfg.FarSize-size))
		}
		return c.truncate(k, size+grow)
	case fFalloc, fFallocKeep:
		off := c.rng.Int64N(size + int64(c.cfg.MaxLen))
		n := int64(c.length())
		if off+n > c.cfg.FarSize {
			n = max(1, c.cfg.FarSize-off)
		}
		mode := uint32(0)
		if op == fFallocKeep {
			mode = unix.FALLOC_FL_KEEP_SIZE
		}
		return c.fallocate(k, mode, off, n)
	case fPunch, fZero:
		off := c.rng.Int64N(size + int64(c.cfg.MaxLen))
		n := 1 + c.rng.Int64N(int64(2*c.cfg.MaxLen))
		mode := uint32(unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE)
		if op == fZero {
			mode = unix.FALLOC_FL_ZERO_RANGE
			if c.rng.IntN(2) == 0 {
				mode |= unix.FALLOC_FL_KEEP_SIZE
			}
			n = min(n, max(1, c.cfg.FarSize-off))
		}
		return c.fallocate(k, mode, off, n)
	case fCopy:
		src := c.rng.Int64N(size)
		n := 1 + c.rng.Int64N(int64(2*c.cfg.MaxLen))
		dst := c.rng.Int64N(size + int64(c.cfg.MaxLen))
		return c.copyRange(k, src, dst, n)
	case fFsync:
		return c.sync(k, false)
	case fFdatasync:
		return c.sync(k, true)
	}
	return c.reopen(k)
}

// pickSlot returns a random slot for which can holds, or -1.
func (c *checker) pickSlot(can func(slot) bool) int {
	var ok []int
	for k, s := range c.slots {
		if can(s) {
			ok = append(ok, k)
		}
	}
	if len(ok) == 0 {
		return -1
	}
	return ok[c.rng.IntN(len(ok))]
}

func (c *checker) reopen(k int) string {
	w := make([]int, len(reopenFlags))
	for i, f := range reopenFlags {
		w[i] = f.weight
	}
	fl := reopenFlags[c.weighted(w)].flags
	r := c.logf("reopen", "slot %d %s", k, flagString(fl))
	if fl&os.O_TRUNC != 0 {
		r.path, r.lo, r.hi = fileName, 0, 1<<62
	}
	if msg := c.openSlot(k, fileName, fl, 0o644); msg != "" {
		return msg
	}
	if c.slots[k].open {
		return c.checkSize(k)
	}
	return ""
}

func flagString(fl int) string {
	s := map[int]string{os.O_RDONLY: "O_RDONLY", os.O_WRONLY: "O_WRONLY", os.O_RDWR: "O_RDWR"}[fl&syscall.O_ACCMODE]
	for _, f := range []struct {
		bit  int
		name string
	}{{os.O_APPEND, "O_APPEND"}, {os.O_TRUNC, "O_TRUNC"}, {os.O_CREATE, "O_CREAT"}, {os.O_EXCL, "O_EXCL"}} {
		if fl&f.bit != 0 {
			s += "|" + f.name
		}
	}
	return s
}

func fd(f *os.File) int { return int(f.Fd()) }

// write is pwrite(2) of n fresh bytes at off through slot k.
func (c *checker) write(k int, off int64, n int) string {
	buf := make([]byte, n)
	c.fill(buf)
	r := c.logf("write", "slot %d off %d (%#x) len %d", k, off, off, n)
	r.path, r.lo, r.hi = c.slots[k].path, off, off+int64(n)
	if msg := c.do(func(s *side) outcome {
		w, err := unix.Pwrite(fd(s.files[k]), buf, off)
		return outcome{err: err, n: int64(w)}
	}); msg != "" {
		return msg
	}
	return c.checkSize(k)
}

// appendWrite is write(2) of n fresh bytes through slot k, opened
// O_APPEND.
func (c *checker) appendWrite(k int, n int) string {
	buf := make([]byte, n)
	c.fill(buf)
	size := c.refSize(k)
	r := c.logf("append", "slot %d len %d (at %d)", k, n, size)
	r.path, r.lo, r.hi = c.slots[k].path, size, size+int64(n)
	if msg := c.do(func(s *side) outcome {
		w, err := unix.Write(fd(s.files[k]), buf)
		return outcome{err: err, n: int64(w)}
	}); msg != "" {
		return msg
	}
	return c.checkSize(k)
}

// read is pread(2) of n bytes at off through slot k.
func (c *checker) read(k int, off int64, n int) string {
	c.logf("read", "slot %d off %d (%#x) len %d", k, off, off, n)
	path := c.slots[k].path
	return c.do(func(s *side) outcome {
		buf := make([]byte, n)
		r, err := unix.Pread(fd(s.files[k]), buf, off)
		return outcome{err: err, n: int64(r), data: buf[:max(r, 0)], off: off, path: path}
	})
}

// truncate is ftruncate(2) through slot k.
func (c *checker) truncate(k int, size int64) string {
	old := c.refSize(k)
	r := c.logf("truncate", "slot %d from %d to %d (%#x)", k, old, size, size)
	r.path, r.lo, r.hi = c.slots[k].path, min(old, size), max(old, size)
	if msg := c.do(func(s *side) outcome {
		return outcome{err: s.files[k].Truncate(size)}
	}); msg != "" {
		return msg
	}
	return c.checkSize(k)
}

// fallocate is fallocate(2) of [off, off+n) through slot k.
func (c *checker) fallocate(k int, mode uint32, off, n int64) string {
	old := c.refSize(k)
	name := "fallocate"
	switch {
	case mode&unix.FALLOC_FL_PUNCH_HOLE != 0:
		name = "punch-hole"
	case mode&unix.FALLOC_FL_ZERO_RANGE != 0:
		name = "zero-range"
	}
	if mode&unix.FALLOC_FL_KEEP_SIZE != 0 {
		name += "-keep-size"
	}
	r := c.logf(name, "slot %d off %d len %d (size %d)", k, off, n, old)
	switch {
	case mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0:
		r.path, r.lo, r.hi = c.slots[k].path, off, off+n
	case mode == 0 && off+n > old:
		r.path, r.lo, r.hi = c.slots[k].path, old, off+n
	}
	if msg := c.do(func(s *side) outcome {
		return outcome{err: unix.Fallocate(fd(s.files[k]), mode, off, n)}
	}); msg != "" {
		return msg
	}
	return c.checkSize(k)
}

// copyRange is copy_file_range(2) of n bytes at src to dst within the
// file of slot k (overlapping ranges are EINVAL on both sides; a range
// past the end copies less).
func (c *checker) copyRange(k int, src, dst, n int64) string {
	r := c.logf("copy-range", "slot %d from %d to %d len %d (size %d)", k, src, dst, n, c.refSize(k))
	r.path, r.lo, r.hi = c.slots[k].path, dst, dst+n
	if msg := c.do(func(s *side) outcome {
		in, out := src, dst
		w, err := unix.CopyFileRange(fd(s.files[k]), &in, fd(s.files[k]), &out, int(n), 0)
		return outcome{err: err, n: int64(w)}
	}); msg != "" {
		return msg
	}
	return c.checkSize(k)
}

func (c *checker) sync(k int, data bool) string {
	if data {
		c.logf("fdatasync", "slot %d", k)
		return c.do(func(s *side) outcome { return outcome{err: unix.Fdatasync(fd(s.files[k]))} })
	}
	c.logf("fsync", "slot %d", k)
	return c.do(func(s *side) outcome { return outcome{err: s.files[k].Sync()} })
}

var pageSize = int64(os.Getpagesize())

// mmapRead maps [off, off+n) of slot k's file shared and read-only and
// reads it through the mapping. The range must lie inside the file.
func (c *checker) mmapRead(k int, off int64, n int) string {
	c.logf("mmap-read", "slot %d off %d (%#x) len %d", k, off, off, n)
	path := c.slots[k].path
	return c.do(func(s *side) outcome {
		buf := make([]byte, n)
		err := withMapping(fd(s.files[k]), off, n, unix.PROT_READ, func(addr uintptr) error {
			return copyMapped(buf, addr, false)
		})
		if err != nil {
			return outcome{err: err}
		}
		return outcome{data: buf, off: off, path: path}
	})
}

// mmapWrite writes n fresh bytes at off through a shared writable mapping
// of slot k's file, then msync(MS_SYNC)s it. The range must lie inside
// the file.
func (c *checker) mmapWrite(k int, off int64, n int) string {
	buf := make([]byte, n)
	c.fill(buf)
	r := c.logf("mmap-write", "slot %d off %d (%#x) len %d, msync", k, off, off, n)
	r.path, r.lo, r.hi = c.slots[k].path, off, off+int64(n)
	if msg := c.do(func(s *side) outcome {
		return outcome{err: withMapping(fd(s.files[k]), off, n, unix.PROT_READ|unix.PROT_WRITE, func(addr uintptr) error {
			if err := copyMapped(buf, addr, true); err != nil {
				return err
			}
			return msync(addr&^uintptr(pageSize-1), int(addr&uintptr(pageSize-1))+n)
		})}
	}); msg != "" {
		return msg
	}
	return c.checkSize(k)
}

// withMapping maps [off, off+n) of fd shared (from the page below off) and
// calls f with the address of the byte at off.
func withMapping(fd int, off int64, n int, prot int, f func(addr uintptr) error) (err error) {
	pg := off &^ (pageSize - 1)
	m, err := unix.Mmap(fd, pg, int(off-pg)+n, prot, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer func() {
		if uerr := unix.Munmap(m); uerr != nil && err == nil {
			err = uerr
		}
	}()
	return f(uintptr(unsafe.Pointer(&m[off-pg])))
}

// copyMapped copies between p and the mapped memory at addr (into the
// mapping when toMapping) with process_vm_readv/writev on this process,
// never by touching the mapping from Go code. A page fault on a FUSE
// mapping waits for the FUSE server; when the server is this process (a
// test mounting Shoal in-process), a fault taken by Go code blocks its
// thread outside any system call, so the garbage collector's
// stop-the-world waits for it forever while the server's goroutines wait
// for the collector: a deadlock. Faults taken inside a system call leave
// the goroutine in the syscall state, where the collector does not wait
// for it. A fault past the end of the file (SIGBUS for Go code) is EFAULT
// here.
func copyMapped(p []byte, addr uintptr, toMapping bool) error {
	pid := os.Getpid()
	for len(p) > 0 {
		local := []unix.Iovec{{Base: &p[0]}}
		local[0].SetLen(len(p))
		remote := []unix.RemoteIovec{{Base: addr, Len: len(p)}}
		var n int
		var err error
		if toMapping {
			n, err = unix.ProcessVMWritev(pid, local, remote, 0)
		} else {
			n, err = unix.ProcessVMReadv(pid, local, remote, 0)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("copy through the mapping: no progress: %w", syscall.EFAULT)
		}
		p, addr = p[n:], addr+uintptr(n)
	}
	return nil
}

// msync is msync(2) MS_SYNC of [addr, addr+n), addr page-aligned.
func msync(addr uintptr, n int) error {
	_, _, e := unix.Syscall(unix.SYS_MSYNC, addr, uintptr(n), unix.MS_SYNC)
	if e != 0 {
		return e
	}
	return nil
}
