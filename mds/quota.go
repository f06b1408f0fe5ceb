package mds

// Directory quotas (docs/admin.md, "Quotas"; docs/mds-keys.md).
//
// A directory with a quota has the quota_root flag in its inode and a "y"
// key with its limits and usage. Every inode carries, in its quota field,
// the nearest directory above it that has a quota (0: none), inherited at
// create and rewritten when a quota is set or removed above it and when
// it is renamed into another quota's tree. A quota directory's own quota
// field names the next quota above it, so the quotas over an inode are the
// chain quota, inode(quota).quota, ... (nested quotas: each is charged and
// checked, so the tightest one applies).
//
// Charging is not done by each operation: txn.flush compares every inode
// the transaction touched with what it was before (existence, size,
// quota field) and charges the difference to the chains, in the same
// batch (so in the same Raft entry: exact across restarts and failover).
// An inode outside every quota has quota 0 before and after, and costs
// one comparison.

import (
	"errors"
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// prefixQuota is the key space of quota records: "y" + dir ino(8) ->
// mdspb.QuotaRecord.
const prefixQuota = 'y'

func quotaKey(dir uint64) []byte { return u64([]byte{prefixQuota}, dir) }

// quotaMode says how txn.flush treats quotas.
type quotaMode int

const (
	quotaEnforce quotaMode = iota // charge, and refuse a change past a limit (ErrQuota)
	quotaCharge                   // charge only: setting or removing a quota
	quotaRaw                      // neither: the txn writes usage itself (repair)
)

// Bounds of the walks a quota change does in one transaction: setting or
// removing a quota relabels the directory's tree (a larger tree is
// refused: set the quota before filling the directory), a rename across
// quotas relabels the moved tree (a larger one is refused with
// ErrCrossDevice, and mv copies instead).
const (
	maxQuotaWalk       = 100_000
	maxQuotaRenameWalk = 10_000
	maxQuotaDepth      = 1 << 10
)

// quotaOf returns the quota an entry created in directory p is charged
// to: p itself when it has a quota, else p's.
func quotaOf(p *mdspb.Inode) uint64 {
	if p.QuotaRoot {
		return p.Attr.Ino
	}
	return p.Quota
}

// charge is one inode's weight in a quota: its logical size (regular
// files) and one inode.
func charge(mode uint32, size uint64) int64 {
	if isReg(mode) {
		return int64(size)
	}
	return 0
}

type quotaDelta struct{ bytes, inodes int64 }

// quotaAbove returns the quota above quota directory q, as it was before
// this txn (orig) or as it is now; 0 when q is gone.
func (t *txn) quotaAbove(q uint64, orig bool) (uint64, error) {
	if c, ok := t.inodes[q]; ok {
		if orig {
			if !c.existed {
				return 0, nil
			}
			return c.origQuota, nil
		}
		if c.deleted {
			return 0, nil
		}
		return c.ino.Quota, nil
	}
	n, err := t.inode(q)
	if errors.Is(err, errs.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return n.Quota, nil
}

// chargeQuotas charges the changes of the cached inodes (inos) to the
// quotas over them, and, unless the txn says otherwise, refuses a change
// that passes a limit.
func (t *txn) chargeQuotas(inos []uint64) error {
	if t.quotaMode == quotaRaw {
		return nil
	}
	var deltas map[uint64]*quotaDelta
	add := func(q uint64, orig bool, b, n int64) error {
		for i := 0; q != 0; i++ {
			if i > maxQuotaDepth {
				return fmt.Errorf("mds: quota chain from %d does not end: %w", q, errs.ErrCorrupt)
			}
			if deltas == nil {
				deltas = make(map[uint64]*quotaDelta)
			}
			d := deltas[q]
			if d == nil {
				d = &quotaDelta{}
				deltas[q] = d
			}
			d.bytes += b
			d.inodes += n
			next, err := t.quotaAbove(q, orig)
			if err != nil {
				return err
			}
			q = next
		}
		return nil
	}
	for _, ino := range inos {
		c := t.inodes[ino]
		newQ := c.ino.Quota
		if c.deleted {
			newQ = 0
		}
		if c.origQuota == 0 && newQ == 0 {
			continue // outside every quota: the no-quota path
		}
		if !c.dirty && !c.deleted {
			continue
		}
		if c.existed && c.origQuota != 0 {
			if err := add(c.origQuota, true, -charge(c.ino.Attr.Mode, c.origSize), -1); err != nil {
				return err
			}
		}
		if !c.deleted && newQ != 0 {
			if err := add(newQ, false, charge(c.ino.Attr.Mode, c.ino.Attr.Size), 1); err != nil {
				return err
			}
		}
		// A quota directory that moved under other quotas takes its
		// usage along (its contents are not in this txn).
		if c.ino.QuotaRoot && c.existed && !c.deleted && c.origQuota != newQ {
			r, err := t.quotaRecord(ino)
			if err != nil {
				return err
			}
			if r != nil {
				ub, un := int64(r.UsedBytes), int64(r.UsedInodes)
				if err := add(c.origQuota, true, -ub, -un); err != nil {
					return err
				}
				if err := add(newQ, false, ub, un); err != nil {
					return err
				}
			}
		}
	}
	if deltas == nil {
		return nil
	}
	qs := make([]uint64, 0, len(deltas))
	for q := range deltas {
		qs = append(qs, q)
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i] < qs[j] })
	for _, q := range qs {
		d := deltas[q]
		if d.bytes == 0 && d.inodes == 0 {
			continue
		}
		r, err := t.quotaRecord(q)
		if err != nil {
			return err
		}
		if r == nil {
			continue // removed in this txn, or its directory is gone
		}
		ub, un := addClamp(r.UsedBytes, d.bytes), addClamp(r.UsedInodes, d.inodes)
		if t.quotaMode == quotaEnforce {
			if d.bytes > 0 && r.LimitBytes != 0 && ub > r.LimitBytes {
				return fmt.Errorf("quota of directory %d: %d bytes used, %d more would pass its limit of %d: %w",
					q, r.UsedBytes, d.bytes, r.LimitBytes, errs.ErrQuota)
			}
			if d.inodes > 0 && r.LimitInodes != 0 && un > r.LimitInodes {
				return fmt.Errorf("quota of directory %d: %d inodes used, %d more would pass its limit of %d: %w",
					q, r.UsedInodes, d.inodes, r.LimitInodes, errs.ErrQuota)
			}
		}
		r.UsedBytes, r.UsedInodes = ub, un
		if err := t.putQuotaRecord(q, r); err != nil {
			return err
		}
	}
	return nil
}

// addClamp is u+d, at least 0.
func addClamp(u uint64, d int64) uint64 {
	if d < 0 && uint64(-d) > u {
		return 0
	}
	return uint64(int64(u) + d)
}

// quotaRecord returns directory q's quota record, nil if it has none.
func (t *txn) quotaRecord(q uint64) (*mdspb.QuotaRecord, error) {
	return readQuotaRecord(t.b, q)
}

func readQuotaRecord(r reader, q uint64) (*mdspb.QuotaRecord, error) {
	rec := &mdspb.QuotaRecord{}
	err := getProto(r, quotaKey(q), rec)
	if errors.Is(err, errs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return rec, nil
}

func (t *txn) putQuotaRecord(q uint64, r *mdspb.QuotaRecord) error {
	v, err := proto.Marshal(r)
	if err != nil {
		return err
	}
	return t.b.Set(quotaKey(q), v, nil)
}

// relabel puts inode n, and, for a directory without a quota of its own,
// everything under it, under quota q (the quota fields; flush charges the
// difference). It walks at most limit inodes (over: tooMany).
func (t *txn) relabel(n *mdspb.Inode, q uint64, limit int, tooMany error) error {
	walked := 0
	set := func(x *mdspb.Inode) error {
		walked++
		if walked > limit {
			return tooMany
		}
		if x.Quota != q {
			x.Quota = q
			t.touch(x)
		}
		return nil
	}
	if err := set(n); err != nil {
		return err
	}
	if !isDir(n.Attr.Mode) || n.QuotaRoot {
		return nil
	}
	return t.relabelChildren(n.Attr.Ino, q, limit-walked, tooMany)
}

// relabelChildren puts everything under directory dir (not dir itself)
// under quota q, not descending into directories with quotas of their
// own (whose own quota field becomes q). It walks at most limit inodes.
func (t *txn) relabelChildren(dir, q uint64, limit int, tooMany error) error {
	walked := 0
	queue := []uint64{dir}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		var kids []uint64
		err := scan(t.b, dentryPrefix(d), func(_, v []byte) (bool, error) {
			ino, _, err := decodeDentry(v)
			if err != nil {
				return false, err
			}
			kids = append(kids, ino)
			return true, nil
		})
		if err != nil {
			return err
		}
		for _, ino := range kids {
			walked++
			if walked > limit {
				return tooMany
			}
			x, err := t.inode(ino)
			if err != nil {
				return err
			}
			if x.Quota != q {
				x.Quota = q
				t.touch(x)
			}
			if isDir(x.Attr.Mode) && !x.QuotaRoot {
				queue = append(queue, ino)
			}
		}
	}
	return nil
}

// renameQuota relabels src, moving from directory from to directory to,
// when they are under different quotas. A directory tree too large to
// relabel in one transaction is refused with ErrCrossDevice (rename(2)
// EXDEV: mv copies it instead).
func (t *txn) renameQuota(src, from, to *mdspb.Inode) error {
	q := quotaOf(to)
	if quotaOf(from) == q {
		return nil
	}
	tooMany := fmt.Errorf("rename of directory %d across quotas: more than %d inodes under it: %w",
		src.Attr.Ino, maxQuotaRenameWalk, errs.ErrCrossDevice)
	return t.relabel(src, q, maxQuotaRenameWalk, tooMany)
}

// linkQuota refuses a hard link that would put an inode under two
// different quotas (link(2) EXDEV, as XFS project quotas do).
func linkQuota(n, p *mdspb.Inode) error {
	if n.Quota != quotaOf(p) {
		return fmt.Errorf("link of inode %d into directory %d under another quota: %w", n.Attr.Ino, p.Attr.Ino, errs.ErrCrossDevice)
	}
	return nil
}
