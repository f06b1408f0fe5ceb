// Command apird measures a cold sequential read through the client
// library, as `shoal bench`'s big.read.api does (T files of SIZE, one
// reader each, 1 MiB reads), with the client's read-ahead as a flag, and
// prints MiB/s, the client's CPU and the reads' latencies: the experiment
// behind docs/performance.md's read sections.
//
//	. DIR/tls/env; apird -mds ADDR [-write] [-t 4] [-size 256] [-ra 8]
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"runtime/trace"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/wire"
)

func main() {
	mds := flag.String("mds", os.Getenv("SHOAL_MDS"), "MDS address")
	write := flag.Bool("write", false, "write the files first")
	threads := flag.Int("t", 4, "files, one reader each")
	size := flag.Int64("size", 256, "MiB per file")
	ra := flag.Int("ra", 0, "read-ahead rows (0: the client's default)")
	traceTo := flag.String("trace", "", "write an execution trace of the read to this file")
	flag.Parse()
	ctx := context.Background()
	creds, err := wire.CredsFromEnv()
	check(err)
	S := *size << 20
	name := func(i int) string { return fmt.Sprintf("/apird-%02d", i) }
	if *write {
		c, err := client.New(ctx, client.Options{MDS: *mds, Creds: creds})
		check(err)
		buf := make([]byte, 1<<20)
		_, _ = rand.Read(buf)
		for i := range *threads {
			f, err := c.Create(ctx, name(i), 0o644)
			check(err)
			for off := int64(0); off < S; off += int64(len(buf)) {
				_, err := f.WriteAt(ctx, buf, off)
				check(err)
			}
			check(f.Close(ctx))
		}
		c.Close()
	}
	syscall.Sync()
	check(os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0))
	c, err := client.New(ctx, client.Options{MDS: *mds, Creds: creds, ReadAheadRows: *ra})
	check(err)
	defer c.Close()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	if *traceTo != "" {
		tf, err := os.Create(*traceTo)
		check(err)
		check(trace.Start(tf))
		defer func() { trace.Stop(); tf.Close() }()
	}
	start := time.Now()
	lat := make([][]time.Duration, *threads)
	var wg sync.WaitGroup
	for i := range *threads {
		wg.Go(func() {
			f, err := c.Open(ctx, name(i))
			check(err)
			buf := make([]byte, 1<<20)
			for off := int64(0); off < S; off += int64(len(buf)) {
				t := time.Now()
				_, err := f.ReadAt(ctx, buf, off)
				check(err)
				lat[i] = append(lat[i], time.Since(t))
			}
			check(f.Close(ctx))
		})
	}
	wg.Wait()
	el := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	q := func(p float64) time.Duration { return all[int(p*float64(len(all)-1))] }
	fmt.Printf("%d x %d MiB in %.2fs = %.0f MiB/s, cpu %.2fs; read p50 %v p90 %v p99 %v max %v; first reads %v\n",
		*threads, *size, el.Seconds(), float64(int64(*threads)*S)/(1<<20)/el.Seconds(), cpu.Seconds(),
		q(0.5), q(0.9), q(0.99), all[len(all)-1], firsts(lat))
}

func firsts(lat [][]time.Duration) []time.Duration {
	var f []time.Duration
	for _, l := range lat {
		if len(l) > 0 {
			f = append(f, l[0].Round(10*time.Microsecond))
		}
	}
	return f
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "apird:", err)
		os.Exit(1)
	}
}
