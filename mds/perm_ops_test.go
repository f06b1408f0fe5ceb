package mds

import (
	"errors"
	"slices"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// TestPermXattr: the xattr rules of Linux's xattr_permission, for uid 1000
// on root's files and on its own.
func TestPermXattr(t *testing.T) {
	e := newEnv(t)
	user := wire.WithUser(ctx, wire.User{UID: 1000, GID: 1000})
	// Root's 0644 file, root's 0600 file, a 0644 file of uid 1000, a
	// sticky 0777 directory of root.
	mk := func(name string, mode, uid uint32) *mdspb.Attr {
		t.Helper()
		r, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(name), Mode: mode, Uid: uid, Gid: uid, Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetAttr()
	}
	pub := mk("pub", sIFREG|0o644, 0)
	priv := mk("priv", sIFREG|0o600, 0)
	mine := mk("mine", sIFREG|0o644, 1000)
	r, err := e.c.Mkdir(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("tmp"), Mode: 0o1777})
	if err != nil {
		t.Fatal(err)
	}
	sticky := r.GetAttr()
	for _, a := range []*mdspb.Attr{pub, priv, mine, sticky} {
		for _, n := range []string{"user.u", "trusted.t", "security.s"} {
			if _, err := e.setx(a.Ino, n, []byte("v"), 0); err != nil {
				t.Fatalf("root set %s of %d: %v", n, a.Ino, err)
			}
		}
	}

	get := func(ino uint64, n string) error {
		_, err := e.c.GetXattr(user, &mdspb.GetXattrRequest{Ino: ino, Name: []byte(n)})
		return err
	}
	set := func(ino uint64, n string) error {
		_, err := e.c.SetXattr(user, &mdspb.SetXattrRequest{Ino: ino, Name: []byte(n), Value: []byte("w")})
		return err
	}
	rm := func(ino uint64, n string) error {
		_, err := e.c.RemoveXattr(user, &mdspb.RemoveXattrRequest{Ino: ino, Name: []byte(n)})
		return err
	}
	rmCaps := func(ino uint64) error {
		if _, err := e.setx(ino, "security.capability", []byte("caps"), 0); err != nil {
			t.Fatal(err)
		}
		return rm(ino, "security.capability")
	}
	for _, tc := range []struct {
		what string
		err  error
		want error
	}{
		{"get user.* of a 0644 file", get(pub.Ino, "user.u"), nil},
		{"get user.* of a 0600 file", get(priv.Ino, "user.u"), errs.ErrPermission},
		{"set user.* of a 0644 file", set(pub.Ino, "user.u"), errs.ErrPermission},
		{"remove user.* of a 0644 file", rm(pub.Ino, "user.u"), errs.ErrPermission},
		{"set user.* of its own file", set(mine.Ino, "user.new"), nil},
		{"set user.* of a sticky dir of another", set(sticky.Ino, "user.u"), errs.ErrNotPermitted},
		{"get trusted.*", get(pub.Ino, "trusted.t"), errs.ErrNoData},
		{"set trusted.* of its own file", set(mine.Ino, "trusted.x"), errs.ErrNotPermitted},
		{"remove trusted.* of its own file", rm(mine.Ino, "trusted.t"), errs.ErrNotPermitted},
		{"get security.* of a 0600 file", get(priv.Ino, "security.s"), nil},
		{"set security.* of its own file", set(mine.Ino, "security.x"), errs.ErrNotPermitted},
		{"set system.*", set(mine.Ino, "system.posix_acl_access"), errs.ErrNotSupported},
		{"remove security.capability of its own file (kill privs)", rmCaps(mine.Ino), nil},
		{"remove security.capability of a file it may not write", rmCaps(pub.Ino), errs.ErrNotPermitted},
	} {
		if tc.want == nil && tc.err != nil || tc.want != nil && !errors.Is(tc.err, tc.want) {
			t.Errorf("uid 1000: %s: %v, want %v", tc.what, tc.err, tc.want)
		}
	}
	// listxattr needs no permission and hides trusted.* from all but root.
	lr, err := e.c.ListXattr(user, &mdspb.ListXattrRequest{Ino: priv.Ino})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range lr.GetNames() {
		names = append(names, string(n))
	}
	if want := []string{"security.s", "user.u"}; !slices.Equal(names, want) {
		t.Errorf("uid 1000 lists %q, want %q", names, want)
	}
	if got, want := e.listx(priv.Ino), []string{"security.s", "trusted.t", "user.u"}; !slices.Equal(got, want) {
		t.Errorf("root lists %q, want %q", got, want)
	}
	// Root may do all of it.
	for _, n := range []string{"user.u", "trusted.t", "security.s"} {
		if _, err := e.setx(priv.Ino, n, []byte("r"), 0); err != nil {
			t.Errorf("root set %s of a 0600 file: %v", n, err)
		}
	}
}

// TestPermExtentsAndLayout: CommitExtents needs write access (mode or
// owner), CloneExtents read on the source and write on the destination,
// SetLayout the owner or root.
func TestPermExtentsAndLayout(t *testing.T) {
	e := newEnv(t)
	user := wire.WithUser(ctx, wire.User{UID: 1000, GID: 1000})
	mk := func(name string, mode, uid uint32, size uint64) *mdspb.Attr {
		t.Helper()
		r, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(name), Mode: mode, Uid: uid, Gid: uid, Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		if size > 0 {
			if _, err := e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: r.GetAttr().GetIno(), Valid: uint32(mdspb.SetAttrBits_SETATTR_SIZE), Size: size}); err != nil {
				t.Fatal(err)
			}
		}
		return r.GetAttr()
	}
	pub := mk("pub", sIFREG|0o644, 0, 100)
	priv := mk("priv", sIFREG|0o600, 0, 100)
	ro := mk("ro", sIFREG|0o444, 1000, 100) // its own, read-only
	mine := mk("mine", sIFREG|0o644, 1000, 0)

	commit := func(ino uint64) error {
		_, err := e.c.CommitExtents(user, &mdspb.CommitExtentsRequest{Ino: ino})
		return err
	}
	clone := func(src, dst uint64) error {
		_, err := e.c.CloneExtents(user, &mdspb.CloneExtentsRequest{SrcIno: src, DstIno: dst, Ranges: []*mdspb.CloneRange{{Length: 100}}})
		return err
	}
	layout := func(ino uint64) error {
		_, err := e.c.SetLayout(user, &mdspb.SetLayoutRequest{Ino: ino, Layout: &mdspb.Layout{K: 2, M: 1, Unit: 1 << 20}})
		return err
	}
	for _, tc := range []struct {
		what string
		err  error
		want error
	}{
		{"commit to root's 0644 file", commit(pub.Ino), errs.ErrPermission},
		{"commit to its own file", commit(mine.Ino), nil},
		{"commit to its own 0444 file", commit(ro.Ino), nil},
		{"clone from a 0600 file of root", clone(priv.Ino, mine.Ino), errs.ErrPermission},
		{"clone into root's 0644 file", clone(ro.Ino, pub.Ino), errs.ErrPermission},
		{"clone from a readable file into its own", clone(pub.Ino, mine.Ino), nil},
		{"set layout of root's file", layout(pub.Ino), errs.ErrNotPermitted},
		{"set layout of the root directory", layout(rootIno), errs.ErrNotPermitted},
		{"set layout of its own file", layout(ro.Ino), nil},
	} {
		if tc.want == nil && tc.err != nil || tc.want != nil && !errors.Is(tc.err, tc.want) {
			t.Errorf("uid 1000: %s: %v, want %v", tc.what, tc.err, tc.want)
		}
	}
	if _, err := e.c.SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: rootIno, Layout: &mdspb.Layout{K: 2, M: 1, Unit: 1 << 20}}); err != nil {
		t.Errorf("root set layout of the root directory: %v", err)
	}
}

// TestPermCommitForeignExtent: a user may not commit another file's
// extent into its own file (it would get read capabilities for data it
// may not read); its own allocations, and extents already in its file,
// it may commit.
func TestPermCommitForeignExtent(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	user := wire.WithUser(ctx, wire.User{UID: 1000, GID: 1000})
	const mib = 1 << 20
	r, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("secret"), Mode: sIFREG | 0o600, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	secret := r.GetAttr()
	A := written(e.alloc(secret.Ino, 1)[0], mib)
	e.commit(secret.Ino, ref(0, mib, 0, A))
	r, err = e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("mine"), Mode: sIFREG | 0o644, Uid: 1000, Gid: 1000, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	mine := r.GetAttr()
	_, err = e.c.CommitExtents(user, &mdspb.CommitExtentsRequest{Ino: mine.Ino, Extents: []*mdspb.ExtentRef{ref(0, mib, 0, A)}})
	wantErr(t, "uid 1000 commits root's extent into its file", err, errs.ErrPermission)

	ar, err := e.c.AllocExtents(user, &mdspb.AllocExtentsRequest{Ino: mine.Ino, Count: 1})
	wantErr(t, "uid 1000 allocates for its file", err, nil)
	B := written(ar.GetExtents()[0], mib)
	_, err = e.c.CommitExtents(user, &mdspb.CommitExtentsRequest{Ino: mine.Ino, Extents: []*mdspb.ExtentRef{ref(0, mib, 0, B)}})
	wantErr(t, "uid 1000 commits its allocation", err, nil)
	_, err = e.c.CommitExtents(user, &mdspb.CommitExtentsRequest{Ino: mine.Ino, Extents: []*mdspb.ExtentRef{ref(mib, mib, 0, B)}})
	wantErr(t, "uid 1000 commits an extent of its own file again", err, nil)
	e.check()
}
