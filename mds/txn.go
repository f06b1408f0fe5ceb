package mds

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// txn is one mutation: an indexed Pebble batch plus write-back caches for
// inodes and extent refcounts, so that an operation touching the same inode
// twice (a rename within one directory) or the same extent twice (a split)
// never works on a stale copy. flush writes the caches into the batch.
type txn struct {
	env *txnEnv
	b   *pebble.Batch
	now int64

	inodes  map[uint64]*cachedInode
	refs    map[uint64]*refDelta
	inoDiff int64 // change of the "inodes" counter

	// quotaMode says how flush treats directory quotas (quota.go):
	// charged and enforced (quotaEnforce, the zero value), charged only
	// (quotaCharge: setting and removing quotas), or left alone
	// (quotaRaw: a repair that writes usage itself).
	quotaMode quotaMode

	// reqID is the request id of the mutation (runTxn); reply
	// is the answer it recorded for a retry (setReply), if replied.
	reqID   string
	reply   []byte
	replied bool
}

// txnEnv is what a mutation reads beyond its batch: the settings that
// date what it queues, the placement rule, and which inodes are open.
// The server builds one in Open; a test can build its own.
type txnEnv struct {
	gcGrace     time.Duration // GC queue delay (Options.GCGrace)
	retireGrace time.Duration // delay before a replaced chunk is deleted (AdminOptions.RetireGrace)
	placement   *PlacementOptions
	open        func(ino uint64) bool // whether some session has ino open
	log         *slog.Logger
}

type cachedInode struct {
	ino     *mdspb.Inode
	dirty   bool
	deleted bool
	// What the inode was before this txn, for the quota charges at
	// flush (quota.go): whether it existed, its size and its quota.
	existed   bool
	origSize  uint64
	origQuota uint64
}

// refDelta is the pending change of one extent's refcount.
type refDelta struct {
	ext   *mdspb.Extent // definition, for the "r" value and the GC queue
	delta int64
}

// inode returns the (cached, mutable) inode ino; ErrNotFound if absent.
func (t *txn) inode(ino uint64) (*mdspb.Inode, error) {
	if ino == 0 {
		return nil, fmt.Errorf("inode 0: %w", errs.ErrInvalid)
	}
	if c, ok := t.inodes[ino]; ok {
		if c.deleted {
			return nil, fmt.Errorf("inode %d: %w", ino, errs.ErrNotFound)
		}
		return c.ino, nil
	}
	n := &mdspb.Inode{}
	if err := getProto(t.b, inodeKey(ino), n); err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			return nil, fmt.Errorf("inode %d: %w", ino, errs.ErrNotFound)
		}
		return nil, err
	}
	if n.Attr == nil {
		return nil, fmt.Errorf("inode %d has no attributes: %w", ino, errs.ErrCorrupt)
	}
	t.inodes[ino] = &cachedInode{ino: n, existed: true, origSize: n.Attr.Size, origQuota: n.Quota}
	return n, nil
}

// dir returns inode ino, which must be a directory.
func (t *txn) dir(ino uint64) (*mdspb.Inode, error) {
	n, err := t.inode(ino)
	if err != nil {
		return nil, err
	}
	if !isDir(n.Attr.Mode) {
		return nil, fmt.Errorf("inode %d: %w", ino, errs.ErrNotDir)
	}
	return n, nil
}

// touch marks an inode written, to be flushed.
func (t *txn) touch(n *mdspb.Inode) { t.inodes[n.Attr.Ino].dirty = true }

// create adds a new inode (its number already allocated).
func (t *txn) create(n *mdspb.Inode) {
	t.inodes[n.Attr.Ino] = &cachedInode{ino: n, dirty: true}
	t.inoDiff++
}

// remove deletes inode ino (and, at flush, its extended attributes and,
// for directories, its parent key). The caller has removed its extent map.
func (t *txn) remove(ino uint64) {
	c := t.inodes[ino]
	c.deleted = true
	t.inoDiff--
}

// dentry looks name up in parent; ok is false if absent.
func (t *txn) dentry(parent uint64, name []byte) (ino uint64, mode uint32, ok bool, err error) {
	v, err := getValue(t.b, dentryKey(parent, name))
	if errors.Is(err, errs.ErrNotFound) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	ino, mode, err = decodeDentry(v)
	return ino, mode, err == nil, err
}

// setDentry writes an entry; only the type bits of mode are stored (they
// never change, unlike the permission bits).
func (t *txn) setDentry(parent uint64, name []byte, ino uint64, mode uint32) error {
	return t.b.Set(dentryKey(parent, name), encodeDentry(ino, mode&sIFMT), nil)
}

func (t *txn) delDentry(parent uint64, name []byte) error {
	return t.b.Delete(dentryKey(parent, name), nil)
}

// dirEmpty reports whether directory ino has no entries.
func (t *txn) dirEmpty(ino uint64) (bool, error) {
	empty := true
	err := scan(t.b, dentryPrefix(ino), func(_, _ []byte) (bool, error) {
		empty = false
		return false, nil
	})
	return empty, err
}

// nextID returns counter name's value and advances it, in this batch.
func (t *txn) nextID(name string) (uint64, error) {
	v, err := getCounter(t.b, name)
	if err != nil {
		return 0, err
	}
	if v == 0 {
		return 0, fmt.Errorf("mds: counter %s missing: %w", name, errs.ErrCorrupt)
	}
	return v, t.b.Set(counterKey(name), encodeU64(v+1), nil)
}

// addRef changes extent e's refcount by d (applied at flush).
func (t *txn) addRef(e *mdspb.Extent, d int64) {
	r, ok := t.refs[e.Id]
	if !ok {
		r = &refDelta{ext: e}
		t.refs[e.Id] = r
	}
	r.delta += d
}

// refCount returns the stored refcount and definition of extent id, with
// this txn's pending delta applied; ok is false if it has no refcount key
// and no pending delta.
func (t *txn) refCount(id uint64) (n int64, ext *mdspb.Extent, ok bool, err error) {
	v, err := getValue(t.b, refKey(id))
	switch {
	case errors.Is(err, errs.ErrNotFound):
	case err != nil:
		return 0, nil, false, err
	default:
		c, body, err := decodePrefixed(v)
		if err != nil {
			return 0, nil, false, err
		}
		ext = &mdspb.Extent{}
		if err := proto.Unmarshal(body, ext); err != nil {
			return 0, nil, false, fmt.Errorf("mds: decode refcount of extent %d: %v: %w", id, err, errs.ErrCorrupt)
		}
		n, ok = int64(c), true
	}
	if r, has := t.refs[id]; has {
		n += r.delta
		ok = true
		if ext == nil {
			ext = r.ext
		}
	}
	return n, ext, ok, nil
}

// flush writes cached inodes, refcounts and the inode counter into the
// batch. Extents whose refcount drops to zero go to the GC queue.
func (t *txn) flush() error {
	inos := make([]uint64, 0, len(t.inodes))
	for ino := range t.inodes {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	if err := t.chargeQuotas(inos); err != nil {
		return err
	}
	for _, ino := range inos {
		c := t.inodes[ino]
		switch {
		case c.deleted:
			if err := t.b.Delete(inodeKey(ino), nil); err != nil {
				return err
			}
			if err := t.dropXattrs(ino); err != nil {
				return err
			}
			if isDir(c.ino.Attr.Mode) {
				if err := t.b.Delete(parentKey(ino), nil); err != nil {
					return err
				}
			}
			if c.ino.QuotaRoot {
				if err := t.b.Delete(quotaKey(ino), nil); err != nil {
					return err
				}
			}
		case c.dirty:
			v, err := proto.Marshal(c.ino)
			if err != nil {
				return err
			}
			if err := t.b.Set(inodeKey(ino), v, nil); err != nil {
				return err
			}
		}
	}
	ids := make([]uint64, 0, len(t.refs))
	for id := range t.refs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		r := t.refs[id]
		n, ext, _, err := t.refCount(id)
		if err != nil {
			return err
		}
		switch {
		case n < 0:
			return fmt.Errorf("mds: refcount of extent %d would be %d: %w", id, n, errs.ErrCorrupt)
		case n == 0:
			// Unreferenced: its chunks are deleted after the grace period.
			if err := t.b.Delete(refKey(id), nil); err != nil {
				return err
			}
			if err := t.queueGC(ext); err != nil {
				return err
			}
		case r.delta != 0:
			v, err := proto.Marshal(ext)
			if err != nil {
				return err
			}
			if err := t.b.Set(refKey(id), encodePrefixed(uint64(n), v), nil); err != nil {
				return err
			}
		}
	}
	if t.inoDiff != 0 {
		n, err := getCounter(t.b, counterInodes)
		if err != nil {
			return err
		}
		if err := t.b.Set(counterKey(counterInodes), encodeU64(uint64(int64(n)+t.inoDiff)), nil); err != nil {
			return err
		}
	}
	return nil
}

// queueGC schedules extent e's chunks for deletion after the grace period.
func (t *txn) queueGC(e *mdspb.Extent) error {
	v, err := proto.Marshal(e)
	if err != nil {
		return err
	}
	return t.b.Set(gcKey(t.now+int64(t.env.gcGrace), e.Id), v, nil)
}
