package fsx

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// names are the entry names of Tree mode: few, so that operations collide
// (EEXIST, ENOTEMPTY, renames over existing targets) as often as they
// succeed. A 255-byte name and a 256-byte one (ENAMETOOLONG) come up now
// and then.
var names = []string{"a", "b", "c", "d", "e", "f", "g", "h"}

var (
	name255 = strings.Repeat("L", 255)
	name256 = strings.Repeat("M", 256)
)

// maxDepth bounds how deep Tree mode nests directories.
const maxDepth = 4

// entry is a name in a tree, from lstat.
type entry struct {
	rel    string
	mode   uint32 // st_mode
	nlink  uint64
	size   int64
	ino    uint64
	target string // symlinks
}

func (e entry) typ() uint32 { return e.mode & syscall.S_IFMT }
func (e entry) isDir() bool { return e.typ() == syscall.S_IFDIR }
func (e entry) depth() int  { return strings.Count(e.rel, "/") + 1 }

// describe is what is compared of an entry: size only for files and
// symlinks (directory sizes are the file system's business).
func (e entry) describe() string {
	s := fmt.Sprintf("%s %s mode %#o nlink %d", e.rel, typeName(e.mode), e.mode&0o7777, e.nlink)
	switch e.typ() {
	case syscall.S_IFREG:
		s += fmt.Sprintf(" size %d", e.size)
	case syscall.S_IFLNK:
		s += fmt.Sprintf(" size %d -> %q", e.size, e.target)
	}
	return s
}

func typeName(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "file"
	case syscall.S_IFDIR:
		return "dir"
	case syscall.S_IFLNK:
		return "symlink"
	}
	return fmt.Sprintf("type %#o", mode&syscall.S_IFMT)
}

func lstatEntry(root, rel string) (entry, error) {
	p := filepath.Join(root, rel)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return entry{}, &fs.PathError{Op: "lstat", Path: rel, Err: err}
	}
	e := entry{rel: rel, mode: st.Mode, nlink: uint64(st.Nlink), size: st.Size, ino: st.Ino}
	if e.typ() == syscall.S_IFLNK {
		t, err := os.Readlink(p)
		if err != nil {
			return entry{}, err
		}
		e.target = t
	}
	return e, nil
}

// walk lists every entry under root (not root itself), in lexical order,
// without following symlinks.
func walk(root string) ([]entry, error) {
	var out []entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		e, err := lstatEntry(root, rel)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// CompareTrees compares the trees under ref and dut as a run's final
// comparison does: names, types, modes, link counts, sizes of files and
// symlinks, symlink targets and file contents. It returns the first
// difference, or "" when there is none.
func CompareTrees(ref, dut string) string { return compareTrees(ref, dut, true) }

// compareTrees compares the trees under a (the reference) and b, and with
// contents their regular files byte for byte. It returns the first
// difference, or "".
func compareTrees(a, b string, contents bool) string {
	ea, err := walk(a)
	if err != nil {
		return fmt.Sprintf("walk reference: %v", err)
	}
	eb, err := walk(b)
	if err != nil {
		return fmt.Sprintf("walk under test: %v", err)
	}
	i, j := 0, 0
	for i < len(ea) || j < len(eb) {
		switch {
		case j == len(eb) || (i < len(ea) && ea[i].rel < eb[j].rel):
			return fmt.Sprintf("tree: %s is missing under test", ea[i].describe())
		case i == len(ea) || eb[j].rel < ea[i].rel:
			return fmt.Sprintf("tree: %s is under test only", eb[j].describe())
		}
		if da, db := ea[i].describe(), eb[j].describe(); da != db {
			return fmt.Sprintf("tree: entry differs:\n  reference:  %s\n  under test: %s", da, db)
		}
		if contents && ea[i].typ() == syscall.S_IFREG {
			if msg := compareFiles(filepath.Join(a, ea[i].rel), filepath.Join(b, eb[j].rel)); msg != "" {
				return fmt.Sprintf("tree: %s: %s", ea[i].rel, msg)
			}
		}
		i++
		j++
	}
	return ""
}

// compareFiles compares two files' bytes.
func compareFiles(a, b string) string {
	fa, err := os.Open(a)
	if err != nil {
		return fmt.Sprintf("open reference: %v", err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return fmt.Sprintf("open under test: %v", err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); ; {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if erra != nil && erra != io.EOF && erra != io.ErrUnexpectedEOF {
			return fmt.Sprintf("read reference at %d: %v", off, erra)
		}
		if errb != nil && errb != io.EOF && errb != io.ErrUnexpectedEOF {
			return fmt.Sprintf("read under test at %d: %v", off, errb)
		}
		if !bytes.Equal(ba[:na], bb[:nb]) {
			i := firstDiff(ba[:na], bb[:nb])
			return fmt.Sprintf("contents differ at offset %d (%#x): %d vs %d bytes in this block: %s",
				off+int64(i), off+int64(i), na, nb, diffWindow(ba[:na], bb[:nb], i))
		}
		if na < len(ba) {
			return ""
		}
		off += int64(na)
	}
}

// Tree mode operations.
const (
	tCreate = iota
	tMkdir
	tRename
	tRename2
	tLink
	tSymlink
	tUnlink
	tRmdir
	tReaddir
	tStat
	tChmod
	tOpen
	tClose
	tWrite
	tRead
	tTruncate
	tFsync
	tNum
)

// compareEvery is how often Tree mode compares the whole tree's metadata.
const compareEvery = 256

func (c *checker) treeStep() string {
	if c.ents == nil {
		ents, err := walk(c.sides[0].dir)
		if err != nil {
			return fmt.Sprintf("walk reference: %v", err)
		}
		c.ents = ents
	}
	ents := c.ents
	w := make([]int, tNum)
	w[tCreate], w[tMkdir], w[tRename], w[tRename2] = 10, 6, 10, 3
	w[tLink], w[tSymlink], w[tUnlink], w[tRmdir] = 4, 4, 7, 5
	w[tReaddir], w[tStat], w[tChmod] = 5, 6, 2
	w[tOpen], w[tClose], w[tWrite], w[tRead], w[tTruncate], w[tFsync] = 8, 4, 10, 8, 3, 2
	if len(ents) > 60 {
		w[tUnlink] += 10
		w[tRmdir] += 10
		w[tCreate] /= 2
		w[tMkdir] /= 3
	}
	op := c.weighted(w)
	switch op {
	case tWrite, tRead, tTruncate, tFsync, tClose:
		can := slot.writable
		switch op {
		case tRead:
			can = slot.readable
		case tClose, tFsync:
			can = func(s slot) bool { return s.open }
		}
		k := c.pickSlot(can)
		if k < 0 {
			op = tOpen
			break
		}
		size := c.refSize(k)
		switch op {
		case tWrite:
			if c.slots[k].appends() {
				return c.appendWrite(k, c.length())
			}
			off := c.rng.Int64N(min(size, c.cfg.MaxSize) + 4096)
			if c.rng.IntN(20) == 0 {
				off = c.rng.Int64N(c.cfg.FarSize)
			}
			return c.write(k, off, c.length())
		case tRead:
			return c.read(k, c.rng.Int64N(size+4096), c.length())
		case tTruncate:
			return c.truncate(k, c.rng.Int64N(min(size, c.cfg.MaxSize)+8192))
		case tFsync:
			return c.sync(k, c.rng.IntN(2) == 0)
		case tClose:
			c.logf("close", "slot %d (%s)", k, c.slots[k].path)
			return c.closeSlot(k)
		}
	}

	// The operations below may change names: list the reference again
	// before the next one.
	c.ents = nil
	var msg string
	switch op {
	case tCreate:
		msg = c.create(ents)
	case tMkdir:
		p := c.newPath(ents)
		mode := []os.FileMode{0o755, 0o700, 0o750, 0o777}[c.rng.IntN(4)]
		c.logf("mkdir", "%s %#o", p, mode)
		msg = c.do(func(s *side) outcome { return outcome{err: syscall.Mkdir(s.path(p), uint32(mode))} })
	case tRename, tRename2:
		msg = c.rename(ents, op == tRename2)
	case tLink:
		src := c.existing(ents, func(e entry) bool { return !e.isDir() || c.rng.IntN(8) == 0 })
		dst := c.anyPath(ents, 30)
		c.logf("link", "%s %s", src, dst)
		msg = c.do(func(s *side) outcome { return outcome{err: syscall.Link(s.path(src), s.path(dst))} })
	case tSymlink:
		p := c.newPath(ents)
		t := c.symlinkTarget()
		c.logf("symlink", "%s -> %q", p, t)
		msg = c.do(func(s *side) outcome { return outcome{err: syscall.Symlink(t, s.path(p))} })
	case tUnlink:
		p := c.existing(ents, func(e entry) bool { return !e.isDir() || c.rng.IntN(10) == 0 })
		if msg := c.closeVictims(p); msg != "" {
			return msg
		}
		c.logf("unlink", "%s", p)
		msg = c.do(func(s *side) outcome { return outcome{err: syscall.Unlink(s.path(p))} })
	case tRmdir:
		p := c.existing(ents, func(e entry) bool { return e.isDir() || c.rng.IntN(10) == 0 })
		c.logf("rmdir", "%s", p)
		msg = c.do(func(s *side) outcome { return outcome{err: syscall.Rmdir(s.path(p))} })
	case tReaddir:
		p := c.existing(ents, func(e entry) bool { return e.isDir() || c.rng.IntN(10) == 0 })
		if c.rng.IntN(4) == 0 {
			p = "."
		}
		c.logf("readdir", "%s", p)
		msg = c.do(func(s *side) outcome { return readdir(s.path(p)) })
	case tStat:
		p := c.anyPath(ents, 20)
		c.logf("lstat", "%s", p)
		msg = c.do(func(s *side) outcome {
			e, err := lstatEntry(s.dir, p)
			if err != nil {
				return outcome{err: err}
			}
			return outcome{text: e.describe()}
		})
	case tChmod:
		p := c.existing(ents, func(entry) bool { return true })
		mode := []uint32{0o644, 0o600, 0o755, 0o700, 0o640, 0o4755, 0o1777}[c.rng.IntN(7)]
		c.logf("chmod", "%s %#o", p, mode)
		msg = c.do(func(s *side) outcome { return outcome{err: syscall.Chmod(s.path(p), mode)} })
	case tOpen:
		p := c.anyPath(ents, 20)
		fl := []int{os.O_RDWR, os.O_RDWR, os.O_RDWR, os.O_RDWR | os.O_APPEND, os.O_RDONLY, os.O_RDWR | os.O_CREATE}[c.rng.IntN(6)]
		k := c.rng.IntN(len(c.slots))
		c.logf("open", "slot %d %s %s", k, p, flagString(fl))
		msg = c.openSlot(k, p, fl, 0o644)
	}
	if msg != "" {
		return msg
	}
	if (c.i+1)%compareEvery == 0 {
		if msg := compareTrees(c.sides[0].dir, c.sides[1].dir, false); msg != "" {
			return "periodic comparison: " + msg
		}
	}
	return ""
}

func (c *checker) create(ents []entry) string {
	p := c.anyPath(ents, 60)
	fl := os.O_CREATE | os.O_WRONLY
	if c.rng.IntN(3) == 0 {
		fl |= os.O_EXCL
	}
	if c.rng.IntN(5) == 0 {
		fl |= os.O_TRUNC
	}
	mode := []os.FileMode{0o644, 0o600, 0o755, 0o640, 0o666, 0o700}[c.rng.IntN(6)]
	k := c.pickSlot(func(s slot) bool { return !s.open })
	keep := k >= 0 && c.rng.IntN(2) == 0
	if k < 0 {
		k = c.rng.IntN(len(c.slots))
	}
	r := c.logf("create", "%s %s %#o (slot %d, keep open %v)", p, flagString(fl), mode, k, keep)
	if fl&os.O_TRUNC != 0 {
		r.path, r.lo, r.hi = p, 0, 1<<62
	}
	if msg := c.openSlot(k, p, fl, mode); msg != "" {
		return msg
	}
	if !keep {
		return c.closeSlot(k)
	}
	return ""
}

func (c *checker) rename(ents []entry, flagged bool) string {
	src := c.existing(ents, func(entry) bool { return true })
	dst := c.anyPath(ents, 50)
	if !flagged {
		if msg := c.closeVictims(dst); msg != "" {
			return msg
		}
		c.logf("rename", "%s %s", src, dst)
		return c.do(func(s *side) outcome { return outcome{err: syscall.Rename(s.path(src), s.path(dst))} })
	}
	flags, name := uint(unix.RENAME_NOREPLACE), "RENAME_NOREPLACE"
	if c.rng.IntN(2) == 0 {
		flags, name = unix.RENAME_EXCHANGE, "RENAME_EXCHANGE"
	}
	c.logf("renameat2", "%s %s %s", src, dst, name)
	return c.do(func(s *side) outcome {
		return outcome{err: unix.Renameat2(unix.AT_FDCWD, s.path(src), unix.AT_FDCWD, s.path(dst), flags)}
	})
}

// closeVictims closes the descriptors of the file at rel when removing rel
// would remove its last name (unless Config.OpenUnlinked).
func (c *checker) closeVictims(rel string) string {
	if c.cfg.OpenUnlinked {
		return ""
	}
	e, err := lstatEntry(c.sides[0].dir, rel)
	if err != nil || e.typ() != syscall.S_IFREG || e.nlink > 1 {
		return ""
	}
	for k, s := range c.slots {
		if s.open && c.refIno(k) == e.ino {
			c.logf("close", "slot %d (%s is about to lose its last name)", k, rel)
			if msg := c.closeSlot(k); msg != "" {
				return msg
			}
		}
	}
	return ""
}

func readdir(p string) outcome {
	ents, err := os.ReadDir(p)
	if err != nil {
		return outcome{err: err}
	}
	var parts []string
	for _, e := range ents {
		parts = append(parts, e.Name()+":"+typeName(uint32(fsTypeBits(e.Type()))))
	}
	slices.Sort(parts)
	return outcome{n: int64(len(ents)), text: strings.Join(parts, " ")}
}

func fsTypeBits(m fs.FileMode) uint32 {
	switch {
	case m&fs.ModeDir != 0:
		return syscall.S_IFDIR
	case m&fs.ModeSymlink != 0:
		return syscall.S_IFLNK
	case m.IsRegular():
		return syscall.S_IFREG
	}
	return 0
}

// existing returns a random entry for which ok holds (a few tries), or a
// new path when there is none.
func (c *checker) existing(ents []entry, ok func(entry) bool) string {
	if len(ents) > 0 {
		for try := 0; try < 8; try++ {
			if e := ents[c.rng.IntN(len(ents))]; ok(e) {
				return e.rel
			}
		}
	}
	return c.newPath(ents)
}

// anyPath returns an existing entry, or with probability pctNew percent a
// path that may not exist.
func (c *checker) anyPath(ents []entry, pctNew int) string {
	if len(ents) == 0 || c.rng.IntN(100) < pctNew {
		return c.newPath(ents)
	}
	return ents[c.rng.IntN(len(ents))].rel
}

// newPath returns a name in a random directory: mostly a real directory
// not too deep, sometimes a file or symlink (ENOTDIR, or a followed link).
func (c *checker) newPath(ents []entry) string {
	parent := "."
	var dirs, others []string
	for _, e := range ents {
		if e.isDir() && e.depth() < maxDepth {
			dirs = append(dirs, e.rel)
		} else if !e.isDir() {
			others = append(others, e.rel)
		}
	}
	switch r := c.rng.IntN(100); {
	case r < 5 && len(others) > 0:
		parent = others[c.rng.IntN(len(others))]
	case r < 75 && len(dirs) > 0:
		parent = dirs[c.rng.IntN(len(dirs))]
	}
	name := names[c.rng.IntN(len(names))]
	switch c.rng.IntN(200) {
	case 0:
		name = name255
	case 1:
		name = name256
	}
	return filepath.Join(parent, name)
}

// symlinkTarget returns a relative target for a symlink: one or two names,
// never "..", so that the link cannot leave the tree wherever a rename or
// a hard link moves it (the two trees live in different places, and a
// link out of the tree under test could reach the cluster's own files).
// It may dangle, loop, pass through files or be empty (ENOENT). The
// kernel resolves ".." itself, so leaving it out costs no coverage of the
// file system under test.
func (c *checker) symlinkTarget() string {
	if c.rng.IntN(40) == 0 {
		return ""
	}
	var parts []string
	for n := 1 + c.rng.IntN(2); n > 0; n-- {
		parts = append(parts, names[c.rng.IntN(len(names))])
	}
	return strings.Join(parts, "/")
}
