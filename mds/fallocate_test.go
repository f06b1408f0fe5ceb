package mds

import (
	"fmt"
	"slices"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

func (e *env) fallocate(ino uint64, mode uint32, off, length uint64) (*mdspb.Attr, error) {
	r, err := e.c.Fallocate(ctx, &mdspb.FallocateRequest{Ino: ino, Mode: mode, Offset: off, Length: length})
	return r.GetAttr(), err
}

// TestFallocatePunchAndZero: a punched range leaves the extent map (split
// entries keep their references), an extent no entry names goes to GC,
// KEEP_SIZE keeps the size and ZERO_RANGE without it grows the file.
func TestFallocatePunchAndZero(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	a := e.create(rootIno, "a")
	ex := e.alloc(a.Ino, 2)
	A, B := written(ex[0], 8*mib), written(ex[1], 4*mib)
	e.commit(a.Ino, ref(0, 8*mib, 0, A), ref(8*mib, 4*mib, 0, B))

	// A hole in the middle of A: A splits in two entries (2 references).
	at, err := e.fallocate(a.Ino, fallocPunchHole|fallocKeepSize, 2*mib, 3*mib)
	if err != nil {
		t.Fatal(err)
	}
	if at.Size != 12*mib {
		t.Fatalf("size after punch %d, want %d", at.Size, 12*mib)
	}
	if got, want := e.mapOf(a.Ino), fmt.Sprintf("0+2@%d:0 5+3@%d:5 8+4@%d:0 ", A.Id, A.Id, B.Id); got != want {
		t.Fatalf("map after punch %s, want %s", got, want)
	}
	if e.refcount(A.Id) != 2 {
		t.Fatalf("refcount of A %d, want 2", e.refcount(A.Id))
	}
	e.check()

	// Zeroing all of B (and past the end, keeping the size) frees it.
	at, err = e.fallocate(a.Ino, fallocZeroRange|fallocKeepSize, 8*mib, 10*mib)
	if err != nil {
		t.Fatal(err)
	}
	if at.Size != 12*mib {
		t.Fatalf("size after zero range with KEEP_SIZE %d, want %d", at.Size, 12*mib)
	}
	if q := e.gcQueue(); !slices.Equal(q, []uint64{B.Id}) {
		t.Fatalf("gc queue %v, want [%d]", q, B.Id)
	}
	e.check()

	// ZERO_RANGE without KEEP_SIZE grows the file; the new bytes are a hole.
	at, err = e.fallocate(a.Ino, fallocZeroRange, 10*mib, 10*mib)
	if err != nil {
		t.Fatal(err)
	}
	if at.Size != 20*mib {
		t.Fatalf("size after zero range %d, want %d", at.Size, 20*mib)
	}
	if got, want := e.mapOf(a.Ino), fmt.Sprintf("0+2@%d:0 5+3@%d:5 ", A.Id, A.Id); got != want {
		t.Fatalf("map after zero range %s, want %s", got, want)
	}
	e.check()

	// Refusals: PUNCH_HOLE without KEEP_SIZE (as Linux), unknown modes,
	// empty and overflowing ranges, directories, other users' files.
	_, err = e.fallocate(a.Ino, fallocPunchHole, 0, mib)
	wantErr(t, "punch without keep size", err, errs.ErrNotSupported)
	_, err = e.fallocate(a.Ino, 0x8 /* COLLAPSE_RANGE */, 0, mib)
	wantErr(t, "collapse range", err, errs.ErrNotSupported)
	_, err = e.fallocate(a.Ino, fallocPunchHole|fallocKeepSize, 0, 0)
	wantErr(t, "empty punch", err, errs.ErrInvalid)
	_, err = e.fallocate(a.Ino, fallocPunchHole|fallocKeepSize, maxFileSize, 2)
	wantErr(t, "punch past the largest file", err, errs.ErrTooLarge)
	_, err = e.fallocate(rootIno, fallocPunchHole|fallocKeepSize, 0, 1)
	wantErr(t, "punch of a directory", err, errs.ErrIsDir)
	user := wire.WithUser(ctx, wire.User{UID: 1000, GID: 1000})
	_, err = e.c.Fallocate(user, &mdspb.FallocateRequest{Ino: a.Ino, Mode: fallocPunchHole | fallocKeepSize, Length: 1})
	wantErr(t, "punch of root's file by uid 1000", err, errs.ErrPermission)
	e.check()
}

// TestDeviceNodes: root makes block and character devices with their
// device numbers kept; others get EPERM; rdev is refused for other types.
func TestDeviceNodes(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name string
		mode uint32
		rdev uint32
	}{{"blk", sIFBLK | 0o640, 0x0102}, {"chr", sIFCHR | 0o666, 0x0503}} {
		r, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(c.name), Mode: c.mode, Rdev: c.rdev, Exclusive: true})
		if err != nil {
			t.Fatalf("mknod %s: %v", c.name, err)
		}
		if a := r.GetAttr(); a.Mode != c.mode || a.Rdev != c.rdev {
			t.Fatalf("mknod %s: mode %o rdev %#x, want %o %#x", c.name, a.Mode, a.Rdev, c.mode, c.rdev)
		}
		a, err := e.lookup(rootIno, c.name)
		if err != nil || a.Mode != c.mode || a.Rdev != c.rdev {
			t.Fatalf("lookup %s: %v %v", c.name, a, err)
		}
	}
	e = e.reopen()
	if a, err := e.lookup(rootIno, "chr"); err != nil || a.Rdev != 0x0503 {
		t.Fatalf("after restart: %v %v", a, err)
	}
	user := wire.WithUser(ctx, wire.User{UID: 1000, GID: 1000})
	if _, err := e.c.Mkdir(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("pub"), Mode: 0o777}); err != nil {
		t.Fatal(err)
	}
	pub, _ := e.lookup(rootIno, "pub")
	_, err := e.c.Create(user, &mdspb.CreateRequest{Parent: pub.Ino, Name: []byte("d"), Mode: sIFCHR | 0o600, Rdev: 1, Exclusive: true})
	wantErr(t, "mknod of a device by uid 1000", err, errs.ErrNotPermitted)
	_, err = e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("f"), Mode: sIFIFO | 0o600, Rdev: 1, Exclusive: true})
	wantErr(t, "FIFO with a device number", err, errs.ErrInvalid)
	e.check()
}
