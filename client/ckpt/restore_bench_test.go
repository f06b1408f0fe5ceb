package ckpt_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/test/cluster"
)

// BenchmarkRestore restores one checkpoint of random-normal tensors (8
// shards of 4 MiB tensors, 256 MiB in all, as the bench) saved without and with the
// checkpoint codec, in the same cluster (loopback, in this process), each
// by a new client: the in-process form of `shoal bench --only compress`,
// for profiles (docs/compression.md):
//
//	go test ./client/ckpt -run '^$' -bench Restore -benchtime 10x -cpuprofile /tmp/restore.prof
func BenchmarkRestore(b *testing.B) {
	if testing.Short() {
		b.Skip("SKIP (-short): starts a cluster")
	}
	cl := cluster.Start(b, cluster.Options{Dir: cluster.TmpfsDir(b)})
	ctx := context.Background()
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F32} {
		shards, size := benchShards(dt, 256<<20)
		for _, mode := range []string{"raw", "planes"} {
			root := fmt.Sprintf("/bench-%s-%s", dt, mode)
			st, err := ckpt.New(cl.Client(), ckpt.Options{Root: root, NoCompression: mode == "raw", NoReuse: true})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := st.Save(ctx, "j", 1, shards); err != nil {
				b.Fatal(err)
			}
			st.Close()
			b.Run(fmt.Sprintf("%s/%s", dt, mode), func(b *testing.B) {
				st, err := ckpt.New(cl.Client(), ckpt.Options{Root: root})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				b.SetBytes(size)
				cpu0 := cpuTime()
				for b.Loop() {
					cp, err := st.Restore(ctx, "j", 1)
					if err != nil {
						b.Fatal(err)
					}
					if !cp.Verified {
						b.Fatal("not verified")
					}
				}
				// The process's CPU time per restore (client and servers: one
				// process), steadier than the rate on a shared machine.
				b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
			})
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchShards makes 8 shards of 4 MiB random-normal tensors (std 0.02),
// size bytes in all.
func benchShards(dt safetensors.DType, size int64) ([]ckpt.Shard, int64) {
	const shards, tensor = 8, 4 << 20
	w := 4
	if dt == safetensors.BF16 {
		w = 2
	}
	var out []ckpt.Shard
	var total int64
	for s := range shards {
		sh := ckpt.Shard{Name: fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)}
		for j := range max(size/shards/tensor, 1) {
			r := rand.New(rand.NewPCG(uint64(s), uint64(j)))
			d := make([]byte, tensor)
			for i := 0; i+w <= len(d); i += w {
				v := math.Float32bits(float32(r.NormFloat64() * 0.02))
				if w == 2 {
					binary.LittleEndian.PutUint16(d[i:], uint16(v>>16))
				} else {
					binary.LittleEndian.PutUint32(d[i:], v)
				}
			}
			sh.Tensors = append(sh.Tensors, ckpt.Tensor{Name: fmt.Sprintf("layers.%d.weight", j), DType: dt, Shape: []int64{int64(tensor / w)}, Data: d})
			total += tensor
		}
		out = append(out, sh)
	}
	return out, total
}
