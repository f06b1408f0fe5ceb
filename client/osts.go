package client

import (
	"context"
	"fmt"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// OST is one OST as the MDS lists it.
type OST struct {
	ID    uint32
	Addr  string
	Up    bool   // heartbeating
	State string // administration: "up", "down", "draining" or "removed"
}

// OSTList is the MDS's list of OSTs.
type OSTList struct {
	OSTs []OST
	// MinParity is the MDS's placement option (--min-parity): a write
	// needs k + min(MinParity, m) OSTs that can take a chunk.
	MinParity int
}

// ListOsts returns the OSTs the MDS knows, removed ones included.
func (c *Client) ListOsts(ctx context.Context) (OSTList, error) {
	r, err := c.mds.ListOsts(ctx, &mdspb.ListOstsRequest{})
	if err != nil {
		return OSTList{}, fmt.Errorf("list OSTs: %w", err)
	}
	l := OSTList{MinParity: int(r.GetMinParity()), OSTs: make([]OST, 0, len(r.GetOsts()))}
	for _, o := range r.GetOsts() {
		l.OSTs = append(l.OSTs, OST{ID: o.GetId(), Addr: o.GetAddr(), Up: o.GetUp(), State: o.GetState()})
	}
	return l, nil
}

// SetLayout sets the layout of directory ino (inherited by the files
// created in it) or of the empty regular file ino; a file with data may
// change only its compression, which its new extents follow. It returns
// the new attributes.
func (c *Client) SetLayout(ctx context.Context, ino uint64, l Layout) (*Attr, error) {
	r, err := c.mds.SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: ino, Layout: l.wire()})
	return attrOf(r.GetAttr()), err
}
