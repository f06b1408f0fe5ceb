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
func (c *Client) ReadExtent(ctx context.Context, ext *mdspb.Extent, off int64, buf []byte) error {
	if compressed(ext) {
		return c.readCompressed(ctx, ext, off, buf, nil)
	}
	return c.readExact(ctx, ext, off, buf)
}

// ExtentMap returns the size of regular file ino and its extent map, for
// readers that plan their own I/O (gds) and read it with ReadExtent: the
// client records the read capabilities that come with it.
func (c *Client) ExtentMap(ctx context.Context, ino uint64) (size int64, refs []*mdspb.ExtentRef, err error) {
	r, err := c.mds.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: ino})
	if err != nil {
		return 0, nil, fmt.Errorf("extent map of inode %d: %w", ino, err)
	}
	return int64(r.GetAttr().GetSize()), r.GetExtents(), nil
}
