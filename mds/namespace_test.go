package mds

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

func TestRoot(t *testing.T) {
	e := newEnv(t)
	a := e.getattr(rootIno)
	if a.Ino != 1 || a.Mode != sIFDIR|0o755 || a.Nlink != 2 {
		t.Fatalf("root attr %v", a)
	}
	if !proto.Equal(a.Layout, &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}) {
		t.Fatalf("root layout %v", a.Layout)
	}
	e.check()
}

func TestCreateLookup(t *testing.T) {
	e := newEnv(t)
	before := e.getattr(rootIno)
	e.clock.Advance(time.Second)
	a := e.create(rootIno, "f")
	if a.Mode != sIFREG|0o644 || a.Nlink != 1 || a.Size != 0 || a.Ino <= rootIno {
		t.Fatalf("created %v", a)
	}
	if !proto.Equal(a.Layout, before.Layout) {
		t.Fatalf("layout %v not inherited from %v", a.Layout, before.Layout)
	}
	root := e.getattr(rootIno)
	if root.MtimeNs <= before.MtimeNs || root.CtimeNs <= before.CtimeNs {
		t.Fatalf("root times not updated: %v -> %v", before, root)
	}
	got, err := e.lookup(rootIno, "f")
	wantErr(t, "lookup", err, nil)
	if !proto.Equal(got, a) {
		t.Fatalf("lookup %v, want %v", got, a)
	}

	// Exclusive create of an existing name; non-exclusive returns it.
	_, err = e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("f"), Mode: sIFREG | 0o600, Exclusive: true})
	wantErr(t, "exclusive create", err, errs.ErrExists)
	r, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("f"), Mode: sIFREG | 0o600})
	wantErr(t, "non-exclusive create", err, nil)
	if r.Attr.Ino != a.Ino {
		t.Fatalf("non-exclusive create gave ino %d, want %d", r.Attr.Ino, a.Ino)
	}
	// An explicit layout overrides the parent's.
	l := &mdspb.Layout{K: 1, M: 2, Unit: 4096}
	r, err = e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("g"), Mode: sIFREG | 0o600, Layout: l})
	wantErr(t, "create with layout", err, nil)
	if !proto.Equal(r.Attr.Layout, l) {
		t.Fatalf("layout %v, want %v", r.Attr.Layout, l)
	}

	d := e.mkdir(rootIno, "d")
	long := strings.Repeat("n", 256)
	for _, tc := range []struct {
		what string
		req  *mdspb.CreateRequest
		want error
	}{
		{"over a directory", &mdspb.CreateRequest{Parent: rootIno, Name: []byte("d"), Mode: sIFREG}, errs.ErrIsDir},
		{"in a file", &mdspb.CreateRequest{Parent: a.Ino, Name: []byte("x"), Mode: sIFREG}, errs.ErrNotDir},
		{"in a missing dir", &mdspb.CreateRequest{Parent: 999, Name: []byte("x"), Mode: sIFREG}, errs.ErrNotFound},
		{"name too long", &mdspb.CreateRequest{Parent: rootIno, Name: []byte(long), Mode: sIFREG}, errs.ErrNameTooLong},
		{"empty name", &mdspb.CreateRequest{Parent: rootIno, Mode: sIFREG}, errs.ErrInvalid},
		{"dot", &mdspb.CreateRequest{Parent: rootIno, Name: []byte("."), Mode: sIFREG}, errs.ErrInvalid},
		{"dotdot", &mdspb.CreateRequest{Parent: rootIno, Name: []byte(".."), Mode: sIFREG}, errs.ErrInvalid},
		{"slash", &mdspb.CreateRequest{Parent: rootIno, Name: []byte("a/b"), Mode: sIFREG}, errs.ErrInvalid},
		{"nul", &mdspb.CreateRequest{Parent: rootIno, Name: []byte("a\x00"), Mode: sIFREG}, errs.ErrInvalid},
		{"directory mode", &mdspb.CreateRequest{Parent: rootIno, Name: []byte("x"), Mode: sIFDIR}, errs.ErrInvalid},
		{"bad layout", &mdspb.CreateRequest{Parent: rootIno, Name: []byte("x"), Mode: sIFREG, Layout: &mdspb.Layout{K: 0, Unit: 1}}, errs.ErrInvalid},
		{"ino 0", &mdspb.CreateRequest{Parent: 0, Name: []byte("x"), Mode: sIFREG}, errs.ErrInvalid},
	} {
		_, err := e.c.Create(ctx, tc.req)
		wantErr(t, "create "+tc.what, err, tc.want)
	}
	_, err = e.lookup(rootIno, "missing")
	wantErr(t, "lookup missing", err, errs.ErrNotFound)
	_, err = e.lookup(a.Ino, "x")
	wantErr(t, "lookup in file", err, errs.ErrNotDir)
	_, err = e.lookup(rootIno, long)
	wantErr(t, "lookup long", err, errs.ErrNameTooLong)
	_, err = e.c.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: 12345})
	wantErr(t, "getattr missing", err, errs.ErrNotFound)
	if d.Nlink != 2 {
		t.Fatalf("dir nlink %d", d.Nlink)
	}
	e.check()
}

func TestMkdirRmdir(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootIno, "d")
	if d.Mode != sIFDIR|0o755 || d.Nlink != 2 {
		t.Fatalf("mkdir attr %v", d)
	}
	if n := e.getattr(rootIno).Nlink; n != 3 {
		t.Fatalf("root nlink %d, want 3", n)
	}
	// Subdirectories inherit the parent's layout.
	l := &mdspb.Layout{K: 2, M: 1, Unit: 65536}
	r, err := e.c.Mkdir(ctx, &mdspb.CreateRequest{Parent: d.Ino, Name: []byte("l"), Mode: 0o700, Layout: l})
	wantErr(t, "mkdir with layout", err, nil)
	sub := e.mkdir(r.Attr.Ino, "sub")
	if !proto.Equal(sub.Layout, l) {
		t.Fatalf("sub layout %v, want %v", sub.Layout, l)
	}
	f := e.create(sub.Ino, "f")
	if !proto.Equal(f.Layout, l) {
		t.Fatalf("file layout %v, want %v", f.Layout, l)
	}

	_, err = e.c.Mkdir(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("d"), Mode: 0o755})
	wantErr(t, "mkdir existing", err, errs.ErrExists)
	_, err = e.c.Rmdir(ctx, &mdspb.UnlinkRequest{Parent: d.Ino, Name: []byte("l")})
	wantErr(t, "rmdir non-empty", err, errs.ErrNotEmpty)
	_, err = e.c.Rmdir(ctx, &mdspb.UnlinkRequest{Parent: sub.Ino, Name: []byte("f")})
	wantErr(t, "rmdir file", err, errs.ErrNotDir)
	_, err = e.c.Rmdir(ctx, &mdspb.UnlinkRequest{Parent: sub.Ino, Name: []byte("nope")})
	wantErr(t, "rmdir missing", err, errs.ErrNotFound)
	_, err = e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("d")})
	wantErr(t, "unlink dir", err, errs.ErrIsDir)
	e.check()

	_, err = e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: sub.Ino, Name: []byte("f")})
	wantErr(t, "unlink", err, nil)
	_, err = e.c.Rmdir(ctx, &mdspb.UnlinkRequest{Parent: r.Attr.Ino, Name: []byte("sub")})
	wantErr(t, "rmdir sub", err, nil)
	if n := e.getattr(r.Attr.Ino).Nlink; n != 2 {
		t.Fatalf("nlink after rmdir %d, want 2", n)
	}
	_, err = e.c.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: sub.Ino})
	wantErr(t, "getattr removed dir", err, errs.ErrNotFound)
	e.check()
}

func TestSymlinkLinkUnlink(t *testing.T) {
	e := newEnv(t)
	r, err := e.c.Symlink(ctx, &mdspb.SymlinkRequest{Parent: rootIno, Name: []byte("s"), Target: []byte("../x/y"), Uid: 7})
	wantErr(t, "symlink", err, nil)
	if r.Attr.Mode != sIFLNK|0o777 || r.Attr.Size != 6 || r.Attr.Uid != 7 {
		t.Fatalf("symlink attr %v", r.Attr)
	}
	rl, err := e.c.Readlink(ctx, &mdspb.GetAttrRequest{Ino: r.Attr.Ino})
	wantErr(t, "readlink", err, nil)
	if string(rl.Target) != "../x/y" {
		t.Fatalf("readlink %q", rl.Target)
	}
	_, err = e.c.Symlink(ctx, &mdspb.SymlinkRequest{Parent: rootIno, Name: []byte("s"), Target: []byte("t")})
	wantErr(t, "symlink existing", err, errs.ErrExists)
	_, err = e.c.Symlink(ctx, &mdspb.SymlinkRequest{Parent: rootIno, Name: []byte("s2")})
	wantErr(t, "symlink empty target", err, errs.ErrInvalid)
	_, err = e.c.Symlink(ctx, &mdspb.SymlinkRequest{Parent: rootIno, Name: []byte("s2"), Target: bytes.Repeat([]byte("x"), 5000)})
	wantErr(t, "symlink long target", err, errs.ErrNameTooLong)

	f := e.create(rootIno, "f")
	_, err = e.c.Readlink(ctx, &mdspb.GetAttrRequest{Ino: f.Ino})
	wantErr(t, "readlink file", err, errs.ErrInvalid)
	d := e.mkdir(rootIno, "d")
	l, err := e.c.Link(ctx, &mdspb.LinkRequest{Ino: f.Ino, NewParent: d.Ino, NewName: []byte("f2")})
	wantErr(t, "link", err, nil)
	if l.Attr.Nlink != 2 {
		t.Fatalf("nlink after link %d", l.Attr.Nlink)
	}
	_, err = e.c.Link(ctx, &mdspb.LinkRequest{Ino: d.Ino, NewParent: rootIno, NewName: []byte("d2")})
	wantErr(t, "link dir", err, errs.ErrNotPermitted)
	_, err = e.c.Link(ctx, &mdspb.LinkRequest{Ino: f.Ino, NewParent: rootIno, NewName: []byte("s")})
	wantErr(t, "link existing", err, errs.ErrExists)
	_, err = e.c.Link(ctx, &mdspb.LinkRequest{Ino: f.Ino, NewParent: f.Ino, NewName: []byte("x")})
	wantErr(t, "link into file", err, errs.ErrNotDir)
	_, err = e.c.Link(ctx, &mdspb.LinkRequest{Ino: 999, NewParent: rootIno, NewName: []byte("x")})
	wantErr(t, "link missing", err, errs.ErrNotFound)
	e.check()

	u, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("f")})
	wantErr(t, "unlink", err, nil)
	if u.Attr.Nlink != 1 {
		t.Fatalf("nlink after unlink %d", u.Attr.Nlink)
	}
	u, err = e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: d.Ino, Name: []byte("f2")})
	wantErr(t, "unlink last", err, nil)
	if u.Attr.Nlink != 0 {
		t.Fatalf("nlink after last unlink %d", u.Attr.Nlink)
	}
	_, err = e.c.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: f.Ino})
	wantErr(t, "getattr unlinked", err, errs.ErrNotFound)
	_, err = e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("f")})
	wantErr(t, "unlink again", err, errs.ErrNotFound)
	e.check()
}

func TestSetAttr(t *testing.T) {
	e := newEnv(t)
	f := e.create(rootIno, "f")
	e.clock.Advance(time.Second)
	valid := uint32(mdspb.SetAttrBits_SETATTR_MODE | mdspb.SetAttrBits_SETATTR_UID | mdspb.SetAttrBits_SETATTR_GID |
		mdspb.SetAttrBits_SETATTR_ATIME | mdspb.SetAttrBits_SETATTR_MTIME_NOW | mdspb.SetAttrBits_SETATTR_SIZE)
	r, err := e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: f.Ino, Valid: valid, Mode: sIFDIR | 0o4711, Uid: 5, Gid: 6, AtimeNs: 42, Size: 1 << 30})
	wantErr(t, "setattr", err, nil)
	a := r.Attr
	now := e.clock.Now().UnixNano()
	if a.Mode != sIFREG|0o4711 || a.Uid != 5 || a.Gid != 6 || a.AtimeNs != 42 || a.MtimeNs != now || a.CtimeNs != now || a.Size != 1<<30 {
		t.Fatalf("setattr result %v", a)
	}
	if !proto.Equal(e.getattr(f.Ino), a) {
		t.Fatal("setattr not persisted")
	}
	// ctime changes even when only a time is set.
	e.clock.Advance(time.Second)
	r, err = e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: f.Ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_MTIME), MtimeNs: 7})
	wantErr(t, "setattr mtime", err, nil)
	if r.Attr.MtimeNs != 7 || r.Attr.CtimeNs != e.clock.Now().UnixNano() {
		t.Fatalf("setattr mtime result %v", r.Attr)
	}
	_, err = e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: rootIno, Valid: uint32(mdspb.SetAttrBits_SETATTR_SIZE)})
	wantErr(t, "truncate dir", err, errs.ErrIsDir)
	_, err = e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: f.Ino, Valid: 1 << 20})
	wantErr(t, "unknown bits", err, errs.ErrInvalid)
	_, err = e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: 999, Valid: uint32(mdspb.SetAttrBits_SETATTR_UID)})
	wantErr(t, "setattr missing", err, errs.ErrNotFound)
	e.check()
}

// TestRename covers the POSIX cases one by one, each on a fresh tree:
// /a/ (dir) with a/f (file), a/sub/ (dir) with a/sub/g (file), /b/ (empty
// dir), /e/ (empty dir), /x (file), /y (file, with a hard link a/ylink).
func TestRename(t *testing.T) {
	type tree struct{ a, sub, b, e, f, g, x, y *mdspb.Attr }
	build := func(e *env) tree {
		var tr tree
		tr.a = e.mkdir(rootIno, "a")
		tr.sub = e.mkdir(tr.a.Ino, "sub")
		tr.b = e.mkdir(rootIno, "b")
		tr.e = e.mkdir(rootIno, "e")
		tr.f = e.create(tr.a.Ino, "f")
		tr.g = e.create(tr.sub.Ino, "g")
		tr.x = e.create(rootIno, "x")
		tr.y = e.create(rootIno, "y")
		if _, err := e.c.Link(ctx, &mdspb.LinkRequest{Ino: tr.y.Ino, NewParent: tr.a.Ino, NewName: []byte("ylink")}); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	const (
		noreplace = uint32(mdspb.RenameFlags_RENAME_NOREPLACE)
		exchange  = uint32(mdspb.RenameFlags_RENAME_EXCHANGE)
	)
	for _, tc := range []struct {
		name      string
		req       func(tr tree) *mdspb.RenameRequest
		want      error
		then      func(t *testing.T, e *env, tr tree)
		unchanged bool // on success, the tree must be as before
	}{
		{
			name: "file in same dir",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", rootIno, "x2", 0) },
			then: func(t *testing.T, e *env, tr tree) {
				mustIno(t, e, rootIno, "x2", tr.x.Ino)
				mustMissing(t, e, rootIno, "x")
			},
		},
		{
			name: "file over file",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", tr.a.Ino, "f", 0) },
			then: func(t *testing.T, e *env, tr tree) {
				mustIno(t, e, tr.a.Ino, "f", tr.x.Ino)
				_, err := e.c.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: tr.f.Ino})
				wantErr(t, "replaced file", err, errs.ErrNotFound)
			},
		},
		{
			name: "file over its own hard link is a no-op",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "y", tr.a.Ino, "ylink", 0) },
			then: func(t *testing.T, e *env, tr tree) {
				mustIno(t, e, rootIno, "y", tr.y.Ino)
				mustIno(t, e, tr.a.Ino, "ylink", tr.y.Ino)
			},
		},
		{
			name:      "same name is a no-op",
			req:       func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "a", rootIno, "a", 0) },
			unchanged: true,
		},
		{
			name: "file over linked file drops one link",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", rootIno, "y", 0) },
			then: func(t *testing.T, e *env, tr tree) {
				if n := e.getattr(tr.y.Ino).Nlink; n != 1 {
					t.Fatalf("nlink %d, want 1", n)
				}
			},
		},
		{
			name: "dir over empty dir",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(tr.a.Ino, "sub", rootIno, "e", 0) },
			then: func(t *testing.T, e *env, tr tree) {
				mustIno(t, e, rootIno, "e", tr.sub.Ino)
				if n := e.getattr(tr.a.Ino).Nlink; n != 2 {
					t.Fatalf("old parent nlink %d, want 2", n)
				}
				if n := e.getattr(rootIno).Nlink; n != 5 { // a, b, e(=sub) + 2
					t.Fatalf("root nlink %d, want 5", n)
				}
				_, err := e.c.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: tr.e.Ino})
				wantErr(t, "replaced dir", err, errs.ErrNotFound)
			},
		},
		{
			name: "dir to another parent",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(tr.a.Ino, "sub", tr.b.Ino, "sub", 0) },
			then: func(t *testing.T, e *env, tr tree) {
				if n := e.getattr(tr.a.Ino).Nlink; n != 2 {
					t.Fatalf("old parent nlink %d", n)
				}
				if n := e.getattr(tr.b.Ino).Nlink; n != 3 {
					t.Fatalf("new parent nlink %d", n)
				}
				// Its parent pointer moved: b is now in sub's ... no, sub
				// is in b, so b may not move into sub.
				_, err := e.c.Rename(ctx, rn(rootIno, "b", tr.sub.Ino, "b", 0))
				wantErr(t, "b into its child", err, errs.ErrInvalid)
				_, err = e.c.Rename(ctx, rn(rootIno, "a", tr.sub.Ino, "a", 0))
				wantErr(t, "a into former child", err, nil)
			},
		},
		{
			name: "dir over non-empty dir",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "b", rootIno, "a", 0) },
			want: errs.ErrNotEmpty,
		},
		{
			name: "file over dir",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", rootIno, "b", 0) },
			want: errs.ErrIsDir,
		},
		{
			name: "dir over file",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "b", rootIno, "x", 0) },
			want: errs.ErrNotDir,
		},
		{
			name: "dir into its own subtree",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "a", tr.sub.Ino, "a2", 0) },
			want: errs.ErrInvalid,
		},
		{
			name: "dir into itself",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "a", tr.a.Ino, "a2", 0) },
			want: errs.ErrInvalid,
		},
		{
			name: "missing source",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "nope", rootIno, "z", 0) },
			want: errs.ErrNotFound,
		},
		{
			name: "missing new parent",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", 999, "z", 0) },
			want: errs.ErrNotFound,
		},
		{
			name: "new parent is a file",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", tr.y.Ino, "z", 0) },
			want: errs.ErrNotDir,
		},
		{
			name: "noreplace over existing",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", rootIno, "y", noreplace) },
			want: errs.ErrExists,
		},
		{
			name: "noreplace to new name",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", tr.b.Ino, "x", noreplace) },
			then: func(t *testing.T, e *env, tr tree) { mustIno(t, e, tr.b.Ino, "x", tr.x.Ino) },
		},
		{
			name: "exchange file and dir across parents",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(tr.a.Ino, "sub", rootIno, "x", exchange) },
			then: func(t *testing.T, e *env, tr tree) {
				mustIno(t, e, rootIno, "x", tr.sub.Ino)
				mustIno(t, e, tr.a.Ino, "sub", tr.x.Ino)
				if n := e.getattr(tr.a.Ino).Nlink; n != 2 {
					t.Fatalf("a nlink %d, want 2", n)
				}
				if n := e.getattr(rootIno).Nlink; n != 6 {
					t.Fatalf("root nlink %d, want 6", n)
				}
			},
		},
		{
			name: "exchange two dirs",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(tr.a.Ino, "sub", rootIno, "b", exchange) },
			then: func(t *testing.T, e *env, tr tree) {
				mustIno(t, e, rootIno, "b", tr.sub.Ino)
				mustIno(t, e, tr.a.Ino, "sub", tr.b.Ino)
			},
		},
		{
			name: "exchange with missing target",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", rootIno, "nope", exchange) },
			want: errs.ErrNotFound,
		},
		{
			name: "exchange dir with its descendant",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "a", tr.a.Ino, "sub", exchange) },
			want: errs.ErrInvalid,
		},
		{
			name: "both flags",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", rootIno, "y", noreplace|exchange) },
			want: errs.ErrInvalid,
		},
		{
			name: "invalid new name",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", rootIno, "..", 0) },
			want: errs.ErrInvalid,
		},
		{
			name: "new name too long",
			req:  func(tr tree) *mdspb.RenameRequest { return rn(rootIno, "x", rootIno, strings.Repeat("z", 300), 0) },
			want: errs.ErrNameTooLong,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tr := build(e)
			before := dump(t, e)
			e.clock.Advance(time.Second)
			_, err := e.c.Rename(ctx, tc.req(tr))
			wantErr(t, "rename", err, tc.want)
			e.check()
			if tc.want != nil || tc.unchanged {
				if after := dump(t, e); after != before {
					t.Fatalf("tree changed:\n%s\nwant\n%s", after, before)
				}
				return
			}
			if tc.then != nil {
				tc.then(t, e, tr)
			}
			e.check()
		})
	}
}

func rn(op uint64, on string, np uint64, nn string, flags uint32) *mdspb.RenameRequest {
	return &mdspb.RenameRequest{OldParent: op, OldName: []byte(on), NewParent: np, NewName: []byte(nn), Flags: flags}
}

func mustIno(t *testing.T, e *env, parent uint64, name string, ino uint64) {
	t.Helper()
	a, err := e.lookup(parent, name)
	if err != nil || a.Ino != ino {
		t.Fatalf("lookup %d/%s: %v %v, want ino %d", parent, name, a, err, ino)
	}
}

func mustMissing(t *testing.T, e *env, parent uint64, name string) {
	t.Helper()
	_, err := e.lookup(parent, name)
	wantErr(t, "lookup "+name, err, errs.ErrNotFound)
}

// dump lists the whole tree (names, inos, nlink) for before/after checks.
func dump(t *testing.T, e *env) string {
	t.Helper()
	var lines []string
	var walk func(dir uint64, path string)
	walk = func(dir uint64, path string) {
		r, err := e.c.ReadDir(ctx, &mdspb.ReadDirRequest{Ino: dir})
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range r.Entries {
			p := path + "/" + string(de.Name)
			a := e.getattr(de.Ino)
			lines = append(lines, fmt.Sprintf("%s ino=%d nlink=%d mode=%o", p, de.Ino, a.Nlink, a.Mode))
			if isDir(de.Mode) {
				walk(de.Ino, p)
			}
		}
	}
	walk(rootIno, "")
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestReadDirPagination(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootIno, "big")
	const n = 2500
	want := make([]string, 0, n)
	for i := range n {
		name := fmt.Sprintf("f%05d", (i*7919)%n) // created out of order
		e.create(d.Ino, name)
		want = append(want, name)
	}
	sort.Strings(want)
	e.mkdir(d.Ino, "zdir")
	want = append(want, "zdir")

	for _, limit := range []uint32{0, 1, 333, 1000, 20000} {
		var got []string
		var after []byte
		calls := 0
		for {
			r, err := e.c.ReadDir(ctx, &mdspb.ReadDirRequest{Ino: d.Ino, After: after, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			calls++
			if max := int(limit); (max == 0 && len(r.Entries) > readDirDefault) || (max > 0 && len(r.Entries) > min(max, readDirMax)) {
				t.Fatalf("limit %d: %d entries", limit, len(r.Entries))
			}
			for _, de := range r.Entries {
				got = append(got, string(de.Name))
				if string(de.Name) == "zdir" && !isDir(de.Mode) {
					t.Fatalf("zdir mode %o", de.Mode)
				}
			}
			if r.Eof {
				break
			}
			if len(r.Entries) == 0 {
				t.Fatal("no entries and no eof")
			}
			after = r.Entries[len(r.Entries)-1].Name
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("limit %d: %d entries, want %d (first %v)", limit, len(got), len(want), got[:min(5, len(got))])
		}
		t.Logf("limit %d: %d calls", limit, calls)
	}
	// Resuming after a name that is not there starts at the next one.
	r, err := e.c.ReadDir(ctx, &mdspb.ReadDirRequest{Ino: d.Ino, After: []byte("f00010x"), Limit: 1})
	wantErr(t, "readdir", err, nil)
	if string(r.Entries[0].Name) != "f00011" || r.Eof {
		t.Fatalf("resume after missing name: %q eof=%v", r.Entries[0].Name, r.Eof)
	}
	r, err = e.c.ReadDir(ctx, &mdspb.ReadDirRequest{Ino: d.Ino, After: []byte("zdir")})
	wantErr(t, "readdir at end", err, nil)
	if len(r.Entries) != 0 || !r.Eof {
		t.Fatalf("readdir after last: %v", r)
	}
	f, _ := e.lookup(d.Ino, "f00001")
	_, err = e.c.ReadDir(ctx, &mdspb.ReadDirRequest{Ino: f.Ino})
	wantErr(t, "readdir of file", err, errs.ErrNotDir)
	e.check()
}

// Calls with nil requests (possible in-process) must fail cleanly.
func TestNilRequests(t *testing.T) {
	e := newEnv(t)
	s := e.s
	calls := map[string]func() error{
		"Lookup":        func() error { _, err := s.Lookup(ctx, nil); return err },
		"GetAttr":       func() error { _, err := s.GetAttr(ctx, nil); return err },
		"SetAttr":       func() error { _, err := s.SetAttr(ctx, nil); return err },
		"Create":        func() error { _, err := s.Create(ctx, nil); return err },
		"Mkdir":         func() error { _, err := s.Mkdir(ctx, nil); return err },
		"Symlink":       func() error { _, err := s.Symlink(ctx, nil); return err },
		"Readlink":      func() error { _, err := s.Readlink(ctx, nil); return err },
		"Link":          func() error { _, err := s.Link(ctx, nil); return err },
		"Unlink":        func() error { _, err := s.Unlink(ctx, nil); return err },
		"Rmdir":         func() error { _, err := s.Rmdir(ctx, nil); return err },
		"Rename":        func() error { _, err := s.Rename(ctx, nil); return err },
		"ReadDir":       func() error { _, err := s.ReadDir(ctx, nil); return err },
		"GetExtents":    func() error { _, err := s.GetExtents(ctx, nil); return err },
		"AllocExtents":  func() error { _, err := s.AllocExtents(ctx, nil); return err },
		"CommitExtents": func() error { _, err := s.CommitExtents(ctx, nil); return err },
		"CommitNilRef": func() error {
			_, err := s.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: rootIno, Extents: []*mdspb.ExtentRef{nil}})
			return err
		},
		"RegisterOst": func() error { _, err := s.RegisterOst(ctx, nil); return err },
	}
	for name, call := range calls {
		wantErr(t, name, call(), errs.ErrInvalid)
	}
	// Nil is fine where every field is optional.
	if _, err := s.StatFs(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListOsts(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_, err := s.Heartbeat(ctx, nil)
	wantErr(t, "Heartbeat", err, errs.ErrInvalid)
	e.check()
}
