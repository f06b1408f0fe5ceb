package client

import (
	"github.com/shoalfs/shoal/mds/mdspb"
)

// The client's own types for what its calls take and return, converted
// from and to the wire's (mds/mdspb) here, in one place. The extents of
// the GPU read path (ExtentMap, ReadExtent) are still the wire's.

// Attr is an inode's attributes.
type Attr struct {
	Ino   uint64
	Mode  uint32 // type and permission bits (Linux values: ModeType)
	UID   uint32
	GID   uint32
	Size  uint64
	Nlink uint32
	// Times, in nanoseconds since the epoch.
	AtimeNs, MtimeNs, CtimeNs int64
	// Layout of a file, or of the files created in a directory; zero
	// for an inode without one.
	Layout Layout
	Rdev   uint32 // a device's number (Linux's st_rdev encoding)
}

// attrOf converts wire attributes; nil stays nil.
func attrOf(a *mdspb.Attr) *Attr {
	if a == nil {
		return nil
	}
	return &Attr{
		Ino: a.GetIno(), Mode: a.GetMode(), UID: a.GetUid(), GID: a.GetGid(),
		Size: a.GetSize(), Nlink: a.GetNlink(),
		AtimeNs: a.GetAtimeNs(), MtimeNs: a.GetMtimeNs(), CtimeNs: a.GetCtimeNs(),
		Layout: layoutOfWire(a.GetLayout()), Rdev: a.GetRdev(),
	}
}

// Layout is how a file's bytes are spread over the OSTs: rows of K data
// and M parity chunks of Unit bytes each, compressed as Compression says
// (docs/compression.md). The JSON names are the wire's.
type Layout struct {
	K           uint32      `json:"k,omitempty"`
	M           uint32      `json:"m,omitempty"`
	Unit        uint32      `json:"unit,omitempty"`
	Compression Compression `json:"compression,omitzero"`
}

// Compression is a layout's compression attribute; the zero value
// (CodecNone) stores extents raw.
type Compression struct {
	Codec        Codec  `json:"codec,omitempty"`
	Level        int32  `json:"level,omitempty"`          // zstd 1..22 (0: 3); s2 ignores it
	MinSavingPct uint32 `json:"min_saving_pct,omitempty"` // 0: the default, 10
	// ElemSize, when 2, 4 or 8, splits every block into byte planes of
	// elements of that width before it is compressed. 0: no planes.
	ElemSize uint32 `json:"elem_size,omitempty"`
}

// Codec is a compression codec (internal/compress's values).
type Codec int32

// Codecs of Compression (the wire's values).
const (
	CodecNone = Codec(mdspb.Codec_CODEC_NONE)
	CodecS2   = Codec(mdspb.Codec_CODEC_S2)
	CodecZstd = Codec(mdspb.Codec_CODEC_ZSTD)
)

// layoutOfWire converts a wire layout; nil is the zero Layout.
func layoutOfWire(l *mdspb.Layout) Layout {
	out := Layout{K: l.GetK(), M: l.GetM(), Unit: l.GetUnit()}
	if c := l.GetCompression(); c != nil {
		out.Compression = Compression{Codec: Codec(c.GetCodec()), Level: c.GetLevel(), MinSavingPct: c.GetMinSavingPct(), ElemSize: c.GetElemSize()}
	}
	return out
}

// wire converts l; the zero Layout is nil, and the zero Compression none.
func (l Layout) wire() *mdspb.Layout {
	if l == (Layout{}) {
		return nil
	}
	out := &mdspb.Layout{K: l.K, M: l.M, Unit: l.Unit}
	if c := l.Compression; c != (Compression{}) {
		out.Compression = &mdspb.Compression{Codec: mdspb.Codec(c.Codec), Level: c.Level, MinSavingPct: c.MinSavingPct, ElemSize: c.ElemSize}
	}
	return out
}

// IsDir reports whether a is a directory's.
func IsDir(a *Attr) bool { return a != nil && a.Mode&sIFMT == sIFDIR }

// IsRegular reports whether a is a regular file's.
func IsRegular(a *Attr) bool { return a != nil && a.Mode&sIFMT == sIFREG }

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name string
	Ino  uint64
	Mode uint32 // the type bits of the inode's mode
	// Attr is the inode's attributes: set in the pages of
	// ReadDirPlusPage, nil in the other listings.
	Attr *Attr
}

// dirEntriesOf converts a wire listing.
func dirEntriesOf(es []*mdspb.DirEntry) []DirEntry {
	out := make([]DirEntry, len(es))
	for i, e := range es {
		out[i] = DirEntry{Name: string(e.GetName()), Ino: e.GetIno(), Mode: e.GetMode(), Attr: attrOf(e.GetAttr())}
	}
	return out
}

// StatFs is the cluster's capacity.
type StatFs struct {
	TotalBytes, FreeBytes uint64
	Files                 uint64 // inodes
	OSTsUp, OSTsTotal     int
	// Quota is the tightest quota over the inode asked about
	// (StatFsIno), nil when none or not asked.
	Quota *Quota
}

// LockKind says who owns a lock: LockPOSIX or LockFlock.
type LockKind int32

// LockType is what a lock allows, or LockUnlock to release one.
type LockType int32

// Lock kinds and types, for SetLock and GetLock (the wire's values).
const (
	LockPOSIX = LockKind(mdspb.LockKind_LOCK_KIND_POSIX) // byte ranges; the owner is a process
	LockFlock = LockKind(mdspb.LockKind_LOCK_KIND_FLOCK) // the whole file; the owner is an open file

	LockRead   = LockType(mdspb.LockType_LOCK_TYPE_READ)   // shared
	LockWrite  = LockType(mdspb.LockType_LOCK_TYPE_WRITE)  // exclusive
	LockUnlock = LockType(mdspb.LockType_LOCK_TYPE_UNLOCK) // SetLock only: release the range
)

// FileLock is a lock on the bytes [Start, End] of a file.
type FileLock struct {
	Kind       LockKind
	Type       LockType
	Start, End uint64
	Pid        uint32 // the holder's process id, as F_GETLK reports it
}

func (l *FileLock) wire() *mdspb.FileLock {
	if l == nil {
		return nil
	}
	return &mdspb.FileLock{Kind: mdspb.LockKind(l.Kind), Type: mdspb.LockType(l.Type), Start: l.Start, End: l.End, Pid: l.Pid}
}

// fileLockOf converts a wire lock; nil stays nil.
func fileLockOf(l *mdspb.FileLock) *FileLock {
	if l == nil {
		return nil
	}
	return &FileLock{Kind: LockKind(l.GetKind()), Type: LockType(l.GetType()), Start: l.GetStart(), End: l.GetEnd(), Pid: l.GetPid()}
}

// SetAttrBits name the attributes a SetAttr changes (an OR of them).
type SetAttrBits uint32

// Bits of SetAttrs.Valid (the wire's values).
const (
	SetMode     = SetAttrBits(mdspb.SetAttrBits_SETATTR_MODE)
	SetUID      = SetAttrBits(mdspb.SetAttrBits_SETATTR_UID)
	SetGID      = SetAttrBits(mdspb.SetAttrBits_SETATTR_GID)
	SetSize     = SetAttrBits(mdspb.SetAttrBits_SETATTR_SIZE)
	SetAtime    = SetAttrBits(mdspb.SetAttrBits_SETATTR_ATIME)
	SetMtime    = SetAttrBits(mdspb.SetAttrBits_SETATTR_MTIME)
	SetAtimeNow = SetAttrBits(mdspb.SetAttrBits_SETATTR_ATIME_NOW) // the MDS's clock
	SetMtimeNow = SetAttrBits(mdspb.SetAttrBits_SETATTR_MTIME_NOW)
)

// SetAttrs are the changes of a SetAttr: the attributes Valid names
// take the values here.
type SetAttrs struct {
	Valid            SetAttrBits
	Mode             uint32 // permission bits only
	UID, GID         uint32
	Size             uint64
	AtimeNs, MtimeNs int64
}

func (s SetAttrs) request(ino uint64) *mdspb.SetAttrRequest {
	return &mdspb.SetAttrRequest{Ino: ino, Valid: uint32(s.Valid), Mode: s.Mode, Uid: s.UID, Gid: s.GID, Size: s.Size, AtimeNs: s.AtimeNs, MtimeNs: s.MtimeNs}
}

// RenameFlags change what RenameIn does (an OR of them; 0: a POSIX
// rename, replacing the target).
type RenameFlags uint32

// RenameIn's flags (the wire's values, as renameat2(2)'s).
const (
	RenameNoReplace = RenameFlags(mdspb.RenameFlags_RENAME_NOREPLACE) // fail with errs.ErrExists if the target exists
	RenameExchange  = RenameFlags(mdspb.RenameFlags_RENAME_EXCHANGE)  // swap the two names
)
