package mds

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

const (
	xCreate  = uint32(mdspb.SetXattrFlags_XATTR_CREATE)
	xReplace = uint32(mdspb.SetXattrFlags_XATTR_REPLACE)
)

func (e *env) setx(ino uint64, name string, value []byte, flags uint32) (*mdspb.Attr, error) {
	r, err := e.c.SetXattr(ctx, &mdspb.SetXattrRequest{Ino: ino, Name: []byte(name), Value: value, Flags: flags})
	return r.GetAttr(), err
}

func (e *env) getx(ino uint64, name string) ([]byte, error) {
	r, err := e.c.GetXattr(ctx, &mdspb.GetXattrRequest{Ino: ino, Name: []byte(name)})
	return r.GetValue(), err
}

func (e *env) listx(ino uint64) []string {
	e.t.Helper()
	r, err := e.c.ListXattr(ctx, &mdspb.ListXattrRequest{Ino: ino})
	if err != nil {
		e.t.Fatalf("listxattr %d: %v", ino, err)
	}
	var out []string
	for _, n := range r.GetNames() {
		out = append(out, string(n))
	}
	return out
}

func (e *env) rmx(ino uint64, name string) (*mdspb.Attr, error) {
	r, err := e.c.RemoveXattr(ctx, &mdspb.RemoveXattrRequest{Ino: ino, Name: []byte(name)})
	return r.GetAttr(), err
}

// xattrKeys counts the "x" keys in the database.
func (e *env) xattrKeys() int {
	e.t.Helper()
	n := 0
	err := e.s.snapshot(func(r reader) error {
		return scan(r, []byte{prefixXattr}, func(_, _ []byte) (bool, error) { n++; return true, nil })
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func TestXattrKeys(t *testing.T) {
	k := xattrKey(0x0102030405060708, []byte("user.a\xff"))
	if want := []byte("x\x01\x02\x03\x04\x05\x06\x07\x08user.a\xff"); !bytes.Equal(k, want) {
		t.Fatalf("key %q, want %q", k, want)
	}
	ino, name, err := decodeXattrKey(k)
	if err != nil || ino != 0x0102030405060708 || string(name) != "user.a\xff" {
		t.Fatalf("decode: %d %q %v", ino, name, err)
	}
	for _, bad := range [][]byte{nil, []byte("x"), xattrPrefix(1), []byte("i\x00\x00\x00\x00\x00\x00\x00\x01a")} {
		if _, _, err := decodeXattrKey(bad); !errors.Is(err, errs.ErrCorrupt) {
			t.Errorf("decode %q: %v", bad, err)
		}
	}
	// The attributes of an inode sort after every shorter inode number's.
	if bytes.Compare(xattrKey(1, []byte("user.\xff\xff")), xattrPrefix(2)) >= 0 {
		t.Fatal("xattr keys of inode 1 reach into inode 2's")
	}
}

func TestXattrSetGetListRemove(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootIno, "f")

	_, err := e.getx(f.Ino, "user.a")
	wantErr(t, "get missing", err, errs.ErrNoData)
	if got := e.listx(f.Ino); len(got) != 0 {
		t.Fatalf("new file lists %q", got)
	}

	e.clock.Advance(time.Second)
	a, err := e.setx(f.Ino, "user.b", []byte("two"), 0)
	wantErr(t, "set b", err, nil)
	if a.CtimeNs <= f.CtimeNs || a.MtimeNs != f.MtimeNs {
		t.Fatalf("set: ctime %d -> %d, mtime %d -> %d; want only ctime changed", f.CtimeNs, a.CtimeNs, f.MtimeNs, a.MtimeNs)
	}
	if got := e.getattr(f.Ino); got.CtimeNs != a.CtimeNs {
		t.Fatalf("stored ctime %d, reply %d", got.CtimeNs, a.CtimeNs)
	}
	bin := []byte{0, 1, 0xff, 0}
	_, err = e.setx(f.Ino, "user.a\xfe", bin, xCreate)
	wantErr(t, "create a", err, nil)
	_, err = e.setx(f.Ino, "trusted.t", nil, 0)
	wantErr(t, "set trusted (empty value)", err, nil)
	_, err = e.setx(f.Ino, "security.s", []byte("lbl"), 0)
	wantErr(t, "set security", err, nil)

	if got, want := e.listx(f.Ino), []string{"security.s", "trusted.t", "user.a\xfe", "user.b"}; !slices.Equal(got, want) {
		t.Fatalf("list %q, want %q", got, want)
	}
	v, err := e.getx(f.Ino, "user.a\xfe")
	wantErr(t, "get a", err, nil)
	if !bytes.Equal(v, bin) {
		t.Fatalf("get a = %x, want %x", v, bin)
	}
	v, err = e.getx(f.Ino, "trusted.t")
	wantErr(t, "get empty", err, nil)
	if len(v) != 0 {
		t.Fatalf("empty value came back as %q", v)
	}

	// Flags.
	_, err = e.setx(f.Ino, "user.b", []byte("x"), xCreate)
	wantErr(t, "create existing", err, errs.ErrExists)
	_, err = e.setx(f.Ino, "user.c", []byte("x"), xReplace)
	wantErr(t, "replace missing", err, errs.ErrNoData)
	_, err = e.setx(f.Ino, "user.b", []byte("x"), xCreate|xReplace)
	wantErr(t, "create|replace existing", err, errs.ErrExists)
	_, err = e.setx(f.Ino, "user.c", []byte("x"), xCreate|xReplace)
	wantErr(t, "create|replace missing", err, errs.ErrNoData)
	_, err = e.setx(f.Ino, "user.b", []byte("x"), 4)
	wantErr(t, "unknown flag", err, errs.ErrInvalid)
	_, err = e.setx(f.Ino, "user.b", []byte("three"), xReplace)
	wantErr(t, "replace", err, nil)
	v, _ = e.getx(f.Ino, "user.b")
	if string(v) != "three" {
		t.Fatalf("after replace: %q", v)
	}
	_, err = e.getx(f.Ino, "user.c")
	wantErr(t, "failed set left nothing", err, errs.ErrNoData)

	// Remove.
	before := e.getattr(f.Ino)
	e.clock.Advance(time.Second)
	a, err = e.rmx(f.Ino, "user.b")
	wantErr(t, "remove", err, nil)
	if a.CtimeNs <= before.CtimeNs {
		t.Fatalf("remove: ctime %d -> %d", before.CtimeNs, a.CtimeNs)
	}
	_, err = e.getx(f.Ino, "user.b")
	wantErr(t, "get removed", err, errs.ErrNoData)
	_, err = e.rmx(f.Ino, "user.b")
	wantErr(t, "remove missing", err, errs.ErrNoData)
	if got, want := e.listx(f.Ino), []string{"security.s", "trusted.t", "user.a\xfe"}; !slices.Equal(got, want) {
		t.Fatalf("list %q, want %q", got, want)
	}

	// Survives a restart.
	e = e.reopen()
	v, err = e.getx(f.Ino, "security.s")
	wantErr(t, "get after reopen", err, nil)
	if string(v) != "lbl" {
		t.Fatalf("after reopen: %q", v)
	}
	e.check()
}

func TestXattrLimits(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootIno, "f")
	d := e.mkdir(rootIno, "d")
	sl, err := e.c.Symlink(ctx, &mdspb.SymlinkRequest{Parent: rootIno, Name: []byte("s"), Target: []byte("f")})
	wantErr(t, "symlink", err, nil)
	fifo, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("p"), Mode: sIFIFO | 0o644})
	wantErr(t, "mkfifo", err, nil)

	name255 := "user." + strings.Repeat("n", 250)
	for _, tc := range []struct {
		what  string
		ino   uint64
		name  string
		value []byte
		want  error
	}{
		{"name of 255 bytes", f.Ino, name255, []byte("v"), nil},
		{"name of 256 bytes", f.Ino, name255 + "n", []byte("v"), errs.ErrRange},
		{"empty name", f.Ino, "", []byte("v"), errs.ErrRange},
		{"namespace only", f.Ino, "user.", []byte("v"), errs.ErrInvalid},
		{"NUL in name", f.Ino, "user.a\x00b", []byte("v"), errs.ErrInvalid},
		{"system (ACL)", f.Ino, "system.posix_acl_access", []byte("v"), errs.ErrNotSupported},
		{"system other", f.Ino, "system.foo", []byte("v"), errs.ErrNotSupported},
		{"no namespace", f.Ino, "foo", []byte("v"), errs.ErrNotSupported},
		{"unknown namespace", f.Ino, "os2.foo", []byte("v"), errs.ErrNotSupported},
		{"value of 64 KiB", f.Ino, "user.big", make([]byte, 64<<10), nil},
		{"value over 64 KiB", f.Ino, "user.big2", make([]byte, 64<<10+1), errs.ErrArgTooBig},
		{"user on a directory", d.Ino, "user.a", []byte("v"), nil},
		{"user on a symlink", sl.Attr.Ino, "user.a", []byte("v"), errs.ErrNotPermitted},
		{"user on a fifo", fifo.Attr.Ino, "user.a", []byte("v"), errs.ErrNotPermitted},
		{"trusted on a symlink", sl.Attr.Ino, "trusted.a", []byte("v"), nil},
		{"missing inode", 999, "user.a", []byte("v"), errs.ErrNotFound},
		{"inode 0", 0, "user.a", []byte("v"), errs.ErrInvalid},
	} {
		_, err := e.setx(tc.ino, tc.name, tc.value, 0)
		wantErr(t, "set: "+tc.what, err, tc.want)
	}
	for _, tc := range []struct {
		what string
		ino  uint64
		name string
		want error
	}{
		{"get name of 256 bytes", f.Ino, name255 + "n", errs.ErrRange},
		{"get system", f.Ino, "system.posix_acl_access", errs.ErrNotSupported},
		{"get user of a symlink", sl.Attr.Ino, "user.a", errs.ErrNoData},
		{"get from a missing inode", 999, "user.a", errs.ErrNotFound},
	} {
		_, err := e.getx(tc.ino, tc.name)
		wantErr(t, tc.what, err, tc.want)
	}
	_, err = e.rmx(sl.Attr.Ino, "user.a")
	wantErr(t, "remove user of a symlink", err, errs.ErrNotPermitted)
	_, err = e.rmx(sl.Attr.Ino, "trusted.a")
	wantErr(t, "remove trusted of a symlink", err, nil)
	_, err = e.rmx(999, "user.a")
	wantErr(t, "remove from a missing inode", err, errs.ErrNotFound)
	_, err = e.rmx(f.Ino, "system.posix_acl_access")
	wantErr(t, "remove system", err, errs.ErrNotSupported)
	_, err = e.c.ListXattr(ctx, &mdspb.ListXattrRequest{Ino: 999})
	wantErr(t, "list a missing inode", err, errs.ErrNotFound)
	e.check()
}

// TestXattrBudget fills one inode up to its total (1 MiB of names and
// values) and its list (64 KiB of names) limits.
func TestXattrBudget(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootIno, "f")
	val := make([]byte, maxXattrValue)
	used := 0
	for i := range 15 {
		name := fmt.Sprintf("user.%02d", i)
		_, err := e.setx(f.Ino, name, val, 0)
		wantErr(t, name, err, nil)
		used += len(name) + len(val)
	}
	_, err := e.setx(f.Ino, "user.15", val, 0)
	wantErr(t, "one value too many", err, errs.ErrNoSpace)
	// Replacing counts the new value instead of the old one.
	_, err = e.setx(f.Ino, "user.00", val, xReplace)
	wantErr(t, "replace at the limit", err, nil)
	rest := maxXattrBytes - used - len("user.15")
	_, err = e.setx(f.Ino, "user.15", val[:rest], 0)
	wantErr(t, "exactly to the limit", err, nil)
	_, err = e.setx(f.Ino, "user.16", nil, 0)
	wantErr(t, "a name past the limit", err, errs.ErrNoSpace)
	_, err = e.setx(f.Ino, "user.15", val[:rest+1], 0)
	wantErr(t, "growing past the limit", err, errs.ErrNoSpace)
	_, err = e.setx(f.Ino, "user.15", val[:rest-1], 0)
	wantErr(t, "shrinking", err, nil)
	_, err = e.rmx(f.Ino, "user.03")
	wantErr(t, "remove", err, nil)
	_, err = e.setx(f.Ino, "user.16", val[:1000], 0)
	wantErr(t, "space freed by remove", err, nil)

	// The list limit: 256 names of 255 bytes fill 64 KiB with their NULs.
	g := e.create(rootIno, "g")
	for i := range 256 {
		name := fmt.Sprintf("user.%0250d", i)
		_, err := e.setx(g.Ino, name, nil, 0)
		wantErr(t, "long name", err, nil)
	}
	_, err = e.setx(g.Ino, "user.x", nil, 0)
	wantErr(t, "one name too many", err, errs.ErrNoSpace)
	if n := len(e.listx(g.Ino)); n != 256 {
		t.Fatalf("listed %d names, want 256", n)
	}
	e.check()
}

// The attributes of an inode go with its last link, in the same batch;
// a remaining link keeps them.
func TestXattrDeletedWithInode(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootIno, "f")
	d := e.mkdir(rootIno, "d")
	g := e.create(rootIno, "g")
	h := e.create(rootIno, "h")
	for _, ino := range []uint64{f.Ino, d.Ino, g.Ino, h.Ino} {
		for _, name := range []string{"user.a", "trusted.b"} {
			if _, err := e.setx(ino, name, []byte("v"), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := e.xattrKeys(); n != 8 {
		t.Fatalf("%d xattr keys, want 8", n)
	}
	// A hard link keeps f alive through the unlink of its first name.
	if _, err := e.c.Link(ctx, &mdspb.LinkRequest{Ino: f.Ino, NewParent: rootIno, NewName: []byte("f2")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("f")}); err != nil {
		t.Fatal(err)
	}
	if got := e.listx(f.Ino); len(got) != 2 {
		t.Fatalf("f after unlinking one of two names lists %q", got)
	}
	e.check()
	steps := []struct {
		what string
		do   func() error
		left int
	}{
		{"unlink last name", func() error {
			_, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("f2")})
			return err
		}, 6},
		{"rmdir", func() error {
			_, err := e.c.Rmdir(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("d")})
			return err
		}, 4},
		{"rename over", func() error {
			_, err := e.c.Rename(ctx, rn(rootIno, "h", rootIno, "g", 0))
			return err
		}, 2},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		if n := e.xattrKeys(); n != s.left {
			t.Fatalf("after %s: %d xattr keys, want %d", s.what, n, s.left)
		}
		e.check()
	}
	if got := e.listx(h.Ino); !slices.Equal(got, []string{"trusted.b", "user.a"}) {
		t.Fatalf("renamed file lists %q", got)
	}
}

// The invariant checker flags attributes of an inode that does not exist.
func TestXattrCheckOrphan(t *testing.T) {
	e := newEnv(t)
	e.check()
	if err := e.s.db.Set(xattrKey(999, []byte("user.a")), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	err := e.s.snapshot(checkInvariants)
	wantErr(t, "check with an orphan xattr", err, errs.ErrCorrupt)
	if !strings.Contains(err.Error(), "missing inode 999") {
		t.Fatalf("check: %v", err)
	}
}

// Nil requests fail cleanly.
func TestXattrNilRequests(t *testing.T) {
	e := newEnv(t)
	s := e.s
	_, err := s.SetXattr(ctx, nil)
	wantErr(t, "SetXattr", err, errs.ErrRange)
	_, err = s.GetXattr(ctx, nil)
	wantErr(t, "GetXattr", err, errs.ErrRange)
	_, err = s.ListXattr(ctx, nil)
	wantErr(t, "ListXattr", err, errs.ErrInvalid)
	_, err = s.RemoveXattr(ctx, nil)
	wantErr(t, "RemoveXattr", err, errs.ErrRange)
}
