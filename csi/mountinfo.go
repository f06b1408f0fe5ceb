package csi

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// shoalFSType is a Shoal mount's type in mountinfo.
const shoalFSType = "fuse.shoal"

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	dev    string   // MAJ:MIN of the file system
	root   string   // the directory of the file system mounted (a bind's source)
	point  string   // the mount point
	opts   []string // the mount's options (ro, nosuid...)
	fstype string
}

func (e mountEntry) readOnly() bool { return slices.Contains(e.opts, "ro") }

// mountinfoPath is read by mounts; tests may point it elsewhere.
var mountinfoPath = "/proc/self/mountinfo"

// mounts returns the mounts of this process's mount namespace.
func mounts() ([]mountEntry, error) {
	f, err := os.Open(mountinfoPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// parseMountinfo parses mountinfo lines:
// ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS.
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if !ok || len(a) < 6 || len(b) < 1 {
			return nil, fmt.Errorf("mountinfo: bad line %q", sc.Text())
		}
		out = append(out, mountEntry{dev: a[2], root: unescapeMountinfo(a[3]), point: unescapeMountinfo(a[4]),
			opts: strings.Split(a[5], ","), fstype: b[0]})
	}
	return out, sc.Err()
}

// mountAt returns the top mount at point (the last one listed there).
func mountAt(ms []mountEntry, point string) (mountEntry, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].point == point {
			return ms[i], true
		}
	}
	return mountEntry{}, false
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
