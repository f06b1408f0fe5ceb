package csi

import (
	"context"
	"errors"

	"github.com/shoalfs/shoal/internal/errs"
)

// The quota calls of the client's Namespace: the cluster's directory
// quotas (client/quota.go, docs/admin.md "Quotas"), on bytes only; a
// volume's inodes are not limited.

func (n clientNS) SetQuota(ctx context.Context, p string, limitBytes uint64) error {
	if limitBytes == 0 {
		return n.RemoveQuota(ctx, p)
	}
	return n.c.SetQuota(ctx, p, limitBytes, 0)
}

func (n clientNS) RemoveQuota(ctx context.Context, p string) error {
	if err := n.c.RemoveQuota(ctx, p); err != nil && !errors.Is(err, errs.ErrNotFound) {
		return err
	}
	return nil
}
