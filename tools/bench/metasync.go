package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"
)

// The sync figures of the meta group (issue 20) do to one file what a
// single-threaded random-operation checker (fsx) does, one operation at a
// time, each one a round trip to whatever makes it durable:
//
//   - meta.fsync4k: write 4 KiB at a random (unaligned) offset, then fsync;
//   - meta.truncate: ftruncate to a random size between 0 and the file's
//     full size;
//   - meta.mmap: store a few bytes into a random page of a MAP_SHARED
//     mapping of the file, then msync(MS_SYNC) that page. The API has no
//     mappings: this one runs on the disk, the loopback and the mount.
//
// Each path runs them in that order, one thread on its own file of
// syncPlan.size bytes (written and fsynced first, not timed), each phase
// for syncPlan.ops operations or syncPlan.budget, whichever comes first,
// the same random operations on every path. A shadow copy of the file
// follows every operation: after each phase the ranges its last operations
// changed are read back through the same handle and compared (a phase
// whose data does not read back fails and sets no figure), and at the end
// the whole file is read back cold (the caches dropped; for the API a new
// client) and compared with the shadow, size included.

// syncPlan sizes the sync figures.
type syncPlan struct {
	size   int64         // of each path's file; a multiple of the page size
	ops    int           // operations per phase at most
	budget time.Duration // time per phase at most
}

var defaultSyncPlan = syncPlan{size: 64 << 20, ops: 500, budget: 2 * time.Second}

// syncBlock is the write size of meta.fsync4k; syncCheck is the number of
// the last operations of a phase whose ranges are read back after it.
const (
	syncBlock = 4096
	syncCheck = 8
)

// truncater is a file that can be cut or grown: an *os.File or an apiFile.
type truncater interface{ Truncate(size int64) error }

// Truncate sets the size of an API file (client File.Truncate: one MDS
// SetAttr after the file's writes are flushed).
func (f apiFile) Truncate(size int64) error { return f.f.Truncate(f.ctx, size) }

// shadow is what a file of the sync figures must hold.
type shadow struct {
	buf  []byte // plan.size bytes; the file's bytes below size
	size int64
	// cut is the lowest size a truncation set since buf was last made
	// exact: buf[cut:] is zero in the file (cut off, maybe grown again)
	// but not yet in buf. settle clears it; a phase of truncations costs
	// one clear, not one per operation.
	cut int64
	// touched holds the ranges ({off, len}) the last operations of a
	// phase changed, at most syncCheck, oldest first.
	touched [][2]int64
}

func (s *shadow) touch(off, n int64) {
	if len(s.touched) == syncCheck {
		s.touched = append(s.touched[:0], s.touched[1:]...)
	}
	s.touched = append(s.touched, [2]int64{off, n})
}

func (s *shadow) truncate(size int64) {
	s.cut = min(s.cut, size)
	s.size = size
}

func (s *shadow) settle() {
	if s.cut < int64(len(s.buf)) {
		clear(s.buf[s.cut:])
		s.cut = int64(len(s.buf))
	}
}

// check reads n bytes at off of f and compares them with the shadow: the
// read must return exactly the bytes below the shadow's size, and those
// must be the shadow's.
func (s *shadow) check(f file, off, n int64, buf []byte) error {
	want := max(0, min(n, s.size-off))
	got, err := f.ReadAt(buf[:n], off)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if int64(got) != want {
		return fmt.Errorf("read of %d bytes at %d returned %d, want %d (file size %d)", n, off, got, want, s.size)
	}
	if bytes.Equal(buf[:want], s.buf[off:off+want]) {
		return nil
	}
	i := int64(0)
	for buf[i] == s.buf[off+i] {
		i++
	}
	return fmt.Errorf("byte %d read back differs from what was written (read of %d bytes at %d)", off+i, n, off)
}

// metaSync runs the sync figures on every live target (part of the meta
// group).
func (r *runner) metaSync(ctx context.Context) error {
	return r.metaSyncWith(ctx, defaultSyncPlan)
}

func (r *runner) metaSyncWith(ctx context.Context, plan syncPlan) error {
	const dir = "meta-sync"
	r.progress("metadata, sync: one thread, one %d MiB file per path: fsync4k, truncate, mmap, %d ops or %s each",
		plan.size>>20, plan.ops, plan.budget)
	for _, t := range r.live() {
		if _, err := r.try(ctx, t, "mkdir "+dir, t.fs.Mkdir(dir)); err != nil {
			return err
		}
	}
	sh := &shadow{buf: make([]byte, plan.size)}
	for _, t := range r.live() {
		if err := r.metaSyncOn(ctx, t, dir+"/file", plan, sh); err != nil {
			return err
		}
	}
	return r.removeAll(ctx, dir)
}

// metaSyncOn runs the sync figures on t, in file name. A failure is
// recorded (try, timed); the error is ctx's only.
func (r *runner) metaSyncOn(ctx context.Context, t *target, name string, plan syncPlan, sh *shadow) error {
	for off := int64(0); off < plan.size; off += ioSize {
		n := min(ioSize, plan.size-off)
		copy(sh.buf[off:off+n], r.pat.at(seedOf(0), off, int(n)))
	}
	sh.size, sh.cut, sh.touched = plan.size, plan.size, nil
	f, err := t.fs.Create(name)
	if err == nil {
		if _, err = r.writeRange(ctx, f, seedOf(0), 0, plan.size, false); err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
		}
	}
	if ok, err := r.try(ctx, t, "meta-sync: write the file", err); !ok {
		return err
	}
	buf := make([]byte, ioSize+1)
	phases := []struct {
		fig string
		run func(rng *rand.Rand) (int64, error)
	}{
		{"meta.fsync4k", func(rng *rand.Rand) (int64, error) { return r.syncWrites(ctx, f, plan, sh, rng) }},
		{"meta.truncate", func(rng *rand.Rand) (int64, error) { return syncTruncates(ctx, f, plan, sh, rng) }},
		{"meta.mmap", func(rng *rand.Rand) (int64, error) { return r.syncMmaps(ctx, f, plan, sh, rng) }},
	}
	for i, ph := range phases {
		if ph.fig == "meta.mmap" && t.path == pathAPI {
			continue
		}
		if ph.fig == "meta.mmap" && sh.size < plan.size {
			// Map the whole file again: grow it back (not timed).
			err := truncateFile(f, plan.size)
			sh.truncate(plan.size)
			if ok, err := r.try(ctx, t, "meta-sync: grow the file back", err); !ok {
				f.Close()
				return err
			}
		}
		sh.touched = sh.touched[:0]
		rng := rand.New(rand.NewPCG(20, uint64(i)))
		m, ok, err := r.timed(ctx, t, ph.fig, func() (int64, int64, error) {
			n, err := ph.run(rng)
			return 0, n, err
		})
		if !ok {
			f.Close()
			return err
		}
		if ph.fig == "meta.truncate" {
			// The end of the file (a byte past it: the size must
			// match), and the lowest cut.
			sh.touched = append(sh.touched[:0], [2]int64{max(0, sh.size-syncBlock), syncBlock + 1}, [2]int64{max(0, sh.cut-syncBlock/2), syncBlock})
		}
		sh.settle()
		var cerr error
		for _, tr := range sh.touched {
			if cerr = sh.check(f, tr[0], tr[1], buf); cerr != nil {
				break
			}
		}
		if ok, err := r.try(ctx, t, ph.fig+" read back", cerr); !ok {
			f.Close()
			return err
		}
		r.vals.set(ph.fig, "ops/s", t.path, m.opsps())
	}
	if ok, err := r.try(ctx, t, "meta-sync: close", f.Close()); !ok {
		return err
	}
	_, err = r.try(ctx, t, "meta-sync: read back cold", r.syncReadBack(t, name, sh, buf))
	return err
}

// syncReadBack reads file name of t back cold and compares it with the
// shadow.
func (r *runner) syncReadBack(t *target, name string, sh *shadow, buf []byte) error {
	if err := r.coldCaches(); err != nil {
		return err
	}
	fs, release, err := t.readFS()
	if err != nil {
		return err
	}
	defer release()
	f, err := fs.Open(name)
	if err != nil {
		return err
	}
	// The last read is one byte past the end: the size must match.
	for off := int64(0); off <= sh.size; off += ioSize {
		if err := sh.check(f, off, ioSize+1, buf); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// more returns whether operation i of a phase started at start may run.
func (p syncPlan) more(i int, start time.Time) bool {
	return i < p.ops && time.Since(start) < p.budget
}

// syncWrites is meta.fsync4k: 4 KiB written at a random offset, then
// fsync. It returns the number of operations done.
func (r *runner) syncWrites(ctx context.Context, f file, plan syncPlan, sh *shadow, rng *rand.Rand) (int64, error) {
	start := time.Now()
	var i int
	for ; plan.more(i, start); i++ {
		if err := ctx.Err(); err != nil {
			return int64(i), err
		}
		off := rng.Int64N(plan.size - syncBlock + 1)
		p := r.pat.at(seedOf(1+i), off, syncBlock)
		copy(sh.buf[off:], p)
		sh.touch(off, syncBlock)
		if _, err := f.WriteAt(p, off); err != nil {
			return int64(i), fmt.Errorf("write of 4 KiB at %d: %w", off, err)
		}
		if err := f.Sync(); err != nil {
			return int64(i), fmt.Errorf("fsync after a write at %d: %w", off, err)
		}
	}
	return int64(i), nil
}

// syncTruncates is meta.truncate: the file cut or grown to a random size.
func syncTruncates(ctx context.Context, f file, plan syncPlan, sh *shadow, rng *rand.Rand) (int64, error) {
	start := time.Now()
	var i int
	for ; plan.more(i, start); i++ {
		if err := ctx.Err(); err != nil {
			return int64(i), err
		}
		size := rng.Int64N(plan.size + 1)
		sh.truncate(size)
		if err := truncateFile(f, size); err != nil {
			return int64(i), err
		}
	}
	return int64(i), nil
}

func truncateFile(f file, size int64) error {
	tf, ok := f.(truncater)
	if !ok {
		return fmt.Errorf("a %T cannot be truncated", f)
	}
	if err := tf.Truncate(size); err != nil {
		return fmt.Errorf("truncate to %d: %w", size, err)
	}
	return nil
}

// syncMmaps is meta.mmap: 1-64 bytes stored at a random place of a random
// page of a shared mapping of the whole file, then msync(MS_SYNC) of that
// page. A fault on the mapping (SIGBUS: the page could not be read in)
// fails the phase instead of the process.
func (r *runner) syncMmaps(ctx context.Context, f file, plan syncPlan, sh *shadow, rng *rand.Rand) (_ int64, err error) {
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return 0, fmt.Errorf("a %T cannot be mapped", f)
	}
	mem, err := unix.Mmap(int(fd.Fd()), 0, int(plan.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mmap of %d bytes, MAP_SHARED: %w", plan.size, err)
	}
	defer func() {
		if uerr := unix.Munmap(mem); uerr != nil && err == nil {
			err = fmt.Errorf("munmap: %w", uerr)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	page := int64(os.Getpagesize())
	start := time.Now()
	var i int
	for ; plan.more(i, start); i++ {
		if err := ctx.Err(); err != nil {
			return int64(i), err
		}
		pg := rng.Int64N(plan.size/page) * page
		n := 1 + rng.Int64N(64)
		off := pg + rng.Int64N(page-n+1)
		p := r.pat.at(seedOf(1000+i), off, int(n))
		copy(sh.buf[off:], p)
		sh.touch(pg, page)
		copy(mem[off:], p)
		if err := unix.Msync(mem[pg:pg+page], unix.MS_SYNC); err != nil {
			return int64(i), fmt.Errorf("msync of the page at %d: %w", pg, err)
		}
	}
	return int64(i), nil
}
