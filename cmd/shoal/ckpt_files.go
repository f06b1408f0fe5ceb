package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
)

// The local files of `shoal ckpt save --from` and `restore --to`.
//
// Save maps the files it saves (mmap, read-only) instead of reading them
// into memory first: the save hashes and uploads them straight from the
// page cache, in parallel, where a read would have copied every byte
// once more, into fresh memory, one file after another, before the save
// began (a third of the command's CPU for random F32 shards, and all of
// its time before the first byte was sent). The files must not change
// during the save, as with any copy: each is checked afterwards (size,
// modification and change times) and a change fails the command, with
// the advice to verify the step. A file shorter than mapMin is read.
//
// Restore streams each file (ckpt.Store.CopyFile) into a temporary file
// beside its name (aligned pieces with O_DIRECT: outFile), synced and
// renamed once every byte checked out.

// mapMin is the size from which save maps a file instead of reading it.
const mapMin = 1 << 20

// ckptDir is the files of a save's --from directory, as shards.
type ckptDir struct {
	shards []ckpt.Shard
	files  []mappedFile
}

// mappedFile is a file save took its bytes from, and what it was then.
type mappedFile struct {
	path  string
	data  []byte // nil: read, not mapped
	size  int64
	mtime time.Time
	ctime syscall.Timespec
}

// ckptReadDir takes the regular files of dir as shards: a *.safetensors
// file becomes its tensors and its header bytes, kept as they are (the
// header must decode), anything else a blob. Close unmaps the files.
func ckptReadDir(dir string) (*ckptDir, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	d := &ckptDir{}
	for _, e := range es {
		if !e.Type().IsRegular() {
			if e.IsDir() {
				fmt.Fprintf(os.Stderr, "shoal: skipping directory %s (save flattens nothing; save each directory on its own)\n", filepath.Join(dir, e.Name()))
			}
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := d.load(p)
		if err != nil {
			d.Close()
			return nil, err
		}
		if !strings.HasSuffix(e.Name(), ".safetensors") {
			d.shards = append(d.shards, ckpt.Shard{Name: e.Name(), Blob: b})
			continue
		}
		h, err := safetensors.Decode(b, int64(len(b)))
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		ds := h.DataStart()
		// Slices of the mapping with its capacity beyond them (it is read
		// only: nothing appends), so that the save sees the header and
		// the tensors as the one run they are and writes whole extents
		// of it without a copy (ckpt's coalesce).
		sh := ckpt.Shard{Name: e.Name(), Header: b[:ds], Tensors: make([]ckpt.Tensor, 0, len(h.Tensors))}
		for _, t := range h.Tensors {
			sh.Tensors = append(sh.Tensors, ckpt.Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape,
				Data: b[ds+t.Begin : ds+t.End]})
		}
		d.shards = append(d.shards, sh)
	}
	if len(d.shards) == 0 {
		return nil, fmt.Errorf("%s holds no files to save", dir)
	}
	return d, nil
}

// load maps the file p (or reads it, when it is small or cannot be
// mapped) and remembers what it was.
func (d *ckptDir) load(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	mf := mappedFile{path: p, size: st.Size(), mtime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		mf.ctime = sys.Ctim
	}
	if st.Size() >= mapMin && st.Size() == int64(int(st.Size())) {
		b, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
		if err == nil {
			syscall.Madvise(b, syscall.MADV_SEQUENTIAL)
			mf.data = b
			d.files = append(d.files, mf)
			return b, nil
		}
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	d.files = append(d.files, mf)
	return b, nil
}

// Changed returns an error naming the files that changed since they
// were taken (the saved step may then not match its manifest).
func (d *ckptDir) Changed() error {
	var bad []string
	for _, mf := range d.files {
		st, err := os.Stat(mf.path)
		if err != nil {
			bad = append(bad, mf.path)
			continue
		}
		same := st.Size() == mf.size && st.ModTime().Equal(mf.mtime)
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Ctim != mf.ctime {
			same = false
		}
		if !same {
			bad = append(bad, mf.path)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("changed during the save: %s", strings.Join(bad, ", "))
	}
	return nil
}

// Close unmaps the files (the shards' bytes go with them).
func (d *ckptDir) Close() {
	for i := range d.files {
		if d.files[i].data != nil {
			syscall.Munmap(d.files[i].data)
			d.files[i].data = nil
		}
	}
}

// ckptCopyOut copies shard name of job's step to the file p: streamed
// (ckpt.Store.CopyFile: pieces written as they arrive, checked against
// the manifest) into a temporary file beside p, renamed to p only once
// every byte checked out and is durable (fsync of the file, then of the
// directory after the rename), so that neither a failed restore nor a
// crash after one leaves a file that looks restored and is not. It
// returns the file's size.
func ckptCopyOut(ctx context.Context, s *ckpt.Store, job string, step int64, name, p string) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return 0, err
	}
	tmpName := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".restore-"+strconv.Itoa(os.Getpid()))
	tmp, err := createOut(tmpName)
	if errors.Is(err, os.ErrExist) {
		// The remains of a restore of this process id that died: ours now.
		os.Remove(tmpName)
		tmp, err = createOut(tmpName)
	}
	if err != nil {
		return 0, err
	}
	e, _, err := s.CopyFile(ctx, job, step, name, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmpName, p)
	}
	if err != nil {
		os.Remove(tmpName)
		return 0, err
	}
	if err := syncDir(filepath.Dir(p)); err != nil {
		return 0, err
	}
	return e.Size, nil
}
