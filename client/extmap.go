package client

import (
	"sort"

	"github.com/shoalfs/shoal/mds/mdspb"
	"google.golang.org/protobuf/proto"
)

// extentMap is an ordered, non-overlapping list of extent references. It is
// copy-on-write: the methods return a new map and never change entries that
// readers may hold.
type extentMap []*mdspb.ExtentRef

func refEnd(r *mdspb.ExtentRef) uint64 { return r.GetFileOff() + r.GetLength() }

// insert returns the map with ref written over [ref.FileOff, end): entries
// overlapping the range are trimmed or split, as the MDS does at commit.
func (m extentMap) insert(ref *mdspb.ExtentRef) extentMap {
	out := m.punch(ref.GetFileOff(), refEnd(ref))
	i := sort.Search(len(out), func(i int) bool { return out[i].GetFileOff() >= ref.GetFileOff() })
	out = append(out, nil)
	copy(out[i+1:], out[i:])
	out[i] = ref
	return out
}

// punch returns the map without the file range [start, end).
func (m extentMap) punch(start, end uint64) extentMap {
	out := make(extentMap, 0, len(m)+1)
	for _, r := range m {
		rs, re := r.GetFileOff(), refEnd(r)
		if re <= start || rs >= end {
			out = append(out, r)
			continue
		}
		if rs < start { // keep the head
			h := proto.Clone(r).(*mdspb.ExtentRef)
			h.Length = start - rs
			out = append(out, h)
		}
		if re > end { // keep the tail
			t := proto.Clone(r).(*mdspb.ExtentRef)
			t.FileOff = end
			t.ExtentOff = r.GetExtentOff() + (end - rs)
			t.Length = re - end
			out = append(out, t)
		}
	}
	return out
}

// truncate returns the map cut at size.
func (m extentMap) truncate(size uint64) extentMap {
	return m.punch(size, ^uint64(0))
}

// overlapping returns the entries that intersect [start, end).
func (m extentMap) overlapping(start, end uint64) []*mdspb.ExtentRef {
	i := sort.Search(len(m), func(i int) bool { return refEnd(m[i]) > start })
	var out []*mdspb.ExtentRef
	for ; i < len(m) && m[i].GetFileOff() < end; i++ {
		out = append(out, m[i])
	}
	return out
}
