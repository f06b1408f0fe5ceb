package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// big: Threads files of Size bytes written sequentially by one thread
// each (1 MiB writes, then fsync and close), read back cold (1 MiB reads),
// then one file of Threads*Size bytes written by Threads threads at
// disjoint offsets. The disk runs each step buffered and with O_DIRECT;
// its baseline is the better of the two.
func (r *runner) big(ctx context.Context) error {
	T, S := r.o.Threads, r.o.Size
	r.progress("big files: %d files of %d MiB, %d threads", T, S>>20, T)
	for _, t := range r.live() {
		if _, err := r.try(ctx, t, "mkdir big", t.fs.Mkdir("big")); err != nil {
			return err
		}
	}
	names := func(prefix string) []string {
		var ns []string
		for i := range T {
			ns = append(ns, fmt.Sprintf("big/%s%02d", prefix, i))
		}
		return ns
	}
	// Each file set: the disk writes one buffered ("b") and one with
	// O_DIRECT ("d"); the others one ("f").
	type variant struct {
		label  string
		fs     fsys
		prefix string
		direct bool
	}
	variants := func(t *target, fig string) []variant {
		if t.path == pathDisk {
			return []variant{{fig + " (buffered)", t.fs, "b", false}, {fig + " (O_DIRECT)", t.direct, "d", true}}
		}
		return []variant{{fig, t.fs, "f", false}}
	}
	// step runs fn for every variant of every live target and sets the
	// figure to the better variant.
	step := func(fig string, cold bool, fn func(t *target, fs fsys, v variant) (int64, int64, error)) error {
		for _, t := range r.live() {
			var ms []measure
			for _, v := range variants(t, fig) {
				fs := v.fs
				release := func() {}
				if cold {
					if err := r.coldCaches(); err != nil {
						return err
					}
					if !v.direct {
						var err error
						fs, release, err = t.readFS()
						if ok, err := r.try(ctx, t, "new client", err); !ok {
							if err != nil {
								return err
							}
							break
						}
					}
				}
				m, ok, err := r.timed(ctx, t, v.label, func() (int64, int64, error) { return fn(t, fs, v) })
				release()
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				r.accountCPU(fig, t.path, m)
				ms = append(ms, m)
			}
			if r.broken[t.path] {
				continue
			}
			best := ms[0]
			if len(ms) == 2 {
				r.note("disk %s: buffered %.0f MiB/s, O_DIRECT %.0f MiB/s; the baseline is the better", fig, ms[0].mibps(), ms[1].mibps())
				if ms[1].mibps() > best.mibps() {
					best = ms[1]
				}
			}
			r.vals.set(fig, "MiB/s", t.path, best.mibps())
		}
		return nil
	}

	if err := step("big.write", false, func(t *target, fs fsys, v variant) (int64, int64, error) {
		return r.writeFiles(ctx, fs, names(v.prefix), S, v.direct)
	}); err != nil {
		return err
	}
	if err := step("big.read", true, func(t *target, fs fsys, v variant) (int64, int64, error) {
		return r.readFiles(ctx, fs, names(v.prefix), S, v.direct)
	}); err != nil {
		return err
	}
	for _, t := range r.live() {
		for _, v := range variants(t, "") {
			for _, n := range names(v.prefix) {
				if ok, err := r.try(ctx, t, "remove "+n, t.fs.Remove(n)); !ok {
					if err != nil {
						return err
					}
					break
				}
			}
		}
	}
	if err := step("big.write1", false, func(t *target, fs fsys, v variant) (int64, int64, error) {
		return r.writeShared(ctx, fs, "big/one-"+v.prefix, T, S, v.direct)
	}); err != nil {
		return err
	}
	return r.removeAll(ctx, "big")
}

// removeAll removes directory p of every target, after a group. A target
// that failed in the group may have left anything behind: its errors are
// ignored.
func (r *runner) removeAll(ctx context.Context, p string) error {
	for _, t := range r.targets {
		err := t.fs.RemoveAll(p)
		if r.broken[t.path] {
			continue
		}
		if _, err := r.try(ctx, t, "remove "+p, err); err != nil {
			return err
		}
	}
	return nil
}

// writeFiles writes each of names (size bytes, 1 MiB writes) on its own
// thread, then fsyncs and closes it.
func (r *runner) writeFiles(ctx context.Context, fs fsys, names []string, size int64, direct bool) (int64, int64, error) {
	var ops atomic.Int64
	err := parallel(ctx, len(names), func(ctx context.Context, i int) error {
		f, err := fs.Create(names[i])
		if err != nil {
			return err
		}
		n, err := r.writeRange(ctx, f, seedOf(i), 0, size, direct)
		ops.Add(n)
		return closeAfter(f, err, true)
	})
	return int64(len(names)) * size, ops.Load(), err
}

// writeShared writes one file of threads*size bytes: thread i writes
// [i*size, (i+1)*size) with 1 MiB writes; then fsync and close.
func (r *runner) writeShared(ctx context.Context, fs fsys, name string, threads int, size int64, direct bool) (int64, int64, error) {
	f, err := fs.Create(name)
	if err != nil {
		return 0, 0, err
	}
	var ops atomic.Int64
	err = parallel(ctx, threads, func(ctx context.Context, i int) error {
		n, err := r.writeRange(ctx, f, seedOf(0), int64(i)*size, size, direct)
		ops.Add(n)
		return err
	})
	return int64(threads) * size, ops.Load(), closeAfter(f, err, true)
}

// writeRange writes the file bytes [off, off+n) in 1 MiB writes.
func (r *runner) writeRange(ctx context.Context, f file, seed, off, n int64, direct bool) (int64, error) {
	var buf []byte
	if direct {
		buf = alignedBuf(ioSize)
	}
	var ops int64
	for o := off; o < off+n; o += ioSize {
		if err := ctx.Err(); err != nil {
			return ops, err
		}
		p := r.pat.at(seed, o, int(min(ioSize, off+n-o)))
		if direct {
			p = buf[:copy(buf, p)]
		}
		if _, err := f.WriteAt(p, o); err != nil {
			return ops, err
		}
		ops++
	}
	return ops, nil
}

// readFiles reads each of names (size bytes, 1 MiB reads) on its own
// thread, spot-checking every read.
func (r *runner) readFiles(ctx context.Context, fs fsys, names []string, size int64, direct bool) (int64, int64, error) {
	var ops atomic.Int64
	err := parallel(ctx, len(names), func(ctx context.Context, i int) error {
		f, err := fs.Open(names[i])
		if err != nil {
			return err
		}
		var buf []byte
		if direct {
			buf = alignedBuf(ioSize)
		} else {
			buf = make([]byte, ioSize)
		}
		n, err := r.readRange(ctx, f, seedOf(i), size, buf, false)
		ops.Add(n)
		return closeAfter(f, err, false)
	})
	return int64(len(names)) * size, ops.Load(), err
}

// readRange reads the first size bytes of f with reads of len(buf),
// checking each against the pattern (fully with full, else a spot
// check).
func (r *runner) readRange(ctx context.Context, f file, seed, size int64, buf []byte, full bool) (int64, error) {
	var ops int64
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return ops, err
		}
		want := int(min(int64(len(buf)), size-off))
		n, err := f.ReadAt(buf[:want], off)
		ops++
		if n < want {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("short read at %d: %d of %d bytes", off, n, want)
			}
			return ops, err
		}
		if err := r.pat.check(seed, off, buf[:n], full); err != nil {
			return ops, err
		}
		off += int64(n)
	}
	return ops, nil
}

// closeAfter closes f after a step that returned err, with an fsync first
// when sync is set and the step succeeded; it returns the first error.
func closeAfter(f file, err error, sync bool) error {
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// small: Files files of 4-128 KiB in one directory per thread: create,
// write in one call and close (no fsync: what a program copying a data
// set does); read back cold; stat cold; unlink.
func (r *runner) small(ctx context.Context) error {
	N, T := r.o.Files, r.o.Threads
	r.progress("small files: %d files of 4-128 KiB, %d threads", N, T)
	name := func(i int) string { return fmt.Sprintf("small/t%02d/f%06d", i%T, i) }
	var total int64
	for i := range N {
		total += int64(smallSize(i))
	}
	// each runs fn on every file, thread t taking files t, t+T, ...
	each := func(fn func(i int) error) error {
		return parallel(ctx, T, func(ctx context.Context, t int) error {
			for i := t; i < N; i += T {
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := fn(i); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, t := range r.live() {
		err := t.fs.Mkdir("small")
		for i := 0; i < T && err == nil; i++ {
			err = t.fs.Mkdir(fmt.Sprintf("small/t%02d", i))
		}
		if _, err := r.try(ctx, t, "mkdir small", err); err != nil {
			return err
		}
	}
	steps := []struct {
		op    string
		cold  bool
		bytes bool // also a MiB/s figure
		fn    func(fs fsys) error
	}{
		{"create", false, true, func(fs fsys) error {
			return each(func(i int) error {
				f, err := fs.Create(name(i))
				if err != nil {
					return err
				}
				_, err = f.WriteAt(r.pat.at(seedOf(i), 0, smallSize(i)), 0)
				return closeAfter(f, err, false)
			})
		}},
		{"read", true, true, func(fs fsys) error {
			bufs := sync.Pool{New: func() any { return make([]byte, 128<<10) }}
			return each(func(i int) error {
				buf := bufs.Get().([]byte)
				defer bufs.Put(buf)
				return r.readWhole(fs, name(i), seedOf(i), smallSize(i), buf)
			})
		}},
		{"stat", true, false, func(fs fsys) error {
			return each(func(i int) error { return fs.Stat(name(i)) })
		}},
		{"unlink", false, false, func(fs fsys) error {
			return each(func(i int) error { return fs.Remove(name(i)) })
		}},
	}
	for _, st := range steps {
		for _, t := range r.live() {
			fs, release := t.fs, func() {}
			if st.cold {
				if err := r.coldCaches(); err != nil {
					return err
				}
			}
			if st.op == "read" {
				var err error
				if fs, release, err = t.readFS(); err != nil {
					if _, err := r.try(ctx, t, "new client", err); err != nil {
						return err
					}
					continue
				}
			}
			var bytes int64
			if st.bytes {
				bytes = total
			}
			m, ok, err := r.timed(ctx, t, "small."+st.op, func() (int64, int64, error) { return bytes, int64(N), st.fn(fs) })
			release()
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			r.vals.set("small."+st.op, "files/s", t.path, m.opsps())
			if st.bytes {
				r.vals.set("small."+st.op, "MiB/s", t.path, m.mibps())
			}
		}
	}
	return r.removeAll(ctx, "small")
}

// readWhole opens name and reads it to the end, as cat does, checking
// every byte and the length.
func (r *runner) readWhole(fs fsys, name string, seed int64, size int, buf []byte) error {
	f, err := fs.Open(name)
	if err != nil {
		return err
	}
	var off int64
	for {
		n, err := f.ReadAt(buf, off)
		if cerr := r.pat.check(seed, off, buf[:n], true); cerr != nil {
			f.Close()
			return fmt.Errorf("%s: %w", name, cerr)
		}
		off += int64(n)
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			break
		}
		if err != nil {
			f.Close()
			return err
		}
	}
	if off != int64(size) {
		f.Close()
		return fmt.Errorf("%s: read %d bytes, wrote %d", name, off, size)
	}
	return f.Close()
}

// metaDirs is the number of directories of the "ndirs" metadata runs.
const metaDirs = 32

// meta: Files empty files created, stat'ed (cold), listed (cold),
// renamed and unlinked by MetaThreads threads, first all in one
// directory, then spread over 32 directories (where a rename moves the
// file to the next directory); each run in new directories. Then the
// sync figures of one file (metasync.go).
func (r *runner) meta(ctx context.Context) error {
	N, T := r.o.Files, r.o.MetaThreads
	r.progress("metadata: %d files, %d threads, in 1 directory and in %d", N, T, metaDirs)
	for _, layout := range []string{"1dir", "ndirs"} {
		D := 1
		if layout == "ndirs" {
			D = metaDirs
		}
		base := "meta-" + layout
		dirOf := func(j int) string { return fmt.Sprintf("%s/d%03d", base, j%D) }
		name := func(i int) string { return fmt.Sprintf("%s/f%06d", dirOf(i), i) }
		renamed := func(i int) string {
			if D == 1 {
				return fmt.Sprintf("%s/r%06d", dirOf(i), i)
			}
			return fmt.Sprintf("%s/r%06d", dirOf(i+1), i)
		}
		perDir := make([]int, D)
		for i := range N {
			perDir[i%D]++
		}
		each := func(fn func(i int) error) error {
			return parallel(ctx, T, func(ctx context.Context, t int) error {
				for i := t; i < N; i += T {
					if err := ctx.Err(); err != nil {
						return err
					}
					if err := fn(i); err != nil {
						return err
					}
				}
				return nil
			})
		}
		for _, t := range r.live() {
			err := t.fs.Mkdir(base)
			for j := 0; j < D && err == nil; j++ {
				err = t.fs.Mkdir(dirOf(j))
			}
			if _, err := r.try(ctx, t, "mkdir "+base, err); err != nil {
				return err
			}
		}
		steps := []struct {
			op   string
			cold bool
			unit string
			fn   func(fs fsys) (int64, error)
		}{
			{"create", false, "ops/s", func(fs fsys) (int64, error) {
				return int64(N), each(func(i int) error { return fs.MetaCreate(name(i)) })
			}},
			{"stat", true, "ops/s", func(fs fsys) (int64, error) {
				return int64(N), each(func(i int) error { return fs.MetaStat(name(i)) })
			}},
			{"readdir", true, "entries/s", func(fs fsys) (int64, error) {
				// Every thread lists every directory once.
				err := parallel(ctx, T, func(ctx context.Context, t int) error {
					for j := range D {
						n, err := fs.MetaReadDir(dirOf(j))
						if err != nil {
							return err
						}
						if n != perDir[j] {
							return fmt.Errorf("readdir %s: %d entries, want %d", dirOf(j), n, perDir[j])
						}
					}
					return nil
				})
				return int64(T * N), err
			}},
			{"rename", false, "ops/s", func(fs fsys) (int64, error) {
				return int64(N), each(func(i int) error { return fs.MetaRename(name(i), renamed(i)) })
			}},
			{"unlink", false, "ops/s", func(fs fsys) (int64, error) {
				return int64(N), each(func(i int) error { return fs.MetaUnlink(renamed(i)) })
			}},
		}
		for _, st := range steps {
			fig := "meta." + st.op + "." + layout
			for _, t := range r.live() {
				if st.cold {
					if err := r.coldCaches(); err != nil {
						return err
					}
				}
				m, ok, err := r.timed(ctx, t, fig, func() (int64, int64, error) {
					n, err := st.fn(t.fs)
					return 0, n, err
				})
				if err != nil {
					return err
				}
				if ok {
					r.vals.set(fig, st.unit, t.path, m.opsps())
				}
			}
		}
		if err := r.removeAll(ctx, base); err != nil {
			return err
		}
	}
	return r.metaSync(ctx) // metasync.go
}

// ckptRead is the read size of a checkpoint restore.
const ckptRead = 8 << 20

// ckpt: Threads writers start at once, each writing one shard of Size
// bytes as safetensors does (a small header, then tensors of 64 KiB to
// 8 MiB in single writes), then fsync and close; the figure is the total
// over the time to the last close. Then the shards are read back cold in
// parallel (8 MiB reads), every byte checked. The disk runs buffered.
func (r *runner) ckpt(ctx context.Context) error {
	T, S := r.o.Threads, r.o.Size
	r.progress("checkpoint: %d writers, one %d MiB shard each", T, S>>20)
	name := func(i int) string { return fmt.Sprintf("ckpt/shard-%05d-of-%05d.safetensors", i, T) }
	for _, t := range r.live() {
		if _, err := r.try(ctx, t, "mkdir ckpt", t.fs.Mkdir("ckpt")); err != nil {
			return err
		}
	}
	for _, t := range r.live() {
		m, ok, err := r.timed(ctx, t, "ckpt.write", func() (int64, int64, error) {
			// Start every writer, then release them at once.
			var ready sync.WaitGroup
			start := make(chan struct{})
			var ops atomic.Int64
			ready.Add(T)
			errc := make(chan error, 1)
			go func() {
				errc <- parallel(ctx, T, func(ctx context.Context, i int) error {
					ready.Done()
					<-start
					return r.writeShard(ctx, t.fs, name(i), i, S, &ops)
				})
			}()
			ready.Wait()
			close(start)
			err := <-errc
			return int64(T) * S, ops.Load(), err
		})
		if err != nil {
			return err
		}
		if ok {
			r.vals.set("ckpt.write", "MiB/s", t.path, m.mibps())
		}
	}
	for _, t := range r.live() {
		if err := r.coldCaches(); err != nil {
			return err
		}
		fs, release, err := t.readFS()
		if err != nil {
			if _, err := r.try(ctx, t, "new client", err); err != nil {
				return err
			}
			continue
		}
		m, ok, err := r.timed(ctx, t, "ckpt.read", func() (int64, int64, error) {
			var ops atomic.Int64
			err := parallel(ctx, T, func(ctx context.Context, i int) error {
				f, err := fs.Open(name(i))
				if err != nil {
					return err
				}
				n, err := r.readRange(ctx, f, seedOf(i), S, make([]byte, ckptRead), true)
				ops.Add(n)
				return closeAfter(f, err, false)
			})
			return int64(T) * S, ops.Load(), err
		})
		release()
		if err != nil {
			return err
		}
		if ok {
			r.vals.set("ckpt.read", "MiB/s", t.path, m.mibps())
		}
	}
	return r.removeAll(ctx, "ckpt")
}

func (r *runner) writeShard(ctx context.Context, fs fsys, name string, shard int, size int64, ops *atomic.Int64) error {
	f, err := fs.Create(name)
	if err != nil {
		return err
	}
	var off int64
	for _, n := range ckptPieces(shard, size) {
		if err = ctx.Err(); err != nil {
			break
		}
		if _, err = f.WriteAt(r.pat.at(seedOf(shard), off, n), off); err != nil {
			break
		}
		ops.Add(1)
		off += int64(n)
	}
	return closeAfter(f, err, true)
}
