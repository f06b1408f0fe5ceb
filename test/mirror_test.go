package test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestMirroredSmallExtents: files of at most 64 KiB (the MDS's default
// --mirror-below) are stored k=1 with the layout's m = 2 copies on 3 OSTs,
// larger ones RS 4+2; a corrupted data chunk of a mirrored file is read
// from a copy; with 2 of its 3 OSTs down it still reads, with all 3 the
// read fails with ErrUnavailable and no bytes.
func TestMirroredSmallExtents(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	c := cl.Client()
	sizes := map[string]int{"/4k": 4096, "/60k": 60 << 10, "/64k": 64 << 10, "/100k": 100 << 10}
	files := map[string][]byte{}
	for name, n := range sizes {
		files[name] = randBytes(uint64(n), n)
		writeFile(t, c, name, files[name])
	}
	osts := func(name string) []uint32 {
		t.Helper()
		refs := extentsOf(t, cl, c, name) // compress_test.go
		if len(refs) != 1 {
			t.Fatalf("%s: %d extents, want 1", name, len(refs))
		}
		ext := refs[0].GetExtent()
		k, m := ext.GetLayout().GetK(), ext.GetLayout().GetM()
		want := uint32(1)
		if sizes[name] > 64<<10 {
			want = 4
		}
		if k != want || m != 2 || len(ext.GetOsts()) != int(k+m) {
			t.Fatalf("%s (%d bytes): k=%d m=%d on %d OSTs, want k=%d m=2", name, sizes[name], k, m, len(ext.GetOsts()), want)
		}
		return ext.GetOsts()
	}
	for name := range sizes {
		osts(name)
	}
	if n := flipDataChunks(t, cl, c, "/4k"); n != 1 {
		t.Fatalf("corrupted %d chunks of /4k, want 1", n)
	}
	got, err := readFile(cl.Client(), "/4k")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "mirrored file, data chunk corrupt", got, files["/4k"])

	placed := osts("/60k")
	index := func(id uint32) int {
		for i := range 6 {
			if o := cl.OST(i); o.Server != nil && o.Server.ID() == id {
				return i
			}
		}
		t.Fatalf("no OST %d", id)
		return -1
	}
	for j, id := range placed[:2] {
		cl.StopOST(index(id))
		got, err := readFile(cl.Client(), "/60k")
		if err != nil {
			t.Fatalf("%d of its OSTs down: %v", j+1, err)
		}
		mustEqual(t, fmt.Sprintf("mirrored file, %d OSTs down", j+1), got, files["/60k"])
	}
	cl.KillOST(index(placed[2]))
	got, err = readFile(cl.Client(), "/60k")
	if err == nil || !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("all 3 OSTs of a mirrored file down: %d bytes, %v; want ErrUnavailable", len(got), err)
	}
}
