package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Figure is one measured rate next to the baseline it is judged against.
// Every figure is a rate: higher is better.
type Figure struct {
	Name     string   `json:"name"`
	Unit     string   `json:"unit"`
	Value    float64  `json:"value"`
	Baseline float64  `json:"baseline"`
	Ratio    float64  `json:"ratio"`
	Target   *float64 `json:"target"` // the ratio issue 4 asks for; null where it sets none
	// Vs names the baseline ("loopback", "disk", "disk/1.5", "10000/s").
	Vs string `json:"-"`
}

// Status is PASS or MISS for a figure with a target, and "" otherwise.
func (f Figure) Status() string {
	if f.Target == nil || f.Baseline <= 0 {
		return ""
	}
	if f.Ratio >= *f.Target {
		return "PASS"
	}
	return "MISS"
}

// Report is the outcome of a run.
type Report struct {
	Figures []Figure
	// Notes say how the figures were taken: caches dropped or not, the
	// disk baseline's variants, the CPU accounting, the machine and its
	// load.
	Notes []string
}

// WriteJSON writes the figures as a JSON array, one object per figure.
func (r *Report) WriteJSON(w io.Writer) error {
	figs := r.Figures
	if figs == nil {
		figs = []Figure{}
	}
	b, err := json.MarshalIndent(figs, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes the figures as an aligned text table, then the notes.
func (r *Report) WriteTable(w io.Writer) error {
	rows := [][]string{{"figure", "unit", "value", "baseline", "vs", "ratio", "target", "result"}}
	for _, f := range r.Figures {
		base, ratio, target, vs := "-", "-", "-", f.Vs
		if f.Baseline > 0 {
			base, ratio = fmtNum(f.Baseline), fmtRatio(f.Ratio)
		}
		if f.Target != nil {
			target = fmt.Sprintf("%.2f", *f.Target)
		}
		if vs == "" {
			vs = "-"
		}
		rows = append(rows, []string{f.Name, f.Unit, fmtNum(f.Value), base, vs, ratio, target, f.Status()})
	}
	if _, err := io.WriteString(w, alignTable(rows, map[int]bool{2: true, 3: true, 5: true, 6: true})); err != nil {
		return err
	}
	return r.WriteNotes(w)
}

// alignTable pads each column to its widest cell, right-aligning the
// columns in right, with two spaces between columns.
func alignTable(rows [][]string, right map[int]bool) string {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		var line strings.Builder
		for i, c := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-len(c))
			if right[i] {
				line.WriteString(pad + c)
			} else {
				line.WriteString(c + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// WriteNotes writes the notes, one per line.
func (r *Report) WriteNotes(w io.Writer) error {
	for _, n := range r.Notes {
		if _, err := fmt.Fprintf(w, "- %s\n", n); err != nil {
			return err
		}
	}
	return nil
}

// WriteMarkdown writes the figures as a Markdown table (for docs).
func (r *Report) WriteMarkdown(w io.Writer) error {
	fmt.Fprintln(w, "| figure | unit | value | baseline | vs | ratio | target | result |")
	fmt.Fprintln(w, "|---|---|--:|--:|---|--:|--:|---|")
	for _, f := range r.Figures {
		base, ratio, target := "-", "-", ""
		if f.Baseline > 0 {
			base, ratio = fmtNum(f.Baseline), fmtRatio(f.Ratio)
		}
		if f.Target != nil {
			target = fmt.Sprintf("%.2f", *f.Target)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", f.Name, f.Unit, fmtNum(f.Value), base, f.Vs, ratio, target, f.Status())
	}
	return r.WriteNotes(w)
}

// fmtRatio prints a ratio with two decimals, or three below 0.1, so that
// a small ratio does not print as zero.
func fmtRatio(r float64) string {
	if r < 0.1 {
		return fmt.Sprintf("%.3f", r)
	}
	return fmt.Sprintf("%.2f", r)
}

// fmtNum prints a rate with three significant digits or more.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// Paths a workload runs through. Disk and loopback are the baselines.
const (
	pathMount    = "mount"    // the Shoal FUSE mount
	pathAPI      = "api"      // the Go client library
	pathLoopback = "loopback" // go-fuse's loopback file system over the disk, passthrough off
	pathDisk     = "disk"     // plain files on the disk under --dir
)

// spec describes one kind of figure: which values exist and what each is
// judged against.
type spec struct {
	name, unit string
	// ec: the API figure's baseline is the disk's rate divided by the
	// erasure-coding overhead (every user byte is (k+m)/k bytes on disk).
	ec bool
	// apiAbs, when set, is the API figure's absolute baseline instead of
	// the disk.
	apiAbs float64
	// noAPI: the figure has no API path (the API has no mappings).
	noAPI bool
	// targets by path.
	targets map[string]float64
}

// specs lists every figure in table order. Issue 4 sets the targets,
// issue 20 those of the sync figures (meta.fsync4k, meta.truncate,
// meta.mmap).
var specs = []spec{
	{name: "big.write", unit: "MiB/s", ec: true, targets: map[string]float64{pathMount: 0.7, pathAPI: 0.6}},
	{name: "big.read", unit: "MiB/s", targets: map[string]float64{pathMount: 0.8, pathAPI: 0.8}},
	{name: "big.write1", unit: "MiB/s", ec: true},
	{name: "cpu.big", unit: "MiB/cpu-s"},
	// CPU-seconds per GiB of the big-file steps (lower is better; the
	// ratio is to the loopback for the mount): the API's client alone,
	// the mount's client with the servers (one process), see
	// runner.setCPUFigures.
	{name: "cpu.read", unit: "cpu-s/GiB"},
	{name: "cpu.write", unit: "cpu-s/GiB"},
	{name: "small.create", unit: "files/s"},
	{name: "small.create", unit: "MiB/s"},
	{name: "small.read", unit: "files/s"},
	{name: "small.read", unit: "MiB/s"},
	{name: "small.stat", unit: "files/s"},
	{name: "small.unlink", unit: "files/s"},
	{name: "meta.create.1dir", unit: "ops/s", apiAbs: 10000, targets: map[string]float64{pathMount: 0.5, pathAPI: 1}},
	{name: "meta.stat.1dir", unit: "ops/s", targets: map[string]float64{pathMount: 0.5}},
	{name: "meta.readdir.1dir", unit: "entries/s"},
	{name: "meta.rename.1dir", unit: "ops/s"},
	{name: "meta.unlink.1dir", unit: "ops/s", targets: map[string]float64{pathMount: 0.5}},
	{name: "meta.create.ndirs", unit: "ops/s", apiAbs: 10000, targets: map[string]float64{pathMount: 0.5, pathAPI: 1}},
	{name: "meta.stat.ndirs", unit: "ops/s", targets: map[string]float64{pathMount: 0.5}},
	{name: "meta.readdir.ndirs", unit: "entries/s"},
	{name: "meta.rename.ndirs", unit: "ops/s"},
	{name: "meta.unlink.ndirs", unit: "ops/s", targets: map[string]float64{pathMount: 0.5}},
	{name: "meta.fsync4k", unit: "ops/s", targets: map[string]float64{pathMount: 0.25}},
	{name: "meta.truncate", unit: "ops/s", targets: map[string]float64{pathMount: 0.25}},
	{name: "meta.mmap", unit: "ops/s", noAPI: true, targets: map[string]float64{pathMount: 0.25}},
	{name: "ckpt.write", unit: "MiB/s", ec: true},
	{name: "ckpt.read", unit: "MiB/s"},
}

// key names one measured value: figure, unit and path.
func key(name, unit, path string) string { return name + " " + unit + " " + path }

// values holds measured values by key.
type values map[string]float64

func (v values) set(name, unit, path string, x float64) { v[key(name, unit, path)] = x }

// assemble turns measured values into figures: mount against loopback,
// loopback against disk, API against disk (divided by the EC overhead for
// writes) or an absolute rate. overhead is (k+m)/k.
func assemble(v values, overhead float64) []Figure {
	var out []Figure
	for _, s := range specs {
		for _, p := range []string{pathMount, pathAPI, pathLoopback} {
			val, ok := v[key(s.name, s.unit, p)]
			if !ok {
				continue
			}
			f := Figure{Name: s.name + "." + p, Unit: s.unit, Value: val}
			switch {
			case p == pathMount:
				f.Baseline, f.Vs = v[key(s.name, s.unit, pathLoopback)], pathLoopback
			case p == pathAPI && s.apiAbs > 0:
				f.Baseline, f.Vs = s.apiAbs, fmt.Sprintf("%.0f/s", s.apiAbs)
			case p == pathAPI && s.ec:
				f.Baseline, f.Vs = v[key(s.name, s.unit, pathDisk)]/overhead, fmt.Sprintf("disk/%.3g", overhead)
			default:
				f.Baseline, f.Vs = v[key(s.name, s.unit, pathDisk)], pathDisk
			}
			if f.Baseline > 0 {
				f.Ratio = round(val/f.Baseline, 4)
			} else {
				f.Baseline = 0
			}
			if t, ok := s.targets[p]; ok {
				f.Target = &t
			}
			f.Value, f.Baseline = round(f.Value, 2), round(f.Baseline, 2)
			out = append(out, f)
		}
	}
	return out
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// Workload groups and paths that --only selects.
var (
	allGroups = []string{"big", "small", "meta", "ckpt"}
	allPaths  = []string{pathMount, pathAPI}
)

// selection is what a run measures.
type selection struct {
	groups map[string]bool
	paths  map[string]bool
}

// parseOnly reads --only: a comma list of workload groups (big, small,
// meta, ckpt; the opt-in ckpt-api, compress and cache) and paths (mount,
// api). A list that names no group selects every group but the opt-in
// ones; one that names no path selects every path.
func parseOnly(s string) (selection, error) {
	sel := selection{groups: map[string]bool{}, paths: map[string]bool{}}
	for _, w := range strings.Split(s, ",") {
		w = strings.ToLower(strings.TrimSpace(w))
		switch {
		case w == "":
		case contains(allGroups, w), contains(optGroups, w), w == groupCache:
			sel.groups[w] = true
		case contains(allPaths, w):
			sel.paths[w] = true
		default:
			all := append(append(append([]string{groupCache}, allGroups...), optGroups...), allPaths...)
			sort.Strings(all)
			return selection{}, fmt.Errorf("--only: unknown workload group or path %q (choose from %s)", w, strings.Join(all, ", "))
		}
	}
	if len(sel.groups) == 0 {
		for _, g := range allGroups {
			sel.groups[g] = true
		}
	}
	if len(sel.paths) == 0 {
		for _, p := range allPaths {
			sel.paths[p] = true
		}
	}
	return sel, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ParseSize reads a byte count: a plain number or one with a suffix K, M,
// G, T (powers of 1024, with or without "i" and "B": 256M, 256MiB, 1GiB).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	u := strings.ToUpper(t)
	u = strings.TrimSuffix(u, "B")
	u = strings.TrimSuffix(u, "I")
	mult := int64(1)
	if n := len(u); n > 0 {
		switch u[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			u = u[:n-1]
		}
	}
	var n int64
	if _, err := fmt.Sscanf(u, "%d", &n); err != nil || fmt.Sprint(n) != u || n < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes such as 256MiB or 1GiB", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}
