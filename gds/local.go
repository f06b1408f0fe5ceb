package gds

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/shoalfs/shoal/internal/errs"
)

// DiscoverLocalOSTs maps the OSTs whose directories are dirs (OST
// directories on this node, as `shoal ost --dir` or `shoal local` made
// them) to their ids, read from each directory's ost.id file
// (docs/ost-format.md: the id the MDS assigned, decimal text and a
// newline). A directory without ost.id (an OST that never registered) is
// skipped; a malformed one is an error.
func DiscoverLocalOSTs(dirs []string) (map[uint32]string, error) {
	out := map[uint32]string{}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "ost.id"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("gds: OST directory %s: %w", d, err)
		}
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("gds: %s holds %q, not an OST id: %w", filepath.Join(d, "ost.id"), b, errs.ErrCorrupt)
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, err
		}
		if prev, ok := out[uint32(id)]; ok && prev != abs {
			return nil, fmt.Errorf("gds: OST %d in both %s and %s: %w", id, prev, abs, errs.ErrInvalid)
		}
		out[uint32(id)] = abs
	}
	return out, nil
}
