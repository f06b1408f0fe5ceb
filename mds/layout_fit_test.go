package mds

import (
	"testing"

	"github.com/shoalfs/shoal/mds/mdspb"
)

func TestFitLayout(t *testing.T) {
	def := &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}
	for _, tc := range []struct {
		def  *mdspb.Layout
		osts int
		k, m uint32
	}{
		{def, 0, 4, 2}, {def, 1, 1, 0}, {def, 2, 1, 1}, {def, 3, 2, 1}, {def, 5, 2, 1},
		{def, 6, 4, 2}, {def, 40, 4, 2},
		{&mdspb.Layout{K: 8, M: 3, Unit: 1 << 20}, 7, 4, 2},
		{&mdspb.Layout{K: 1, M: 2, Unit: 1 << 20}, 2, 1, 1}, // never wider than the default
	} {
		got := fitLayout(tc.def, tc.osts)
		if got.K != tc.k || got.M != tc.m || got.Unit != tc.def.Unit {
			t.Errorf("fitLayout(%d+%d, %d) = %d+%d unit %d, want %d+%d", tc.def.K, tc.def.M, tc.osts, got.K, got.M, got.Unit, tc.k, tc.m)
		}
		if !autoLayout(tc.def, got) {
			t.Errorf("autoLayout(%d+%d, %d+%d) = false", tc.def.K, tc.def.M, got.K, got.M)
		}
	}
	if autoLayout(def, &mdspb.Layout{K: 3, M: 1, Unit: 1 << 20}) {
		t.Error("an administrator's RS 3+1 counted as automatic")
	}
}

// A first MDS's root layout follows the OSTs that register while the root
// is empty; an entry in the root, or an administrator's layout, fixes it.
// Health names the directories wider than the OSTs.
func TestRootLayoutFitsOsts(t *testing.T) {
	e := newEnv(t)
	root := func() *mdspb.Layout {
		a, err := e.c.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: rootIno})
		if err != nil {
			t.Fatal(err)
		}
		return a.Attr.Layout
	}
	if l := root(); l.K != 4 || l.M != 2 {
		t.Fatalf("root of a new file system: %v", l)
	}
	e.registerOsts(3)
	if l := root(); l.K != 2 || l.M != 1 || l.Unit != 1<<20 {
		t.Fatalf("root with 3 OSTs: %v, want RS 2+1", l)
	}
	// On 3 OSTs a directory of RS 4+2 cannot be written at all (k=4),
	// one of RS 2+2 only narrow: Health names both, unplaceable first.
	d := e.mkdir(rootIno, "wide")
	if _, err := e.c.SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: d.Ino, Layout: &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	n := e.mkdir(rootIno, "narrow")
	if _, err := e.c.SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: n.Ino, Layout: &mdspb.Layout{K: 2, M: 2, Unit: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	h, err := e.c.Health(ctx, &mdspb.HealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Osts != 3 || len(h.WideLayouts) != 2 {
		t.Fatalf("health: %v", h)
	}
	if w := h.WideLayouts[0]; w.Path != "/wide" || !w.Unplaceable || w.Need != 4 {
		t.Fatalf("first wide layout %v", w)
	}
	if w := h.WideLayouts[1]; w.Path != "/narrow" || w.Unplaceable || w.Need != 2 {
		t.Fatalf("second wide layout %v", w)
	}
	// The root has entries now: more OSTs leave it as it is.
	e.registerOsts(6)
	if l := root(); l.K != 2 || l.M != 1 {
		t.Fatalf("root with entries after 6 OSTs: %v, want RS 2+1 still", l)
	}
	if h, _ = e.c.Health(ctx, &mdspb.HealthRequest{}); len(h.WideLayouts) != 0 {
		t.Fatalf("health with 6 OSTs: %v", h.WideLayouts)
	}
	e.check()
}
