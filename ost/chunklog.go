package ost

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The chunk log is the store's small-write path (docs/ost-format.md,
// "Chunk log"). A chunk of at most smallChunk bytes is appended, as one
// record, to the active one of two preallocated log files, and is durable
// once an fdatasync of that file covers it: one fdatasync serves every
// writer waiting at the time (group commit), and it writes over blocks
// the file already has, so it costs a flush of the data and no journal
// commit. A chunk written as files costs two fdatasyncs of new files and
// a directory fsync (store.writeFiles).
//
// The logged chunk is kept in memory (table) until the flusher has
// written its files, unsynced; reads, stats and deletes consult the table
// first. When the active file is full, writes move to the other one, and
// the full one is retired once every chunk it holds is in files: the
// files are made durable (syncfs on the OS's file system, one fsync each
// elsewhere), then the file's header gets a new generation, which makes
// its records stale. At open, the records of each file's generation are
// written as files again (replay), so a crash loses nothing acknowledged.
// A delete of a chunk whose record is still live and a crash after it
// bring the chunk back at replay, as an orphan: the MDS's GC deletes it
// again, as it does for a delete lost in a crash (store.remove).

const (
	logDir        = "log"       // log/0 and log/1
	logFileSize   = 4 << 20     // bytes of each log file, preallocated
	logHeaderSize = 4096        // the header block at offset 0
	smallChunk    = 64 << 10    // larger chunks are written as files
	logRetry      = time.Second // pause before the flusher retries after an error
	// logIdle is how long after the last append the flusher writes the
	// logged chunks as files (and at once when a log file is full):
	// while small writes keep coming, they have the disk to themselves.
	logIdle = 10 * time.Millisecond
)

// logEntry is a logged chunk not yet in files.
type logEntry struct {
	data []byte // the chunk's bytes (the tail of its record buffer)
	file int    // the log file holding its record
	end  int64  // the offset after its record
}

// logFile is one of the two log files.
type logFile struct {
	f       vfs.File
	path    string
	gen     uint64 // records of this generation are live
	off     int64  // where the next record goes
	synced  int64  // records before this offset are durable
	syncing bool   // an fdatasync of the file is running
	live    int    // table entries whose record is in this file
	full    bool   // writes moved to the other file; retired when live is 0
	// written lists the chunks moved to files since the last retire, on
	// file systems without syncfs (retire fsyncs each).
	written []chunkID
}

// chunkLog is the chunk log of a store. Its flusher goroutine is started
// by openChunkLog and stopped by close.
type chunkLog struct {
	st *store

	mu     sync.Mutex
	cond   sync.Cond // broadcast when a sync ends or a file is retired
	files  [2]*logFile
	cur    int                  // the active file
	table  map[chunkID]logEntry // logged chunks not yet in files
	broken error                // a failed log write or sync: no more appends
	closed bool

	kick chan struct{} // an append: the flusher waits for logIdle more (buffered, 1)
	full chan struct{} // a log file is full: the flusher runs now (buffered, 1)
	stop chan struct{} // closed by close
	done chan struct{} // closed when the flusher has returned
}

// get returns the bytes of chunk c if it is in the table. l may be nil.
func (l *chunkLog) get(c chunkID) ([]byte, bool) {
	if l == nil {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.table[c]
	return e.data, ok
}

// append logs chunk c and returns once its record is durable. It returns
// false, having logged nothing that counts, when the chunk is too big for
// the log, the log is closed or broken, or both files are full: the
// caller writes the chunk as files. The caller holds c's stripe lock and
// has checked that c is neither logged nor in files. l may be nil.
func (l *chunkLog) append(c chunkID, data []byte) bool {
	if l == nil || len(data) > smallChunk {
		return false
	}
	rec := encodeRecord(c, data)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken != nil || l.closed {
		return false
	}
	i := l.cur
	f := l.files[i]
	if f.off+int64(len(rec)) > logFileSize {
		o := l.files[1-i]
		f.full = true
		l.pokeFull()
		if o.full {
			return false // the other file is not retired yet
		}
		i = 1 - i
		l.cur, f = i, o
	}
	sealRecord(rec, f.gen)
	if _, err := f.f.WriteAt(rec, f.off); err != nil {
		l.fail(err)
		return false
	}
	f.off += int64(len(rec))
	e := logEntry{data: rec[recHeaderSize:], file: i, end: f.off}
	l.table[c] = e
	f.live++
	for f.synced < e.end && l.broken == nil {
		if f.syncing {
			l.cond.Wait()
			continue
		}
		f.syncing = true
		target := f.off
		l.mu.Unlock()
		err := f.f.SyncData()
		l.mu.Lock()
		f.syncing = false
		if err != nil {
			l.fail(err)
		} else {
			f.synced = max(f.synced, target)
		}
		l.cond.Broadcast()
	}
	if l.broken != nil {
		// Not known durable: the caller writes it as files. (Should
		// the record survive anyway, replay writes the same bytes.)
		delete(l.table, c)
		f.live--
		return false
	}
	l.st.m.logWrites.Inc()
	l.poke()
	return true
}

// fail marks the log broken by err: appends stop, the flusher writes the
// logged chunks as synced files. l.mu is held.
func (l *chunkLog) fail(err error) {
	if l.broken == nil {
		l.broken = err
		l.st.log.Error("chunk log failed; small chunks are written as files from now on", "dir", l.st.dir, "err", err)
	}
	l.cond.Broadcast()
}

// poke tells the flusher of an append.
func (l *chunkLog) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// pokeFull wakes the flusher at once.
func (l *chunkLog) pokeFull() {
	select {
	case l.full <- struct{}{}:
	default:
	}
}

// drop removes chunk c from the table and reports whether it was there
// (a delete of a logged chunk). The caller holds c's stripe lock. l may
// be nil.
func (l *chunkLog) drop(c chunkID) ([]byte, bool) {
	if l == nil {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.table[c]
	if ok {
		delete(l.table, c)
		l.files[e.file].live--
	}
	return e.data, ok
}

// flushChunk writes chunk c's files now if it is logged, so that its data
// file exists when it returns (Server.ChunkPath). l may be nil.
func (l *chunkLog) flushChunk(c chunkID) error {
	if l == nil {
		return nil
	}
	mu := l.st.stripe(c)
	mu.Lock()
	defer mu.Unlock()
	return l.writeOut(c)
}

// flushAll writes the files of every logged chunk whose record is
// durable, so that a listing of chunks/ finds them. l may be nil.
func (l *chunkLog) flushAll() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	ids := make([]chunkID, 0, len(l.table))
	for c, e := range l.table {
		if e.end <= l.files[e.file].synced {
			ids = append(ids, c)
		}
	}
	l.mu.Unlock()
	var first error
	for _, c := range ids {
		mu := l.st.stripe(c)
		mu.Lock()
		err := l.writeOut(c)
		mu.Unlock()
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// writeOut writes logged chunk c as files and takes it out of the table.
// The caller holds c's stripe lock. Files are synced only when the log is
// broken (a retire will not make them durable).
func (l *chunkLog) writeOut(c chunkID) error {
	l.mu.Lock()
	e, ok := l.table[c]
	sync := l.broken != nil
	l.mu.Unlock()
	if !ok {
		return nil
	}
	data := e.data
	if !l.st.raw {
		// vfs.File.Write may change the bytes it is given, and
		// readers may be copying e.data out of the table meanwhile.
		data = bytes.Clone(data)
	}
	if _, err := l.st.writeFiles(c, data, sync); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.table, c)
	f := l.files[e.file]
	f.live--
	if !l.st.raw && !sync {
		f.written = append(f.written, c)
	}
	return nil
}

// run is the flusher: it writes logged chunks as files once appends have
// paused for logIdle, or a log file is full, and retires full log files.
// It returns when close has been called and everything is written out.
func (l *chunkLog) run() {
	defer close(l.done)
	var retry <-chan time.Time
	idle := time.NewTimer(logIdle)
	defer idle.Stop()
	for {
		stopping := false
		select {
		case <-l.kick:
			idle.Reset(logIdle)
			continue
		case <-idle.C:
		case <-l.full:
		case <-retry:
		case <-l.stop:
			stopping = true
		}
		retry = nil
		err := l.flushAll()
		if err == nil {
			err = l.retireFull(stopping)
		}
		if err != nil {
			l.st.log.Warn("chunk log: writing logged chunks as files failed; retrying", "dir", l.st.dir, "err", err)
			if stopping {
				return // the records stay in the log: replay writes them at the next open
			}
			retry = time.After(logRetry)
			continue
		}
		if stopping {
			return
		}
	}
}

// retireFull retires each full file that holds no chunk of the table; with
// all, both files (at close).
func (l *chunkLog) retireFull(all bool) error {
	for i := range l.files {
		l.mu.Lock()
		f := l.files[i]
		due := (f.full || all) && f.live == 0 && f.off > logHeaderSize && !f.syncing && l.broken == nil
		l.mu.Unlock()
		if !due {
			continue
		}
		if err := l.retire(i); err != nil {
			return err
		}
	}
	return nil
}

// retire makes the files of the chunks that log file i held durable and
// gives the file a new generation, which empties it. Appends do not touch
// a full file, nor the active one while close runs it.
func (l *chunkLog) retire(i int) error {
	l.mu.Lock()
	f := l.files[i]
	written := f.written
	l.mu.Unlock()
	if err := l.st.syncChunkFiles(written); err != nil {
		return err
	}
	if err := writeLogHeader(f.f, f.gen+1); err != nil {
		l.mu.Lock()
		l.fail(err)
		l.mu.Unlock()
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f.gen++
	f.off, f.synced = logHeaderSize, logHeaderSize
	f.written = f.written[len(written):]
	f.full = false
	l.st.m.logRetires.Inc()
	l.cond.Broadcast()
	return nil
}

// close stops appends and the flusher, which writes out what is logged
// and retires both files, so that the next open has nothing to replay.
// l may be nil.
func (l *chunkLog) close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	var err error
	for _, f := range l.files {
		err = errors.Join(err, f.f.Close())
	}
	return err
}

// syncChunkFiles makes chunk files written without sync durable: one
// syncfs on the OS's file system, else an fsync of each file and of the
// directories holding them.
func (st *store) syncChunkFiles(cs []chunkID) error {
	if st.raw {
		return syncFS(st.dir)
	}
	dirs := map[string]bool{}
	for _, c := range cs {
		for _, p := range []string{st.dataPath(c), st.sidecarPath(c)} {
			if err := st.fsyncFile(p); err != nil {
				return err
			}
		}
		dirs[filepath.Dir(st.dataPath(c))] = true
	}
	for d := range dirs {
		if err := st.fsyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// fsyncFile fsyncs the file at path; one deleted since is no error.
func (st *store) fsyncFile(path string) error {
	f, err := st.fs.Open(path)
	if err != nil {
		if errors.Is(err, errNotExist) {
			return nil
		}
		return fmt.Errorf("ost: sync %s: %w", path, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
