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
)

// All lists every sentinel, for tables that must cover each one.
var All = []error{
	ErrNotFound, ErrExists, ErrNotEmpty, ErrNotDir, ErrIsDir, ErrInvalid,
	ErrNameTooLong, ErrNoSpace, ErrCorrupt, ErrUnavailable, ErrStale,
	ErrPermission, ErrNotPermitted, ErrNotSupported, ErrTooLarge, ErrLoop,
	ErrNoData, ErrRange, ErrArgTooBig,
}
