package mds

// Identity, trust and POSIX permissions (docs/security.md).
//
// Every MDS call may carry the identity of the user it is made for
// (wire.UIDHeader, GIDHeader, GroupsHeader: set by the FUSE mount from the
// request's caller and by the client library from its Options). The
// certificate of the calling node decides how far that identity is
// believed: a trusted node's ids are taken as they are; a squashed node's
// root (uid 0) becomes IdentityOptions.SquashUID/GID, and with SquashAll
// every id does, as Lustre's nodemaps do. A call without an identity is
// made by root of its node (admin tools, the MDS's own work), mapped the
// same way. The checks below follow Linux's generic_permission, the
// sticky-directory rule and the owner rules of chmod, chown and utimes.

import (
	"context"
	"fmt"
	"slices"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// IdentityOptions maps client certificates to trust levels.
type IdentityOptions struct {
	// Squash lists the certificate names (CN) of nodes whose users are
	// squashed; "*" squashes every certificate of role client. Nodes not
	// listed are trusted. Callers on plaintext connections (a cluster run
	// --insecure) have no certificate and are trusted unless SquashInsecure.
	Squash []string
	// SquashInsecure squashes callers without a certificate.
	SquashInsecure bool
	// SquashUID and SquashGID replace root's ids (and with SquashAll
	// every id) of squashed callers. Default 65534 (nobody, nogroup).
	SquashUID, SquashGID uint32
	// SquashAll maps every uid and gid of squashed callers, not only root.
	SquashAll bool
}

func (o *IdentityOptions) setDefaults() {
	if o.SquashUID == 0 {
		o.SquashUID = 65534
	}
	if o.SquashGID == 0 {
		o.SquashGID = 65534
	}
}

// caller is the user an MDS call acts for, after mapping.
type caller struct {
	uid, gid uint32
	groups   []uint32
	squashed bool
}

func (c caller) root() bool { return c.uid == 0 }

func (c caller) inGroup(gid uint32) bool {
	return c.gid == gid || slices.Contains(c.groups, gid)
}

// squashed reports whether calls from the node with identity id (ok:
// it presented a certificate) are squashed.
func (o *IdentityOptions) squashed(id wire.Identity, ok bool) bool {
	if !ok {
		return o.SquashInsecure
	}
	if id.Role != pki.RoleClient && id.Role != pki.RoleAdmin {
		return false // servers act for themselves
	}
	for _, n := range o.Squash {
		if n == id.Name || (n == "*" && id.Role == pki.RoleClient) {
			return true
		}
	}
	return false
}

// mapCaller returns the mapped identity of the call in ctx: the user in
// its metadata, squashed as Options.Identity says for the node that sent
// it. The interceptor calls it once per call (intercept.go, callerOf).
func (s *Server) mapCaller(ctx context.Context) (caller, error) {
	u, _, err := wire.UserFrom(ctx)
	if err != nil {
		return caller{}, err
	}
	c := caller{uid: u.UID, gid: u.GID, groups: u.Groups}
	id, ok := wire.PeerIdentity(ctx)
	if !s.o.Identity.squashed(id, ok) {
		return c, nil
	}
	o := &s.o.Identity
	c.squashed = true
	if o.SquashAll || c.uid == 0 {
		c.uid = o.SquashUID
	}
	if o.SquashAll || c.gid == 0 {
		c.gid = o.SquashGID
	}
	groups := c.groups[:0:0]
	for _, g := range c.groups {
		if o.SquashAll || g == 0 {
			g = o.SquashGID
		}
		groups = append(groups, g)
	}
	c.groups = groups
	return c, nil
}

// Permission bits asked of an inode.
const (
	mayExec  = 1
	mayWrite = 2
	mayRead  = 4
)

// may reports whether c has every access in want (mayRead|...) on a.
func (c caller) may(a *mdspb.Attr, want uint32) bool {
	if c.root() {
		// Root may do anything but execute a file no one may execute.
		return want&mayExec == 0 || isDir(a.Mode) || a.Mode&0o111 != 0
	}
	var bits uint32
	switch {
	case c.uid == a.Uid:
		bits = a.Mode >> 6
	case c.inGroup(a.Gid):
		bits = a.Mode >> 3
	default:
		bits = a.Mode
	}
	return bits&7&want == want
}

// check returns ErrPermission unless c has want on a.
func (c caller) check(a *mdspb.Attr, want uint32, op string) error {
	if c.may(a, want) {
		return nil
	}
	return fmt.Errorf("%s: uid %d on inode %d (mode %o, owner %d:%d): %w", op, c.uid, a.Ino, a.Mode&permMask, a.Uid, a.Gid, errs.ErrPermission)
}

// owns reports whether c owns a or is root.
func (c caller) owns(a *mdspb.Attr) bool { return c.root() || c.uid == a.Uid }

// sticky checks the sticky-directory rule for removing or replacing child
// in dir: in a sticky directory only the owner of the child, the owner of
// the directory or root may (EPERM otherwise).
func (c caller) sticky(dir, child *mdspb.Attr, op string) error {
	if dir.Mode&0o1000 == 0 || c.owns(child) || c.uid == dir.Uid {
		return nil
	}
	return fmt.Errorf("%s: uid %d in sticky directory %d owned by %d, entry owned by %d: %w", op, c.uid, dir.Ino, dir.Uid, child.Uid, errs.ErrNotPermitted)
}

// checkSetAttr applies the rules of chmod, chown, truncate and utimes.
func (c caller) checkSetAttr(a *mdspb.Attr, req *mdspb.SetAttrRequest) error {
	has := func(b mdspb.SetAttrBits) bool { return req.GetValid()&uint32(b) != 0 }
	notPermitted := func(what string) error {
		return fmt.Errorf("setattr %s: uid %d on inode %d owned by %d: %w", what, c.uid, a.Ino, a.Uid, errs.ErrNotPermitted)
	}
	if has(mdspb.SetAttrBits_SETATTR_MODE) && !c.owns(a) && !c.killsPrivs(a, req.GetMode()) {
		return notPermitted("mode")
	}
	if has(mdspb.SetAttrBits_SETATTR_UID) && req.GetUid() != a.Uid && !c.root() {
		return notPermitted("uid")
	}
	if has(mdspb.SetAttrBits_SETATTR_GID) && req.GetGid() != a.Gid && !(c.root() || (c.uid == a.Uid && c.inGroup(req.GetGid()))) {
		return notPermitted("gid")
	}
	if (has(mdspb.SetAttrBits_SETATTR_ATIME) || has(mdspb.SetAttrBits_SETATTR_MTIME)) && !c.owns(a) {
		return notPermitted("times")
	}
	// Times set to now and truncation need write permission; the owner
	// may always (a file created 0444 is still written through the
	// descriptor that created it).
	if (has(mdspb.SetAttrBits_SETATTR_ATIME_NOW) || has(mdspb.SetAttrBits_SETATTR_MTIME_NOW) || has(mdspb.SetAttrBits_SETATTR_SIZE)) &&
		!c.owns(a) && !c.may(a, mayWrite) {
		return c.check(a, mayWrite, "setattr")
	}
	return nil
}

// killsPrivs reports whether a mode change of a by c only clears its
// setuid and setgid bits, for a caller that may write it: the kernel makes
// that change itself, with the writer's credentials, when a user other
// than the owner writes or truncates such a file (file_remove_privs).
func (c caller) killsPrivs(a *mdspb.Attr, mode uint32) bool {
	const privs = 0o6000
	old, m := a.Mode&0o7777, mode&0o7777
	return m != old && m&^old == 0 && (old^m)&^privs == 0 && c.may(a, mayWrite)
}

// newOwner returns the owner of an inode c creates with the ids the
// request names: a trusted caller's request decides (the FUSE mount sends
// the creating process's ids, with a setgid parent's group); a squashed
// caller's files belong to its mapped ids.
func (c caller) newOwner(uid, gid uint32) (uint32, uint32) {
	if !c.squashed {
		return uid, gid
	}
	if gid == 0 || !c.inGroup(gid) {
		gid = c.gid
	}
	return c.uid, gid
}

// mayData reports whether c may be given capabilities to read (or write)
// a file's chunks: by its mode, or as its owner (POSIX checks the mode at
// open; the owner may have opened it before a chmod, or created it 0444).
func (c caller) mayData(a *mdspb.Attr, want uint32) bool {
	return c.owns(a) || c.may(a, want)
}

// checkRename applies the sticky rule to the source and to a replaced
// target, and asks write permission on a directory that changes parent
// (its ".." changes).
func (c caller) checkRename(t *txn, op, np, src *mdspb.Inode, dstIno uint64, dstOK bool) error {
	if err := c.sticky(op.Attr, src.Attr, "rename"); err != nil {
		return err
	}
	if dstOK {
		dst, err := t.inode(dstIno)
		if err != nil {
			return err
		}
		if err := c.sticky(np.Attr, dst.Attr, "rename"); err != nil {
			return err
		}
	}
	if isDir(src.Attr.Mode) && op.Attr.Ino != np.Attr.Ino {
		return c.check(src.Attr, mayWrite, "rename directory")
	}
	return nil
}
