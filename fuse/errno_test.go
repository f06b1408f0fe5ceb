package fuse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

func TestToErrno(t *testing.T) {
	want := map[error]syscall.Errno{
		errs.ErrNotFound:     syscall.ENOENT,
		errs.ErrExists:       syscall.EEXIST,
		errs.ErrNotEmpty:     syscall.ENOTEMPTY,
		errs.ErrNotDir:       syscall.ENOTDIR,
		errs.ErrIsDir:        syscall.EISDIR,
		errs.ErrInvalid:      syscall.EINVAL,
		errs.ErrNameTooLong:  syscall.ENAMETOOLONG,
		errs.ErrNoSpace:      syscall.ENOSPC,
		errs.ErrCorrupt:      syscall.EIO,
		errs.ErrUnavailable:  syscall.EIO,
		errs.ErrStale:        syscall.ESTALE,
		errs.ErrPermission:   syscall.EACCES,
		errs.ErrNotPermitted: syscall.EPERM,
		errs.ErrNotSupported: syscall.EOPNOTSUPP,
		errs.ErrTooLarge:     syscall.EFBIG,
		errs.ErrLoop:         syscall.ELOOP,
		errs.ErrNoData:       syscall.ENODATA,
		errs.ErrRange:        syscall.ERANGE,
		errs.ErrArgTooBig:    syscall.E2BIG,
		errs.ErrQuota:        syscall.EDQUOT,
		errs.ErrCrossDevice:  syscall.EXDEV,
	}
	// Every sentinel, bare and wrapped once and twice.
	for _, s := range errs.All {
		w, ok := want[s]
		if !ok {
			t.Errorf("sentinel %q has no expected errno in this test: add it", s)
			continue
		}
		for _, err := range []error{
			s,
			fmt.Errorf("lookup %q: %w", "x", s),
			fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", s)),
			errors.Join(errors.New("first"), s),
		} {
			if got := ToErrno(err); got != w {
				t.Errorf("ToErrno(%v) = %v, want %v", err, got, w)
			}
		}
	}
	if len(want) != len(errs.All) {
		t.Errorf("test covers %d sentinels, errs.All has %d", len(want), len(errs.All))
	}

	other := []struct {
		name  string
		err   error
		errno syscall.Errno
		known bool
	}{
		{"nil", nil, 0, true},
		{"canceled", context.Canceled, syscall.EINTR, true},
		{"wrapped canceled", fmt.Errorf("read: %w", context.Canceled), syscall.EINTR, true},
		{"errno passes", syscall.EROFS, syscall.EROFS, true},
		{"wrapped errno", fmt.Errorf("x: %w", syscall.EXDEV), syscall.EXDEV, true},
		{"ENOSYS never", syscall.ENOSYS, syscall.EOPNOTSUPP, true},
		{"zero errno", fmt.Errorf("x: %w", syscall.Errno(0)), syscall.EIO, false},
		{"unknown", errors.New("boom"), syscall.EIO, false},
		{"deadline", context.DeadlineExceeded, syscall.EIO, false},
		{"unexpected EOF", io.ErrUnexpectedEOF, syscall.EIO, false},
	}
	for _, c := range other {
		got, known := toErrno(c.err)
		if got != c.errno || known != c.known {
			t.Errorf("%s: toErrno(%v) = %v, %v; want %v, %v", c.name, c.err, got, known, c.errno, c.known)
		}
		if got == syscall.ENOSYS {
			t.Errorf("%s: ENOSYS returned", c.name)
		}
	}
}

// A sentinel wins over an errno further down the same chain.
func TestToErrnoSentinelFirst(t *testing.T) {
	err := fmt.Errorf("%w: %w", errs.ErrNoSpace, syscall.EIO)
	if got := ToErrno(err); got != syscall.ENOSPC {
		t.Errorf("ToErrno = %v, want ENOSPC", got)
	}
}

func TestSplitNs(t *testing.T) {
	cases := []struct {
		ns   int64
		sec  int64
		nsec uint32
	}{
		{0, 0, 0},
		{1, 0, 1},
		{1_500_000_000, 1, 500_000_000},
		{-1, -1, 999_999_999},
		{-1_000_000_000, -1, 0},
		{1_700_000_000_123_456_789, 1_700_000_000, 123_456_789},
	}
	for _, c := range cases {
		sec, nsec := splitNs(c.ns)
		if int64(sec) != c.sec || nsec != c.nsec {
			t.Errorf("splitNs(%d) = %d, %d; want %d, %d", c.ns, int64(sec), nsec, c.sec, c.nsec)
		}
		if back := joinNs(sec, nsec); back != c.ns {
			t.Errorf("joinNs(splitNs(%d)) = %d", c.ns, back)
		}
	}
}
