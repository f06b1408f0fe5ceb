package wire

import (
	"context"
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
)

// FuzzUserFrom parses arbitrary identity metadata, as an MDS receives it
// from the network: no panic, a malformed identity is ErrInvalid, at most
// MaxGroups groups are accepted, and an accepted identity sent again
// parses to itself.
func FuzzUserFrom(f *testing.F) {
	f.Add("1000", "1000", "1000,2000")
	f.Add("0", "0", "")
	f.Add("4294967295", "65534", ",,7,")
	f.Add("-1", "x", "1,a")
	f.Add("1", "1", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20")
	f.Fuzz(func(t *testing.T, uid, gid, groups string) {
		kv := []string{UIDHeader, uid, GIDHeader, gid}
		if groups != "" {
			kv = append(kv, GroupsHeader, groups)
		}
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
		u, ok, err := UserFrom(ctx)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalid) || ok {
				t.Fatalf("UserFrom(%q, %q, %q): ok=%v err=%v", uid, gid, groups, ok, err)
			}
			return
		}
		if !ok || len(u.Groups) > MaxGroups {
			t.Fatalf("UserFrom(%q, %q, %q) = %+v, %v", uid, gid, groups, u, ok)
		}
		out, _ := metadata.FromOutgoingContext(WithUser(context.Background(), u))
		back, ok, err := UserFrom(metadata.NewIncomingContext(context.Background(), out))
		if err != nil || !ok || back.UID != u.UID || back.GID != u.GID || !slices.Equal(back.Groups, u.Groups) {
			t.Fatalf("%+v sent again parses to %+v, %v, %v", u, back, ok, err)
		}
	})
}
