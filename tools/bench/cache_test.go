package bench

import (
	"bufio"
	"slices"
	"strings"
	"testing"
)

// The cache figures: the first read with the cache against the read
// without one (target 0.95), the second against the disk's cold read
// (target 0.9); a figure without a measured value is left out, one
// without a baseline has no ratio and no result.
func TestAssembleCache(t *testing.T) {
	v := values{}
	v.set("cache.shards.read", "MiB/s", pathDisk, 1000)
	v.set("cache.shards.read", "MiB/s", pathMount, 200)
	v.set("cache.shards.read1", "MiB/s", pathMount, 196) // 0.98 of 200: PASS
	v.set("cache.shards.read2", "MiB/s", pathMount, 850) // 0.85 of 1000: MISS
	v.set("cache.small.read", "files/s", pathMount, 400)
	v.set("cache.small.read1", "files/s", pathMount, 300) // 0.75: MISS
	v.set("cache.small.read2", "files/s", pathMount, 900) // no disk value
	figs := assembleCache(v)

	cases := []struct {
		name, unit, vs   string
		value, base, rat float64
		target           float64
		status           string
	}{
		{"cache.shards.read1.mount", "MiB/s", "no cache", 196, 200, 0.98, 0.95, "PASS"},
		{"cache.shards.read2.mount", "MiB/s", "disk", 850, 1000, 0.85, 0.9, "MISS"},
		{"cache.small.read1.mount", "files/s", "no cache", 300, 400, 0.75, 0.95, "MISS"},
		{"cache.small.read2.mount", "files/s", "disk", 900, 0, 0, 0.9, ""},
	}
	if len(figs) != len(cases) {
		t.Fatalf("%d figures, want %d: %v", len(figs), len(cases), figs)
	}
	for i, c := range cases {
		f := figs[i]
		if f.Name != c.name || f.Unit != c.unit {
			t.Errorf("figure %d: %s (%s), want %s (%s) (table order)", i, f.Name, f.Unit, c.name, c.unit)
			continue
		}
		if f.Vs != c.vs || f.Value != c.value || f.Baseline != c.base || f.Ratio != c.rat {
			t.Errorf("%s: got vs %q value %v baseline %v ratio %v; want %q %v %v %v", c.name, f.Vs, f.Value, f.Baseline, f.Ratio, c.vs, c.value, c.base, c.rat)
		}
		if f.Target == nil || *f.Target != c.target {
			t.Errorf("%s: target %v, want %v", c.name, f.Target, c.target)
		}
		if f.Status() != c.status {
			t.Errorf("%s: status %q, want %q", c.name, f.Status(), c.status)
		}
	}
	// The assembly of the other groups does not pick the cache values up.
	if figs := assemble(v, 1.5); len(figs) != 0 {
		t.Errorf("assemble made cache figures: %v", figs)
	}
	if figs := assembleCache(values{}); len(figs) != 0 {
		t.Errorf("assembleCache of nothing: %v", figs)
	}
}

func TestCacheShardSizes(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		total int64
		want  []int64
	}{
		{2 << 30, slices.Repeat([]int64{64 * mib}, 32)},
		{256 * mib, slices.Repeat([]int64{64 * mib}, 4)},
		{100*mib + 5, []int64{64 * mib, 36 * mib}},
		{10 * mib, []int64{10 * mib}},
		{5, []int64{mib}},
	} {
		if got := cacheShardSizes(c.total); !slices.Equal(got, c.want) {
			t.Errorf("cacheShardSizes(%d) = %v, want %v", c.total, got, c.want)
		}
	}
}

// cache is opt-in: named, it is selected; not named, it is not.
func TestParseOnlyCache(t *testing.T) {
	sel, err := parseOnly("cache,mount")
	if err != nil {
		t.Fatal(err)
	}
	if g, p := keys(sel.groups), keys(sel.paths); g != "cache" || p != "mount" {
		t.Errorf("parseOnly(cache,mount) = %s / %s", g, p)
	}
	if sel, _ := parseOnly(""); sel.groups[groupCache] {
		t.Error("the cache group is in the default set")
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP shoal_fuse_ops_total FUSE requests served, by operation.
# TYPE shoal_fuse_ops_total counter
shoal_fuse_ops_total{op="open",proc="fuse"} 12
shoal_fuse_ops_total{op="read",proc="fuse"} 3456
shoal_client_cache_passthrough_opens_total{proc="client"} 7
shoal_client_cache_errors_total{kind="io",proc="client"} 1
shoal_client_cache_errors_total{kind="full",proc="client"} 2
`
	m, err := parseMetrics(bufio.NewScanner(strings.NewReader(text)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"shoal_fuse_ops_total", `op="read"`, 3456},
		{"shoal_fuse_ops_total", "", 3468},
		{"shoal_client_cache_passthrough_opens_total", "", 7},
		{"shoal_client_cache_errors_total", "", 3},
		{"shoal_client_cache_hits_total", "", 0},
	} {
		if got := sumMetric(m, c.name, c.label); got != c.want {
			t.Errorf("sumMetric(%s, %q) = %v, want %v", c.name, c.label, got, c.want)
		}
	}
}
