package mdspb

// CommitHeader is the gRPC metadata key with which a client asks the MDS
// to acknowledge a namespace change once it is committed and visible,
// before its WAL sync (value CommitEarly). Sync makes such changes
// durable. Hand-written: buf does not generate this file.
const (
	CommitHeader = "shoal-commit"
	CommitEarly  = "early"
)
