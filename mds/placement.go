package mds

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// PlacementOptions configure where AllocExtents puts chunks and when it
// refuses (Options.Placement; docs/reliability.md, "Writes while OSTs are
// down or full").
type PlacementOptions struct {
	// MinParity is how many of an extent's m parity chunks must be placed
	// (and written) for a write to go ahead: Ceph's min_size is k +
	// MinParity. With fewer than k+m OSTs able to take a chunk, an extent
	// is placed narrow, on the OSTs that can, and widened later by the
	// MDS. Default 0: k OSTs suffice, and a narrow extent may have no
	// redundancy until it is widened. A value above a layout's m means
	// m for it: no narrow writes.
	MinParity int
	// NearFullRatio of used capacity at which an OST is reported nearfull
	// (a warning in `shoal admin status`); default 0.90.
	NearFullRatio float64
	// FullRatio of used capacity beyond which placement puts no chunk on
	// an OST, which is then reported full; default 0.95.
	FullRatio float64
	// MirrorBelow: an extent that AllocExtents is told is at most this
	// many bytes long is coded with k = 1, one data chunk and the
	// layout's m parity chunks, which are copies of it: as many OST
	// losses survived as with k data chunks, in 1+m chunk writes (and
	// syncs) instead of k+m, and read from one chunk instead of k. A 4
	// KiB write and fsync, a small file, a mapped page's msync. It costs
	// (1+m)/(k+m)*k times the space of those small extents only.
	// 0: DefaultMirrorBelow; negative: never.
	MirrorBelow int64
}

// Defaults of PlacementOptions.
const (
	DefaultNearFullRatio = 0.90
	DefaultFullRatio     = 0.95
	// DefaultMirrorBelow is the OSTs' chunk log's bound (ost/chunklog.go):
	// mirrored chunks of a small extent still go through the log.
	DefaultMirrorBelow = 64 << 10
)

func (o *PlacementOptions) setDefaults() error {
	if o.NearFullRatio == 0 {
		o.NearFullRatio = DefaultNearFullRatio
	}
	if o.FullRatio == 0 {
		o.FullRatio = DefaultFullRatio
	}
	if o.MirrorBelow == 0 {
		o.MirrorBelow = DefaultMirrorBelow
	}
	switch {
	case o.MinParity < 0:
		return fmt.Errorf("mds: Placement.MinParity %d (0 or more): %w", o.MinParity, errs.ErrInvalid)
	case o.FullRatio <= 0 || o.FullRatio > 1:
		return fmt.Errorf("mds: Placement.FullRatio %v (0 < ratio <= 1): %w", o.FullRatio, errs.ErrInvalid)
	case o.NearFullRatio <= 0 || o.NearFullRatio > o.FullRatio:
		return fmt.Errorf("mds: Placement.NearFullRatio %v (0 < ratio <= FullRatio %v): %w", o.NearFullRatio, o.FullRatio, errs.ErrInvalid)
	}
	return nil
}

// minChunks is how many chunks of an extent of layout l must be placed
// and durable for it to be written.
func (o *PlacementOptions) minChunks(l *mdspb.Layout) int {
	return int(l.GetK()) + min(o.MinParity, int(l.GetM()))
}

// extentLayout is the layout of a new extent of length bytes of a file of
// layout l: l, or l with k = 1 for a small extent (MirrorBelow). length 0
// (not told) is not small.
func (o *PlacementOptions) extentLayout(l *mdspb.Layout, length uint64) *mdspb.Layout {
	if length == 0 || o.MirrorBelow < 0 || length > uint64(o.MirrorBelow) || l.GetK() <= 1 {
		return l
	}
	m := proto.Clone(l).(*mdspb.Layout)
	m.K = 1
	return m
}

// candidate is one OST that could take a chunk, as placement sees it.
type candidate struct {
	id       uint32
	capacity uint64 // 0: unknown (never full)
	free     uint64 // as last reported, less what was placed there since
}

// room reports whether c can take a chunk of n bytes and stay within
// fullRatio of its capacity.
func (c candidate) room(n uint64, fullRatio float64) bool {
	if c.capacity == 0 {
		return true
	}
	if c.free < n {
		return false
	}
	used := c.capacity - min(c.free, c.capacity) + n
	return float64(used) <= fullRatio*float64(c.capacity)
}

// fullRows is the rows of the chunk an OST must have room for not to be
// reported full: a whole extent's chunk as clients cut them by default
// (client.Options.ExtentRows), which is what streaming writes place.
const fullRows = 4

// fullness is what status reports about an OST's space: nearfull at or
// past NearFullRatio, full when the chunk of a whole extent of unit-byte
// cells (fullRows of them) would take it past FullRatio, so placement
// leaves it out.
func (o *PlacementOptions) fullness(capacity, free, unit uint64) (nearfull, full bool) {
	if capacity == 0 {
		return false, false
	}
	used := float64(capacity - min(free, capacity))
	c := candidate{capacity: capacity, free: free}
	full = !c.room(fullRows*unit, o.FullRatio)
	return full || used >= o.NearFullRatio*float64(capacity), full
}

// placeRequest is what one placement needs besides the candidates.
type placeRequest struct {
	layout    *mdspb.Layout
	chunk     uint64 // bytes of each chunk
	rot       uint64 // extents placed before this one (tile)
	minChunks int    // fewer OSTs than this able to take a chunk: refuse
	fullRatio float64
	excluded  int // OSTs up but excluded by the client (for the message)
}

// chunkBytes is the length of each chunk of an extent of length bytes
// under l; length 0 counts as one cell.
func chunkBytes(l *mdspb.Layout, length uint64) uint64 {
	lo := layout.Layout{K: int(l.GetK()), M: int(l.GetM()), Unit: int64(l.GetUnit())}
	if length == 0 || lo.K == 0 {
		return uint64(lo.Unit)
	}
	return uint64(lo.Geom(int64(min(length, 1<<62))).ChunkLen())
}

// place picks the OSTs of one extent's k+m chunks from cands (live OSTs
// not excluded by the client). It is pure: the same inputs give the same
// placement.
//
// Policy: OSTs without room for a chunk (by their reported free space,
// within the full ratio) are skipped. Of the rest, those with at least
// half the free space of the emptiest one form the pool (topped up by
// free space when the pool is smaller than k+m), ordered by id, so that
// OSTs far fuller than the rest are left alone. Which members of the
// pool take extent number rot, and which chunk each takes, is tile's
// rule: consecutive extents (of one file, or of every writer together)
// go to disjoint OSTs while the pool has room for two, and over many
// extents every OST takes as many data and parity chunks as any other.
//
// When fewer than k+m OSTs can take a chunk but at least minChunks can,
// the extent is placed narrow: its data chunks and as many parity chunks
// as there are OSTs, the other parity slots 0 (unplaced). Fewer than
// minChunks OSTs up is ErrUnavailable; enough up but too few with room is
// ErrNoSpace. Either error says what was needed and found.
func place(cands []candidate, r placeRequest) ([]uint32, error) {
	l := r.layout
	need := int(l.GetK() + l.GetM())
	if need == 0 {
		return nil, fmt.Errorf("placement for empty layout: %w", errs.ErrInvalid)
	}
	minChunks := max(min(r.minChunks, need), int(l.GetK()))
	if len(cands) < minChunks {
		return nil, fmt.Errorf("need %d OSTs up for RS %d+%d, have %d%s: %w",
			minChunks, l.GetK(), l.GetM(), len(cands), excludedNote(r.excluded), errs.ErrUnavailable)
	}
	var usable []candidate
	for _, c := range cands {
		if c.room(r.chunk, r.fullRatio) {
			usable = append(usable, c)
		}
	}
	if len(usable) < minChunks {
		return nil, fmt.Errorf("need %d OSTs with room for a chunk of %d bytes for RS %d+%d, have %d of %d up%s: %w",
			minChunks, r.chunk, l.GetK(), l.GetM(), len(usable), len(cands), excludedNote(r.excluded), errs.ErrNoSpace)
	}
	// Emptiest first; ids break ties so the order is deterministic.
	sort.Slice(usable, func(i, j int) bool {
		if usable[i].free != usable[j].free {
			return usable[i].free > usable[j].free
		}
		return usable[i].id < usable[j].id
	})
	width := min(need, len(usable))
	n := width
	for n < len(usable) && usable[n].free >= usable[0].free/2 {
		n++
	}
	pool := usable[:n]
	sort.Slice(pool, func(i, j int) bool { return pool[i].id < pool[j].id })
	out := make([]uint32, need) // slots past width stay 0: unplaced parity
	for j, i := range tile(len(pool), width, r.rot) {
		out[j] = pool[i].id
	}
	return out, nil
}

// tile returns where extent number rot puts its w chunks in a pool of p
// members (p >= w >= 1): chunk j on member tile(p, w, rot)[j]. It is the
// placement rule, apart from the choice of the pool:
//
//   - Extents tile the pool: extent rot starts at member rot*w mod p
//     and takes w consecutive members, so consecutive extents (those in
//     flight at once, whoever writes them) use disjoint OSTs when
//     p >= 2w, and a cycle of p/gcd(p,w) extents in a row covers every
//     member equally. (The rule before advanced the start by one per
//     extent: consecutive extents shared w-1 OSTs and others stayed
//     idle; docs/scale.md.)
//   - The starts repeat from one cycle to the next, which alone would
//     give each OST the same chunk index forever (with p a multiple of
//     w, the first member of a tile always data chunk 0, the last always
//     parity). So cycle c rotates the chunks within each tile by c mod
//     w: over w cycles (a block) every member takes every chunk index
//     w/gcd(p,w) times, data and parity alike.
//   - With p > 2w, block b moves every tile b members on. Without it,
//     when w divides p the pool would be cut into p/w fixed groups: the
//     other chunks of a failed OST's extents would all be on the same
//     w-1 OSTs, which would carry its whole rebuild and its degraded
//     reads; with it there are p tiles in all, as there were p windows
//     before. Once a block, not once a cycle, so that nearly every run
//     of a cycle's extents still covers the pool exactly; and only with
//     p > 2w, where the last extent of a block and the first of the
//     next (starts w+1 apart) stay disjoint.
func tile(p, w int, rot uint64) []int {
	cycle := uint64(p / gcd(p, w))
	c := rot / cycle
	start := int(rot%cycle) * w % p
	if p > 2*w {
		start = (start + int(c/uint64(w)%uint64(p))) % p
	}
	s := int(c % uint64(w))
	out := make([]int, w)
	for j := range w {
		out[j] = (start + (j+s)%w) % p
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func excludedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d excluded by the client)", n)
}

// placed counts the placed slots of a placement.
func placed(osts []uint32) int {
	n := 0
	for _, o := range osts {
		if o != 0 {
			n++
		}
	}
	return n
}
