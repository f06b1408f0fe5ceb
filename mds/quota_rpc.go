package mds

// The quota RPCs (docs/admin.md, "Quotas"): set, get, remove, list,
// check and repair, the quota statfs answers with, and the per-quota
// metrics. The charging itself is in quota.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// SetQuota gives directory ino a quota, or changes its limits. A new
// quota relabels the directory's tree (at most maxQuotaWalk inodes) in
// the same transaction, which also computes its usage; limits below the
// usage are accepted (what is there stays; nothing more fits).
func (s *Server) handleSetQuota(ctx context.Context, req *mdspb.SetQuotaRequest) (_ *mdspb.Quota, err error) {
	ino := req.GetIno()
	err = s.commit(ctx, func(t *txn) error {
		t.quotaMode = quotaCharge
		d, err := t.dir(ino)
		if err != nil {
			return err
		}
		if d.QuotaRoot {
			r, err := t.quotaRecord(ino)
			if err != nil {
				return err
			}
			if r == nil {
				return fmt.Errorf("mds: directory %d has the quota flag but no quota record: %w", ino, errs.ErrCorrupt)
			}
			r.LimitBytes, r.LimitInodes = req.GetLimitBytes(), req.GetLimitInodes()
			return t.putQuotaRecord(ino, r)
		}
		d.QuotaRoot = true
		d.Attr.CtimeNs = t.now
		t.touch(d)
		if err := t.putQuotaRecord(ino, &mdspb.QuotaRecord{LimitBytes: req.GetLimitBytes(), LimitInodes: req.GetLimitInodes()}); err != nil {
			return err
		}
		tooMany := fmt.Errorf("set quota on directory %d: more than %d inodes under it (set quotas before filling directories): %w",
			ino, maxQuotaWalk, errs.ErrTooLarge)
		return t.relabelChildren(ino, ino, maxQuotaWalk, tooMany)
	})
	if err != nil {
		return nil, err
	}
	return s.quotaOf(ino)
}

// GetQuota returns directory ino's quota; ErrNotFound if it has none.
func (s *Server) handleGetQuota(ctx context.Context, req *mdspb.QuotaRequest) (*mdspb.Quota, error) {
	return s.quotaOf(req.GetIno())
}

func (s *Server) quotaOf(ino uint64) (out *mdspb.Quota, err error) {
	err = s.snapshot(func(r reader) error {
		rec, err := readQuotaRecord(r, ino)
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("quota of inode %d: %w", ino, errs.ErrNotFound)
		}
		out = quotaReply(r, ino, rec)
		return nil
	})
	return out, err
}

func quotaReply(r reader, ino uint64, rec *mdspb.QuotaRecord) *mdspb.Quota {
	return &mdspb.Quota{
		Ino: ino, Path: dirPath(r, ino),
		LimitBytes: rec.LimitBytes, LimitInodes: rec.LimitInodes,
		UsedBytes: rec.UsedBytes, UsedInodes: rec.UsedInodes,
	}
}

// RemoveQuota takes directory ino's quota away: its tree goes back under
// the quota above it (relabelled, at most maxQuotaWalk inodes).
func (s *Server) handleRemoveQuota(ctx context.Context, req *mdspb.QuotaRequest) (_ *mdspb.Empty, err error) {
	ino := req.GetIno()
	err = s.commit(ctx, func(t *txn) error {
		t.quotaMode = quotaCharge
		d, err := t.dir(ino)
		if err != nil {
			return err
		}
		if !d.QuotaRoot {
			return fmt.Errorf("quota of directory %d: %w", ino, errs.ErrNotFound)
		}
		d.QuotaRoot = false
		d.Attr.CtimeNs = t.now
		t.touch(d)
		if err := t.b.Delete(quotaKey(ino), nil); err != nil {
			return err
		}
		tooMany := fmt.Errorf("remove quota of directory %d: more than %d inodes under it: %w", ino, maxQuotaWalk, errs.ErrTooLarge)
		return t.relabelChildren(ino, d.Quota, maxQuotaWalk, tooMany)
	})
	if err != nil {
		return nil, err
	}
	return &mdspb.Empty{}, nil
}

// ListQuotas returns every quota, by directory inode.
func (s *Server) handleListQuotas(ctx context.Context, _ *mdspb.Empty) (out *mdspb.ListQuotasReply, err error) {
	out = &mdspb.ListQuotasReply{}
	err = s.snapshot(func(r reader) error {
		out.Quotas, err = listQuotas(r)
		return err
	})
	return out, err
}

func listQuotas(r reader) ([]*mdspb.Quota, error) {
	var out []*mdspb.Quota
	err := scan(r, []byte{prefixQuota}, func(k, v []byte) (bool, error) {
		ino, err := decodeIDKey(prefixQuota, k)
		if err != nil {
			return false, err
		}
		rec := &mdspb.QuotaRecord{}
		if err := unmarshalQuota(v, rec); err != nil {
			return false, err
		}
		out = append(out, quotaReply(r, ino, rec))
		return true, nil
	})
	return out, err
}

// CheckQuotas recomputes every quota's usage by walking its tree (and
// the orphans charged to it), in one transaction; with repair it writes
// the usage found and fixes inodes labelled with the wrong quota.
func (s *Server) handleCheckQuotas(ctx context.Context, req *mdspb.CheckQuotasRequest) (out *mdspb.CheckQuotasReply, err error) {
	out = &mdspb.CheckQuotasReply{}
	err = s.commit(ctx, func(t *txn) error {
		out.Checks, err = t.checkQuotas(req.GetRepair())
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkQuotas is CheckQuotas in t.
func (t *txn) checkQuotas(repair bool) ([]*mdspb.QuotaCheck, error) {
	if repair {
		t.quotaMode = quotaRaw
	}
	kept, err := listQuotas(t.b)
	if err != nil {
		return nil, err
	}
	real := make(map[uint64]*quotaDelta, len(kept))
	misplaced := make(map[uint64]uint64)
	labelled := make(map[uint64]bool) // inodes whose label was checked
	for _, q := range kept {
		d := &quotaDelta{}
		real[q.Ino] = d
		seen := map[uint64]bool{}
		queue := []uint64{q.Ino}
		for len(queue) > 0 {
			dir, err := t.inode(queue[0])
			if err != nil {
				return nil, err
			}
			queue = queue[1:]
			want := quotaOf(dir)
			var kids []uint64
			err = scan(t.b, dentryPrefix(dir.Attr.Ino), func(_, v []byte) (bool, error) {
				ino, _, err := decodeDentry(v)
				kids = append(kids, ino)
				return err == nil, err
			})
			if err != nil {
				return nil, err
			}
			for _, ino := range kids {
				if seen[ino] {
					continue // a hard link: charged once
				}
				seen[ino] = true
				x, err := t.inode(ino)
				if err != nil {
					return nil, err
				}
				d.bytes += charge(x.Attr.Mode, x.Attr.Size)
				d.inodes++
				if !labelled[ino] {
					labelled[ino] = true
					if x.Quota != want {
						misplaced[want]++
						if repair {
							x.Quota = want
							t.touch(x)
						}
					}
				}
				if isDir(x.Attr.Mode) {
					queue = append(queue, ino)
				}
			}
		}
	}
	// Orphans (removed, still open) stay charged to their quotas.
	err = scan(t.b, []byte{prefixOrphan}, func(k, _ []byte) (bool, error) {
		ino, err := decodeIDKey(prefixOrphan, k)
		if err != nil {
			return false, err
		}
		x, err := t.inode(ino)
		if errors.Is(err, errs.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		for q, i := x.Quota, 0; q != 0 && i <= maxQuotaDepth; i++ {
			if d := real[q]; d != nil {
				d.bytes += charge(x.Attr.Mode, x.Attr.Size)
				d.inodes++
			}
			if q, err = t.quotaAbove(q, false); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*mdspb.QuotaCheck, 0, len(kept))
	for _, q := range kept {
		d := real[q.Ino]
		c := &mdspb.QuotaCheck{Quota: q, RealBytes: uint64(d.bytes), RealInodes: uint64(d.inodes), Misplaced: misplaced[q.Ino]}
		drift := c.RealBytes != q.UsedBytes || c.RealInodes != q.UsedInodes
		if repair && (drift || c.Misplaced != 0) {
			rec := &mdspb.QuotaRecord{LimitBytes: q.LimitBytes, LimitInodes: q.LimitInodes, UsedBytes: c.RealBytes, UsedInodes: c.RealInodes}
			if err := t.putQuotaRecord(q.Ino, rec); err != nil {
				return nil, err
			}
			c.Repaired = true
		}
		out = append(out, c)
	}
	return out, nil
}

// statQuota returns the tightest quota over inode ino (the one with the
// fewest bytes left, or, without byte limits, the fewest inodes left),
// nil if none.
func statQuota(r reader, ino uint64) (*mdspb.Quota, error) {
	n, err := readInode(r, ino)
	if err != nil {
		return nil, err
	}
	var best *mdspb.Quota
	left := func(q *mdspb.Quota) (bool, uint64) {
		if q.LimitBytes != 0 {
			return true, q.LimitBytes - min(q.UsedBytes, q.LimitBytes)
		}
		return false, q.LimitInodes - min(q.UsedInodes, q.LimitInodes)
	}
	q := quotaOf(n)
	for i := 0; q != 0 && i <= maxQuotaDepth; i++ {
		rec, err := readQuotaRecord(r, q)
		if err != nil {
			return nil, err
		}
		if rec != nil && (rec.LimitBytes != 0 || rec.LimitInodes != 0) {
			c := &mdspb.Quota{Ino: q, LimitBytes: rec.LimitBytes, LimitInodes: rec.LimitInodes, UsedBytes: rec.UsedBytes, UsedInodes: rec.UsedInodes}
			if best == nil {
				best = c
			} else {
				cb, cl := left(c)
				bb, bl := left(best)
				if (cb && !bb) || (cb == bb && cl < bl) {
					best = c
				}
			}
		}
		d, err := readInode(r, q)
		if err != nil {
			break
		}
		q = d.Quota
	}
	return best, nil
}

// dirPath names directory ino from the root by its parent keys ("" when
// a step is missing). Each step scans the parent's entries for the
// child: fine for the few quota directories it names.
func dirPath(r reader, ino uint64) string {
	var parts []string
	for i := 0; ino != rootIno; i++ {
		if i > maxQuotaDepth*64 {
			return ""
		}
		v, err := getValue(r, parentKey(ino))
		if err != nil {
			return ""
		}
		parent, err := decodeU64(v)
		if err != nil {
			return ""
		}
		var name string
		err = scan(r, dentryPrefix(parent), func(k, v []byte) (bool, error) {
			child, _, err := decodeDentry(v)
			if err != nil {
				return false, err
			}
			if child != ino {
				return true, nil
			}
			_, nm, err := decodeDentryKey(k)
			name = string(nm)
			return false, err
		})
		if err != nil || name == "" {
			return ""
		}
		parts = append(parts, name)
		ino = parent
	}
	slices.Reverse(parts)
	return "/" + strings.Join(parts, "/")
}

func unmarshalQuota(v []byte, rec *mdspb.QuotaRecord) error {
	if err := proto.Unmarshal(v, rec); err != nil {
		return fmt.Errorf("mds: decode quota record: %v: %w", err, errs.ErrCorrupt)
	}
	return nil
}

// quotaCollector exports each quota's limits and usage, read from Pebble
// at each scrape, labelled with the quota directory's path (one series
// per quota an administrator set: bounded).
type quotaCollector struct{ s *Server }

var (
	quotaUsedBytesDesc = prometheus.NewDesc("shoal_mds_quota_used_bytes",
		"Logical bytes of the regular files under each quota directory.", []string{"quota"}, nil)
	quotaLimitBytesDesc = prometheus.NewDesc("shoal_mds_quota_limit_bytes",
		"Byte limit of each quota directory (0: none).", []string{"quota"}, nil)
	quotaUsedInodesDesc = prometheus.NewDesc("shoal_mds_quota_used_inodes",
		"Inodes under each quota directory.", []string{"quota"}, nil)
	quotaLimitInodesDesc = prometheus.NewDesc("shoal_mds_quota_limit_inodes",
		"Inode limit of each quota directory (0: none).", []string{"quota"}, nil)
)

func (c quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- quotaUsedBytesDesc
	ch <- quotaLimitBytesDesc
	ch <- quotaUsedInodesDesc
	ch <- quotaLimitInodesDesc
}

func (c quotaCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return
	}
	var qs []*mdspb.Quota
	if err := s.snapshot(func(r reader) (err error) {
		qs, err = listQuotas(r)
		return err
	}); err != nil {
		return
	}
	seen := map[string]bool{}
	for _, q := range qs {
		label := q.Path
		if label == "" || seen[label] {
			label = fmt.Sprintf("ino:%d", q.Ino)
		}
		seen[label] = true
		ch <- prometheus.MustNewConstMetric(quotaUsedBytesDesc, prometheus.GaugeValue, float64(q.UsedBytes), label)
		ch <- prometheus.MustNewConstMetric(quotaLimitBytesDesc, prometheus.GaugeValue, float64(q.LimitBytes), label)
		ch <- prometheus.MustNewConstMetric(quotaUsedInodesDesc, prometheus.GaugeValue, float64(q.UsedInodes), label)
		ch <- prometheus.MustNewConstMetric(quotaLimitInodesDesc, prometheus.GaugeValue, float64(q.LimitInodes), label)
	}
}
