package test

import (
	"context"
	"testing"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestReadsInAnyOrder: 1 MiB reads of a file in the order the kernel's
// read-ahead may deliver a FUSE reader's READs read every byte right and
// read each
// chunk byte from the disk once: none of them is taken for a random read
// and read again outside the rows fetched ahead (client.File.noteRead).
func TestReadsInAnyOrder(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	const size = 48 << 20
	data := randBytes(43, size)
	writeFile(t, cl.Client(), "/order", data)
	r := cl.ClientWith(client.Options{})
	f, err := r.Open(ctx, "/order")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	const mib = 1 << 20
	buf := make([]byte, mib)
	// Windows of 8 MiB, each read second half first, as the kernel's
	// READs of two read-ahead windows in flight may come: 4 MiB ahead of
	// the stream, then 8 MiB behind it.
	var order []int64
	for w := int64(0); w < size; w += 8 * mib {
		for _, i := range []int64{4, 5, 6, 7, 0, 1, 2, 3} {
			order = append(order, w+i*mib)
		}
	}
	for _, off := range order {
		if _, err := f.ReadAt(ctx, buf, off); err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		mustEqual(t, "read", buf, data[off:off+mib])
	}
	if st := r.DataStats(); st.ReadBytes != size {
		t.Errorf("read %d chunk bytes for a file of %d (%+v): some read twice", st.ReadBytes, size, st)
	}
}

// TestReadRef: a sequential reader's ReadRef hands out the file's bytes
// from the row cache, right, and holds them until released; a read that is
// not one (a jump, a range past the end, bytes written and not yet
// committed) is refused with nothing held, for ReadAt to serve.
func TestReadRef(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	w := cl.Client()
	root, err := w.GetAttr(ctx, client.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	row := int64(root.Layout.K) * int64(root.Layout.Unit)
	const mib = 1 << 20
	if row%mib != 0 {
		t.Fatalf("rows of %d bytes: the test reads whole MiBs of rows", row)
	}
	size := 6 * row
	data := randBytes(44, int(size))
	writeFile(t, w, "/ref", data)
	// One row of read-ahead: a read more than two rows behind the stream
	// is not part of it.
	c := cl.ClientWith(client.Options{ReadAheadRows: 1})
	f, err := c.Open(ctx, "/ref")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	type ref struct {
		off     int64
		b       []byte
		release func()
	}
	var held []ref
	for off := int64(0); off < 2*row; off += mib {
		b, release, ok := f.ReadRef(ctx, off, mib)
		if !ok {
			t.Fatalf("sequential ReadRef at %d refused", off)
		}
		mustEqual(t, "ReadRef", b, data[off:off+mib])
		held = append(held, ref{off, b, release})
	}
	// Bytes held stay right while the reader goes on.
	buf := make([]byte, mib)
	for off := 2 * row; off < 4*row; off += mib {
		if _, err := f.ReadAt(ctx, buf, off); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range held {
		mustEqual(t, "ReadRef held", h.b, data[h.off:h.off+mib])
		h.release()
	}
	if _, _, ok := f.ReadRef(ctx, size-mib/2, mib); ok {
		t.Error("ReadRef past the end of the file served")
	}
	if _, _, ok := f.ReadRef(ctx, 0, mib); ok {
		t.Error("ReadRef four rows behind the stream served as sequential")
	}
	if _, err := f.WriteAt(ctx, []byte("new"), 5*row+5); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := f.ReadRef(ctx, 5*row, mib); ok {
		t.Error("ReadRef over bytes written and not committed served")
	}
	if _, err := f.ReadAt(ctx, buf, 5*row); err != nil {
		t.Fatal(err)
	}
	want := append([]byte{}, data[5*row:5*row+mib]...)
	copy(want[5:], "new")
	mustEqual(t, "ReadAt over the write", buf, want)
}
