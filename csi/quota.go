package csi

import "context"

// The quota calls of the client's Namespace. The cluster's directory
// quotas (client/quota.go) are wired here once they exist; until then
// volumes are made without enforcement.

func (n clientNS) SetQuota(ctx context.Context, p string, limitBytes uint64) error {
	return errNoQuotas
}

func (n clientNS) RemoveQuota(ctx context.Context, p string) error { return nil }
