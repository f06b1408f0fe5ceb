package fuse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"

	"github.com/shoalfs/shoal/internal/errs"
)

// errnoTable maps each sentinel of internal/errs to the errno a POSIX
// caller sees. It is the only place where errno values are chosen; a test
// checks that it covers errs.All.
var errnoTable = []struct {
	err   error
	errno syscall.Errno
}{
	{errs.ErrNotFound, syscall.ENOENT},
	{errs.ErrExists, syscall.EEXIST},
	{errs.ErrNotEmpty, syscall.ENOTEMPTY},
	{errs.ErrNotDir, syscall.ENOTDIR},
	{errs.ErrIsDir, syscall.EISDIR},
	{errs.ErrInvalid, syscall.EINVAL},
	{errs.ErrNameTooLong, syscall.ENAMETOOLONG},
	{errs.ErrNoSpace, syscall.ENOSPC},
	{errs.ErrCorrupt, syscall.EIO},
	{errs.ErrUnavailable, syscall.EIO},
	{errs.ErrStale, syscall.ESTALE},
	{errs.ErrPermission, syscall.EACCES},
	{errs.ErrNotPermitted, syscall.EPERM},
	{errs.ErrNotSupported, syscall.EOPNOTSUPP},
	{errs.ErrTooLarge, syscall.EFBIG},
	{errs.ErrLoop, syscall.ELOOP},
	{errs.ErrNoData, syscall.ENODATA},
	{errs.ErrRange, syscall.ERANGE},
	{errs.ErrArgTooBig, syscall.E2BIG},
	{errs.ErrQuota, syscall.EDQUOT},
	{errs.ErrCrossDevice, syscall.EXDEV},
	{context.Canceled, syscall.EINTR},
}

// ToErrno maps an error to the errno returned to the kernel: a sentinel of
// internal/errs (wrapped or not) to its table entry, context.Canceled to
// EINTR, a syscall.Errno to itself, nil to 0 and anything else to EIO. It
// never returns ENOSYS, which the kernel would take as "operation not
// implemented, do not ask again".
func ToErrno(err error) syscall.Errno {
	e, _ := toErrno(err)
	return e
}

// toErrno is ToErrno that also reports whether err was recognised; the
// mount logs the errors that were not.
func toErrno(err error) (syscall.Errno, bool) {
	if err == nil {
		return 0, true
	}
	for _, t := range errnoTable {
		if errors.Is(err, t.err) {
			return t.errno, true
		}
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		if en == 0 {
			// A zero Errno inside a non-nil error is a bug upstream;
			// do not report success for it.
			return syscall.EIO, false
		}
		if en == syscall.ENOSYS {
			return syscall.EOPNOTSUPP, true
		}
		return en, true
	}
	return syscall.EIO, false
}

// errno maps err for the kernel, logging an unrecognised error at warn
// level the first time its kind (operation and Go type) is seen and at
// debug level afterwards, so that a failing path cannot flood the log.
func (m *Mounted) errno(op string, ino uint64, err error) syscall.Errno {
	e, ok := toErrno(err)
	if ok {
		return e
	}
	key := fmt.Sprintf("%s/%T", op, rootCause(err))
	level := slog.LevelDebug
	if _, seen := m.unknown.LoadOrStore(key, true); !seen {
		level = slog.LevelWarn
	}
	m.log.Log(context.Background(), level, "unmapped error returned as EIO",
		"op", op, "ino", ino, "err", err)
	return e
}

// rootCause returns the innermost error of a wrap chain (the first branch
// of a join).
func rootCause(err error) error {
	for {
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next := u.Unwrap()
			if next == nil {
				return err
			}
			err = next
		case interface{ Unwrap() []error }:
			es := u.Unwrap()
			if len(es) == 0 || es[0] == nil {
				return err
			}
			err = es[0]
		default:
			return err
		}
	}
}
