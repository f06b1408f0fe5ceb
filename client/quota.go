package client

// Directory quotas (docs/admin.md, "Quotas"): the MDS keeps each quota
// directory's usage (logical bytes of regular files, inodes) and refuses
// a create or a write that would pass a limit (errs.ErrQuota, EDQUOT).
// Paths are absolute paths inside the Shoal namespace ("/vol/a").

import (
	"context"
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Quota is one directory's quota. A limit of 0 is unlimited.
type Quota struct {
	Path        string
	LimitBytes  uint64
	LimitInodes uint64
	UsedBytes   uint64
	UsedInodes  uint64
}

// QuotaCheck is one quota's usage as kept by the MDS against the usage
// recomputed from the namespace. Misplaced counts inodes labelled with
// the wrong quota; Repaired says the check wrote what it found.
type QuotaCheck struct {
	Quota       Quota // as kept (before any repair)
	RealBytes   uint64
	RealInodes  uint64
	Misplaced   uint64
	Repaired    bool
	Consistent  bool // kept usage equals the recomputed one and nothing is misplaced
	Ino         uint64
	DriftBytes  int64 // kept minus real
	DriftInodes int64
}

func quotaOf(q *mdspb.Quota) Quota {
	return Quota{
		Path: q.GetPath(), LimitBytes: q.GetLimitBytes(), LimitInodes: q.GetLimitInodes(),
		UsedBytes: q.GetUsedBytes(), UsedInodes: q.GetUsedInodes(),
	}
}

// quotaDir resolves path to a directory's inode.
func (c *Client) quotaDir(ctx context.Context, path string) (uint64, error) {
	a, err := c.resolve(ctx, path)
	if err != nil {
		return 0, err
	}
	if !IsDir(a) {
		return 0, fmt.Errorf("quota on %s: %w", path, errs.ErrNotDir)
	}
	return a.Ino, nil
}

// SetQuota gives directory path a quota, or changes its limits (0:
// unlimited). A new quota counts what the directory already holds.
func (c *Client) SetQuota(ctx context.Context, path string, limitBytes, limitInodes uint64) error {
	ino, err := c.quotaDir(ctx, path)
	if err != nil {
		return err
	}
	_, err = c.mds.SetQuota(ctx, &mdspb.SetQuotaRequest{Ino: ino, LimitBytes: limitBytes, LimitInodes: limitInodes})
	return err
}

// GetQuota returns directory path's quota; errs.ErrNotFound when it has
// none.
func (c *Client) GetQuota(ctx context.Context, path string) (Quota, error) {
	ino, err := c.quotaDir(ctx, path)
	if err != nil {
		return Quota{}, err
	}
	q, err := c.mds.GetQuota(ctx, &mdspb.QuotaRequest{Ino: ino})
	if err != nil {
		return Quota{}, err
	}
	return quotaOf(q), nil
}

// RemoveQuota takes directory path's quota away; errs.ErrNotFound when it
// has none.
func (c *Client) RemoveQuota(ctx context.Context, path string) error {
	ino, err := c.quotaDir(ctx, path)
	if err != nil {
		return err
	}
	_, err = c.mds.RemoveQuota(ctx, &mdspb.QuotaRequest{Ino: ino})
	return err
}

// ListQuotas returns every quota of the cluster.
func (c *Client) ListQuotas(ctx context.Context) ([]Quota, error) {
	r, err := c.mds.ListQuotas(ctx, &mdspb.Empty{})
	if err != nil {
		return nil, err
	}
	out := make([]Quota, 0, len(r.GetQuotas()))
	for _, q := range r.GetQuotas() {
		out = append(out, quotaOf(q))
	}
	return out, nil
}

// CheckQuotas recomputes every quota's usage from the namespace and
// reports the drift; with repair it also writes the recomputed usage.
func (c *Client) CheckQuotas(ctx context.Context, repair bool) ([]QuotaCheck, error) {
	r, err := c.mds.CheckQuotas(ctx, &mdspb.CheckQuotasRequest{Repair: repair})
	if err != nil {
		return nil, err
	}
	out := make([]QuotaCheck, 0, len(r.GetChecks()))
	for _, k := range r.GetChecks() {
		q := quotaOf(k.GetQuota())
		out = append(out, QuotaCheck{
			Quota: q, Ino: k.GetQuota().GetIno(),
			RealBytes: k.GetRealBytes(), RealInodes: k.GetRealInodes(),
			Misplaced: k.GetMisplaced(), Repaired: k.GetRepaired(),
			Consistent:  q.UsedBytes == k.GetRealBytes() && q.UsedInodes == k.GetRealInodes() && k.GetMisplaced() == 0,
			DriftBytes:  int64(q.UsedBytes) - int64(k.GetRealBytes()),
			DriftInodes: int64(q.UsedInodes) - int64(k.GetRealInodes()),
		})
	}
	return out, nil
}

// StatFsIno is StatFs for a node: with the tightest quota over inode ino
// in Quota (nil when no quota is over it), which statfs reports as the
// size and usage.
func (c *Client) StatFsIno(ctx context.Context, ino uint64) (*StatFs, error) {
	r, err := c.mds.StatFs(ctx, &mdspb.StatFsRequest{Ino: ino})
	if err != nil {
		return nil, err
	}
	st := &StatFs{TotalBytes: r.GetTotalBytes(), FreeBytes: r.GetFreeBytes(), Files: r.GetFiles(), OSTsUp: int(r.GetOstsUp()), OSTsTotal: int(r.GetOstsTotal())}
	if q := r.GetQuota(); q != nil {
		qq := quotaOf(q)
		st.Quota = &qq
	}
	return st, nil
}
