package client

import (
	"fmt"
	"slices"
	"strings"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Log lines of the read path (issue 17, item 9). A degraded read logs one
// line per read (not per chunk: one pass over a dataset with an OST down
// logged 845), and lines of the same kind, the same set of failing OSTs,
// are limited to a few, then one per 10 s, each saying how many were left
// out (internal/lograte). A read that fails because too few chunks are
// readable (the caller gets EIO) is logged too, at error level, which it
// was not: the mount's EIO had no line anywhere. The counts are in
// shoal_client_degraded_reads_total either way.

// logDegraded logs that chunks bad of ext could not be read and are
// rebuilt from parity. Unplaced slots (OST 0, an extent written narrow)
// are rebuilt without a word.
func (c *Client) logDegraded(ext *mdspb.Extent, bad []int, errsByChunk []error) {
	var osts []uint32
	var chunks []int
	var first error
	for _, j := range bad {
		o := ext.GetOsts()[j]
		if o == 0 {
			continue
		}
		if !slices.Contains(osts, o) {
			osts = append(osts, o)
		}
		chunks = append(chunks, j)
		if first == nil {
			first = errsByChunk[j]
		}
	}
	if len(chunks) == 0 {
		return
	}
	slices.Sort(osts)
	ok, n := c.rep.logs.Allow("degraded " + ostList(osts))
	if !ok {
		return
	}
	c.log.Warn("chunk reads failed; reconstructing from parity", "extent", ext.GetId(), "chunks", chunks, "osts", osts, "err", first, "suppressed", n)
}

// logUnreadable logs a read that fails because fewer than k chunks of ext
// are readable: the bytes are lost to this read (EIO at the mount).
func (c *Client) logUnreadable(ext *mdspb.Extent, present int, errsByChunk []error, err error) {
	var osts []uint32
	for j, e := range errsByChunk {
		if e != nil && j < len(ext.GetOsts()) && !slices.Contains(osts, ext.GetOsts()[j]) {
			osts = append(osts, ext.GetOsts()[j])
		}
	}
	slices.Sort(osts)
	ok, n := c.rep.logs.Allow("unreadable " + ostList(osts))
	if !ok {
		return
	}
	c.log.Error("read failed: too few chunks readable to rebuild the extent", "extent", ext.GetId(), "readable", present,
		"need", ext.GetLayout().GetK(), "failed_osts", osts, "err", err, "suppressed", n)
}

func ostList(osts []uint32) string {
	var b strings.Builder
	for i, o := range osts {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, o)
	}
	return b.String()
}
