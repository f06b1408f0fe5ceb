package ost

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// The log files' format (docs/ost-format.md, "Chunk log"). A file is
// logFileSize bytes, written with zeros when it is made, so that records
// overwrite blocks it already has. Its first logHeaderSize bytes are the
// header:
//
//	magic "SHOALCLG" | version u32 | 0 u32 | generation u64 | CRC-32C u32 of the 24 bytes before
//
// and records follow it back to back from logHeaderSize:
//
//	magic u32 | CRC-32C u32 of the 32 header bytes after it | generation u64 |
//	extent u64 | index u32 | length u32 | CRC-32C u32 of the data | 0 u32 | data
//
// Integers are little-endian. The live records of a file are those from
// logHeaderSize that carry its header's generation and whose CRCs match,
// up to the first one that does not.

const (
	logVersion     = 1
	recHeaderSize  = 40
	recMagic       = 0x52474c43 // "CLGR"
	logHeaderBytes = 28
)

var logMagic = [8]byte{'S', 'H', 'O', 'A', 'L', 'C', 'L', 'G'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errNotExist is the error of a file that does not exist, on every FS.
var errNotExist = fs.ErrNotExist

// encodeRecord returns a record of chunk c with data, its generation and
// header CRC left for sealRecord.
func encodeRecord(c chunkID, data []byte) []byte {
	rec := make([]byte, recHeaderSize+len(data))
	binary.LittleEndian.PutUint32(rec[0:], recMagic)
	binary.LittleEndian.PutUint64(rec[16:], c.extent)
	binary.LittleEndian.PutUint32(rec[24:], c.index)
	binary.LittleEndian.PutUint32(rec[28:], uint32(len(data)))
	binary.LittleEndian.PutUint32(rec[32:], crc32.Checksum(data, castagnoli))
	copy(rec[recHeaderSize:], data)
	return rec
}

// sealRecord sets a record's generation and header CRC.
func sealRecord(rec []byte, gen uint64) {
	binary.LittleEndian.PutUint64(rec[8:], gen)
	binary.LittleEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:recHeaderSize], castagnoli))
}

// logRecord is a live record found by readLog.
type logRecord struct {
	c    chunkID
	data []byte
}

// readLog returns the live records of a log file's contents b whose
// header has generation gen.
func readLog(b []byte, gen uint64) []logRecord {
	var out []logRecord
	for off := logHeaderSize; off+recHeaderSize <= len(b); {
		h := b[off : off+recHeaderSize]
		if binary.LittleEndian.Uint32(h[0:]) != recMagic ||
			binary.LittleEndian.Uint32(h[4:]) != crc32.Checksum(h[8:], castagnoli) ||
			binary.LittleEndian.Uint64(h[8:]) != gen {
			break
		}
		n := int(binary.LittleEndian.Uint32(h[28:]))
		if n == 0 || n > smallChunk || off+recHeaderSize+n > len(b) {
			break
		}
		data := b[off+recHeaderSize : off+recHeaderSize+n]
		if crc32.Checksum(data, castagnoli) != binary.LittleEndian.Uint32(h[32:]) {
			break
		}
		c := chunkID{extent: binary.LittleEndian.Uint64(h[16:]), index: binary.LittleEndian.Uint32(h[24:])}
		out = append(out, logRecord{c: c, data: data})
		off += recHeaderSize + n
	}
	return out
}

// parseLogHeader returns the generation of a log file's header, and false
// when b holds no valid header.
func parseLogHeader(b []byte) (uint64, bool) {
	if len(b) < logHeaderBytes || [8]byte(b[:8]) != logMagic ||
		binary.LittleEndian.Uint32(b[8:]) != logVersion ||
		binary.LittleEndian.Uint32(b[24:]) != crc32.Checksum(b[:24], castagnoli) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[16:]), true
}

// writeLogHeader writes a header of generation gen and syncs it.
func writeLogHeader(f vfs.File, gen uint64) error {
	b := make([]byte, logHeaderSize)
	copy(b, logMagic[:])
	binary.LittleEndian.PutUint32(b[8:], logVersion)
	binary.LittleEndian.PutUint64(b[16:], gen)
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[:24], castagnoli))
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("ost: chunk log header: %w", err)
	}
	if err := f.SyncData(); err != nil {
		return fmt.Errorf("ost: chunk log header: %w", err)
	}
	return nil
}

// openChunkLog opens (or makes) the two log files of st, writes the live
// records of the last run as chunk files (replay), retires both files and
// starts the flusher. It runs before the store counts its chunks.
func openChunkLog(st *store) (*chunkLog, int, error) {
	dir := filepath.Join(st.dir, logDir)
	if err := st.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("ost: %w", err)
	}
	l := &chunkLog{st: st, table: map[chunkID]logEntry{}, kick: make(chan struct{}, 1), full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	l.cond.L = &l.mu
	fail := func(err error) (*chunkLog, int, error) {
		for _, f := range l.files {
			if f != nil {
				f.f.Close()
			}
		}
		return nil, 0, err
	}
	var recs []logRecord
	for i := range l.files {
		f, rs, err := openLogFile(st, filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			return fail(err)
		}
		l.files[i] = f
		recs = append(recs, rs...)
	}
	for _, d := range []string{dir, st.dir} {
		if err := st.fsyncDir(d); err != nil {
			return fail(fmt.Errorf("ost: %w", err))
		}
	}
	// Replay: a live record's files may be missing, or present and not
	// durable; write them again.
	var cs []chunkID
	for _, r := range recs {
		for _, p := range []string{st.dataPath(r.c), st.sidecarPath(r.c)} {
			if err := st.fs.Remove(p); err != nil && !errors.Is(err, errNotExist) {
				return fail(diskErr("replay", r.c, err))
			}
		}
		if _, err := st.writeFiles(r.c, r.data, false); err != nil {
			return fail(err)
		}
		cs = append(cs, r.c)
	}
	if len(recs) > 0 {
		if err := st.syncChunkFiles(cs); err != nil {
			return fail(fmt.Errorf("ost: replay of the chunk log: %w", err))
		}
	}
	for _, f := range l.files {
		if f.off > logHeaderSize {
			if err := writeLogHeader(f.f, f.gen+1); err != nil {
				return fail(err)
			}
			f.gen++
			f.off, f.synced = logHeaderSize, logHeaderSize
		}
	}
	go l.run()
	return l, len(recs), nil
}

// openLogFile opens the log file at path and returns it with its live
// records; a missing file, or one without a valid header or of the wrong
// size, is made anew (zeros, then a header of generation 1).
func openLogFile(st *store, path string) (*logFile, []logRecord, error) {
	f, err := st.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, nil, fmt.Errorf("ost: open chunk log: %w", err)
	}
	lf := &logFile{f: f, path: path, off: logHeaderSize, synced: logHeaderSize}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("ost: chunk log: %w", err)
	}
	if fi.Size() == logFileSize {
		b := make([]byte, logFileSize)
		if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
			f.Close()
			return nil, nil, fmt.Errorf("ost: read chunk log %s: %w", path, err)
		}
		if gen, ok := parseLogHeader(b); ok {
			recs := readLog(b, gen)
			lf.gen = gen
			for _, r := range recs {
				lf.off += int64(recHeaderSize + len(r.data))
			}
			lf.synced = lf.off
			return lf, recs, nil
		}
	}
	// New, torn or foreign: zeros over the whole file, so that no record
	// of an earlier life can pass for one of generation 1.
	zero := make([]byte, 1<<20)
	for off := int64(0); off < logFileSize; off += int64(len(zero)) {
		if _, err := f.WriteAt(zero, off); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("ost: make chunk log %s: %w", path, err)
		}
	}
	if err := writeLogHeader(f, 1); err != nil {
		f.Close()
		return nil, nil, err
	}
	lf.gen = 1
	return lf, nil, nil
}

// syncFS makes everything written to the file system holding dir durable
// (syncfs(2)).
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ost: open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("ost: syncfs %s: %w", dir, err)
	}
	return nil
}
