package mds

import (
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// TestLookupMany: each lookup of a LookupMany call answers as Lookup
// does, in order, errors included (with their sentinel), and the call
// refuses no lookups or too many.
func TestLookupMany(t *testing.T) {
	e := newEnv(t)
	d := e.mkdir(rootIno, "d")
	f := e.create(d.Ino, "f")
	g := e.create(rootIno, "g")
	closed := e.mkdir(rootIno, "closed")
	e.create(closed.Ino, "x")
	if _, err := e.c.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: closed.Ino, Valid: uint32(mdspb.SetAttrBits_SETATTR_MODE), Mode: 0o700}); err != nil {
		t.Fatal(err)
	}
	user := wire.WithUser(ctx, wire.User{UID: 1000, GID: 1000})
	look := func(parent uint64, name string) *mdspb.LookupRequest {
		return &mdspb.LookupRequest{Parent: parent, Name: []byte(name)}
	}
	reqs := []*mdspb.LookupRequest{
		look(d.Ino, "f"), look(rootIno, "g"), look(d.Ino, "absent"), look(rootIno, ""),
		look(f.Ino, "y"), look(closed.Ino, "x"), look(12345678, "z"), look(rootIno, "d"),
	}
	r, err := e.c.LookupMany(user, &mdspb.LookupManyRequest{Lookups: reqs})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetResults()) != len(reqs) {
		t.Fatalf("%d results for %d lookups", len(r.GetResults()), len(reqs))
	}
	for i, q := range reqs {
		want, wantE := e.c.Lookup(user, q)
		got := r.GetResults()[i]
		if wantE == nil {
			if len(got.GetStatus()) != 0 || !proto.Equal(got.GetAttr(), want.GetAttr()) {
				t.Fatalf("lookup %d: %v, want %v", i, got, want.GetAttr())
			}
			continue
		}
		if got.GetAttr() != nil || len(got.GetStatus()) == 0 {
			t.Fatalf("lookup %d: %v, want the error %v", i, got, wantE)
		}
	}
	// The sentinels travel: spot-check through the client's decoding
	// (client/lookupbatch.go decodes the same way).
	for i, want := range map[int]error{0: nil, 2: errs.ErrNotFound, 3: errs.ErrInvalid, 4: errs.ErrNotDir, 5: errs.ErrPermission, 6: errs.ErrNotFound} {
		err := decodeLookupStatus(t, r.GetResults()[i])
		wantErr(t, "lookup result", err, want)
	}
	if !proto.Equal(r.GetResults()[1].GetAttr(), g) || !proto.Equal(r.GetResults()[0].GetAttr(), f) {
		t.Fatal("found entries answer other attributes")
	}
	_, err = e.c.LookupMany(ctx, &mdspb.LookupManyRequest{})
	wantErr(t, "no lookups", err, errs.ErrInvalid)
	many := make([]*mdspb.LookupRequest, maxLookupMany+1)
	for i := range many {
		many[i] = look(rootIno, "g")
	}
	_, err = e.c.LookupMany(ctx, &mdspb.LookupManyRequest{Lookups: many})
	wantErr(t, "too many lookups", err, errs.ErrInvalid)
}

// decodeLookupStatus is the error one LookupMany result carries, decoded
// as the client does (nil for a found entry).
func decodeLookupStatus(t *testing.T, r *mdspb.LookupResult) error {
	t.Helper()
	if len(r.GetStatus()) == 0 {
		return nil
	}
	var st spb.Status
	if err := proto.Unmarshal(r.GetStatus(), &st); err != nil {
		t.Fatal(err)
	}
	return wire.FromStatus(status.FromProto(&st).Err())
}
