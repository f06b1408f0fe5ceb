package mds

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// checkInvariants reads a whole database and reports every broken
// invariant of the key schema (docs/mds-keys.md) as one error wrapping
// errs.ErrCorrupt. It is for tests and, later, an fsck command; it reads
// everything into memory.
func checkInvariants(r reader) error {
	var problems []error
	bad := func(format string, args ...any) {
		if len(problems) < 50 {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	inodes := make(map[uint64]*mdspb.Inode)
	err := scan(r, []byte{prefixInode}, func(k, v []byte) (bool, error) {
		ino, err := decodeInodeKey(k)
		if err != nil {
			return false, err
		}
		n := &mdspb.Inode{}
		if err := proto.Unmarshal(v, n); err != nil || n.Attr == nil || n.Attr.Ino != ino {
			bad("inode %d: bad record", ino)
			return true, nil
		}
		inodes[ino] = n
		return true, nil
	})
	if err != nil {
		return err
	}
	if n, ok := inodes[rootIno]; !ok || !isDir(n.Attr.Mode) {
		bad("root inode missing or not a directory")
	}
	nextIno, err := getCounter(r, counterNextIno)
	if err != nil {
		return err
	}
	count, err := getCounter(r, counterInodes)
	if err != nil {
		return err
	}
	if count != uint64(len(inodes)) {
		bad("inode counter %d, %d inodes", count, len(inodes))
	}

	// Dentries: links per inode, subdirectories per directory, parents.
	links := make(map[uint64]int)
	subdirs := make(map[uint64]int)
	dirParent := make(map[uint64]uint64)
	err = scan(r, []byte{prefixDentry}, func(k, v []byte) (bool, error) {
		parent, name, err := decodeDentryKey(k)
		if err != nil {
			return false, err
		}
		ino, mode, err := decodeDentry(v)
		if err != nil {
			return false, err
		}
		if validName(name) != nil {
			bad("dentry %d/%q: invalid name", parent, name)
		}
		p, ok := inodes[parent]
		if !ok || !isDir(p.Attr.Mode) {
			bad("dentry %d/%q: parent missing or not a directory", parent, name)
		}
		n, ok := inodes[ino]
		if !ok {
			bad("dentry %d/%q -> missing inode %d", parent, name, ino)
			return true, nil
		}
		if mode&sIFMT != n.Attr.Mode&sIFMT {
			bad("dentry %d/%q: type %o, inode %d type %o", parent, name, mode&sIFMT, ino, n.Attr.Mode&sIFMT)
		}
		links[ino]++
		if isDir(n.Attr.Mode) {
			subdirs[parent]++
			dirParent[ino] = parent
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	// Orphans: regular files with no name left, kept while open.
	orphans := make(map[uint64]bool)
	err = scan(r, []byte{prefixOrphan}, func(k, _ []byte) (bool, error) {
		ino, err := decodeIDKey(prefixOrphan, k)
		if err != nil {
			return false, err
		}
		orphans[ino] = true
		if n, ok := inodes[ino]; !ok || !isReg(n.Attr.Mode) || n.Attr.Nlink != 0 {
			bad("orphan %d: inode missing, not a regular file or linked", ino)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for ino, n := range inodes {
		if ino >= nextIno {
			bad("inode %d >= next_ino %d", ino, nextIno)
		}
		switch {
		case isDir(n.Attr.Mode):
			if want := uint32(2 + subdirs[ino]); n.Attr.Nlink != want {
				bad("directory %d: nlink %d, want %d", ino, n.Attr.Nlink, want)
			}
			if ino != rootIno && links[ino] != 1 {
				bad("directory %d: %d entries", ino, links[ino])
			}
			v, err := getValue(r, parentKey(ino))
			if err != nil {
				bad("directory %d: no parent key", ino)
				continue
			}
			p, _ := decodeU64(v)
			want, ok := dirParent[ino]
			if ino == rootIno {
				want, ok = rootIno, true
			}
			if !ok || p != want {
				bad("directory %d: parent key %d, entry in %d", ino, p, want)
			}
		default:
			if int(n.Attr.Nlink) != links[ino] || (links[ino] == 0 && !orphans[ino]) {
				bad("inode %d: nlink %d, %d entries", ino, n.Attr.Nlink, links[ino])
			}
		}
	}

	// Extent maps: ordered, non-overlapping, within the extent and the
	// file size; refcounts equal the number of entries.
	refs := make(map[uint64]int)
	var lastIno, lastEnd uint64
	err = scan(r, []byte{prefixMap}, func(k, v []byte) (bool, error) {
		ino, _, err := decodeMapKey(k)
		if err != nil {
			return false, err
		}
		e, err := readRef(k, v)
		if err != nil {
			bad("%v", err)
			return true, nil
		}
		n, ok := inodes[ino]
		if !ok || !isReg(n.Attr.Mode) {
			bad("extent map of %d: inode missing or not a regular file", ino)
		}
		if ino == lastIno && e.FileOff < lastEnd {
			bad("extent map of %d: entry at %d overlaps the previous one (ends %d)", ino, e.FileOff, lastEnd)
		}
		lastIno, lastEnd = ino, e.FileOff+e.Length
		if e.Length == 0 || e.ExtentOff+e.Length > logicalLen(e.Extent) {
			bad("extent map of %d: entry at %d out of its extent", ino, e.FileOff)
		}
		if ok && lastEnd > n.Attr.Size {
			bad("extent map of %d: entry ends at %d beyond size %d", ino, lastEnd, n.Attr.Size)
		}
		refs[e.Extent.Id]++
		return true, nil
	})
	if err != nil {
		return err
	}
	stored := make(map[uint64]bool)
	err = scan(r, []byte{prefixRef}, func(k, v []byte) (bool, error) {
		id, err := decodeIDKey(prefixRef, k)
		if err != nil {
			return false, err
		}
		c, _, err := decodePrefixed(v)
		if err != nil {
			return false, err
		}
		stored[id] = true
		if int(c) != refs[id] {
			bad("extent %d: refcount %d, %d map entries", id, c, refs[id])
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for id, n := range refs {
		if !stored[id] {
			bad("extent %d: %d map entries, no refcount", id, n)
		}
	}
	err = scan(r, []byte{prefixPending}, func(k, _ []byte) (bool, error) {
		id, err := decodeIDKey(prefixPending, k)
		if err != nil {
			return false, err
		}
		if stored[id] {
			bad("extent %d: pending and referenced", id)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	// Extended attributes belong to existing inodes, have valid names and
	// stay within the per-inode limits.
	xattrList := make(map[uint64]int)
	xattrTotal := make(map[uint64]int)
	err = scan(r, []byte{prefixXattr}, func(k, v []byte) (bool, error) {
		ino, name, err := decodeXattrKey(k)
		if err != nil {
			return false, err
		}
		if _, ok := inodes[ino]; !ok {
			bad("xattr %q of missing inode %d", name, ino)
		}
		if validXattrName(name) != nil || len(v) > maxXattrValue {
			bad("xattr %q of inode %d: invalid name or %d-byte value", name, ino, len(v))
		}
		xattrList[ino] += len(name) + 1
		xattrTotal[ino] += len(name) + len(v)
		return true, nil
	})
	if err != nil {
		return err
	}
	for ino, total := range xattrTotal {
		if total > maxXattrBytes || xattrList[ino] > maxXattrList {
			bad("xattrs of inode %d: %d bytes, names %d, over the limits", ino, total, xattrList[ino])
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("mds: invariants broken: %w", errors.Join(append(problems, errs.ErrCorrupt)...))
	}
	return nil
}
