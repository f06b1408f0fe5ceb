// Package fsx is an fsx-style random operation checker. It applies the same
// seeded sequence of file and namespace operations to two directories in
// lockstep, a reference (a local file system on a real disk) and the
// directory under test (a Shoal mount), and compares every result: bytes
// read, byte and error counts, the errno of every failure, sizes after each
// change, directory listings, and at the end both trees byte for byte
// (names, types, modes, sizes, link counts, symlink targets, contents).
//
// The operation sequence depends only on the seed and on the reference's
// state, so the first n operations of a run are the same whatever its
// length: Shrink finds the shortest failing prefix by re-running shorter
// runs on fresh directories.
//
// The package does not import testing: the test in package test drives it
// against a cluster, and its own tests drive it against two local
// directories.
package fsx

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"time"
)

// Mode is what a run exercises.
type Mode int

const (
	// File: one file behind several descriptors at once: writes near and
	// far beyond the end (sparse), O_APPEND writes, reads (past the end
	// too), ftruncate up and down, fallocate (mode 0, KEEP_SIZE, punched
	// holes and zeroed ranges), copy_file_range within the file, mmap
	// reads and shared mmap writes with msync, fsync, fdatasync, and
	// close/reopen with O_APPEND or O_TRUNC.
	File Mode = iota
	// Tree: a small namespace: create (O_EXCL, O_TRUNC), mkdir, rename
	// (over files and directories, RENAME_NOREPLACE, RENAME_EXCHANGE),
	// link, symlink, unlink, rmdir, chmod, lstat, readdir, and small reads,
	// writes and truncates through several open files.
	Tree
)

func (m Mode) String() string {
	if m == Tree {
		return "tree"
	}
	return "file"
}

// Config is one run of the checker.
type Config struct {
	Seed uint64
	Ops  int
	Mode Mode
	// Fds is how many descriptors are kept open at once. Default 4.
	Fds int
	// MaxLen bounds one read or write. Default 256 KiB (File), 16 KiB (Tree).
	MaxLen int
	// MaxSize is the size near writes keep a file around; larger files are
	// truncated more often. Default 6 MiB (File), 64 KiB (Tree).
	MaxSize int64
	// FarSize bounds writes, truncates and fallocates far beyond the end
	// of the file (sparse files). Default 40 MiB (File), 1 MiB (Tree).
	FarSize int64
	// NoMmap leaves out mmap reads and writes.
	NoMmap bool
	// OpenUnlinked lets unlink and rename remove the last name of a file
	// that a descriptor holds open, and go on using the descriptor. When
	// off, such descriptors are closed first.
	OpenUnlinked bool
	// Hook, when set, runs before operation i (fault injection: stop a
	// server, corrupt a file). An error ends the run.
	Hook func(i int) error
}

func (c *Config) setDefaults() {
	if c.Fds <= 0 {
		c.Fds = 4
	}
	file := c.Mode == File
	if c.MaxLen <= 0 {
		c.MaxLen = pick(file, 256<<10, 16<<10)
	}
	if c.MaxSize <= 0 {
		c.MaxSize = int64(pick(file, 6<<20, 64<<10))
	}
	if c.FarSize <= 0 {
		c.FarSize = int64(pick(file, 40<<20, 1<<20))
	}
	c.FarSize = max(c.FarSize, c.MaxSize)
}

func pick(cond bool, a, b int) int {
	if cond {
		return a
	}
	return b
}

// Failure is a difference between the reference and the directory under
// test.
type Failure struct {
	Config Config
	// Index is the operation that failed; Config.Ops for the final
	// comparison of the trees.
	Index int
	Msg   string
	// Tail is the end of the operation log, the failing operation last.
	Tail []string
	// Shrunk is set on the failure Shrink returned: Config.Ops is then
	// the shortest failing prefix found. Tries counts the runs it made.
	Shrunk bool
	Tries  int
}

func (f *Failure) Error() string {
	var b strings.Builder
	where := fmt.Sprintf("op %d", f.Index)
	if f.Index >= f.Config.Ops {
		where = "final comparison"
	}
	fmt.Fprintf(&b, "fsx %s mode, seed %d, %d ops: %s: %s\n", f.Config.Mode, f.Config.Seed, f.Config.Ops, where, f.Msg)
	if f.Shrunk {
		fmt.Fprintf(&b, "shortest failing prefix: %d ops (%d runs to find)\n", f.Config.Ops, f.Tries)
	}
	b.WriteString("op log tail:\n")
	for _, l := range f.Tail {
		b.WriteString("  ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// Stats counts what a run did.
type Stats struct {
	Ops    int
	ByKind map[string]int // operations by kind
	// Time is the time spent by kind on each side: [0] the reference,
	// [1] the directory under test.
	Time map[string]*[2]time.Duration
}

// Slowest lists the kinds of operation by time spent under test, with
// their mean latency on both sides.
func (s Stats) Slowest() string {
	kinds := make([]string, 0, len(s.Time))
	for k := range s.Time {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return s.Time[kinds[i]][1] > s.Time[kinds[j]][1] })
	var b strings.Builder
	for _, k := range kinds {
		t, n := s.Time[k], max(1, s.ByKind[k])
		fmt.Fprintf(&b, "%s: %d, %v under test (%v each; reference %v each)\n", k, s.ByKind[k],
			t[1].Round(time.Millisecond), (t[1] / time.Duration(n)).Round(time.Microsecond), (t[0] / time.Duration(n)).Round(time.Microsecond))
	}
	return b.String()
}

// tailLen is how many operations a failure shows.
const tailLen = 40

// Run applies cfg.Ops operations to the directories ref and dut (both
// existing and empty) in lockstep. It returns a *Failure on the first
// difference, another error when the run could not be set up, and nil
// when both sides agree to the end.
func Run(cfg Config, ref, dut string) (Stats, error) {
	cfg.setDefaults()
	c := &checker{
		cfg:   cfg,
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)),
		sides: [2]*side{{dir: ref}, {dir: dut}},
		stats: Stats{ByKind: map[string]int{}, Time: map[string]*[2]time.Duration{}},
	}
	for _, s := range c.sides {
		if err := checkEmptyDir(s.dir); err != nil {
			return c.stats, err
		}
		s.files = make([]*os.File, cfg.Fds)
	}
	c.slots = make([]slot, cfg.Fds)
	defer c.abandon()
	if msg := c.setup(); msg != "" {
		return c.stats, c.fail(-1, "setup: "+msg)
	}
	for i := 0; i < cfg.Ops; i++ {
		if cfg.Hook != nil {
			if err := cfg.Hook(i); err != nil {
				return c.stats, fmt.Errorf("fsx: hook before op %d: %w", i, err)
			}
		}
		c.i = i
		if msg := c.step(); msg != "" {
			return c.stats, c.fail(i, msg)
		}
		c.stats.Ops++
	}
	c.i = cfg.Ops
	if msg := c.closeAll(); msg != "" {
		return c.stats, c.fail(cfg.Ops, msg)
	}
	if msg := compareTrees(ref, dut, true); msg != "" {
		return c.stats, c.fail(cfg.Ops, msg)
	}
	return c.stats, nil
}

func checkEmptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("fsx: %w", err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("fsx: %s is not empty", dir)
	}
	return nil
}

func (c *checker) fail(i int, msg string) *Failure {
	f := &Failure{Config: c.cfg, Index: i, Msg: msg}
	if i < 0 {
		f.Index = 0
	}
	if c.blame != "" {
		f.Msg += "\n" + c.blame
	}
	from := max(0, len(c.log)-tailLen)
	for _, r := range c.log[from:] {
		f.Tail = append(f.Tail, r.String())
	}
	return f
}

// Shrink looks for the shortest prefix of f's run that still fails, by
// binary search on the operation count, each try on fresh directories
// from fresh. It returns the failure of the shortest failing run (f
// itself when no shorter run fails).
func Shrink(f *Failure, fresh func() (ref, dut string, err error)) *Failure {
	best := f
	lo, hi := 0, min(f.Index+1, f.Config.Ops) // ops=lo passes (assumed), ops=hi fails
	tries := 0
	try := func(n int) *Failure {
		tries++
		ref, dut, err := fresh()
		if err != nil {
			return nil
		}
		cfg := f.Config
		cfg.Ops = n
		_, err = Run(cfg, ref, dut)
		ff, _ := err.(*Failure)
		return ff
	}
	if hi < f.Config.Ops {
		if ff := try(hi); ff != nil {
			best = ff
		} else {
			hi = f.Config.Ops // the failure needs the later operations too
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if ff := try(mid); ff != nil {
			hi, best = mid, ff
		} else {
			lo = mid
		}
	}
	out := *best
	out.Shrunk, out.Tries = true, tries
	return &out
}
