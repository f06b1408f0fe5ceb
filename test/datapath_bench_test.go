package test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/shoalfs/shoal/test/cluster"
)

// cpuTime is the user and system CPU time of the process: the client and
// every server of an in-process cluster (not the kernel's own threads).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU starts counting CPU time; the function it returns reports MB
// moved per CPU-second, for b.N runs of size bytes each. A shared machine
// changes a benchmark's wall time far more than its CPU time per byte.
func reportCPU(b *testing.B, size int) func() {
	c0 := cpuTime()
	return func() {
		if cpu := cpuTime() - c0; cpu > 0 {
			b.ReportMetric(float64(size)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
		}
	}
}

// dropCaches empties the kernel's page cache (root only), so that the next
// read of a chunk file goes to the disk.
func dropCaches(b *testing.B) bool {
	b.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		b.Logf("drop caches: %v", err)
		return false
	}
	return true
}

// BenchmarkClientReadCache reads a 256 MiB file through the client library
// (1 MiB calls, a new client each time) with the OSTs' chunk files cold
// (page cache dropped before each read; root only, else skipped) and warm
// (read once before). It takes the knobs of BenchmarkClientSequential
// (SHOAL_BENCH_DIRECT, SHOAL_BENCH_GRPC, ...): docs/performance.md compares
// O_DIRECT and page-cache reads with it.
func BenchmarkClientReadCache(b *testing.B) {
	const size = 256 << 20
	cl := cluster.Start(b, benchClusterOptions())
	ctx := context.Background()
	buf := randBytes(1, 1<<20)
	f, err := cl.Client().Create(ctx, "/seq", 0o644)
	if err != nil {
		b.Fatal(err)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := f.WriteAt(ctx, buf, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(ctx); err != nil {
		b.Fatal(err)
	}
	p := make([]byte, 1<<20)
	read := func(b *testing.B) {
		f, err := cl.Client().Open(ctx, "/seq")
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close(ctx)
		for off := int64(0); off < size; off += int64(len(p)) {
			if _, err := f.ReadAt(ctx, p, off); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(size)
		var cpu time.Duration
		defer func() {
			if cpu > 0 {
				b.ReportMetric(float64(size)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
			}
		}()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if !dropCaches(b) {
				b.Skip("not root: cannot drop the page cache")
			}
			b.StartTimer()
			c0 := cpuTime()
			read(b)
			cpu += cpuTime() - c0
		}
	})
	b.Run("warm", func(b *testing.B) {
		b.SetBytes(size)
		read(b)
		b.ResetTimer()
		defer reportCPU(b, size)()
		for i := 0; i < b.N; i++ {
			read(b)
		}
	})
}
