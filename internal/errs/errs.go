// Package errs holds Shoal's sentinel errors. Every layer wraps them with %w
// and tests them with errors.Is; the wire package carries them across gRPC as
// status codes with a typed reason, and fuse maps them to errno in one place.
package errs

import "errors"

var (
	ErrNotFound     = errors.New("not found")
	ErrExists       = errors.New("already exists")
	ErrNotEmpty     = errors.New("directory not empty")
	ErrNotDir       = errors.New("not a directory")
	ErrIsDir        = errors.New("is a directory")
	ErrInvalid      = errors.New("invalid argument")
	ErrNameTooLong  = errors.New("name too long")
	ErrNoSpace      = errors.New("no space left")
	ErrCorrupt      = errors.New("checksum mismatch: corrupt data")
	ErrUnavailable  = errors.New("too few targets available")
	ErrStale        = errors.New("stale handle or placement")
	ErrPermission   = errors.New("permission denied")
	ErrNotPermitted = errors.New("operation not permitted")
	ErrNotSupported = errors.New("operation not supported")
	ErrTooLarge     = errors.New("value too large")
	ErrLoop         = errors.New("too many levels of symbolic links")
	ErrNoData       = errors.New("no such attribute")
	ErrRange        = errors.New("result out of range")
	ErrArgTooBig    = errors.New("argument too big")
	// ErrQuota: the change would pass a directory quota's limit
	// (docs/admin.md, "Quotas").
	ErrQuota = errors.New("disk quota exceeded")
	// ErrCrossDevice: a link or rename the MDS will not make in place
	// (across directory quotas); a caller may copy instead.
	ErrCrossDevice = errors.New("invalid cross-device link")
	// ErrNotLeader: the MDS replica is not the leader of its Raft group
	// (or not yet serving as one); the call may be retried at the leader.
	// A *NotLeaderError carries the leader's address when known.
	ErrNotLeader = errors.New("not the MDS leader")
)

// All lists every sentinel, for tables that must cover each one.
var All = []error{
	ErrNotFound, ErrExists, ErrNotEmpty, ErrNotDir, ErrIsDir, ErrInvalid,
	ErrNameTooLong, ErrNoSpace, ErrCorrupt, ErrUnavailable, ErrStale,
	ErrPermission, ErrNotPermitted, ErrNotSupported, ErrTooLarge, ErrLoop,
	ErrNoData, ErrRange, ErrArgTooBig, ErrQuota, ErrCrossDevice,
}

// Internal lists the sentinels that stop below the client library: the MDS
// group connection (wire.GroupConn) consumes ErrNotLeader by retrying at
// the leader, so it never reaches a file system caller.
var Internal = []error{ErrNotLeader}

// NotLeaderError is ErrNotLeader with the address of the member believed
// to lead ("" when none is known).
type NotLeaderError struct {
	Leader string
	Msg    string
}

func (e *NotLeaderError) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	if e.Leader == "" {
		return ErrNotLeader.Error() + " (no leader known)"
	}
	return ErrNotLeader.Error() + "; leader at " + e.Leader
}

func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// CapabilityError is ErrPermission from an OST that refused the capability
// sent with a chunk call (docs/security.md, "Capabilities"): Reason says
// why, one of the Cap* constants.
type CapabilityError struct {
	Reason string
	Msg    string
}

// Reasons of a CapabilityError.
const (
	CapMissing   = "missing"      // the call carried no capability
	CapMalformed = "malformed"    // it does not decode
	CapForged    = "forged"       // its signature is wrong (or made with a key the OST does not know)
	CapExpired   = "expired"      // it is past its expiry
	CapExtent    = "wrong-extent" // it does not name the chunk's extent
	CapAccess    = "wrong-access" // it does not grant the operation (read, write, admin)
	CapNoKey     = "no-key"       // the OST has no key from the MDS yet
)

func (e *CapabilityError) Error() string {
	if e.Msg != "" {
		return e.Msg
	}
	return "capability refused: " + e.Reason
}

func (e *CapabilityError) Unwrap() error { return ErrPermission }
