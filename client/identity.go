package client

import (
	"context"

	"github.com/shoalfs/shoal/internal/wire"
)

// User is the identity MDS calls are made for: the MDS checks POSIX
// permissions with it (docs/security.md).
type User = wire.User

// WithUser returns ctx with u as the identity of the calls made with it,
// overriding Options.User: the FUSE mount passes each request's caller.
func WithUser(ctx context.Context, u User) context.Context { return wire.WithUser(ctx, u) }

func withUser(ctx context.Context, u User) context.Context { return wire.WithUser(ctx, u) }

func wireHasUser(ctx context.Context) bool { return wire.HasUser(ctx) }
