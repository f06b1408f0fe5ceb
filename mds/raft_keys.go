package mds

import "encoding/binary"

// Keys of a replicated MDS (raft*.go, dedup.go), part of format version 1
// for the same reason as the administration keys: a database without them
// is a valid single-MDS database. They live in the state machine, so they
// are replicated like every other key.
//
//	key                                 value
//	"R"                                 applied index(8) + applied term(8): the last Raft entry in this database
//	"P" + member id(8)                  member address: the group's configuration as of the applied index
//	"q" + request id                    expiry ns(8) [+ 0x01 + encoded reply]: a mutation with this request id
//	                                    was applied, and its answer (raftapply.go, encodeReqValue)
//	"Q" + expiry ns(8) + request id     empty: the expiry index of the "q" keys, scanned by GC
//
// The Raft log itself (entries, hard state, snapshot metadata) is not in
// this database: it lives in a second Pebble database in the "raft"
// subdirectory (raftlog.go).
const (
	prefixApplied = 'R'
	prefixMember  = 'P'
	prefixReq     = 'q'
	prefixReqExp  = 'Q'
)

func appliedKey() []byte { return []byte{prefixApplied} }

func encodeApplied(index, term uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, index), term)
}

func decodeApplied(v []byte) (index, term uint64, ok bool) {
	if len(v) != 16 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), true
}

func memberKey(id uint64) []byte { return u64([]byte{prefixMember}, id) }

func reqKey(id string) []byte { return append([]byte{prefixReq}, id...) }

func reqExpKey(due int64, id string) []byte {
	return append(u64([]byte{prefixReqExp}, uint64(due)), id...)
}
