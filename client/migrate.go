package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// MigrateResult reports one migration.
type MigrateResult struct {
	Ino       uint64 `json:"ino"`
	From      Layout `json:"from"`
	To        Layout `json:"to"`
	Bytes     int64  `json:"bytes_copied"`
	Attempts  int    `json:"attempts"`
	Unchanged bool   `json:"unchanged"` // already in the layout: nothing done
}

// migrateAttempts is how often Migrate starts over when the file changes
// under it.
const migrateAttempts = 3

// migratePiece is the largest read and write of a migration copy.
const migratePiece = 16 << 20

// Migrate rewrites regular file p into layout to, online: it copies the
// file's mapped ranges (holes stay holes) into a hidden new file of the
// same directory created with that layout, then has the MDS swap the
// copy's extent map in for the file's in one transaction, only if the file
// did not change meanwhile (else it starts over, up to three times). The
// file keeps its inode, names, owner, mode, times and xattrs; readers that
// hold the old map keep reading the old extents until GC's grace period
// ends. progress, when not nil, receives the bytes copied so far.
func (c *Client) Migrate(ctx context.Context, p string, to Layout, progress func(int64)) (*MigrateResult, error) {
	if _, err := layoutOf(to.wire()); err != nil {
		return nil, err
	}
	parent, name, err := c.resolveParent(ctx, p)
	if err != nil {
		return nil, err
	}
	res := &MigrateResult{To: to}
	var lastErr error
	for res.Attempts < migrateAttempts {
		res.Attempts++
		a, err := c.Lookup(ctx, parent, name)
		if err != nil {
			return nil, err
		}
		if !IsRegular(a) {
			return nil, fmt.Errorf("migrate %s: not a regular file: %w", p, errs.ErrInvalid)
		}
		res.Ino, res.From = a.Ino, a.Layout
		if sameLayout(a.Layout.wire(), to.wire()) {
			res.Unchanged = true
			return res, nil
		}
		n, err := c.migrateOnce(ctx, parent, name, a, to, progress)
		res.Bytes += n
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, errs.ErrStale) {
			return res, err
		}
		lastErr = err
	}
	return res, fmt.Errorf("migrate %s: the file kept changing: %w", p, lastErr)
}

func sameLayout(a, b *mdspb.Layout) bool {
	return a.GetK() == b.GetK() && a.GetM() == b.GetM() && a.GetUnit() == b.GetUnit() &&
		sameCompression(a.GetCompression(), b.GetCompression()) // compress.go
}

// migrateOnce makes one copy of file a (entered as name in parent) in
// layout to and swaps it in. It returns the bytes copied.
func (c *Client) migrateOnce(ctx context.Context, parent uint64, name string, a *Attr, to Layout, progress func(int64)) (int64, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return 0, err
	}
	tmpName := "." + name + ".migrate-" + hex.EncodeToString(rnd[:])
	if len(tmpName) > 255 {
		tmpName = ".migrate-" + hex.EncodeToString(rnd[:])
	}
	cr, err := c.mds.Create(ctx, &mdspb.CreateRequest{
		Parent: parent, Name: []byte(tmpName), Mode: sIFREG | 0o600,
		Uid: a.UID, Gid: a.GID, Exclusive: true, Layout: to.wire(),
	})
	if err != nil {
		return 0, fmt.Errorf("migrate %s: create the copy: %w", name, err)
	}
	tmpIno := cr.GetAttr().GetIno()
	committed := false
	defer func() {
		if !committed {
			if err := c.UnlinkIn(context.WithoutCancel(ctx), parent, tmpName); err != nil && !errors.Is(err, errs.ErrNotFound) {
				c.log.Warn("remove the copy of a failed migration", "ino", a.Ino, "name", tmpName, "err", err)
			}
		}
	}()
	n, err := c.copyMapped(ctx, a, tmpIno, progress)
	if err != nil {
		return n, fmt.Errorf("migrate %s: copy: %w", name, err)
	}
	_, err = c.mds.MigrateCommit(ctx, &mdspb.MigrateCommitRequest{
		SrcIno: a.Ino, TmpParent: parent, TmpName: []byte(tmpName), TmpIno: tmpIno,
		ExpectSize: a.Size, ExpectMtimeNs: a.MtimeNs, ExpectCtimeNs: a.CtimeNs,
	})
	if err != nil {
		return n, err
	}
	committed = true
	return n, nil
}

// copyMapped copies the mapped ranges of file a (as its extent map says
// now) into file dst, gives dst a's size, and makes it durable.
func (c *Client) copyMapped(ctx context.Context, a *Attr, dst uint64, progress func(int64)) (int64, error) {
	src, err := c.OpenIno(ctx, a.Ino)
	if err != nil {
		return 0, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	out, err := c.OpenIno(ctx, dst)
	if err != nil {
		return 0, err
	}
	defer out.Close(context.WithoutCancel(ctx))
	src.mu.Lock()
	refs := append([]*mdspb.ExtentRef(nil), src.ext...)
	src.mu.Unlock()
	size := int64(a.Size)
	buf := make([]byte, migratePiece)
	var copied int64
	for _, r := range refs {
		off, end := int64(r.GetFileOff()), min(int64(r.GetFileOff()+r.GetLength()), size)
		for off < end {
			n := int(min(int64(len(buf)), end-off))
			got, err := src.ReadAt(ctx, buf[:n], off)
			if err != nil && got < n {
				return copied, err
			}
			if _, err := out.WriteAt(ctx, buf[:n], off); err != nil {
				return copied, err
			}
			off += int64(n)
			copied += int64(n)
			if progress != nil {
				progress(copied)
			}
		}
	}
	if out.Size() < size {
		if err := out.Truncate(ctx, size); err != nil {
			return copied, err
		}
	}
	return copied, out.Fsync(ctx)
}
