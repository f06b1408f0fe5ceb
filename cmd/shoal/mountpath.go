package main

// Paths through a Shoal mount (issue 18): `shoal admin setstripe
// ./mnt/dir` means the directory the mount shows there, as lfs and juicefs
// take paths. A path whose absolute form lies under a mount of type
// fuse.shoal (found in /proc/self/mountinfo) is the part after the mount
// point, inside the file system; any other path is taken from the file
// system's root, as before (/ is the root). The mount's source, which
// `shoal mount` and `shoal local` set to shoal:ADDR (the MDS addresses it
// mounted), gives the cluster when --mds is not on the command line.

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// shoalFSType is the file system type of a Shoal mount in mountinfo.
const shoalFSType = "fuse.shoal"

// mountSourcePrefix starts the source of a Shoal mount that names its
// MDS: shoal:ADDR[,ADDR...].
const mountSourcePrefix = "shoal:"

// mountSource is the source (df's first column) of a mount of the
// cluster at mdsAddr.
func mountSource(mdsAddr string) string { return mountSourcePrefix + mdsAddr }

// shoalMount is one Shoal mount of this machine.
type shoalMount struct {
	point string // absolute mount point
	mds   string // the MDS addresses it mounted; "" if its source does not say
	// root is the directory of the file system mounted there: "/" for
	// a mount, the volume's directory for a bind mount of one (the CSI
	// driver's volumes in pods).
	root string
}

// mountinfoPath is read by shoalMounts; tests point it elsewhere.
var mountinfoPath = "/proc/self/mountinfo"

// shoalMounts lists the Shoal mounts in mountinfo, or none if it cannot
// be read.
func shoalMounts() []shoalMount {
	f, err := os.Open(mountinfoPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []shoalMount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 2 || b[0] != shoalFSType {
			continue
		}
		m := shoalMount{point: unescapeMountinfo(a[4]), root: unescapeMountinfo(a[3])}
		if src := unescapeMountinfo(b[1]); strings.HasPrefix(src, mountSourcePrefix) {
			m.mds = strings.TrimPrefix(src, mountSourcePrefix)
		}
		out = append(out, m)
	}
	return out
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// fsPath is a path argument as the file system sees it.
type fsPath struct {
	inner string      // the path inside the file system, from its root
	mount *shoalMount // the mount it was found under; nil: taken from the root
}

// resolveFSPath returns where arg lies in the file system: the part
// after the mount point when arg (made absolute, symbolic links
// followed as far as they exist) is under a Shoal mount, else arg itself,
// a path from the file system's root.
func resolveFSPath(arg string) fsPath {
	mounts := shoalMounts()
	if len(mounts) == 0 {
		return fsPath{inner: arg}
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return fsPath{inner: arg}
	}
	if r, err := evalExisting(abs); err == nil {
		abs = r
	}
	var best *shoalMount
	for i := range mounts {
		m := &mounts[i]
		if under(abs, m.point) && (best == nil || len(m.point) > len(best.point)) {
			best = m
		}
	}
	if best == nil {
		return fsPath{inner: arg}
	}
	rel, err := filepath.Rel(best.point, abs)
	if err != nil {
		return fsPath{inner: arg}
	}
	if rel == "." {
		rel = ""
	}
	return fsPath{inner: path.Join("/", best.root, filepath.ToSlash(rel)), mount: best}
}

// under reports whether p is dir or inside it (both absolute and clean).
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// evalExisting follows the symbolic links of the longest part of p that
// exists and appends the rest: a path to a file not made yet resolves.
func evalExisting(p string) (string, error) {
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest), nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// mdsFor returns the MDS address to use for the path arguments ps: the
// one given on the command line (explicit), else that of the Shoal mount
// the first of them is under, else dflt ($SHOAL_MDS).
func mdsFor(explicit bool, dflt string, ps ...fsPath) string {
	if explicit {
		return dflt
	}
	for _, p := range ps {
		if p.mount != nil && p.mount.mds != "" {
			return p.mount.mds
		}
	}
	return dflt
}

// pathArgs names the commands whose first argument is a path in the file
// system, and pathFlags those whose flag is one (ckpt's --root).
var (
	pathArgs = map[string]bool{
		"shoal admin setstripe": true,
		"shoal admin getstripe": true,
		"shoal admin migrate":   true,
		"shoal admin quota set": true,
		"shoal admin quota get": true,
		"shoal admin quota rm":  true,
	}
	pathFlags = map[string]string{"shoal ckpt": "root"}
)

// pathsThroughMounts rewrites, before cmd runs, its path argument or
// flag into the path inside the file system (resolveFSPath), and sets
// --mds from the mount when the command line does not give it. cobra
// hands the same args slice to the command's RunE.
func pathsThroughMounts(cmd *cobra.Command, args []string) error {
	var ps []fsPath
	if pathArgs[cmd.CommandPath()] && len(args) > 0 && strings.TrimSpace(args[0]) != "" {
		p := resolveFSPath(args[0])
		args[0] = p.inner
		ps = append(ps, p)
	}
	for c := cmd; c != nil; c = c.Parent() {
		name, ok := pathFlags[c.CommandPath()]
		if !ok {
			continue
		}
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			p := resolveFSPath(f.Value.String())
			if err := f.Value.Set(p.inner); err != nil {
				return err
			}
			ps = append(ps, p)
		}
	}
	f := cmd.Flags().Lookup("mds")
	if f == nil || f.Changed {
		return nil
	}
	if addr := mdsFor(false, f.Value.String(), ps...); addr != f.Value.String() {
		return f.Value.Set(addr)
	}
	return nil
}

// refuseStackedMount returns an error when mountpoint already has a Shoal
// mount: a second one would hide the first, silently (issue 18).
func refuseStackedMount(mountpoint string) error {
	p, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil // the mount itself will say what is wrong
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	for _, m := range shoalMounts() {
		if m.point != p {
			continue
		}
		of := ""
		if m.mds != "" {
			of = " of the MDS at " + m.mds
		}
		return fmt.Errorf("%s already has a Shoal mount%s: unmount it first (fusermount3 -u %s), or choose another mount point", mountpoint, of, mountpoint)
	}
	return nil
}
