package ost

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shoalfs/shoal/internal/errs"
)

// TestChunkLogPath writes small chunks through the chunk log: they read
// back (from memory and from their files), stat, count, delete, and their
// files appear once the flusher has run; a chunk too big for the log is
// written as files at once.
func TestChunkLogPath(t *testing.T) {
	var hold atomic.Bool // fail the flusher's file writes, keeping chunks in the table
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if hold.Load() && op.Kind == errorfs.OpCreate && storePath(op.Path) {
			return &fs.PathError{Op: "hold", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	})
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock, FS: errorfs.Wrap(vfs.Default, inj)})
	st := to.srv.st
	small := randBytes(3*testBlock+5, 1)
	to.write(t, 10, 0, small)
	if got := metric(t, to.reg, "shoal_ost_log_writes_total"); got != 1 {
		t.Fatalf("log writes %v after one small chunk, want 1", got)
	}
	if got, err := to.read(10, 0, 100, 5000); err != nil || !bytes.Equal(got, small[100:5100]) {
		t.Fatalf("read of a logged chunk: %v", err)
	}
	if n, err := st.stat(chunkID{10, 0}); err != nil || n != uint64(len(small)) {
		t.Fatalf("stat: %d, %v", n, err)
	}
	// The same bytes again are success; others are refused.
	if created, err := st.write(chunkID{10, 0}, small); err != nil || created {
		t.Fatalf("rewrite with the same bytes: %v, %v", created, err)
	}
	if _, err := st.write(chunkID{10, 0}, randBytes(len(small), 2)); !errors.Is(err, errs.ErrExists) {
		t.Fatalf("rewrite with other bytes: %v, want ErrExists", err)
	}
	// ChunkPath writes the files out.
	onDisk, err := os.ReadFile(to.srv.ChunkPath(10, 0))
	if err != nil || !bytes.Equal(onDisk, small) {
		t.Fatalf("data file of a logged chunk: %v", err)
	}
	if _, ok := st.clog.get(chunkID{10, 0}); ok {
		t.Fatal("the chunk is still in the log's table after ChunkPath")
	}
	if got, err := to.read(10, 0, 0, uint64(len(small))); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("read from files: %v", err)
	}

	// A delete of a chunk still in the table.
	hold.Store(true)
	to.write(t, 11, 0, small)
	if _, ok := st.clog.get(chunkID{11, 0}); !ok {
		t.Fatal("a chunk whose files cannot be written is not in the table")
	}
	if existed, err := st.remove(chunkID{11, 0}); err != nil || !existed {
		t.Fatalf("delete of a logged chunk: %v, %v", existed, err)
	}
	hold.Store(false)
	if _, err := to.read(11, 0, 0, 1); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("read after delete: %v, want ErrNotFound", err)
	}
	if err := st.clog.flushAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(to.srv.ChunkPath(11, 0)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("deleted chunk has files: %v", err)
	}

	big := randBytes(smallChunk+1, 3)
	to.write(t, 12, 0, big)
	if got := metric(t, to.reg, "shoal_ost_log_writes_total"); got != 2 {
		t.Fatalf("log writes %v, want 2 (the big chunk goes to files)", got)
	}
	if _, ok := st.clog.get(chunkID{12, 0}); ok {
		t.Fatal("a chunk over smallChunk is in the log")
	}
	inf := to.info(t)
	if inf.GetChunks() != 2 || inf.GetUsed() != uint64(len(small)+len(big)) {
		t.Fatalf("Info: %d chunks, %d bytes; want 2, %d", inf.GetChunks(), inf.GetUsed(), len(small)+len(big))
	}
}

// TestChunkLogWrapsAndReopens writes, from several goroutines, more
// chunks than the two log files hold together, so that each fills and is
// retired several times; every chunk reads back, before and after a
// reopen, and the counters match the disk.
func TestChunkLogWrapsAndReopens(t *testing.T) {
	dir := t.TempDir()
	to := startOST(t, dir, Options{BlockSize: testBlock})
	const workers, each = 4, 60
	size := smallChunk - 1000
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				e := uint64(1000 + w*each + i)
				if _, err := to.srv.st.write(chunkID{e, 1}, randBytes(size, e)); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	total := workers * each
	if total*size < 3*logFileSize {
		t.Fatalf("test writes %d bytes, not enough to fill the log files more than once", total*size)
	}
	check := func(to *testOST) {
		t.Helper()
		for e := uint64(1000); e < uint64(1000+total); e++ {
			got, err := to.read(e, 1, 0, uint64(size))
			if err != nil || !bytes.Equal(got, randBytes(size, e)) {
				t.Fatalf("chunk %d: %v", e, err)
			}
		}
		inf := to.info(t)
		if inf.GetChunks() != uint64(total) || inf.GetUsed() != uint64(total*size) {
			t.Fatalf("Info: %d chunks, %d bytes", inf.GetChunks(), inf.GetUsed())
		}
	}
	check(to)
	if got := metric(t, to.reg, "shoal_ost_log_retires_total"); got < 2 {
		t.Fatalf("%v log files retired, want at least 2", got)
	}
	to.stop(t)
	to2 := startOST(t, dir, Options{BlockSize: testBlock})
	check(to2)
}

// TestChunkLogReplay cuts the power right after small chunks are
// acknowledged, before their files are durable or written: the reopened
// store has them whole, as files, and the log is empty again.
func TestChunkLogReplay(t *testing.T) {
	mem := vfs.NewCrashableMem()
	if err := mem.MkdirAll("/ost", 0o755); err != nil {
		t.Fatal(err)
	}
	if d, err := mem.OpenDir("/"); err != nil || d.Sync() != nil {
		t.Fatal("sync /")
	}
	// Hold every chunk file write of the flusher, so that the crash
	// finds the chunks in the log only.
	var hold atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if hold.Load() && op.Kind == errorfs.OpCreate && storePath(op.Path) {
			return &fs.PathError{Op: "hold", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	})
	st, _ := openMemStore(t, errorfs.Wrap(mem, inj))
	hold.Store(true)
	chunks := map[chunkID][]byte{}
	for i := range 20 {
		c := chunkID{extent: uint64(0x100 + i), index: uint32(i % 3)}
		chunks[c] = randBytes(1+i*997, uint64(i))
		if _, err := st.write(c, chunks[c]); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	hold.Store(false)
	if err := st.clog.close(); err != nil {
		t.Fatal(err)
	}
	re, rep := openMemStore(t, crashed)
	if rep.replayed != len(chunks) {
		t.Fatalf("replayed %d chunks, want %d", rep.replayed, len(chunks))
	}
	for c, data := range chunks {
		if !checkNoPartial(t, re, c, data) {
			t.Fatalf("chunk %s lost in the crash", c)
		}
		if _, ok := re.clog.get(c); ok {
			t.Fatalf("chunk %s in the log's table after replay", c)
		}
	}
	if err := re.clog.close(); err != nil {
		t.Fatal(err)
	}
	// The replay retired the log: a second crash and open replay nothing.
	again, rep := openMemStore(t, crashed.CrashClone(vfs.CrashCloneCfg{}))
	if rep.replayed != 0 {
		t.Fatalf("second open replayed %d chunks", rep.replayed)
	}
	for c, data := range chunks {
		if !checkNoPartial(t, again, c, data) {
			t.Fatalf("chunk %s lost after the second open", c)
		}
	}
	again.clog.close()
}

// TestChunkLogFailure fails the log's writes and syncs: the chunk write
// still succeeds, as files, and the log takes no more chunks.
func TestChunkLogFailure(t *testing.T) {
	for name, kind := range map[string]errorfs.OpKind{"write": errorfs.OpFileWriteAt, "sync": errorfs.OpFileSyncData} {
		t.Run(name, func(t *testing.T) {
			var armed atomic.Bool
			inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
				if armed.Load() && op.Kind == kind && strings.Contains(op.Path, string(filepath.Separator)+logDir+string(filepath.Separator)) {
					return &fs.PathError{Op: "log", Path: op.Path, Err: syscall.EIO}
				}
				return nil
			})
			to := startOST(t, t.TempDir(), Options{BlockSize: testBlock, FS: errorfs.Wrap(vfs.Default, inj)})
			armed.Store(true)
			data := randBytes(5000, 4)
			to.write(t, 20, 0, data)
			to.write(t, 21, 0, data)
			if got := metric(t, to.reg, "shoal_ost_log_writes_total"); got != 0 {
				t.Fatalf("%v chunks logged by a failing log", got)
			}
			for _, e := range []uint64{20, 21} {
				if got, err := to.read(e, 0, 0, uint64(len(data))); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("chunk %d: %v", e, err)
				}
				if _, err := os.Stat(to.srv.st.dataPath(chunkID{e, 0})); err != nil {
					t.Fatalf("chunk %d has no data file: %v", e, err)
				}
			}
		})
	}
}
