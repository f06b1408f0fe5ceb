package client

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Balanced reads. A sequential reader keeps only the k data chunks of an
// extent busy, on k of its k+m OSTs; several readers of a few files each
// collide on some OSTs while others idle (docs/scale.md: one client host
// with 4 readers and 12 OST hosts read at 0.56 of the links). Any k chunks
// of a row rebuild it, so a read may take a parity chunk in place of a
// data chunk whose OST is busy: the same bytes from an idle link, for the
// CPU of a decode. The client counts its chunk reads in flight to each OST
// over the network; a data chunk whose OST has balanceSlack more than an
// unused parity chunk's is read from the parity chunk. A slack of 1 took
// one client host's reads from 6 to 12 OST hosts from 1.42x to 1.65x,
// a slack of 2 to 1.51x (docs/scale.md). Reads through an
// OST's local endpoint (short-circuit, one host) are not counted: they
// share one disk, and a decode would cost CPU for nothing. A balanced read
// that fails is read again the plain way, which reports and rebuilds as
// always.

// balanceSlack is how many more reads in flight a data chunk's OST must
// have than a parity chunk's for the read to take the parity chunk.
const balanceSlack = 1

// ostLoad counts a client's chunk reads in flight over the network, by OST.
type ostLoad struct {
	mu   sync.Mutex
	n    map[uint32]int
	seen atomic.Bool // a chunk was read over the network
}

// network reports whether the client has read a chunk over the network.
func (l *ostLoad) network() bool { return l.seen.Load() }

func (l *ostLoad) add(id uint32, d int) {
	if d > 0 && !l.seen.Load() {
		l.seen.Store(true)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[uint32]int{}
	}
	l.n[id] += d
	if l.n[id] == 0 {
		delete(l.n, id)
	}
}

// balancePlan chooses the k chunks of ext to read: its data chunks, with
// each data chunk whose OST is busy swapped for the least busy unused
// parity chunk that is balanceSlack less busy. It returns the chunk
// indexes swapped out (data) and in (parity), nil when none is.
func (l *ostLoad) balancePlan(ext *mdspb.Extent, k, m int) (out, in []int) {
	osts := ext.GetOsts()
	if m == 0 || len(osts) != k+m {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.n) == 0 {
		return nil, nil
	}
	load := func(j int) int { return l.n[osts[j]] }
	for j := range k {
		best := -1
		for p := k; p < k+m; p++ {
			if osts[p] == 0 || slices.Contains(in, p) {
				continue
			}
			if best < 0 || load(p) < load(best) {
				best = p
			}
		}
		if best >= 0 && osts[j] != 0 && load(j) >= load(best)+balanceSlack {
			out, in = append(out, j), append(in, best)
		}
	}
	return out, in
}

// readBalanced reads rows [r0, r1) of ext into out (as readRows) with a
// parity chunk in place of each data chunk on a busy OST, and reports
// whether it did; false (nothing swapped, or a chunk failed) leaves the
// read to readRows' plain way.
func (c *Client) readBalanced(ctx context.Context, ext *mdspb.Extent, r0, r1 int64, out []byte) bool {
	// The plan first: most rows (every local one) are never balanced,
	// and it needs only the extent's k and m, not its geometry.
	skip, use := c.load.balancePlan(ext, int(ext.GetLayout().GetK()), int(ext.GetLayout().GetM()))
	if len(skip) == 0 {
		return false
	}
	sp, err := spanOf(ext, r0, r1, out)
	if err != nil {
		return false
	}
	lo := sp.g.Layout
	parity := make([][]byte, lo.M)
	have := make([]bool, lo.Shards())
	failed := make([]bool, lo.Shards())
	var wg sync.WaitGroup
	for j := range lo.Shards() {
		var dst [][]byte
		switch {
		case j < lo.K && !slices.Contains(skip, j):
			if dst = sp.dataDst(out, j); len(dst) == 0 {
				have[j] = true // no data of this chunk in the rows: padding
				continue
			}
		case slices.Contains(use, j):
			parity[j-lo.K] = c.bufs.Get(int(sp.cLen))
			defer c.bufs.Put(parity[j-lo.K])
			dst = [][]byte{parity[j-lo.K]}
		default:
			continue
		}
		have[j] = true
		wg.Go(func() { failed[j] = c.readChunk(ctx, ext, j, sp.cOff, dst) != nil })
	}
	wg.Wait()
	if slices.Contains(failed, true) || ctx.Err() != nil {
		return false
	}
	if c.rebuildRows(ext, sp, out, parity, have, skip) != nil {
		return false
	}
	c.metrics.balancedReads.Add(float64(len(skip)))
	return true
}
