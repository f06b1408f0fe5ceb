package wire

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
)

// Metadata keys of the caller's identity on an MDS call: the uid, primary
// gid and supplementary groups of the user on whose behalf a client calls
// (the FUSE request's caller, or the client library's Options). The MDS
// checks POSIX permissions with them, after mapping them by the trust
// level of the client's certificate (docs/security.md).
const (
	UIDHeader    = "shoal-uid"
	GIDHeader    = "shoal-gid"
	GroupsHeader = "shoal-groups"
)

// MaxGroups bounds the supplementary groups a call may name (Linux's
// NGROUPS_MAX is 65536; FUSE reports none, and a real user has a few).
const MaxGroups = 256

// User is a caller's identity.
type User struct {
	UID, GID uint32
	Groups   []uint32
}

// WithUser returns ctx carrying u as the identity of outgoing calls.
func WithUser(ctx context.Context, u User) context.Context {
	kv := []string{UIDHeader, strconv.FormatUint(uint64(u.UID), 10), GIDHeader, strconv.FormatUint(uint64(u.GID), 10)}
	if len(u.Groups) > 0 {
		g := make([]string, len(u.Groups))
		for i, x := range u.Groups {
			g[i] = strconv.FormatUint(uint64(x), 10)
		}
		kv = append(kv, GroupsHeader, strings.Join(g, ","))
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// HasUser reports whether ctx already carries an outgoing identity.
func HasUser(ctx context.Context) bool {
	md, ok := metadata.FromOutgoingContext(ctx)
	return ok && len(md.Get(UIDHeader)) > 0
}

// UserFrom returns the identity an incoming call carries; ok is false when
// it carries none. A malformed identity is an error (ErrInvalid).
func UserFrom(ctx context.Context) (u User, ok bool, err error) {
	md, mok := metadata.FromIncomingContext(ctx)
	if !mok {
		return User{}, false, nil
	}
	uids, gids := md.Get(UIDHeader), md.Get(GIDHeader)
	if len(uids) == 0 && len(gids) == 0 {
		return User{}, false, nil
	}
	if len(uids) != 1 || len(gids) != 1 {
		return User{}, false, fmt.Errorf("caller identity: want one %s and one %s: %w", UIDHeader, GIDHeader, errs.ErrInvalid)
	}
	if u.UID, err = parseID(uids[0]); err != nil {
		return User{}, false, err
	}
	if u.GID, err = parseID(gids[0]); err != nil {
		return User{}, false, err
	}
	for _, v := range md.Get(GroupsHeader) {
		for _, f := range strings.Split(v, ",") {
			if f == "" {
				continue
			}
			if len(u.Groups) >= MaxGroups {
				return User{}, false, fmt.Errorf("caller identity: over %d groups: %w", MaxGroups, errs.ErrInvalid)
			}
			g, err := parseID(f)
			if err != nil {
				return User{}, false, err
			}
			u.Groups = append(u.Groups, g)
		}
	}
	return u, true, nil
}

func parseID(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("caller identity: id %q: %w", s, errs.ErrInvalid)
	}
	return uint32(v), nil
}
