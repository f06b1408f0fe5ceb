package client

import (
	"errors"
	"testing"
	"time"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Answers kept in dirAttrs never go back in time: an older answer
// arriving late, or an answer to a change sent before a change that
// left a tombstone, is not kept; a later one is.
func TestDirAttrsOrder(t *testing.T) {
	var d dirAttrs
	attr := func(ctime int64) *mdspb.Attr { return &mdspb.Attr{Ino: 7, Nlink: uint32(ctime), CtimeNs: ctime} }
	got := func() int64 {
		a, ok := d.get(7, time.Minute)
		if !ok {
			return -1
		}
		return a.CtimeNs
	}
	s1, s2 := d.begin(), d.begin()
	d.put(s2, attr(20))
	d.put(s1, attr(10)) // applied first, answered last: older
	if g := got(); g != 20 {
		t.Fatalf("after an older late answer: ctime %d, want 20", g)
	}
	s3 := d.begin() // a rename: no attributes in its answer
	s4 := d.begin()
	d.drop(s3, 7)
	if g := got(); g != -1 {
		t.Fatalf("after a tombstone: ctime %d, want none", g)
	}
	d.put(s1, attr(30)) // sent before the rename
	if g := got(); g != -1 {
		t.Fatalf("an answer to a change sent before the tombstone's was kept: %d", g)
	}
	d.put(s4, attr(40))
	if g := got(); g != 40 {
		t.Fatalf("after a later answer: ctime %d, want 40", g)
	}
	if _, ok := d.get(7, 0); ok {
		t.Fatal("an answer older than maxAge 0 was returned")
	}
	a, _ := d.get(7, time.Minute)
	a.Nlink = 99
	if b, _ := d.get(7, time.Minute); b.Nlink == 99 {
		t.Fatal("get returned the kept attributes, not a copy")
	}
	d.put(d.begin(), nil) // nothing to keep
	if g := got(); g != 40 {
		t.Fatalf("after an empty put: ctime %d, want 40", g)
	}
	s5 := d.begin()
	d.answered(s5, 7, nil, errNone) // a retried change: its answer has no directory
	if g := got(); g != -1 {
		t.Fatalf("after an answer without the directory: ctime %d, want none", g)
	}
	d.answered(d.begin(), 7, attr(50), errFailed) // failed: changed nothing
	if g := got(); g != -1 {
		t.Fatalf("a failed change's answer was kept: %d", g)
	}
}

var (
	errNone   error
	errFailed = errors.New("failed")
)
