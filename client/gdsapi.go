package client

import (
	"context"
	"fmt"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// ReadExtent reads bytes [off, off+len(buf)) of extent ext into buf, for
// readers that plan their own I/O from the extent map (the GPU read path,
// gds): one chunk read per cell piece, checked by the OSTs' checksums, and
// on any failure the rows rebuilt from any k chunks. It fails with
// errs.ErrUnavailable when fewer than k chunks of a row can be read.
//
// off counts file bytes of the extent: a compressed extent's blocks are
// fetched and decoded (compress.go).
func (c *Client) ReadExtent(ctx context.Context, ext *Extent, off int64, buf []byte) error {
	w := ext.toWire()
	if compressed(w) {
		return c.readCompressed(ctx, w, off, buf, nil)
	}
	return c.readExact(ctx, w, off, buf)
}

// ExtentMap returns the size of regular file ino and its extent map, for
// readers that plan their own I/O (gds) and read it with ReadExtent: the
// client records the read capabilities that come with it.
func (c *Client) ExtentMap(ctx context.Context, ino uint64) (size int64, refs []ExtentRef, err error) {
	r, err := c.mds.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: ino})
	if err != nil {
		return 0, nil, fmt.Errorf("extent map of inode %d: %w", ino, err)
	}
	refs = make([]ExtentRef, len(r.GetExtents()))
	for i, ref := range r.GetExtents() {
		refs[i] = ExtentRef{FileOff: int64(ref.GetFileOff()), Length: int64(ref.GetLength()), ExtentOff: int64(ref.GetExtentOff()), Extent: extentOfWire(ref.GetExtent())}
	}
	return int64(r.GetAttr().GetSize()), refs, nil
}

// ExtentRef places bytes of an extent in a file: Length bytes at
// FileOff are the extent's from ExtentOff (file bytes of the extent,
// decoded ones for a compressed extent).
type ExtentRef struct {
	FileOff, Length, ExtentOff int64
	Extent                     *Extent // never nil in ExtentMap's refs
}

// Extent is an immutable run of bytes erasure coded over OSTs, as
// ExtentMap lists it for readers that plan their own chunk I/O.
type Extent struct {
	ID     uint64
	Layout Layout
	// Length is the number of bytes in its chunks: its coding geometry.
	// For a raw extent it is also the number of file bytes it holds.
	Length int64
	// LogicalLength, when not 0, marks a compressed extent: it holds
	// LogicalLength file bytes, stored encoded (docs/compression.md);
	// read them with ReadExtent, not from its chunks.
	LogicalLength int64
	// OSTs is its placement: chunk j lives on OST OSTs[j].
	OSTs []uint32

	wire *mdspb.Extent // as the MDS sent it (with its block index), for ReadExtent
}

// extentOfWire converts a wire extent; nil is the zero Extent.
func extentOfWire(e *mdspb.Extent) *Extent {
	return &Extent{ID: e.GetId(), Layout: layoutOfWire(e.GetLayout()), Length: int64(e.GetLength()),
		LogicalLength: int64(e.GetLogicalLength()), OSTs: e.GetOsts(), wire: e}
}

// toWire is the extent as the MDS sent it, or built from its fields.
func (e *Extent) toWire() *mdspb.Extent {
	if e.wire != nil {
		return e.wire
	}
	return &mdspb.Extent{Id: e.ID, Layout: e.Layout.wire(), Length: uint64(e.Length), LogicalLength: uint64(e.LogicalLength), Osts: e.OSTs}
}
