// Package ost is Shoal's object storage target: it keeps immutable chunks
// and their block checksums in one directory on one disk, serves them over
// gRPC (ostpb.Ost) and, for chunk reads and writes, over the framed TCP
// data path of internal/datanet (data.go; Info reports its address), and
// registers and heartbeats with the MDS. Both transports run the same
// validation and store code. Chunk data is written with O_DIRECT where
// the file system allows it (Options.DirectIO).
//
// The on-disk format is described in docs/ost-format.md; the names of the
// files come from chunk ids only (layout.go).
//
// Concurrency: writes and deletes of one chunk are serialised by a striped
// lock (store.stripes, keyed by chunk id); reads take no lock, because a
// chunk's files never change once its data file is in place, and a read that
// races a delete reports ErrNotFound. Server.mu guards the heartbeat loop's
// state; it is never held while a stripe lock is taken, nor the reverse.
package ost
