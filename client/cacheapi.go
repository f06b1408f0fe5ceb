package client

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// ContentVersion identifies the file's contents as this File has them: a
// SHA-256 of its size and extent map (each entry's file offset, length,
// extent offset and extent id; extents are immutable and their ids never
// reused). Any change committed by any client (a write, truncate, punch,
// clone or migration) gives a new map, so a node-local cache compares it
// with the one its copy was filled at (docs/fuse.md, "Node-local cache").
// ok is false while the File holds writes of its own not yet committed:
// it then reads bytes no version names.
func (f *File) ContentVersion() (v [32]byte, size int64, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if len(f.dirty) > 0 || len(f.inflight) > 0 || f.writeNs.Load() != 0 {
		return v, 0, false
	}
	h := sha256.New()
	var b [8 * 4]byte
	binary.LittleEndian.PutUint64(b[:], uint64(f.size))
	h.Write(b[:8])
	for _, r := range f.ext {
		binary.LittleEndian.PutUint64(b[0:], r.GetFileOff())
		binary.LittleEndian.PutUint64(b[8:], r.GetLength())
		binary.LittleEndian.PutUint64(b[16:], r.GetExtentOff())
		binary.LittleEndian.PutUint64(b[24:], r.GetExtent().GetId())
		h.Write(b[:])
	}
	h.Sum(v[:0])
	return v, f.size, true
}

// ClusterIdentity names the cluster for a node-local cache, so that a
// cache directory never serves one cluster's files to another: the UUID
// of its first OST (the lowest id; the MDS lists removed OSTs too, so it
// never changes).
func (c *Client) ClusterIdentity(ctx context.Context) (string, error) {
	r, err := c.mds.ListOsts(ctx, &mdspb.ListOstsRequest{})
	if err != nil {
		return "", fmt.Errorf("list OSTs: %w", err)
	}
	var first *mdspb.OstInfo
	for _, o := range r.GetOsts() {
		if first == nil || o.GetId() < first.GetId() {
			first = o
		}
	}
	if first == nil || first.GetUuid() == "" {
		return "", fmt.Errorf("cluster identity: no OST registered: %w", errs.ErrUnavailable)
	}
	return first.GetUuid(), nil
}
