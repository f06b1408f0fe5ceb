package mds

import (
	"context"
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// ReadDir lists a directory's entries sorted by name bytes, starting after
// req.after; "." and ".." are not included.
func (s *Server) handleReadDir(ctx context.Context, req *mdspb.ReadDirRequest) (_ *mdspb.ReadDirReply, err error) {
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = readDirDefault
	case limit > readDirMax:
		limit = readDirMax
	}
	if len(req.GetAfter()) > maxNameLen {
		return nil, fmt.Errorf("readdir after a name of %d bytes: %w", len(req.GetAfter()), errs.ErrNameTooLong)
	}
	cl := s.callerOf(ctx)
	out := &mdspb.ReadDirReply{Eof: true}
	err = s.snapshot(func(r reader) error {
		d, err := readInode(r, req.GetIno())
		if err != nil {
			return err
		}
		if !isDir(d.Attr.Mode) {
			return fmt.Errorf("readdir of inode %d: %w", d.Attr.Ino, errs.ErrNotDir)
		}
		if err := cl.check(d.Attr, mayRead, "readdir"); err != nil {
			return err
		}
		prefix := dentryPrefix(d.Attr.Ino)
		lower := prefix
		if len(req.GetAfter()) > 0 {
			// The first key after prefix+after is prefix+after+"\x00".
			lower = append(dentryKey(d.Attr.Ino, req.GetAfter()), 0)
		}
		return scanRange(r, lower, prefixEnd(prefix), func(k, v []byte) (bool, error) {
			if len(out.Entries) == limit {
				out.Eof = false
				return false, nil
			}
			_, name, err := decodeDentryKey(k)
			if err != nil {
				return false, err
			}
			ino, mode, err := decodeDentry(v)
			if err != nil {
				return false, err
			}
			e := &mdspb.DirEntry{Name: append([]byte(nil), name...), Ino: ino, Mode: mode}
			if req.GetPlus() {
				n, err := readInode(r, ino)
				if err != nil {
					return false, fmt.Errorf("readdir of inode %d: entry %q: %w", d.Attr.Ino, name, err)
				}
				e.Attr = n.Attr
			}
			out.Entries = append(out.Entries, e)
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// StatFs sums the capacity of the live OSTs and the free space of those
// that can take chunks (not full).
func (s *Server) handleStatFs(ctx context.Context, req *mdspb.StatFsRequest) (_ *mdspb.StatFsReply, err error) {
	files, err := getCounter(s.db, counterInodes)
	if err != nil {
		return nil, err
	}
	out := &mdspb.StatFsReply{Files: files}
	// Raw space, each file system once: OSTs of `shoal local` share a disk.
	var rawTotal, rawFree uint64
	seen := map[string]bool{}
	for _, o := range s.listOsts() {
		out.OstsTotal++
		if !o.Up {
			continue
		}
		out.OstsUp++
		if o.FsId != "" {
			if seen[o.FsId] {
				continue
			}
			seen[o.FsId] = true
		}
		rawTotal += o.Capacity
		if !o.Full { // placement puts nothing more there
			rawFree += o.Free
		}
	}
	// File bytes under the root's layout: k of every k+m raw bytes.
	k, n := uint64(1), uint64(1)
	if root, err := readInode(s.db, rootIno); err == nil && root.GetAttr().GetLayout().GetK() > 0 {
		l := root.GetAttr().GetLayout()
		k, n = uint64(l.GetK()), uint64(l.GetK()+l.GetM())
	}
	out.TotalBytes = rawTotal / n * k
	out.FreeBytes = rawFree / n * k
	if ino := req.GetIno(); ino != 0 {
		if out.Quota, err = statQuota(s.db, ino); err != nil {
			return nil, err
		}
	}
	return out, nil
}
