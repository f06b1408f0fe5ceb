package mds

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// The state of the data now, for operators (`shoal admin status`): which
// committed extents are degraded or unreadable given the OSTs' current
// states and the bad-chunk queue, and which files hold them. A job's
// counts are its last pass's; this is the present (issue 17, item 6:
// status said "540 extents lost" after every OST was back).

// Damage classes of DamagedFile.damage, most severe first.
const (
	damageUnreadable = "unreadable" // more than m chunks on down or removed OSTs
	damageLost       = "lost"       // a job found more than m chunks unreadable
	damageBad        = "bad"        // a chunk reported corrupt
	damageDegraded   = "degraded"   // a chunk on a down or removed OST, or unplaced
)

func damageRank(d string) int {
	switch d {
	case damageUnreadable:
		return 0
	case damageLost:
		return 1
	case damageBad:
		return 2
	}
	return 3
}

// maxHealthFiles bounds the files one Health or GetJob call names.
const maxHealthFiles = 1000

// Health counts the degraded and unreadable committed extents now, and
// names the files that hold them (req.max_files, unreadable first).
func (s *Server) handleHealth(ctx context.Context, req *mdspb.HealthRequest) (_ *mdspb.HealthReply, err error) {
	ov := s.ostView()
	gone := map[uint32]bool{0: true} // 0: a slot left unplaced
	for id := range ov.infos {
		if !ov.up[id] || ov.state[id] == ostRemoved {
			gone[id] = true
		}
	}
	out := &mdspb.HealthReply{}
	damage := map[uint64]string{}
	err = s.snapshot(func(r reader) error {
		bad := map[uint64]bool{}
		err := scan(r, []byte{prefixBad}, func(k, _ []byte) (bool, error) {
			if len(k) != 13 {
				return false, errCorruptKey("bad chunk", k)
			}
			bad[binary.BigEndian.Uint64(k[1:9])] = true
			out.BadChunksQueued++
			return true, ctx.Err()
		})
		if err != nil {
			return err
		}
		err = scan(r, []byte{prefixRef}, func(k, v []byte) (bool, error) {
			e, err := decodeExtentValue(k, v)
			if err != nil {
				return false, err
			}
			out.Extents++
			n := 0
			for _, o := range e.GetOsts() {
				if gone[o] {
					n++
				}
			}
			switch {
			case n > int(e.GetLayout().GetM()):
				out.UnreadableExtents++
				out.DegradedExtents++
				damage[e.Id] = damageUnreadable
			case bad[e.Id]:
				out.DegradedExtents++
				damage[e.Id] = damageBad
			case n > 0:
				out.DegradedExtents++
				damage[e.Id] = damageDegraded
			}
			return true, ctx.Err()
		})
		if err != nil {
			return err
		}
		osts, err := registeredOsts(r)
		if err != nil {
			return err
		}
		out.Osts = uint32(osts)
		if osts > 0 { // none yet: status says so
			if out.WideLayouts, err = wideLayouts(ctx, r, s.o.DefaultLayout, &s.o.Placement, osts); err != nil {
				return err
			}
		}
		if req.GetMaxFiles() == 0 || len(damage) == 0 {
			return nil
		}
		out.Files, err = damagedFiles(ctx, r, damage, int(min(req.GetMaxFiles(), maxHealthFiles)))
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// jobFiles names the files of a job's damaged extents (GetJob with
// files): lost ones for repair and drain, bad ones for scrub.
func (s *Server) jobFiles(ctx context.Context, j *mdspb.AdminJob) error {
	if len(j.DamagedExtents) == 0 {
		return nil
	}
	d := damageLost
	if j.Kind == JobScrub {
		d = damageBad
	}
	damage := make(map[uint64]string, len(j.DamagedExtents))
	for _, id := range j.DamagedExtents {
		damage[id] = d
	}
	return s.snapshot(func(r reader) error {
		var err error
		j.Files, err = damagedFiles(ctx, r, damage, 20)
		return err
	})
}

// damagedFiles finds the files whose extent maps name the extents of
// damage (one scan of every map entry) and names up to max of them, the
// most severe damage first, then the most damaged extents.
func damagedFiles(ctx context.Context, r reader, damage map[uint64]string, max int) ([]*mdspb.DamagedFile, error) {
	files := map[uint64]*mdspb.DamagedFile{}
	seen := map[[2]uint64]bool{} // (ino, extent): an extent split in two entries counts once
	err := scan(r, []byte{prefixMap}, func(k, v []byte) (bool, error) {
		ref, err := readRef(k, v)
		if err != nil {
			return false, err
		}
		id := ref.GetExtent().GetId()
		d, ok := damage[id]
		if !ok {
			return true, ctx.Err()
		}
		ino, _, err := decodeMapKey(k)
		if err != nil {
			return false, err
		}
		if seen[[2]uint64{ino, id}] {
			return true, nil
		}
		seen[[2]uint64{ino, id}] = true
		f := files[ino]
		if f == nil {
			f = &mdspb.DamagedFile{Ino: ino, Damage: d}
			files[ino] = f
		}
		f.Extents++
		if damageRank(d) < damageRank(f.Damage) {
			f.Damage = d
		}
		return true, ctx.Err()
	})
	if err != nil {
		return nil, err
	}
	out := make([]*mdspb.DamagedFile, 0, len(files))
	for _, f := range files {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *mdspb.DamagedFile) int {
		if ra, rb := damageRank(a.Damage), damageRank(b.Damage); ra != rb {
			return ra - rb
		}
		if c := cmp.Compare(b.Extents, a.Extents); c != 0 {
			return c
		}
		return cmp.Compare(a.Ino, b.Ino)
	})
	out = out[:min(max, len(out))]
	inos := make(map[uint64]bool, len(out))
	for _, f := range out {
		inos[f.Ino] = true
	}
	paths, err := pathsOf(ctx, r, inos)
	if err != nil {
		return nil, err
	}
	for _, f := range out {
		f.Path = paths[f.Ino]
	}
	return out, nil
}

// pathsOf returns a path from the root for each inode of inos that has a
// name (one of its names, for a file with several): one scan of every
// directory entry for the inodes themselves, then the directories above
// them one by one (their "u" key and their parent's entries).
func pathsOf(ctx context.Context, r reader, inos map[uint64]bool) (map[uint64]string, error) {
	type link struct {
		parent uint64
		name   string
	}
	links := map[uint64]link{rootIno: {}}
	err := scan(r, []byte{prefixDentry}, func(k, v []byte) (bool, error) {
		child, _, err := decodeDentry(v)
		if err != nil {
			return false, err
		}
		if !inos[child] {
			return true, ctx.Err()
		}
		if _, ok := links[child]; ok {
			return true, nil
		}
		parent, name, err := decodeDentryKey(k)
		if err != nil {
			return false, err
		}
		links[child] = link{parent, string(name)}
		return true, ctx.Err()
	})
	if err != nil {
		return nil, err
	}
	// nameDir finds directory d's link: its parent from its "u" key, its
	// name among the parent's entries.
	nameDir := func(d uint64) (link, bool, error) {
		v, err := getValue(r, parentKey(d))
		if err != nil || len(v) != 8 {
			return link{}, false, nil // not a directory, or none: no path
		}
		p := binary.BigEndian.Uint64(v)
		var l link
		found := false
		err = scan(r, dentryPrefix(p), func(k, v []byte) (bool, error) {
			child, _, err := decodeDentry(v)
			if err != nil {
				return false, err
			}
			if child != d {
				return true, ctx.Err()
			}
			_, name, err := decodeDentryKey(k)
			if err != nil {
				return false, err
			}
			l, found = link{p, string(name)}, true
			return false, nil
		})
		return l, found, err
	}
	out := map[uint64]string{}
	for ino := range inos {
		var parts []string
		cur := ino
		ok := true
		for cur != rootIno && ok && len(parts) < 4096 {
			l, known := links[cur]
			if !known {
				var err error
				if l, known, err = nameDir(cur); err != nil {
					return nil, err
				}
				if known {
					links[cur] = l
				}
			}
			ok = known
			parts = append(parts, l.name)
			cur = l.parent
		}
		if !ok || cur != rootIno {
			continue // no name left (unlinked, still open)
		}
		slices.Reverse(parts)
		out[ino] = "/" + strings.Join(parts, "/")
	}
	return out, nil
}
