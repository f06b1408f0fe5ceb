package mds

import (
	"encoding/binary"
)

// Keys of the administration worker (admin*.go), part of format version 1:
// they were added without a version change because an MDS that predates
// them never writes them and a database without them is valid (no
// migration: an absent key means "active", "no job", "nothing queued").
// docs/mds-keys.md lists them with the rest.
//
//	key                                         value
//	"s" + ost id(4)                             admin state u32 (ostDraining, ostRemoved); absent: active
//	"J" + job kind                              mdspb.AdminJob proto
//	"M" + extent id(8) + index(4)               mdspb.MoveRecord proto: a chunk move in flight
//	"D" + due ns(8) + extent id(8) + index(4)   ost id(4): an old chunk copy to delete at or after due
//	"b" + extent id(8) + index(4)               mdspb.BadChunk proto: a chunk reported bad, to rebuild
const (
	prefixOstState = 's'
	prefixJob      = 'J'
	prefixMove     = 'M'
	prefixRetire   = 'D'
	prefixBad      = 'b'
)

func ostStateKey(id uint32) []byte { return u32([]byte{prefixOstState}, id) }

func jobKey(kind string) []byte { return append([]byte{prefixJob}, kind...) }

func moveKey(extent uint64, index uint32) []byte {
	return u32(u64([]byte{prefixMove}, extent), index)
}

func retireKey(dueNs int64, extent uint64, index uint32) []byte {
	return u32(u64(u64([]byte{prefixRetire}, uint64(max(dueNs, 0))), extent), index)
}

func badKey(extent uint64, index uint32) []byte {
	return u32(u64([]byte{prefixBad}, extent), index)
}

func decodeRetireKey(k []byte) (dueNs int64, extent uint64, index uint32, err error) {
	if len(k) != 21 || k[0] != prefixRetire {
		return 0, 0, 0, errCorruptKey("retire", k)
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), binary.BigEndian.Uint64(k[9:17]), binary.BigEndian.Uint32(k[17:]), nil
}

func decodeOstStateKey(k []byte) (uint32, error) {
	if len(k) != 5 || k[0] != prefixOstState {
		return 0, errCorruptKey("ost state", k)
	}
	return binary.BigEndian.Uint32(k[1:]), nil
}
