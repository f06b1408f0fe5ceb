package ost

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Fault injection at the chunk store (Options.FS, vfs.go): ENOSPC on a
// write, EIO on a read, a crash in the middle of a write, a torn write.

// nthFault fails the n-th operation (counting from 0) that the store does
// under its chunks/ or tmp/ directory with err, once, while armed.
type nthFault struct {
	armed atomic.Bool
	n     atomic.Int64 // operations still to let through
	hit   atomic.Bool  // the fault was injected
	err   func(errorfs.Op) error
}

func (f *nthFault) String() string { return "nth-fault" }

func (f *nthFault) MaybeError(op errorfs.Op) error {
	if !f.armed.Load() || !storePath(op.Path) {
		return nil
	}
	if f.n.Add(-1) != -1 {
		return nil
	}
	f.armed.Store(false)
	f.hit.Store(true)
	return f.err(op)
}

func (f *nthFault) arm(n int64) {
	f.hit.Store(false)
	f.n.Store(n)
	f.armed.Store(true)
}

// storePath reports whether p is inside a store's chunks/ or tmp/.
func storePath(p string) bool {
	sep := string(filepath.Separator)
	return strings.Contains(p, sep+chunksDir+sep) || strings.HasSuffix(p, sep+chunksDir) ||
		strings.Contains(p, sep+tmpDir+sep) || strings.HasSuffix(p, sep+tmpDir)
}

func pathErr(errno syscall.Errno) func(errorfs.Op) error {
	return func(op errorfs.Op) error {
		return &fs.PathError{Op: fmt.Sprint(op.Kind), Path: op.Path, Err: errno}
	}
}

// checkNoPartial checks that chunk c of st is either absent or whole
// (equal to data), that no sidecar lies without its data file, that tmp/
// is empty and that the counters match the disk.
func checkNoPartial(t *testing.T, st *store, c chunkID, data []byte) (whole bool) {
	t.Helper()
	whole, _ = checkChunkAfterFault(t, st, c, data, false)
	return whole
}

// checkChunkAfterFault is checkNoPartial; with reordered it also accepts
// a data file without its sidecar, which reads as corrupt (the outcome
// docs/ost-format.md gives for a file system that does not persist the
// two renames of a write in order), and reports whether it found one.
func checkChunkAfterFault(t *testing.T, st *store, c chunkID, data []byte, reordered bool) (whole, noSidecar bool) {
	t.Helper()
	var ce *CorruptError
	got, err := st.read(c, 0, uint64(len(data)))
	switch {
	case err == nil:
		if !bytes.Equal(got, data) {
			t.Fatalf("chunk %s reads back different bytes", c)
		}
		whole = true
	case errors.Is(err, errs.ErrNotFound):
		if _, err := st.fs.Stat(st.sidecarPath(c)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("chunk %s: a sidecar without data (%v)", c, err)
		}
	case reordered && errors.As(err, &ce) && ce.Block == SidecarBlock && ce.Detail == "missing":
		noSidecar = true
	default:
		t.Fatalf("read of chunk %s: %v, want it whole or ErrNotFound", c, err)
	}
	if names, err := st.fs.List(filepath.Join(st.dir, tmpDir)); err != nil || len(names) != 0 {
		t.Errorf("tmp/ holds %v (%v)", names, err)
	}
	var used, n int64
	for i := range fanout {
		ents, err := st.listShard(i)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			used += int64(e.length)
			n++
		}
	}
	if st.used.Load() != used || st.chunks.Load() != n {
		t.Errorf("counters: %d bytes in %d chunks, the disk has %d in %d", st.used.Load(), st.chunks.Load(), used, n)
	}
	return whole, noSidecar
}

// TestWriteENOSPC fails each file-system step of a chunk write in turn
// with ENOSPC (a chunk too big for the chunk log, whose faults
// chunklog_test.go injects): the client gets errs.ErrNoSpace over both transports, the
// chunk is either absent or whole (never a sidecar or temp file left
// visible, never a torn chunk), and the OST keeps serving: the same write
// succeeds once the disk has room.
func TestWriteENOSPC(t *testing.T) {
	fault := &nthFault{err: pathErr(syscall.ENOSPC)}
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock, FS: errorfs.Wrap(vfs.Default, fault)})
	dc, addr := dataClient(t, to)
	ctx := t.Context()
	data := randBytes(smallChunk+4*testBlock+100, 11)
	steps := 0
	for n := int64(0); ; n++ {
		for _, grpcPath := range []bool{false, true} {
			c := chunkID{extent: uint64(100 + 2*n), index: 2}
			if grpcPath {
				c.extent++
			}
			fault.arm(n)
			var err error
			if grpcPath {
				_, err = to.cli.WriteChunk(ctx, &ostpb.WriteChunkRequest{Id: cid(c.extent, c.index), Data: data})
			} else {
				err = dc.Write(ctx, addr, c.extent, c.index, nil, [][]byte{data})
			}
			fault.armed.Store(false)
			if !fault.hit.Load() {
				if err != nil {
					t.Fatalf("write with no fault: %v", err)
				}
				if steps == 0 {
					t.Fatal("no file-system step was failed")
				}
				t.Logf("%d steps of a chunk write failed in turn", steps)
				return
			}
			steps++
			if !errors.Is(err, errs.ErrNoSpace) {
				t.Fatalf("step %d (grpc %v): %v, want ErrNoSpace", n, grpcPath, err)
			}
			checkNoPartial(t, to.srv.st, c, data)
			// The OST keeps serving: the retry stores the whole chunk.
			if err := dc.Write(ctx, addr, c.extent, c.index, nil, [][]byte{data}); err != nil {
				t.Fatalf("step %d: retry: %v", n, err)
			}
			if !checkNoPartial(t, to.srv.st, c, data) {
				t.Fatalf("step %d: retry did not store the chunk", n)
			}
		}
	}
}

// TestReadEIO fails reads of a chunk's data and sidecar with EIO: the
// client sees errs.ErrCorrupt over both transports (it reconstructs the
// chunk from the others and reports it), the store a *CorruptError naming
// the block, and other chunks still read.
func TestReadEIO(t *testing.T) {
	var failPath atomic.Pointer[string]
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if p := failPath.Load(); p != nil && op.Path == *p &&
			(op.Kind == errorfs.OpFileReadAt || op.Kind == errorfs.OpFileRead) {
			return &fs.PathError{Op: "read", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	})
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock, FS: errorfs.Wrap(vfs.Default, inj)})
	dc, addr := dataClient(t, to)
	ctx := t.Context()
	data := randBytes(4*testBlock, 12)
	to.write(t, 5, 0, data)
	to.write(t, 6, 0, data)
	st := to.srv.st

	for _, tc := range []struct {
		name  string
		path  string
		block int
	}{
		{"data", to.srv.ChunkPath(5, 0), 1}, // the chunk's files, out of the chunk log
		{"sidecar", to.srv.ChunkPath(5, 0) + crcSuffix, SidecarBlock},
	} {
		failPath.Store(&tc.path)
		if _, err := to.read(5, 0, testBlock, testBlock); !errors.Is(err, errs.ErrCorrupt) {
			t.Errorf("%s: gRPC read: %v, want ErrCorrupt", tc.name, err)
		}
		if err := dc.Read(ctx, addr, 5, 0, nil, 0, [][]byte{make([]byte, len(data))}); !errors.Is(err, errs.ErrCorrupt) {
			t.Errorf("%s: data-path read: %v, want ErrCorrupt", tc.name, err)
		}
		var ce *CorruptError
		_, err := st.read(chunkID{5, 0}, testBlock, testBlock)
		if !errors.As(err, &ce) || ce.Extent != 5 || ce.Block != tc.block || !strings.Contains(ce.Detail, "input/output error") {
			t.Errorf("%s: store read: %v, want a CorruptError for block %d", tc.name, err, tc.block)
		}
		if got, err := to.read(6, 0, 0, uint64(len(data))); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: another chunk: %v", tc.name, err)
		}
	}
	// The disk recovers: the chunk reads again.
	failPath.Store(nil)
	if got, err := to.read(5, 0, 0, uint64(len(data))); err != nil || !bytes.Equal(got, data) {
		t.Errorf("after the fault: %v", err)
	}
}

// openMemStore opens a store in /ost on fs.
func openMemStore(t *testing.T, fs vfs.FS) (*store, scanReport) {
	t.Helper()
	st, rep, err := openStore(t.Context(), storeOptions{dir: "/ost", fs: fs, blockSize: testBlock, m: newMetrics(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), bufs: &datanet.BufPool{}})
	if err != nil {
		t.Fatal(err)
	}
	return st, rep
}

// TestCrashMidWrite cuts the power (vfs.CrashClone: what was not synced is
// lost, or for odd steps partly kept) before each file-system step of a
// chunk write, and after it: the reopened store has the chunks written
// before whole, the new chunk absent or whole (whole once acknowledged),
// no sidecar without data and an empty tmp/. Where the clone keeps
// unsynced directory entries it may keep the data file's rename without
// the sidecar's, which ext4 and XFS never do: that chunk, never
// acknowledged, must then read as corrupt (so the client reconstructs
// it) and be reported at Open, never read back wrong bytes.
//
// It runs for a chunk written as files and for one written through the
// chunk log, whose acknowledged chunk comes back at replay.
func TestCrashMidWrite(t *testing.T) {
	t.Run("files", func(t *testing.T) { testCrashMidWrite(t, smallChunk+5*testBlock, 8) })
	t.Run("log", func(t *testing.T) { testCrashMidWrite(t, 5*testBlock, 2) })
}

func testCrashMidWrite(t *testing.T, size, minPoints int) {
	mem := vfs.NewCrashableMem()
	if err := mem.MkdirAll("/ost", 0o755); err != nil {
		t.Fatal(err)
	}
	if d, err := mem.OpenDir("/"); err != nil || d.Sync() != nil {
		t.Fatal("sync /")
	}
	var (
		mu     sync.Mutex
		clones []*vfs.MemFS
		step   int
	)
	rng := rand.New(rand.NewPCG(1, 2))
	crash := func() {
		cfg := vfs.CrashCloneCfg{}
		if step%2 == 1 {
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(uint64(step), 3))}
		}
		step++
		clones = append(clones, mem.CrashClone(cfg))
	}
	var recording atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if recording.Load() {
			mu.Lock()
			crash()
			mu.Unlock()
		}
		return nil
	})
	st, _ := openMemStore(t, errorfs.Wrap(mem, inj))
	old := chunkID{extent: 0x1ab, index: 0}
	oldData := randBytes(3*testBlock+7, 13)
	// vfs.File.Write may change the bytes it is given (MemFS does under
	// -race): the store gets copies.
	if _, err := st.write(old, bytes.Clone(oldData)); err != nil {
		t.Fatal(err)
	}
	c := chunkID{extent: 0x2ab, index: 1} // the same chunks/ab directory
	data := randBytes(size, 14)
	recording.Store(true)
	if _, err := st.write(c, bytes.Clone(data)); err != nil {
		t.Fatal(err)
	}
	recording.Store(false)
	crash() // after the acknowledgement
	if len(clones) < minPoints {
		t.Fatalf("only %d crash points", len(clones))
	}
	for i, fs := range clones {
		re, rep := openMemStore(t, fs)
		if !checkNoPartial(t, re, old, oldData) {
			t.Fatalf("crash %d: the chunk written before is gone", i)
		}
		whole, noSidecar := checkChunkAfterFault(t, re, c, data, i%2 == 1)
		if i == len(clones)-1 && !whole {
			t.Fatalf("crash after the acknowledgement lost the chunk")
		}
		if noSidecar && (len(rep.missingSidecar) != 1 || rep.missingSidecar[0] != c.String()) {
			t.Errorf("crash %d: Open reported %v without sidecar, want %s", i, rep.missingSidecar, c)
		}
		t.Logf("crash %d of %d: new chunk whole %v, data without sidecar %v", i, len(clones), whole, noSidecar)
	}
}

// tornFS tears the writes of chunk data: past the first block, a write
// leaves zeros where the data should be and reports success, as a disk
// that loses part of a write does.
type tornFS struct {
	vfs.FS
	on atomic.Bool
}

func (t *tornFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := t.FS.Create(name, cat)
	if err != nil || !t.on.Load() {
		return f, err
	}
	return tornFile{f}, nil
}

type tornFile struct{ vfs.File }

func (f tornFile) Write(p []byte) (int, error) {
	if len(p) <= testBlock {
		return f.File.Write(p) // the sidecar
	}
	torn := bytes.Clone(p)
	clear(torn[testBlock+testBlock/2:])
	if _, err := f.File.Write(torn); err != nil {
		return 0, err
	}
	return len(p), nil
}

// TestTornWrite stores a chunk whose data write was torn: reads of the
// torn blocks fail as corrupt naming the first bad block, reads of the
// good block still succeed, and the scrubber finds the chunk. (A chunk
// too big for the chunk log: the records of the log carry CRCs that
// replay checks.)
func TestTornWrite(t *testing.T) {
	tfs := &tornFS{FS: vfs.Default}
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock, FS: tfs})
	data := randBytes(smallChunk+4*testBlock, 15)
	tfs.on.Store(true)
	to.write(t, 9, 0, data)
	tfs.on.Store(false)
	to.write(t, 10, 0, data)

	if got, err := to.read(9, 0, 0, testBlock); err != nil || !bytes.Equal(got, data[:testBlock]) {
		t.Errorf("read of the block before the tear: %v", err)
	}
	if _, err := to.read(9, 0, 0, uint64(len(data))); !errors.Is(err, errs.ErrCorrupt) {
		t.Errorf("read over the tear: %v, want ErrCorrupt", err)
	}
	var ce *CorruptError
	if _, err := to.srv.st.read(chunkID{9, 0}, 0, uint64(len(data))); !errors.As(err, &ce) || ce.Block != 1 {
		t.Errorf("store read: %v, want a CorruptError for block 1", err)
	}
	if _, bad := to.srv.scrubChunk(chunkID{9, 0}); !bad {
		t.Error("the scrubber did not find the torn chunk")
	}
	if _, bad := to.srv.scrubChunk(chunkID{10, 0}); bad {
		t.Error("the scrubber found a whole chunk bad")
	}
	to.srv.scrub.mu.Lock()
	pending := len(to.srv.scrub.mu.pending)
	to.srv.scrub.mu.Unlock()
	if pending != 1 {
		t.Errorf("%d chunks queued for the MDS, want 1", pending)
	}
}

// TestIdentityLockStatfsFaults: the directory lock, the identity files
// (ost.uuid, ost.id) and statfs go through Options.FS as the chunks do. A
// failure there is an error that names what failed, never a panic, and
// leaves nothing half done: the lock is released, the identity files are
// whole or absent, tmp/ holds no temp file.
func TestIdentityLockStatfsFaults(t *testing.T) {
	var failing atomic.Pointer[func(errorfs.Op) bool]
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if f := failing.Load(); f != nil && (*f)(op) {
			return &fs.PathError{Op: "fault", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	})
	fail := func(kind errorfs.OpKind, name string) {
		f := func(op errorfs.Op) bool {
			return op.Kind == kind && strings.HasPrefix(filepath.Base(op.Path), name)
		}
		failing.Store(&f)
	}
	dir := t.TempDir()
	efs := errorfs.Wrap(vfs.Default, inj)
	open := func() (*Server, error) {
		return Open(t.Context(), Options{Dir: dir, BlockSize: testBlock, FS: efs})
	}
	noTemp := func(when string) {
		t.Helper()
		if ents, err := os.ReadDir(filepath.Join(dir, tmpDir)); err != nil || len(ents) != 0 {
			t.Errorf("%s: tmp/ holds %v (%v)", when, ents, err)
		}
	}
	wantErr := func(when string, err error, what string) {
		t.Helper()
		if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), what) {
			t.Fatalf("%s: %v, want EIO naming %s", when, err, what)
		}
	}

	// The first Open creates ost.uuid: each step of its write fails in
	// turn, and Open fails, unlocking the directory (the next Open gets
	// as far again).
	for _, kind := range []errorfs.OpKind{errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileSync, errorfs.OpRename} {
		fail(kind, uuidFile)
		_, err := open()
		wantErr(fmt.Sprintf("Open, ost.uuid failing at op %d", kind), err, uuidFile)
		if _, err := os.Stat(filepath.Join(dir, uuidFile)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("op %d: ost.uuid after a failed write: %v", kind, err)
		}
		noTemp(fmt.Sprintf("ost.uuid failing at op %d", kind))
	}
	failing.Store(nil)
	srv, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if !validUUID(srv.UUID()) {
		t.Fatalf("uuid %q", srv.UUID())
	}

	// statfs: Info fails, saying so; it answers again once the disk does.
	fail(errorfs.OpGetDiskUsage, filepath.Base(dir))
	_, err = srv.info()
	wantErr("Info, statfs failing", err, "statfs")
	failing.Store(nil)
	if inf, err := srv.info(); err != nil || inf.Capacity == 0 {
		t.Fatalf("Info after the fault: %v %v", inf, err)
	}

	// ost.id (written at the first registration): a failed write leaves
	// the OST without an id, a retry persists it.
	fail(errorfs.OpFileSync, idFile)
	wantErr("saveID, sync failing", srv.st.saveID(7), idFile)
	failing.Store(nil)
	noTemp("ost.id failing")
	if id, err := srv.st.loadID(); err != nil || id != 0 {
		t.Fatalf("id after a failed write: %d %v, want 0", id, err)
	}
	if err := srv.st.saveID(7); err != nil {
		t.Fatal(err)
	}
	uuid := srv.UUID()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}

	// The lock, and reading the identity files, at Open.
	for _, c := range []struct {
		kind errorfs.OpKind
		name string
		what string
	}{
		{errorfs.OpLock, lockFile, "lock " + dir},
		{errorfs.OpOpen, uuidFile, uuidFile},
		{errorfs.OpOpen, idFile, idFile},
	} {
		fail(c.kind, c.name)
		_, err := open()
		wantErr(fmt.Sprintf("Open, %s failing at op %d", c.name, c.kind), err, c.what)
	}
	failing.Store(nil)
	srv, err = open()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.UUID() != uuid || srv.ID() != 7 {
		t.Fatalf("reopened as %s id %d, want %s id 7", srv.UUID(), srv.ID(), uuid)
	}
}
