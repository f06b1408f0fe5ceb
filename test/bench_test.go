package test

import (
	"context"
	"os"
	"strconv"

	"testing"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/ost"
	"github.com/shoalfs/shoal/test/cluster"
)

// BenchmarkClientSequential writes and reads a 256 MiB file through the
// client library (no FUSE), 1 MiB calls.
func BenchmarkClientSequential(b *testing.B) {
	const size = 256 << 20
	cl := cluster.Start(b, benchClusterOptions())
	c := cl.Client()
	ctx := context.Background()
	buf := randBytes(1, 1<<20)
	b.Run("write", func(b *testing.B) {
		b.SetBytes(size)
		defer reportCPU(b, size)()
		for i := 0; i < b.N; i++ {
			f, err := c.Create(ctx, "/seq", 0o644)
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
		}
	})
	b.Run("read", func(b *testing.B) {
		b.SetBytes(size)
		p := make([]byte, 1<<20)
		defer reportCPU(b, size)()
		for i := 0; i < b.N; i++ {
			f, err := cl.Client().Open(ctx, "/seq")
			if err != nil {
				b.Fatal(err)
			}
			for off := int64(0); off < size; off += int64(len(p)) {
				if _, err := f.ReadAt(ctx, p, off); err != nil {
					b.Fatal(err)
				}
			}
			f.Close(ctx)
		}
	})
}

// benchClusterOptions reads the benchmark's knobs from the environment:
// SHOAL_BENCH_UPLOADS and SHOAL_BENCH_READAHEAD (client), SHOAL_BENCH_GRPC=1
// (chunk I/O over gRPC instead of the data path), SHOAL_BENCH_DIRECT=off,
// writes or all (the OSTs' O_DIRECT use).
func benchClusterOptions() cluster.Options {
	o := cluster.Options{Client: benchClientOptions()}
	switch os.Getenv("SHOAL_BENCH_DIRECT") {
	case "off":
		o.DirectIO = ost.DirectOff
	case "writes":
		o.DirectIO = ost.DirectWrites
	case "all":
		o.DirectIO = ost.DirectAll
	}
	return o
}

func benchClientOptions() client.Options {
	var o client.Options
	if v, err := strconv.Atoi(os.Getenv("SHOAL_BENCH_UPLOADS")); err == nil {
		o.UploadsPerFile = v
	}
	if v, err := strconv.Atoi(os.Getenv("SHOAL_BENCH_READAHEAD")); err == nil {
		o.ReadAheadRows, o.ReadCacheRows = v, 2*v+2
	}
	o.GRPCChunks = os.Getenv("SHOAL_BENCH_GRPC") == "1"
	return o
}
