package bench

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func find(t *testing.T, figs []Figure, name, unit string) Figure {
	t.Helper()
	for _, f := range figs {
		if f.Name == name && f.Unit == unit {
			return f
		}
	}
	t.Fatalf("no figure %s (%s) in %v", name, unit, figs)
	return Figure{}
}

func TestAssembleBaselinesAndTargets(t *testing.T) {
	v := values{}
	v.set("big.write", "MiB/s", pathDisk, 1500)
	v.set("big.write", "MiB/s", pathLoopback, 600)
	v.set("big.write", "MiB/s", pathMount, 450) // 0.75 of loopback: PASS at 0.7
	v.set("big.write", "MiB/s", pathAPI, 500)   // 0.5 of 1000: MISS at 0.6
	v.set("big.read", "MiB/s", pathDisk, 2000)
	v.set("big.read", "MiB/s", pathAPI, 1600) // 0.8 exactly: PASS
	v.set("meta.create.1dir", "ops/s", pathDisk, 50000)
	v.set("meta.create.1dir", "ops/s", pathAPI, 12000)
	v.set("small.stat", "files/s", pathMount, 100) // no loopback measured
	v.set("meta.fsync4k", "ops/s", pathLoopback, 2000)
	v.set("meta.fsync4k", "ops/s", pathMount, 400) // 0.2 of loopback: MISS at 0.25
	v.set("meta.mmap", "ops/s", pathDisk, 8000)
	v.set("meta.mmap", "ops/s", pathLoopback, 2000)
	v.set("meta.mmap", "ops/s", pathMount, 600) // 0.3 of loopback: PASS at 0.25
	figs := assemble(v, 1.5)

	cases := []struct {
		name, unit, vs   string
		value, base, rat float64
		target           float64 // 0: none
		status           string
	}{
		{"big.write.mount", "MiB/s", "loopback", 450, 600, 0.75, 0.7, "PASS"},
		{"big.write.api", "MiB/s", "disk/1.5", 500, 1000, 0.5, 0.6, "MISS"},
		{"big.write.loopback", "MiB/s", "disk", 600, 1500, 0.4, 0, ""},
		{"big.read.api", "MiB/s", "disk", 1600, 2000, 0.8, 0.8, "PASS"},
		{"meta.create.1dir.api", "ops/s", "10000/s", 12000, 10000, 1.2, 1, "PASS"},
		{"small.stat.mount", "files/s", "loopback", 100, 0, 0, 0, ""},
		{"meta.fsync4k.mount", "ops/s", "loopback", 400, 2000, 0.2, 0.25, "MISS"},
		{"meta.fsync4k.loopback", "ops/s", "disk", 2000, 0, 0, 0, ""},
		{"meta.mmap.mount", "ops/s", "loopback", 600, 2000, 0.3, 0.25, "PASS"},
		{"meta.mmap.loopback", "ops/s", "disk", 2000, 8000, 0.25, 0, ""},
	}
	for _, c := range cases {
		f := find(t, figs, c.name, c.unit)
		if f.Vs != c.vs || f.Value != c.value || f.Baseline != c.base || f.Ratio != c.rat {
			t.Errorf("%s: got vs %q value %v baseline %v ratio %v; want %q %v %v %v", c.name, f.Vs, f.Value, f.Baseline, f.Ratio, c.vs, c.value, c.base, c.rat)
		}
		switch {
		case c.target == 0 && f.Target != nil:
			t.Errorf("%s: target %v, want none", c.name, *f.Target)
		case c.target != 0 && (f.Target == nil || *f.Target != c.target):
			t.Errorf("%s: target %v, want %v", c.name, f.Target, c.target)
		}
		if f.Status() != c.status {
			t.Errorf("%s: status %q, want %q", c.name, f.Status(), c.status)
		}
	}
	if len(figs) != len(cases) {
		t.Errorf("%d figures, want %d (no figure without a measured value)", len(figs), len(cases))
	}
}

// Every target issues 4 and 20 set is on the figure it belongs to, and on
// no other.
func TestTargetsOfIssue4(t *testing.T) {
	want := map[string]float64{
		"big.write.api": 0.6, "big.read.api": 0.8,
		"big.write.mount": 0.7, "big.read.mount": 0.8,
		"meta.create.1dir.mount": 0.5, "meta.stat.1dir.mount": 0.5, "meta.unlink.1dir.mount": 0.5,
		"meta.create.ndirs.mount": 0.5, "meta.stat.ndirs.mount": 0.5, "meta.unlink.ndirs.mount": 0.5,
		"meta.create.1dir.api": 1, "meta.create.ndirs.api": 1,
		// Issue 20.
		"meta.fsync4k.mount": 0.25, "meta.truncate.mount": 0.25, "meta.mmap.mount": 0.25,
	}
	v := values{}
	for _, s := range specs {
		for _, p := range []string{pathDisk, pathLoopback, pathMount, pathAPI} {
			v.set(s.name, s.unit, p, 1)
		}
	}
	got := map[string]float64{}
	for _, f := range assemble(v, 1.5) {
		if f.Target != nil {
			got[f.Name] = *f.Target
		}
	}
	if len(got) != len(want) {
		t.Errorf("targets on %v, want %v", got, want)
	}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s: target %v, want %v", n, got[n], w)
		}
	}
}

func TestJSONShape(t *testing.T) {
	tgt := 0.7
	r := &Report{Figures: []Figure{
		{Name: "big.write.mount", Unit: "MiB/s", Value: 450, Baseline: 600, Ratio: 0.75, Target: &tgt, Vs: "loopback"},
		{Name: "big.write.loopback", Unit: "MiB/s", Value: 600, Baseline: 1500, Ratio: 0.4, Vs: "disk"},
	}, Notes: []string{"a note"}}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("not a JSON array of objects: %v\n%s", err, buf.String())
	}
	if len(got) != 2 {
		t.Fatalf("%d objects, want 2", len(got))
	}
	for _, o := range got {
		var keys []string
		for k := range o {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if strings.Join(keys, ",") != "baseline,name,ratio,target,unit,value" {
			t.Errorf("keys %v", keys)
		}
	}
	if got[0]["target"] != 0.7 || got[1]["target"] != nil || got[0]["name"] != "big.write.mount" || got[0]["ratio"] != 0.75 {
		t.Errorf("objects %v", got)
	}
	// No figures is an empty array, not null.
	buf.Reset()
	(&Report{}).WriteJSON(&buf)
	if strings.TrimSpace(buf.String()) != "[]" {
		t.Errorf("empty report: %q", buf.String())
	}
}

func TestWriteTable(t *testing.T) {
	tgt := 0.7
	r := &Report{Figures: []Figure{
		{Name: "big.write.mount", Unit: "MiB/s", Value: 123.456, Baseline: 600, Ratio: 0.2058, Target: &tgt, Vs: "loopback"},
		{Name: "meta.create.1dir.loopback", Unit: "ops/s", Value: 5432.1, Baseline: 0, Vs: "disk"},
	}, Notes: []string{"caches: dropped"}}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	want := []string{
		"figure                     unit   value  baseline  vs        ratio  target  result",
		"big.write.mount            MiB/s    123       600  loopback   0.21    0.70  MISS",
		"meta.create.1dir.loopback  ops/s   5432         -  disk          -       -",
		"- caches: dropped",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("table:\n%s\nwant:\n%s", buf.String(), strings.Join(want, "\n"))
	}
	buf.Reset()
	r.WriteMarkdown(&buf)
	if !strings.Contains(buf.String(), "| big.write.mount | MiB/s | 123 | 600 | loopback | 0.21 | 0.70 | MISS |") {
		t.Errorf("markdown:\n%s", buf.String())
	}
}

func TestFmtRatio(t *testing.T) {
	for in, want := range map[float64]string{0.0036: "0.004", 0.05: "0.050", 0.1: "0.10", 0.2058: "0.21", 1.333: "1.33"} {
		if got := fmtRatio(in); got != want {
			t.Errorf("fmtRatio(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestFmtNum(t *testing.T) {
	for in, want := range map[float64]string{0: "0.00", 1.234: "1.23", 12.34: "12.3", 123.4: "123", 123456.7: "123457"} {
		if got := fmtNum(in); got != want {
			t.Errorf("fmtNum(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestParseOnly(t *testing.T) {
	cases := []struct {
		in             string
		groups, paths  string
		wantErrContain string
	}{
		{"", "big,ckpt,meta,small", "api,mount", ""},
		{"big", "big", "api,mount", ""},
		{"api", "big,ckpt,meta,small", "api", ""},
		{" Meta , mount,small ", "meta,small", "mount", ""},
		{"big,bogus", "", "", `unknown workload group or path "bogus"`},
	}
	for _, c := range cases {
		sel, err := parseOnly(c.in)
		if c.wantErrContain != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErrContain) {
				t.Errorf("parseOnly(%q): error %v, want one containing %q", c.in, err, c.wantErrContain)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseOnly(%q): %v", c.in, err)
			continue
		}
		if g, p := keys(sel.groups), keys(sel.paths); g != c.groups || p != c.paths {
			t.Errorf("parseOnly(%q) = %s / %s, want %s / %s", c.in, g, p, c.groups, c.paths)
		}
	}
}

func keys(m map[string]bool) string {
	var ks []string
	for k, v := range m {
		if v {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{"0": 0, "4096": 4096, "1K": 1 << 10, "256M": 256 << 20, "256MiB": 256 << 20, "256mib": 256 << 20, "1GiB": 1 << 30, "2G": 2 << 30, "3MB": 3 << 20}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1M", "1.5G", "12X", "1 G G", "99999999999T"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseProcStatCPU(t *testing.T) {
	// pid (comm with ) and spaces) state ppid ... utime=250 stime=50
	line := "4242 (shoal local) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0"
	d, err := parseProcStatCPU(line)
	if err != nil || d != 3*time.Second {
		t.Errorf("parseProcStatCPU = %v, %v; want 3s", d, err)
	}
	if _, err := parseProcStatCPU("garbage"); err == nil {
		t.Error("parseProcStatCPU(garbage): no error")
	}
}

func TestSmallSizes(t *testing.T) {
	lo, hi := 1<<30, 0
	for i := range 10000 {
		s := smallSize(i)
		if s < 4<<10 || s > 128<<10 {
			t.Fatalf("smallSize(%d) = %d, outside 4-128 KiB", i, s)
		}
		lo, hi = min(lo, s), max(hi, s)
	}
	if lo > 8<<10 || hi < 124<<10 {
		t.Errorf("sizes span only %d..%d", lo, hi)
	}
}

func TestCkptPieces(t *testing.T) {
	for _, size := range []int64{1, 100, 1 << 20, 256 << 20} {
		for shard := range 3 {
			var total int64
			ps := ckptPieces(shard, size)
			for i, p := range ps {
				if p <= 0 || p > poolTail {
					t.Fatalf("size %d shard %d: piece %d is %d bytes", size, shard, i, p)
				}
				total += int64(p)
			}
			if total != size {
				t.Errorf("size %d shard %d: pieces sum to %d", size, shard, total)
			}
		}
	}
}

func TestPattern(t *testing.T) {
	p := newPattern()
	a := p.at(seedOf(1), poolPeriod-10, 100)
	if !bytes.Equal(p.at(seedOf(1), poolPeriod+5, 50), p.at(seedOf(1), 5, 50)) {
		t.Error("the pattern does not repeat with its period")
	}
	got := append([]byte(nil), a...)
	if err := p.check(seedOf(1), poolPeriod-10, got, true); err != nil {
		t.Error(err)
	}
	got[99] ^= 1
	if err := p.check(seedOf(1), poolPeriod-10, got, true); err == nil {
		t.Error("a flipped byte passed the full check")
	}
	if bytes.Equal(p.at(seedOf(1), 0, 4096), p.at(seedOf(2), 0, 4096)) {
		t.Error("two files have the same contents")
	}
	if buf := alignedBuf(ioSize); len(buf) != ioSize || uintptr(unsafe.Pointer(&buf[0]))%dirAlign != 0 {
		t.Error("alignedBuf is not aligned")
	}
}
