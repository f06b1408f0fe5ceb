package main

import (
	"fmt"
	"io"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Directories whose layout the cluster cannot hold (issue 18): on three
// OSTs a directory of RS 4+2 took every write and failed it at close,
// while status said HEALTH_OK.

// statusLayout is a directory whose layout needs more OSTs than are
// registered.
type statusLayout struct {
	Ino  uint64 `json:"ino"`
	Path string `json:"path"`
	K    uint32 `json:"k"`
	M    uint32 `json:"m"`
	// Need is the OSTs a write needs (k + min-parity); Unplaceable: more
	// than the cluster has, so every write of a new file there fails.
	// Otherwise its files are written narrow and never widened.
	Need        uint32 `json:"need"`
	Unplaceable bool   `json:"unplaceable"`
}

func statusLayouts(h *mdspb.HealthReply) []statusLayout {
	var out []statusLayout
	for _, w := range h.GetWideLayouts() {
		out = append(out, statusLayout{Ino: w.GetIno(), Path: w.GetPath(), K: w.GetK(), M: w.GetM(), Need: w.GetNeed(), Unplaceable: w.GetUnplaceable()})
	}
	return out
}

func (l statusLayout) name() string {
	if l.Path == "" {
		return fmt.Sprintf("inode %d", l.Ino)
	}
	return l.Path
}

// judgeLayouts adds a warning per directory whose layout cannot be
// placed, or only narrow.
func (rep *statusReport) judgeLayouts() {
	if rep.Data == nil {
		return
	}
	osts := rep.Data.Osts
	for _, l := range rep.Data.Layouts {
		if l.Unplaceable {
			rep.warn = append(rep.warn, fmt.Sprintf("directory %s has layout k=%d m=%d: a write needs %d OSTs and %d are registered, so no new file there can be written beyond the small ones the MDS mirrors (shoal admin setstripe %s with k+m at most %d, or add OSTs)",
				l.name(), l.K, l.M, l.Need, osts, l.name(), osts))
			continue
		}
		rep.warn = append(rep.warn, fmt.Sprintf("directory %s has layout k=%d m=%d, wider than the %d OSTs registered: its files are written narrow (%d parity chunks) and never widened",
			l.name(), l.K, l.M, osts, int(osts)-int(l.K)))
	}
}

// printLayouts lists them after the data.
func printLayouts(w io.Writer, rep *statusReport) {
	if rep.Data == nil || len(rep.Data.Layouts) == 0 {
		return
	}
	fmt.Fprintf(w, "  directories with layouts wider than the %d OSTs:\n", rep.Data.Osts)
	for _, l := range rep.Data.Layouts {
		what := "narrow writes"
		if l.Unplaceable {
			what = "writes fail"
		}
		fmt.Fprintf(w, "    %s (k=%d m=%d: %s)\n", l.name(), l.K, l.M, what)
	}
}
