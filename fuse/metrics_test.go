package fuse

import (
	"strings"
	"testing"
	"time"

	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeRaw answers reads with 10 bytes, writes in full and lookups with
// ENOENT; everything else is go-fuse's default (ENOSYS).
type fakeRaw struct{ gofuse.RawFileSystem }

func (fakeRaw) Lookup(<-chan struct{}, *gofuse.InHeader, string, *gofuse.EntryOut) gofuse.Status {
	return gofuse.ENOENT
}

func (fakeRaw) Read(_ <-chan struct{}, _ *gofuse.ReadIn, buf []byte) (gofuse.ReadResult, gofuse.Status) {
	return gofuse.ReadResultData(buf[:10]), gofuse.OK
}

func (fakeRaw) Write(_ <-chan struct{}, _ *gofuse.WriteIn, data []byte) (uint32, gofuse.Status) {
	return uint32(len(data)), gofuse.OK
}

// TestMetrics: requests are counted and timed by operation, bytes read
// and written are counted, and errors are counted by errno.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := &meteredRaw{RawFileSystem: fakeRaw{gofuse.NewDefaultRawFileSystem()}, m: newMetrics(reg)}
	for range 3 {
		if st := r.Lookup(nil, &gofuse.InHeader{}, "x", &gofuse.EntryOut{}); st != gofuse.ENOENT {
			t.Fatalf("lookup: %v", st)
		}
	}
	r.Read(nil, &gofuse.ReadIn{}, make([]byte, 4096))
	r.Write(nil, &gofuse.WriteIn{}, make([]byte, 1000))
	r.Mkdir(nil, &gofuse.MkdirIn{}, "d", &gofuse.EntryOut{}) // ENOSYS

	// A second mount in the process shares the metrics.
	m2 := newMetrics(reg)
	m2.done(opRead, time.Now(), gofuse.OK)

	want := `
# HELP shoal_fuse_errors_total FUSE requests answered with an error, by operation and errno (ENOENT of a lookup included).
# TYPE shoal_fuse_errors_total counter
shoal_fuse_errors_total{errno="ENOENT",op="lookup"} 3
shoal_fuse_errors_total{errno="ENOSYS",op="mkdir"} 1
# HELP shoal_fuse_read_bytes_total Bytes returned to the kernel by FUSE reads.
# TYPE shoal_fuse_read_bytes_total counter
shoal_fuse_read_bytes_total 10
# HELP shoal_fuse_written_bytes_total Bytes accepted from the kernel by FUSE writes.
# TYPE shoal_fuse_written_bytes_total counter
shoal_fuse_written_bytes_total 1000
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shoal_fuse_errors_total", "shoal_fuse_read_bytes_total", "shoal_fuse_written_bytes_total"); err != nil {
		t.Error(err)
	}
	for op, n := range map[string]float64{"lookup": 3, "read": 2, "write": 1, "mkdir": 1, "getattr": 0} {
		got := testutil.ToFloat64(r.m.ops[opIndex(t, op)])
		if got != n {
			t.Errorf("shoal_fuse_ops_total{op=%q} = %v, want %v", op, got, n)
		}
	}
	n, err := testutil.GatherAndCount(reg, "shoal_fuse_op_duration_seconds")
	if err != nil || n != int(numOps) {
		t.Errorf("op_duration_seconds series: %d, %v; want one per operation (%d)", n, err, numOps)
	}
}

func opIndex(t *testing.T, name string) fuseOp {
	for op, n := range opNames {
		if n == name {
			return fuseOp(op)
		}
	}
	t.Fatalf("no op %q", name)
	return 0
}

// BenchmarkMetricsDone is the cost the metrics add to a request.
func BenchmarkMetricsDone(b *testing.B) {
	m := newMetrics(prometheus.NewRegistry())
	for b.Loop() {
		m.done(opGetattr, time.Now(), gofuse.OK)
	}
}
