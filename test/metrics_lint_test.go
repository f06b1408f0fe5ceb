package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/test/cluster"
)

// metricSubsystems are the subsystems a metric name may start with
// (shoal_<subsystem>_<name>_<unit>, STYLE.md).
var metricSubsystems = []string{"mds", "ost", "client", "fuse", "gds", "raft"}

// forbiddenLabels would give a series per inode, path or chunk: unbounded
// cardinality (STYLE.md: no inode or path labels).
var forbiddenLabels = []string{"ino", "inode", "path", "file", "filename", "name", "extent", "chunk", "uid", "gid", "user", "pid"}

var metricNameRE = regexp.MustCompile(`^shoal_([a-z0-9]+)_[a-z0-9_]*[a-z0-9]$`)

// lintMetrics returns the ways the families break STYLE.md's naming rules.
func lintMetrics(fams []*dto.MetricFamily) []string {
	var bad []string
	for _, f := range fams {
		name, typ := f.GetName(), f.GetType()
		m := metricNameRE.FindStringSubmatch(name)
		switch {
		case m == nil:
			bad = append(bad, fmt.Sprintf("%s: not shoal_<subsystem>_<name>_<unit> in lower case", name))
			continue
		case !slices.Contains(metricSubsystems, m[1]):
			bad = append(bad, fmt.Sprintf("%s: subsystem %q is none of %v", name, m[1], metricSubsystems))
		}
		if strings.Contains(name, "__") {
			bad = append(bad, fmt.Sprintf("%s: double underscore", name))
		}
		counter := typ == dto.MetricType_COUNTER
		if counter != strings.HasSuffix(name, "_total") {
			bad = append(bad, fmt.Sprintf("%s: a %v; counters, and only counters, end in _total", name, typ))
		}
		base := strings.TrimSuffix(name, "_total")
		if typ == dto.MetricType_HISTOGRAM || typ == dto.MetricType_SUMMARY {
			if !strings.HasSuffix(base, "_seconds") && !strings.HasSuffix(base, "_bytes") {
				bad = append(bad, fmt.Sprintf("%s: a %v must end in its unit (_seconds, _bytes)", name, typ))
			}
		}
		for _, u := range []string{"_ms", "_millis", "_milliseconds", "_us", "_microseconds", "_ns", "_nanoseconds", "_kb", "_mb", "_gb", "_kib", "_mib", "_gib", "_byte", "_second", "_secs", "_sec"} {
			if strings.HasSuffix(base, u) || strings.Contains(base, u+"_") {
				bad = append(bad, fmt.Sprintf("%s: unit %q: use base units (_seconds, _bytes)", name, u[1:]))
			}
		}
		if strings.TrimSpace(f.GetHelp()) == "" {
			bad = append(bad, fmt.Sprintf("%s: no help text", name))
		}
		labels := map[string]bool{}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		for l := range labels {
			if slices.Contains(forbiddenLabels, l) {
				bad = append(bad, fmt.Sprintf("%s: label %q has unbounded values", name, l))
			}
			if !regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(l) {
				bad = append(bad, fmt.Sprintf("%s: label %q is not lower snake case", name, l))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func TestLintMetricsRules(t *testing.T) {
	fam := func(name string, typ dto.MetricType, labels ...string) *dto.MetricFamily {
		m := &dto.Metric{}
		for _, l := range labels {
			m.Label = append(m.Label, &dto.LabelPair{Name: &l, Value: new(string)})
		}
		help := "h"
		return &dto.MetricFamily{Name: &name, Type: &typ, Help: &help, Metric: []*dto.Metric{m}}
	}
	for _, tc := range []struct {
		f    *dto.MetricFamily
		want string // a substring of the one complaint; "" for none
	}{
		{fam("shoal_ost_read_bytes_total", dto.MetricType_COUNTER, "op"), ""},
		{fam("shoal_mds_op_duration_seconds", dto.MetricType_HISTOGRAM, "op"), ""},
		{fam("shoal_mds_osts", dto.MetricType_GAUGE), ""},
		{fam("shoal_mds_ops", dto.MetricType_COUNTER), "end in _total"},
		{fam("shoal_mds_osts_total", dto.MetricType_GAUGE), "end in _total"},
		{fam("shoal_mds_op_latency", dto.MetricType_HISTOGRAM), "must end in its unit"},
		{fam("shoal_mds_queue_wait_ms", dto.MetricType_GAUGE), `unit "ms"`},
		{fam("mds_ops_total", dto.MetricType_COUNTER), "not shoal_"},
		{fam("shoal_disk_ops_total", dto.MetricType_COUNTER), "subsystem"},
		{fam("shoal_mds_ops_total", dto.MetricType_COUNTER, "ino"), `label "ino"`},
		{fam("shoal_mds_ops_total", dto.MetricType_COUNTER, "path"), `label "path"`},
	} {
		got := lintMetrics([]*dto.MetricFamily{tc.f})
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%s: %v, want no complaint", tc.f.GetName(), got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("%s: %v, want one complaint with %q", tc.f.GetName(), got, tc.want)
		}
	}
}

// TestMetricsLint starts a cluster and a mount, does some I/O so that
// labelled metrics have series, and checks every metric of the MDS, the
// OSTs and the client against STYLE.md.
func TestMetricsLint(t *testing.T) {
	cluster.RequireFUSE(t)
	servers, clients := prometheus.NewRegistry(), prometheus.NewRegistry()
	cl := cluster.Start(t, cluster.Options{Registry: servers, Client: client.Options{Registry: clients}})
	mnt := cl.Mount()
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	p := filepath.Join(mnt, "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatal(err)
	}

	var fams []*dto.MetricFamily
	for _, reg := range []prometheus.Gatherer{servers, clients} {
		f, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		fams = append(fams, f...)
	}
	names := map[string]dto.MetricType{}
	for _, f := range fams {
		names[f.GetName()] = f.GetType()
	}
	for _, want := range []string{"shoal_mds_ops_total", "shoal_mds_op_duration_seconds", "shoal_ost_write_bytes_total", "shoal_client_read_bytes_total"} {
		if _, ok := names[want]; !ok {
			t.Errorf("metric %s missing; gathered %d families", want, len(names))
		}
	}
	for _, b := range lintMetrics(fams) {
		t.Error(b)
	}
}

// TestMetricsLintSource checks the metrics declared in the source, which
// include those of packages TestMetricsLint does not start (gds needs a
// GPU): every prometheus.NewCounter, NewGauge, NewHistogram or NewSummary
// (plain, Vec or Func) whose options open with a literal Name, and every
// prometheus.NewDesc with a literal name (custom collectors: gauges). It also
// checks that every metric the Grafana dashboard (tools/grafana/shoal.json)
// queries is one of them.
func TestMetricsLintSource(t *testing.T) {
	decl := regexp.MustCompile(`prometheus\.New(Counter|Gauge|Histogram|Summary)(?:Vec|Func)?\(\s*prometheus\.(?:Counter|Gauge|Histogram|Summary)Opts\{\s*Name:\s*"([^"]+)",\s*Help:\s*"([^"]*)"`)
	desc := regexp.MustCompile(`prometheus\.NewDesc\(\s*"([^"]+)",\s*"([^"]*)"`)
	types := map[string]dto.MetricType{"Counter": dto.MetricType_COUNTER, "Gauge": dto.MetricType_GAUGE,
		"Histogram": dto.MetricType_HISTOGRAM, "Summary": dto.MetricType_SUMMARY}
	var fams []*dto.MetricFamily
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			typ := types[m[1]]
			name, help := m[2], m[3]
			fams = append(fams, &dto.MetricFamily{Name: &name, Help: &help, Type: &typ})
		}
		// Descriptors of custom collectors (read at each scrape): gauges.
		for _, m := range desc.FindAllStringSubmatch(string(b), -1) {
			typ := dto.MetricType_GAUGE
			name, help := m[1], m[2]
			fams = append(fams, &dto.MetricFamily{Name: &name, Help: &help, Type: &typ})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) < 10 {
		t.Fatalf("found %d metric declarations: the pattern no longer matches the code", len(fams))
	}
	for _, b := range lintMetrics(fams) {
		t.Error(b)
	}

	// The dashboard queries only metrics the code declares.
	names := map[string]dto.MetricType{}
	for _, f := range fams {
		names[f.GetName()] = f.GetType()
	}
	b, err := os.ReadFile("../tools/grafana/shoal.json")
	if err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	used, err := dashboardMetrics(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(used) < 10 {
		t.Fatalf("dashboard queries %d shoal_ metrics", len(used))
	}
	for _, u := range used {
		base := u
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if typ, ok := names[strings.TrimSuffix(u, s)]; ok && typ == dto.MetricType_HISTOGRAM {
				base = strings.TrimSuffix(u, s)
			}
		}
		if _, ok := names[base]; !ok {
			t.Errorf("dashboard queries %s, which the code does not declare", u)
		}
	}
}

// dashboardMetrics returns the shoal_ metric names in the expressions of
// a Grafana dashboard.
func dashboardMetrics(b []byte) ([]string, error) {
	var d any
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	seen := map[string]bool{}
	re := regexp.MustCompile(`shoal_[a-z0-9_]+`)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && (k == "expr" || k == "query") {
					for _, n := range re.FindAllString(s, -1) {
						seen[n] = true
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(d)
	var out []string
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}
