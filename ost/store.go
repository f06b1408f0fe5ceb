package ost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/errs"
)

// MaxChunkSize is the largest chunk WriteChunk accepts.
const MaxChunkSize = 64 << 20

// compareBufSize is the buffer size used to compare a rewrite with the
// stored chunk.
const compareBufSize = 1 << 20

// maxRun bounds the bytes of whole blocks read by one ReadAt before they are
// verified: small enough to stay in the CPU cache between the copy and the
// checksum, large enough to keep syscalls few.
const maxRun = 512 << 10

// store is the chunk store of one OST directory: files and counters, no RPC.
type store struct {
	dir       string // the OST directory
	blockSize int    // checksum block size of new chunks
	m         *metrics

	// stripes serialise writes and deletes of one chunk (see package doc).
	stripes [256]sync.Mutex
	seed    maphash.Seed

	used   atomic.Int64 // bytes in data files
	chunks atomic.Int64 // data files

	bufs sync.Pool // *[]byte, scratch for edge blocks and compares
}

// openStore prepares dir's chunks/ and tmp/ directories, empties tmp/ and
// scans the chunks to set the counters.
func openStore(ctx context.Context, dir string, blockSize int, m *metrics) (*store, scanReport, error) {
	st := &store{dir: dir, blockSize: blockSize, m: m, seed: maphash.MakeSeed()}
	if err := os.RemoveAll(filepath.Join(dir, tmpDir)); err != nil {
		return nil, scanReport{}, fmt.Errorf("ost: clean %s: %w", tmpDir, err)
	}
	if err := os.Mkdir(filepath.Join(dir, tmpDir), 0o700); err != nil {
		return nil, scanReport{}, fmt.Errorf("ost: %w", err)
	}
	for i := range fanout {
		if err := os.MkdirAll(filepath.Join(dir, chunksDir, shardName(uint64(i))), 0o755); err != nil {
			return nil, scanReport{}, fmt.Errorf("ost: %w", err)
		}
	}
	for _, d := range []string{filepath.Join(dir, chunksDir), dir} {
		if err := syncDir(d); err != nil {
			return nil, scanReport{}, fmt.Errorf("ost: %w", err)
		}
	}
	rep, err := st.scan(ctx)
	if err != nil {
		return nil, scanReport{}, err
	}
	return st, rep, nil
}

// scanReport is what scan found out of the ordinary, for the log.
type scanReport struct {
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
		ents, err := os.ReadDir(shard)
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
				if err := os.Remove(st.sidecarPath(c)); err != nil && !errors.Is(err, fs.ErrNotExist) {
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

// getBuf returns a pooled buffer of length n; putBuf gives it back.
func (st *store) getBuf(n int) *[]byte {
	if p, ok := st.bufs.Get().(*[]byte); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]byte, n)
	return &b
}

func (st *store) putBuf(p *[]byte) { st.bufs.Put(p) }

// write stores data as chunk c and makes it durable: data and sidecar go to
// temp files, are fsynced, renamed into place (sidecar first; the data
// file's presence seals the chunk), and the directory is fsynced. An
// existing chunk with the same bytes is success (the directory is fsynced
// again, so a retry after a failed fsync is durable too); different bytes
// are errs.ErrExists. It reports whether it created the chunk.
func (st *store) write(c chunkID, data []byte) (created bool, err error) {
	mu := st.stripe(c)
	mu.Lock()
	defer mu.Unlock()

	path := st.dataPath(c)
	fi, err := os.Lstat(path)
	switch {
	case err == nil:
		return false, st.sameChunk(c, path, fi, data)
	case !errors.Is(err, fs.ErrNotExist):
		return false, diskErr("write", c, err)
	}

	tab, err := checksum.Compute(data, st.blockSize)
	if err != nil {
		return false, fmt.Errorf("ost: write chunk %s: %w", c, err)
	}
	crcTmp, err := writeTemp(filepath.Join(st.dir, tmpDir), "w-", tab.Encode())
	if err != nil {
		return false, diskErr("write sidecar of", c, err)
	}
	dataTmp, err := writeTemp(filepath.Join(st.dir, tmpDir), "w-", data)
	if err != nil {
		os.Remove(crcTmp)
		return false, diskErr("write", c, err)
	}
	if err := os.Rename(crcTmp, st.sidecarPath(c)); err != nil {
		os.Remove(crcTmp)
		os.Remove(dataTmp)
		return false, diskErr("write", c, err)
	}
	if err := os.Rename(dataTmp, path); err != nil {
		os.Remove(dataTmp)
		os.Remove(st.sidecarPath(c))
		return false, diskErr("write", c, err)
	}
	st.used.Add(int64(len(data)))
	st.chunks.Add(1)
	if err := syncDir(filepath.Dir(path)); err != nil {
		return true, diskErr("sync directory of", c, err)
	}
	return true, nil
}

// writeTemp writes b to a new file in dir, fsyncs and closes it, and
// returns its path.
func writeTemp(dir, pattern string, b []byte) (string, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
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
	f, err := os.Open(path)
	if err != nil {
		return diskErr("compare", c, err)
	}
	defer f.Close()
	p := st.getBuf(compareBufSize)
	defer st.putBuf(p)
	buf := *p
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
	if err := syncDir(filepath.Dir(path)); err != nil {
		return diskErr("sync directory of", c, err)
	}
	return nil
}

// read returns bytes [off, off+n) of chunk c after verifying the checksum
// of every block they touch.
func (st *store) read(c chunkID, off, n uint64) ([]byte, error) {
	f, err := os.Open(st.dataPath(c))
	if err != nil {
		return nil, diskErr("read", c, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, diskErr("read", c, err)
	}
	size := uint64(fi.Size())
	if off > size || n > size-off {
		return nil, fmt.Errorf("ost: read chunk %s: range [%d, %d+%d) outside its %d bytes: %w",
			c, off, off, n, size, errs.ErrInvalid)
	}
	if n == 0 {
		return []byte{}, nil
	}
	tab, err := st.loadSidecar(c, size)
	if err != nil {
		return nil, err
	}
	dst := make([]byte, n)
	if err := st.readVerified(c, f, tab, off, dst); err != nil {
		return nil, err
	}
	st.m.readBytes.Add(float64(n))
	return dst, nil
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
	f, err := os.Open(st.sidecarPath(c))
	if errors.Is(err, fs.ErrNotExist) {
		// Either a delete raced this read (it removes data, then sidecar),
		// or the sidecar is lost.
		if _, serr := os.Lstat(st.dataPath(c)); errors.Is(serr, fs.ErrNotExist) {
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
// verifying every block they touch. Whole blocks are read straight into dst,
// in one ReadAt per run; a partly wanted block at either end goes through a
// pooled buffer.
func (st *store) readVerified(c chunkID, f *os.File, tab checksum.Table, off uint64, dst []byte) error {
	bs := uint64(tab.BlockSize)
	end := off + uint64(len(dst))
	for pos := off; pos < end; {
		b := int(pos / bs)
		bstart, bend := tab.BlockRange(b)
		if pos == bstart && bend <= end {
			// A run of whole blocks [pos, runEnd), at most maxRun bytes
			// (or one block) so that the blocks are still in cache when
			// their checksums are computed.
			last := b
			for last+1 < len(tab.Sums) {
				_, e := tab.BlockRange(last + 1)
				if e > end || e-pos > maxRun {
					break
				}
				last++
			}
			_, runEnd := tab.BlockRange(last)
			run := dst[pos-off : runEnd-off]
			if _, err := f.ReadAt(run, int64(pos)); err != nil {
				return readErr(c, b, err)
			}
			for i := b; i <= last; i++ {
				s, e := tab.BlockRange(i)
				if err := st.verify(c, tab, i, run[s-pos:e-pos]); err != nil {
					return err
				}
			}
			pos = runEnd
			continue
		}
		p := st.getBuf(int(bend - bstart))
		blk := *p
		if _, err := f.ReadAt(blk, int64(bstart)); err != nil {
			st.putBuf(p)
			return readErr(c, b, err)
		}
		if err := st.verify(c, tab, b, blk); err != nil {
			st.putBuf(p)
			return err
		}
		stop := min(bend, end)
		copy(dst[pos-off:stop-off], blk[pos-bstart:stop-bstart])
		st.putBuf(p)
		pos = stop
	}
	return nil
}

func (st *store) verify(c chunkID, tab checksum.Table, i int, p []byte) error {
	err := tab.Verify(i, p)
	if err == nil {
		return nil
	}
	var me *checksum.MismatchError
	if errors.As(err, &me) {
		st.m.corruptBlocks.Inc()
		return corruptErr(c, i, "crc32c %08x, want %08x", me.Got, me.Want)
	}
	return fmt.Errorf("ost: chunk %s: %w", c, err)
}

// stat returns the length of chunk c.
func (st *store) stat(c chunkID) (uint64, error) {
	fi, err := os.Lstat(st.dataPath(c))
	if err != nil {
		return 0, diskErr("stat", c, err)
	}
	return uint64(fi.Size()), nil
}

// remove deletes chunk c, data first, then its sidecar, and reports whether
// the chunk existed. A missing chunk is not an error. The directory is not
// fsynced: a delete lost in a crash leaves an orphan that GC deletes again.
func (st *store) remove(c chunkID) (bool, error) {
	mu := st.stripe(c)
	mu.Lock()
	defer mu.Unlock()

	path := st.dataPath(c)
	fi, err := os.Lstat(path)
	existed := err == nil
	switch {
	case existed:
		if err := os.Remove(path); err != nil {
			return false, diskErr("delete", c, err)
		}
		st.used.Add(-fi.Size())
		st.chunks.Add(-1)
	case !errors.Is(err, fs.ErrNotExist):
		return false, diskErr("delete", c, err)
	}
	if err := os.Remove(st.sidecarPath(c)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return existed, diskErr("delete sidecar of", c, err)
	}
	return existed, nil
}

// syncDir fsyncs a directory, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
