package mds

import (
	"testing"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Namespace changes answer with the directory as they left it, equal to
// what a getattr of the directory right after returns.
func TestAnswersCarryTheDirectory(t *testing.T) {
	e := newEnv(t)
	same := func(op string, got *mdspb.Attr) {
		t.Helper()
		want := e.getattr(got.GetIno())
		if got.GetIno() == 0 || got.GetCtimeNs() != want.GetCtimeNs() || got.GetNlink() != want.GetNlink() || got.GetMtimeNs() != want.GetMtimeNs() {
			t.Fatalf("%s: directory in the answer %v, getattr %v", op, got, want)
		}
	}
	e.clock.Advance(1)
	d, err := e.c.Mkdir(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("d"), Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	same("mkdir", d.GetParent())
	dir := d.GetAttr().GetIno()
	e.clock.Advance(1)
	c, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: dir, Name: []byte("f"), Mode: 0o644})
	if err != nil {
		t.Fatal(err)
	}
	same("create", c.GetParent())
	e.clock.Advance(1)
	r, err := e.c.Rename(ctx, &mdspb.RenameRequest{OldParent: dir, OldName: []byte("f"), NewParent: rootIno, NewName: []byte("g")})
	if err != nil {
		t.Fatal(err)
	}
	same("rename (old)", r.GetOldParent())
	same("rename (new)", r.GetNewParent())
	e.clock.Advance(1)
	u, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("g")})
	if err != nil {
		t.Fatal(err)
	}
	same("unlink", u.GetParent())
	e.clock.Advance(1)
	rd, err := e.c.Rmdir(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("d")})
	if err != nil {
		t.Fatal(err)
	}
	same("rmdir", rd.GetParent())
}
