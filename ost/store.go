package ost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/errs"
)

// MaxChunkSize is the largest chunk WriteChunk accepts: the largest
// payload of the data path.
const MaxChunkSize = datanet.MaxLength

// directAlign is the alignment O_DIRECT needs of file offsets, lengths and
// buffers (the logical block size of every disk Shoal runs on, or less).
const directAlign = datanet.Align

// directReadsByDefault is whether DirectDefault reads chunk data with
// O_DIRECT. docs/performance.md ("Data path: framed TCP and O_DIRECT")
// has the measurement behind it.
const directReadsByDefault = false

// compareBufSize is the buffer size used to compare a rewrite with the
// stored chunk.
const compareBufSize = 1 << 20

// maxRun bounds the bytes of whole blocks read by one ReadAt before they are
// verified: small enough to stay in the CPU cache between the copy and the
// checksum, large enough to keep syscalls few.
const maxRun = 512 << 10

// storeOptions configure a store.
type storeOptions struct {
	dir          string // the OST directory
	fs           vfs.FS // the file system dir is on; nil: vfs.Default (vfs.go)
	blockSize    int    // checksum block size of new chunks
	m            *metrics
	log          *slog.Logger
	bufs         *datanet.BufPool // aligned scratch buffers
	directWrites bool             // write chunk data with O_DIRECT where aligned
	directReads  bool             // read chunk data with O_DIRECT where aligned
	limit        uint64           // most bytes of chunk data held (Options.Capacity); 0: none
}

// store is the chunk store of one OST directory: files and counters, no RPC.
type store struct {
	dir       string // the OST directory
	fs        vfs.FS // the file system dir is on (vfs.go)
	raw       bool   // fs is vfs.Default: the OS fast paths of vfs.go apply
	blockSize int    // checksum block size of new chunks
	m         *metrics
	log       *slog.Logger
	bufs      *datanet.BufPool

	// directWrites and directReads are the O_DIRECT choices of
	// storeOptions, both cleared for good (and logged once, by
	// directRefused) when the file system refuses O_DIRECT.
	directWrites  atomic.Bool
	directReads   atomic.Bool
	directRefused sync.Once

	tmpSeq atomic.Uint64 // names temp files; tmp/ is emptied at open

	// openFile opens chunk data files on the OS fast path of vfs.go
	// (os.OpenFile; tests inject errors).
	openFile func(name string, flag int, perm os.FileMode) (*os.File, error)

	// stripes serialise writes and deletes of one chunk (see package doc).
	stripes [256]sync.Mutex
	seed    maphash.Seed

	used   atomic.Int64 // bytes in data files
	chunks atomic.Int64 // data files

	limit    int64        // most bytes in data files; 0: no limit
	reserved atomic.Int64 // bytes of chunk writes in progress, counted against limit

	clog *chunkLog // the small-write path (chunklog.go); nil: none
}

// openStore prepares dir's chunks/ and tmp/ directories, empties tmp/,
// checks that the file system takes O_DIRECT (when asked to use it) and
// scans the chunks to set the counters.
func openStore(ctx context.Context, o storeOptions) (*store, scanReport, error) {
	dir := o.dir
	if o.fs == nil {
		o.fs = vfs.Default
	}
	if o.fs != vfs.Default {
		// O_DIRECT needs the OS's file system (vfs.go).
		o.directWrites, o.directReads = false, false
	}
	st := &store{dir: dir, fs: o.fs, raw: o.fs == vfs.Default, blockSize: o.blockSize, m: o.m, log: o.log, bufs: o.bufs, seed: maphash.MakeSeed(), openFile: os.OpenFile, limit: int64(min(o.limit, 1<<62))}
	st.directWrites.Store(o.directWrites)
	st.directReads.Store(o.directReads)
	if err := st.fs.RemoveAll(filepath.Join(dir, tmpDir)); err != nil {
		return nil, scanReport{}, fmt.Errorf("ost: clean %s: %w", tmpDir, err)
	}
	if err := st.fs.MkdirAll(filepath.Join(dir, tmpDir), 0o700); err != nil {
		return nil, scanReport{}, fmt.Errorf("ost: %w", err)
	}
	for i := range fanout {
		if err := st.fs.MkdirAll(filepath.Join(dir, chunksDir, shardName(uint64(i))), 0o755); err != nil {
			return nil, scanReport{}, fmt.Errorf("ost: %w", err)
		}
	}
	for _, d := range []string{filepath.Join(dir, chunksDir), dir} {
		if err := st.fsyncDir(d); err != nil {
			return nil, scanReport{}, fmt.Errorf("ost: %w", err)
		}
	}
	if o.directWrites || o.directReads {
		if err := st.probeDirect(); err != nil {
			return nil, scanReport{}, err
		}
	}
	clog, replayed, err := openChunkLog(st)
	if err != nil {
		return nil, scanReport{}, err
	}
	rep, err := st.scan(ctx)
	if err != nil {
		clog.close()
		return nil, scanReport{}, err
	}
	st.clog = clog
	rep.replayed = replayed
	return st, rep, nil
}

// scanReport is what scan found out of the ordinary, for the log.
type scanReport struct {
	replayed       int      // chunks of the chunk log written as files again
	orphanSidecars int      // sidecars without data (interrupted write or delete), removed
	missingSidecar []string // data files without a sidecar: reads report them corrupt
	strays         []string // files under chunks/ that are not chunk files, left alone
}

// scan counts the chunks and their bytes, and removes sidecars whose data
// file is missing.
func (st *store) scan(ctx context.Context) (scanReport, error) {
	var rep scanReport
	var used, n int64
	for i := range fanout {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		shard := filepath.Join(st.dir, chunksDir, shardName(uint64(i)))
		ents, err := st.readDir(shard)
		if err != nil {
			return rep, fmt.Errorf("ost: scan: %w", err)
		}
		data := make(map[chunkID]bool)
		sidecars := make(map[chunkID]bool)
		for _, e := range ents {
			c, sidecar, ok := parseChunkName(e.Name())
			if !ok || !e.Type().IsRegular() {
				rep.strays = append(rep.strays, filepath.Join(shard, e.Name()))
				continue
			}
			if sidecar {
				sidecars[c] = true
				continue
			}
			fi, err := e.Info()
			if err != nil {
				return rep, fmt.Errorf("ost: scan: %w", err)
			}
			data[c] = true
			used += fi.Size()
			n++
		}
		for c := range sidecars {
			if !data[c] {
				if err := st.fs.Remove(st.sidecarPath(c)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return rep, fmt.Errorf("ost: scan: %w", err)
				}
				rep.orphanSidecars++
			}
		}
		for c := range data {
			if !sidecars[c] {
				rep.missingSidecar = append(rep.missingSidecar, c.String())
			}
		}
	}
	st.used.Store(used)
	st.chunks.Store(n)
	return rep, nil
}

func (st *store) dataPath(c chunkID) string    { return filepath.Join(st.dir, relDataPath(c)) }
func (st *store) sidecarPath(c chunkID) string { return st.dataPath(c) + crcSuffix }

func (st *store) stripe(c chunkID) *sync.Mutex {
	var h maphash.Hash
	h.SetSeed(st.seed)
	var b [12]byte
	for i := range 8 {
		b[i] = byte(c.extent >> (8 * i))
	}
	for i := range 4 {
		b[8+i] = byte(c.index >> (8 * i))
	}
	h.Write(b[:])
	return &st.stripes[h.Sum64()%uint64(len(st.stripes))]
}

// probeDirect writes one aligned block with O_DIRECT to a temp file, and
// turns O_DIRECT off (see refuseDirect) when the file system refuses it.
func (st *store) probeDirect() error {
	path := filepath.Join(st.dir, tmpDir, "direct-probe")
	f, err := st.openFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_DIRECT, 0o600)
	if errors.Is(err, syscall.EINVAL) {
		st.refuseDirect(err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("ost: probe O_DIRECT: %w", err)
	}
	defer os.Remove(path)
	defer f.Close()
	b := st.bufs.Get(directAlign)
	defer st.bufs.Put(b)
	clear(b)
	if _, err := f.Write(b); errors.Is(err, syscall.EINVAL) {
		st.refuseDirect(err)
	} else if err != nil {
		return fmt.Errorf("ost: probe O_DIRECT: %w", err)
	}
	return nil
}

// refuseDirect turns O_DIRECT off for the life of the store, because the
// file system refused it (tmpfs does), and logs that once.
func (st *store) refuseDirect(err error) {
	st.directWrites.Store(false)
	st.directReads.Store(false)
	st.directRefused.Do(func() {
		st.log.Info("the file system refuses O_DIRECT; chunk data goes through the page cache", "dir", st.dir, "err", err)
	})
}

// write stores data as chunk c and makes it durable. A chunk of at most
// smallChunk bytes is appended to the chunk log (chunklog.go) and is
// durable once the log's group fdatasync covers it; its files are written
// right after, in the background. A larger one (or any, when the log
// cannot take it) goes to files directly (writeFiles). An existing chunk
// with the same bytes is success (its durability is made sure again);
// different bytes are errs.ErrExists. It reports whether it created the
// chunk.
func (st *store) write(c chunkID, data []byte) (created bool, err error) {
	mu := st.stripe(c)
	mu.Lock()
	defer mu.Unlock()

	if logged, ok := st.clog.get(c); ok {
		if !bytes.Equal(logged, data) {
			return false, fmt.Errorf("ost: write chunk %s: stored with different bytes: %w", c, errs.ErrExists)
		}
		return false, nil
	}
	path := st.dataPath(c)
	fi, err := st.lstat(path)
	switch {
	case err == nil:
		return false, st.sameChunk(c, path, fi, data)
	case !errors.Is(err, fs.ErrNotExist):
		return false, diskErr("write", c, err)
	}

	if err := st.reserve(int64(len(data))); err != nil {
		return false, diskErr("write", c, err)
	}
	defer st.reserved.Add(-int64(len(data)))
	if !st.clog.append(c, data) {
		placed, err := st.writeFiles(c, data, true)
		if !placed {
			return false, err
		}
		st.used.Add(int64(len(data)))
		st.chunks.Add(1)
		return true, err
	}
	st.used.Add(int64(len(data)))
	st.chunks.Add(1)
	return true, nil
}

// writeFiles writes chunk c's sidecar and data to temp files and renames
// them into place, sidecar first (the data file's presence seals the
// chunk). With sync, each temp file is fdatasynced before its rename and
// the directory after, so the chunk is durable when it returns; without,
// the chunk log holds its bytes until chunkLog.retire makes the files
// durable. The caller holds c's stripe lock and has checked that c has no
// data file. It reports whether the files are in place (an error after
// that is the directory's fsync).
func (st *store) writeFiles(c chunkID, data []byte, sync bool) (placed bool, err error) {
	tab, err := checksum.Compute(data, st.blockSize)
	if err != nil {
		return false, fmt.Errorf("ost: write chunk %s: %w", c, err)
	}
	dataTmp, err := st.writeChunkTemp(data, sync, sync)
	if err != nil {
		return false, diskErr("write", c, err)
	}
	return st.placeFiles(c, tab, dataTmp, sync)
}

// placeFiles writes chunk c's sidecar (of tab) to a temp file and renames
// it and dataTmp, the chunk's data already written (and with sync
// fdatasynced), into place, sidecar first; with sync, then fsyncs the
// directory. It removes dataTmp when it fails before placing it, and
// reports whether the files are in place.
func (st *store) placeFiles(c chunkID, tab checksum.Table, dataTmp string, sync bool) (placed bool, err error) {
	path := st.dataPath(c)
	crcTmp, err := st.writeChunkTemp(tab.Encode(), false, sync)
	if err != nil {
		st.fs.Remove(dataTmp)
		return false, diskErr("write sidecar of", c, err)
	}
	if err := st.fs.Rename(crcTmp, st.sidecarPath(c)); err != nil {
		st.fs.Remove(crcTmp)
		st.fs.Remove(dataTmp)
		return false, diskErr("write", c, err)
	}
	if err := st.fs.Rename(dataTmp, path); err != nil {
		st.fs.Remove(dataTmp)
		st.fs.Remove(st.sidecarPath(c))
		return false, diskErr("write", c, err)
	}
	if !sync {
		return true, nil
	}
	if err := st.fsyncDir(filepath.Dir(path)); err != nil {
		return true, diskErr("sync directory of", c, err)
	}
	return true, nil
}

// reserve counts n bytes of a chunk write against the store's limit
// until the caller takes them off reserved again; syscall.ENOSPC when
// they do not fit.
func (st *store) reserve(n int64) error {
	for {
		r := st.reserved.Load()
		if st.limit > 0 && st.used.Load()+r+n > st.limit {
			return fmt.Errorf("%d bytes more would pass the OST's capacity of %d bytes: %w", n, st.limit, syscall.ENOSPC)
		}
		if st.reserved.CompareAndSwap(r, r+n) {
			return nil
		}
	}
}

// writeChunkTemp writes b to a new file in tmp/, syncs it (fdatasync)
// when sync is set, closes it, and returns its path. With direct, b goes to the disk with
// O_DIRECT, skipping the page cache, when the store may use it and b's
// address and length are aligned; otherwise, or when the write is refused
// (EINVAL), through the page cache.
func (st *store) writeChunkTemp(b []byte, direct, sync bool) (string, error) {
	direct = direct && st.directWrites.Load() && len(b)%directAlign == 0 && datanet.IsAligned(b)
	for {
		f, path, err := st.newTemp(&direct)
		if err != nil {
			return "", err
		}
		_, err = f.Write(b)
		if direct && errors.Is(err, syscall.EINVAL) {
			// Alignment the checks above did not foresee: this write
			// goes through the page cache.
			f.Close()
			st.fs.Remove(path)
			direct = false
			continue
		}
		if err == nil && sync {
			err = f.SyncData()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			st.fs.Remove(path)
			return "", err
		}
		return path, nil
	}
}

// newTemp creates a new temp file in tmp/ for a chunk write, with O_DIRECT
// when *direct, which it clears when the file system refuses O_DIRECT.
func (st *store) newTemp(direct *bool) (vfs.File, string, error) {
	for {
		path := filepath.Join(st.dir, tmpDir, "w-"+strconv.FormatUint(st.tmpSeq.Add(1), 10))
		f, err := st.createTemp(path, *direct)
		switch {
		case errors.Is(err, fs.ErrExist):
			continue
		case *direct && errors.Is(err, syscall.EINVAL):
			st.refuseDirect(err)
			*direct = false
			continue
		case err != nil:
			return nil, "", err
		}
		return f, path, nil
	}
}

// fdatasync flushes f's data and the metadata needed to read it back.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &fs.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

// sameChunk compares the stored chunk at path with data: nil if equal
// (after fsyncing the directory), errs.ErrExists if not.
func (st *store) sameChunk(c chunkID, path string, fi fs.FileInfo, data []byte) error {
	exists := func() error {
		return fmt.Errorf("ost: write chunk %s: stored with different bytes: %w", c, errs.ErrExists)
	}
	if fi.Size() != int64(len(data)) {
		return exists()
	}
	f, err := st.open(path)
	if err != nil {
		return diskErr("compare", c, err)
	}
	defer f.Close()
	buf := st.bufs.Get(compareBufSize)
	defer st.bufs.Put(buf)
	for off := 0; off < len(data); {
		n := min(len(buf), len(data)-off)
		if _, err := f.ReadAt(buf[:n], int64(off)); err != nil {
			return diskErr("compare", c, err)
		}
		if !bytes.Equal(buf[:n], data[off:off+n]) {
			return exists()
		}
		off += n
	}
	if err := st.fsyncDir(filepath.Dir(path)); err != nil {
		return diskErr("sync directory of", c, err)
	}
	return nil
}

// read returns bytes [off, off+n) of chunk c after verifying the checksum
// of every block they touch. The range is checked against the chunk's size
// before anything is allocated.
func (st *store) read(c chunkID, off, n uint64) ([]byte, error) {
	size, err := st.stat(c)
	if err != nil {
		return nil, err
	}
	if off > size || n > size-off {
		return nil, rangeErr(c, off, n, size)
	}
	if n == 0 {
		return []byte{}, nil
	}
	dst := make([]byte, n)
	if err := st.readInto(c, off, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

func rangeErr(c chunkID, off, n, size uint64) error {
	return fmt.Errorf("ost: read chunk %s: range [%d, %d+%d) outside its %d bytes: %w",
		c, off, off, n, size, errs.ErrInvalid)
}

// readInto fills dst with bytes [off, off+len(dst)) of chunk c after
// verifying the checksum of every block they touch. It reads with O_DIRECT
// when the store reads direct and the range, dst, the chunk's size and its
// checksum blocks are all aligned; through the page cache otherwise.
func (st *store) readInto(c chunkID, off uint64, dst []byte) error {
	n := uint64(len(dst))
	if b, ok := st.clog.get(c); ok {
		if off > uint64(len(b)) || n > uint64(len(b))-off {
			return rangeErr(c, off, n, uint64(len(b)))
		}
		copy(dst, b[off:])
		st.m.readBytes.Add(float64(n))
		return nil
	}
	direct := st.directReads.Load() && n > 0 && off%directAlign == 0 && n%directAlign == 0 && datanet.IsAligned(dst)
	path := st.dataPath(c)
	f, direct, err := st.openData(path, direct)
	if err != nil {
		return diskErr("read", c, err)
	}
	defer func() { f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return diskErr("read", c, err)
	}
	size := uint64(fi.Size())
	if off > size || n > size-off {
		return rangeErr(c, off, n, size)
	}
	if n == 0 {
		return nil
	}
	tab, err := st.loadSidecar(c, size)
	if err != nil {
		return err
	}
	if direct && (size%directAlign != 0 || uint64(tab.BlockSize)%directAlign != 0) {
		// Some block ends off the alignment: read through the page cache.
		f.Close()
		if f, err = st.open(path); err != nil {
			return diskErr("read", c, err)
		}
		direct = false
	}
	err = st.readVerified(c, f, tab, off, dst)
	if direct && errors.Is(err, syscall.EINVAL) {
		// The disk wants a larger alignment than directAlign.
		st.directReads.Store(false)
		st.log.Warn("O_DIRECT read refused; chunk reads go through the page cache", "chunk", c.String(), "err", err)
		f.Close()
		if f, err = st.open(path); err != nil {
			return diskErr("read", c, err)
		}
		err = st.readVerified(c, f, tab, off, dst)
	}
	if err != nil {
		return err
	}
	st.m.readBytes.Add(float64(n))
	return nil
}

// openChunk opens chunk c's data file for reading through the page cache,
// and again with O_DIRECT where the store's writes use it (nil
// otherwise), and returns them with its encoded checksum table, checked
// against the file's size, for a client on this host to read and verify
// itself (datanet's OpOpen). A chunk in the chunk log, or a store on a
// file system other than the OS's (tests' fault injection), is
// errs.ErrNotSupported: the client reads it with OpRead.
func (st *store) openChunk(c chunkID) (f, direct *os.File, table []byte, err error) {
	if !st.raw {
		return nil, nil, nil, fmt.Errorf("ost: open chunk %s: the store is not on the OS's file system: %w", c, errs.ErrNotSupported)
	}
	if _, ok := st.clog.get(c); ok {
		return nil, nil, nil, fmt.Errorf("ost: open chunk %s: in the chunk log: %w", c, errs.ErrNotSupported)
	}
	path := st.dataPath(c)
	if f, err = st.openFile(path, os.O_RDONLY, 0); err != nil {
		return nil, nil, nil, diskErr("open", c, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, nil, diskErr("open", c, err)
	}
	tab, err := st.loadSidecar(c, uint64(fi.Size()))
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	if st.directWrites.Load() {
		if d, err := st.openFile(path, os.O_RDONLY|syscall.O_DIRECT, 0); err == nil {
			direct = d
		}
	}
	return f, direct, tab.Encode(), nil
}

// openData opens a chunk's data file for reading, with O_DIRECT when
// direct is set and the file system allows it. It reports whether the file
// is open with O_DIRECT.
func (st *store) openData(path string, direct bool) (vfs.File, bool, error) {
	if direct && st.raw {
		f, err := st.openFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
		if err == nil {
			return osFile{f}, true, nil
		}
		if !errors.Is(err, syscall.EINVAL) {
			return nil, false, err
		}
		st.refuseDirect(err)
	}
	f, err := st.open(path)
	return f, false, err
}

// loadSidecar reads and decodes the checksum table of chunk c, whose data
// file has size bytes.
func (st *store) loadSidecar(c chunkID, size uint64) (checksum.Table, error) {
	b, err := st.readSidecar(c, size)
	if err != nil {
		return checksum.Table{}, err
	}
	tab, err := checksum.Decode(b)
	if err != nil {
		st.m.corruptBlocks.Inc()
		return checksum.Table{}, corruptErr(c, SidecarBlock, "%v", err)
	}
	if tab.Length != size {
		st.m.corruptBlocks.Inc()
		return checksum.Table{}, corruptErr(c, SidecarBlock, "covers %d bytes, data file has %d", tab.Length, size)
	}
	return tab, nil
}

func (st *store) readSidecar(c chunkID, size uint64) ([]byte, error) {
	f, err := st.open(st.sidecarPath(c))
	if errors.Is(err, fs.ErrNotExist) {
		// Either a delete raced this read (it removes data, then sidecar),
		// or the sidecar is lost.
		if _, serr := st.lstat(st.dataPath(c)); errors.Is(serr, fs.ErrNotExist) {
			return nil, diskErr("read", c, serr)
		}
		st.m.corruptBlocks.Inc()
		return nil, corruptErr(c, SidecarBlock, "missing")
	}
	if err != nil {
		return nil, diskErr("read sidecar of", c, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, diskErr("read sidecar of", c, err)
	}
	// No valid sidecar of this data file is longer than one with the
	// smallest block size; never read (or allocate) more than that.
	if limit := checksum.EncodedSize(size, checksum.MinBlockSize); uint64(fi.Size()) > limit {
		st.m.corruptBlocks.Inc()
		return nil, corruptErr(c, SidecarBlock, "%d bytes, at most %d expected", fi.Size(), limit)
	}
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, readErr(c, SidecarBlock, err)
	}
	return b, nil
}

// readVerified fills dst with bytes [off, off+len(dst)) of the data file f,
// verifying every block they touch (checksum.Table.ReadVerified: whole
// blocks straight into dst, a partly wanted block at either end through a
// pooled, aligned buffer, since f may be open with O_DIRECT).
func (st *store) readVerified(c chunkID, f vfs.File, tab checksum.Table, off uint64, dst []byte) error {
	err := tab.ReadVerified(f, off, dst, maxRun, st.bufs.Get, st.bufs.Put)
	var re *checksum.ReadError
	var me *checksum.MismatchError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re):
		return readErr(c, re.Block, re.Err)
	case errors.As(err, &me):
		st.m.corruptBlocks.Inc()
		return corruptErr(c, me.Block, "crc32c %08x, want %08x", me.Got, me.Want)
	}
	return fmt.Errorf("ost: chunk %s: %w", c, err)
}

// stat returns the length of chunk c.
func (st *store) stat(c chunkID) (uint64, error) {
	if b, ok := st.clog.get(c); ok {
		return uint64(len(b)), nil
	}
	fi, err := st.lstat(st.dataPath(c))
	if err != nil {
		return 0, diskErr("stat", c, err)
	}
	return uint64(fi.Size()), nil
}

// remove deletes chunk c, data first, then its sidecar (or, for a chunk
// still in the chunk log, its entry there), and reports whether the chunk
// existed. A missing chunk is not an error. The directory is not
// fsynced: a delete lost in a crash leaves an orphan that GC deletes again.
func (st *store) remove(c chunkID) (bool, error) {
	mu := st.stripe(c)
	mu.Lock()
	defer mu.Unlock()

	if b, ok := st.clog.drop(c); ok {
		st.used.Add(-int64(len(b)))
		st.chunks.Add(-1)
		return true, nil
	}
	path := st.dataPath(c)
	fi, err := st.lstat(path)
	existed := err == nil
	switch {
	case existed:
		if err := st.fs.Remove(path); err != nil {
			return false, diskErr("delete", c, err)
		}
		st.used.Add(-fi.Size())
		st.chunks.Add(-1)
	case !errors.Is(err, fs.ErrNotExist):
		return false, diskErr("delete", c, err)
	}
	if err := st.fs.Remove(st.sidecarPath(c)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return existed, diskErr("delete sidecar of", c, err)
	}
	return existed, nil
}
