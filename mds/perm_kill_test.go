package mds

import (
	"errors"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// TestSetAttrKillPrivs: the kernel clears setuid and setgid with the
// writer's credentials when a user other than the owner writes a file; the
// MDS allows that mode change, and no other, to a caller that may write.
func TestSetAttrKillPrivs(t *testing.T) {
	file := &mdspb.Attr{Ino: 9, Mode: 0o100000 | 0o6777, Uid: 0, Gid: 0}
	readOnly := &mdspb.Attr{Ino: 9, Mode: 0o100000 | 0o6755, Uid: 0, Gid: 0}
	user := caller{uid: 1000, gid: 1000}
	mode := uint32(mdspb.SetAttrBits_SETATTR_MODE)
	for _, tc := range []struct {
		name string
		a    *mdspb.Attr
		mode uint32
		ok   bool
	}{
		{"clear both", file, 0o100777, true},
		{"clear setuid", file, 0o102777, true},
		{"clear setgid", file, 0o104777, true},
		{"no change", file, 0o106777, false},
		{"clear and chmod", file, 0o100755, false},
		{"clear, no write permission", readOnly, 0o100755, false},
		{"add setuid", &mdspb.Attr{Ino: 9, Mode: 0o100777}, 0o104777, false},
	} {
		err := user.checkSetAttr(tc.a, &mdspb.SetAttrRequest{Ino: 9, Valid: mode, Mode: tc.mode})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errs.ErrNotPermitted)) {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
