// Command ckrd measures a cold checkpoint restore through the client
// library, as `shoal bench --only ckpt-api`'s ckptapi.restore does (a new
// client, 8 safetensors shards of tensors of 64 KiB to 8 MiB, every
// tensor checked), and prints the time of each phase (client, store,
// restore) and the process's CPU: the experiment behind
// docs/performance.md's checkpoint restore sections.
//
//	. DIR/tls/env; ckrd -mds ADDR [-save] [-size 256] [-n 3] [-cpuprofile F]
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/wire"
)

func main() {
	mds := flag.String("mds", os.Getenv("SHOAL_MDS"), "MDS address")
	save := flag.Bool("save", false, "save the checkpoint first")
	size := flag.Int64("size", 256, "MiB in all")
	n := flag.Int("n", 3, "restores, each by a new client after drop_caches")
	prof := flag.String("cpuprofile", "", "CPU profile of the restores")
	flag.Parse()
	ctx := context.Background()
	creds, err := wire.CredsFromEnv()
	check(err)
	const root, job = "/ckrd", "j"
	if *save {
		c, err := client.New(ctx, client.Options{MDS: *mds, Creds: creds})
		check(err)
		st, err := ckpt.New(c, ckpt.Options{Root: root})
		check(err)
		t := time.Now()
		_, err = st.Save(ctx, job, 1, shards(*size<<20))
		check(err)
		fmt.Printf("save %.2fs\n", time.Since(t).Seconds())
		st.Close()
		c.Close()
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	for range *n {
		syscall.Sync()
		check(os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0))
		cpu0 := cpuTime()
		t0 := time.Now()
		c, err := client.New(ctx, client.Options{MDS: *mds, Creds: creds})
		check(err)
		t1 := time.Now()
		st, err := ckpt.New(c, ckpt.Options{Root: root})
		check(err)
		t2 := time.Now()
		cp, err := st.Restore(ctx, job, ckpt.Latest)
		check(err)
		t3 := time.Now()
		var total int64
		for _, s := range cp.Shards {
			for _, t := range s.Tensors {
				total += int64(len(t.Data))
			}
		}
		st.Close()
		c.Close()
		el := t3.Sub(t0)
		fmt.Printf("restore %d MiB in %.3fs = %.0f MiB/s (client %.1f ms, store %.1f ms, restore %.1f ms), cpu %.2fs, verified %v\n",
			total>>20, el.Seconds(), float64(total)/(1<<20)/el.Seconds(),
			ms(t1.Sub(t0)), ms(t2.Sub(t1)), ms(t3.Sub(t2)), (cpuTime() - cpu0).Seconds(), cp.Verified)
	}
}

// shards builds 8 shards of size/8 bytes each, tensors of 64 KiB to 8 MiB
// of random bytes.
func shards(size int64) []ckpt.Shard {
	const nsh = 8
	out := make([]ckpt.Shard, nsh)
	for i := range out {
		sh := ckpt.Shard{Name: fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, nsh)}
		for off, j := int64(0), 0; off < size/nsh; j++ {
			n := min(64<<10+2*mrand.Int64N((8<<20-64<<10)/2), size/nsh-off) &^ 1
			if n == 0 {
				break
			}
			b := make([]byte, n)
			_, _ = rand.Read(b)
			sh.Tensors = append(sh.Tensors, ckpt.Tensor{Name: fmt.Sprintf("layers.%d.weight", j), DType: safetensors.BF16, Shape: []int64{n / 2}, Data: b})
			off += n
		}
		out[i] = sh
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "ckrd:", err)
		os.Exit(1)
	}
}
