package fsx

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// checker is the state of one run.
type checker struct {
	cfg   Config
	rng   *rand.Rand
	sides [2]*side // reference, under test
	slots []slot
	i     int // current operation
	log   []rec
	stats Stats
	blame string // ops that last touched a differing byte, for the failure
	kind  string // of the current operation, for Stats.Time
	// ents lists the reference tree (Tree mode); nil after an operation
	// that may have changed it.
	ents []entry
}

// side is one of the two directories.
type side struct {
	dir   string
	files []*os.File // by slot; nil when closed
}

func (s *side) path(rel string) string { return filepath.Join(s.dir, rel) }

// slot is a descriptor kept open on both sides.
type slot struct {
	open  bool
	path  string // the name it was opened by
	flags int
}

func (s slot) readable() bool { return s.open && s.flags&syscall.O_ACCMODE != syscall.O_WRONLY }
func (s slot) writable() bool { return s.open && s.flags&syscall.O_ACCMODE != syscall.O_RDONLY }
func (s slot) appends() bool  { return s.open && s.flags&syscall.O_APPEND != 0 }

// rec is one logged operation.
type rec struct {
	i      int
	desc   string
	path   string // file whose bytes it changed, for blame
	lo, hi int64  // byte range it changed; lo == hi: none
}

func (r rec) String() string {
	if r.i < 0 {
		return "setup: " + r.desc
	}
	return fmt.Sprintf("#%d %s", r.i, r.desc)
}

// outcome is what an operation returned on one side.
type outcome struct {
	err  error
	n    int64
	data []byte
	text string // anything else to compare (names, attributes)
	off  int64  // file offset of data[0], for blame
	path string // file data was read from, for blame
}

// errClass is the comparable form of an error: its errno, or its text
// for errors that carry none.
func errClass(err error) string {
	if err == nil {
		return "ok"
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return errnoName(en)
	}
	return "error " + err.Error()
}

func errnoName(en syscall.Errno) string {
	for _, e := range knownErrnos {
		if e.e == en {
			return e.name
		}
	}
	return fmt.Sprintf("errno %d (%v)", int(en), en)
}

var knownErrnos = []struct {
	e    syscall.Errno
	name string
}{
	{syscall.ENOENT, "ENOENT"}, {syscall.EEXIST, "EEXIST"}, {syscall.ENOTDIR, "ENOTDIR"},
	{syscall.EISDIR, "EISDIR"}, {syscall.ENOTEMPTY, "ENOTEMPTY"}, {syscall.EINVAL, "EINVAL"},
	{syscall.EPERM, "EPERM"}, {syscall.EACCES, "EACCES"}, {syscall.EBADF, "EBADF"},
	{syscall.EIO, "EIO"}, {syscall.ELOOP, "ELOOP"}, {syscall.ENAMETOOLONG, "ENAMETOOLONG"},
	{syscall.EXDEV, "EXDEV"}, {syscall.EFBIG, "EFBIG"}, {syscall.ENOSPC, "ENOSPC"},
	{syscall.EOPNOTSUPP, "EOPNOTSUPP"}, {syscall.ESTALE, "ESTALE"}, {syscall.EBUSY, "EBUSY"},
	{syscall.EMLINK, "EMLINK"}, {syscall.ENXIO, "ENXIO"}, {syscall.ENODEV, "ENODEV"},
}

// do runs op on the reference, then on the side under test, and compares
// the outcomes. It returns a description of the difference, or "".
func (c *checker) do(op func(s *side) outcome) string {
	t0 := time.Now()
	a := op(c.sides[0])
	t1 := time.Now()
	b := op(c.sides[1])
	if c.kind != "" {
		t := c.stats.Time[c.kind]
		if t == nil {
			t = new([2]time.Duration)
			c.stats.Time[c.kind] = t
		}
		t[0] += t1.Sub(t0)
		t[1] += time.Since(t1)
	}
	if ea, eb := errClass(a.err), errClass(b.err); ea != eb {
		return fmt.Sprintf("error differs: reference %s (%v), under test %s (%v)", ea, a.err, eb, b.err)
	}
	if a.n != b.n {
		return fmt.Sprintf("count differs: reference %d, under test %d", a.n, b.n)
	}
	if a.text != b.text {
		return fmt.Sprintf("result differs:\n  reference:  %s\n  under test: %s", a.text, b.text)
	}
	if !bytes.Equal(a.data, b.data) {
		i := firstDiff(a.data, b.data)
		msg := fmt.Sprintf("data differs: %d bytes read, first difference at byte %d (file offset %d = %#x): %s",
			len(a.data), i, a.off+int64(i), a.off+int64(i), diffWindow(a.data, b.data, i))
		c.blame = c.blameFor(a.path, a.off+int64(i))
		return msg
	}
	return ""
}

func firstDiff(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// diffWindow shows the bytes around offset i of both sides.
func diffWindow(want, got []byte, i int) string {
	lo := max(0, i-4)
	hiW, hiG := min(len(want), i+12), min(len(got), i+12)
	return fmt.Sprintf("reference % x | under test % x (from byte %d)", want[lo:max(lo, hiW)], got[lo:max(lo, hiG)], lo)
}

// blameFor lists the last operations that changed byte off of path.
func (c *checker) blameFor(path string, off int64) string {
	var hits []string
	for j := len(c.log) - 1; j >= 0 && len(hits) < 4; j-- {
		r := c.log[j]
		if r.path == path && r.lo <= off && off < r.hi {
			hits = append(hits, r.String())
		}
	}
	if len(hits) == 0 {
		return fmt.Sprintf("no logged operation wrote offset %d of %s (it should be a hole: zeros)", off, path)
	}
	slices.Reverse(hits)
	return fmt.Sprintf("last operations that changed offset %d of %s:\n  %s", off, path, strings.Join(hits, "\n  "))
}

// logf records the current operation. It returns the record's index so
// that the byte range can be filled in once known.
func (c *checker) logf(kind, format string, args ...any) *rec {
	c.stats.ByKind[kind]++
	c.kind = kind
	c.log = append(c.log, rec{i: c.i, desc: kind + " " + fmt.Sprintf(format, args...)})
	return &c.log[len(c.log)-1]
}

// weighted picks an index by weight.
func (c *checker) weighted(w []int) int {
	total := 0
	for _, x := range w {
		total += x
	}
	r := c.rng.IntN(total)
	for i, x := range w {
		if r < x {
			return i
		}
		r -= x
	}
	return len(w) - 1
}

// fill fills p with pseudo-random bytes from the run's generator.
func (c *checker) fill(p []byte) {
	for i := 0; i < len(p); i += 8 {
		v := c.rng.Uint64()
		for j := 0; j < 8 && i+j < len(p); j++ {
			p[i+j] = byte(v >> (8 * j))
		}
	}
}

// length returns an I/O length: mostly small, sometimes up to MaxLen.
func (c *checker) length() int {
	switch r := c.rng.IntN(10); {
	case r < 5:
		return 1 + c.rng.IntN(min(4096, c.cfg.MaxLen))
	case r < 9:
		return 1 + c.rng.IntN(min(64<<10, c.cfg.MaxLen))
	}
	return 1 + c.rng.IntN(c.cfg.MaxLen)
}

// openSlot opens rel with flags in slot k on both sides. A slot that is
// open is closed first (and its close compared).
func (c *checker) openSlot(k int, rel string, flags int, mode os.FileMode) string {
	if msg := c.closeSlot(k); msg != "" {
		return msg
	}
	msg := c.do(func(s *side) outcome {
		f, err := os.OpenFile(s.path(rel), flags|syscall.O_CLOEXEC, mode)
		s.files[k] = f
		return outcome{err: err}
	})
	if msg != "" {
		return msg
	}
	if c.sides[0].files[k] != nil {
		c.slots[k] = slot{open: true, path: rel, flags: flags}
	}
	return ""
}

// closeSlot closes slot k on both sides and compares the results: close
// reports write errors that were not reported before.
func (c *checker) closeSlot(k int) string {
	if !c.slots[k].open {
		return ""
	}
	c.slots[k] = slot{}
	return c.do(func(s *side) outcome {
		f := s.files[k]
		s.files[k] = nil
		return outcome{err: f.Close()}
	})
}

func (c *checker) closeAll() string {
	for k := range c.slots {
		if msg := c.closeSlot(k); msg != "" {
			return fmt.Sprintf("close of slot %d: %s", k, msg)
		}
	}
	return ""
}

// abandon closes whatever is still open after a failure.
func (c *checker) abandon() {
	for _, s := range c.sides {
		for k, f := range s.files {
			if f != nil {
				f.Close()
				s.files[k] = nil
			}
		}
	}
}

// refSize is the size of the file open in slot k, from the reference.
func (c *checker) refSize(k int) int64 {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(c.sides[0].files[k].Fd()), &st); err != nil {
		return 0
	}
	return st.Size
}

// refIno is the inode number of the file open in slot k on the reference.
func (c *checker) refIno(k int) uint64 {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(c.sides[0].files[k].Fd()), &st); err != nil {
		return 0
	}
	return st.Ino
}

// checkSize compares the size of slot k's file after a change.
func (c *checker) checkSize(k int) string {
	msg := c.do(func(s *side) outcome {
		var st syscall.Stat_t
		err := syscall.Fstat(int(s.files[k].Fd()), &st)
		return outcome{err: err, n: st.Size}
	})
	if msg != "" {
		return "fstat after the operation: " + msg
	}
	return ""
}
