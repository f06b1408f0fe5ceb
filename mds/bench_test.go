package mds

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// BenchmarkNamespace measures create, lookup and unlink rates of one MDS
// over loopback gRPC with concurrent callers (b.SetParallelism), in one
// directory, with synced commits.
func BenchmarkNamespace(b *testing.B) {
	e := startEnv(b, testOptions(b), newClock())
	b.SetParallelism(8)
	var seq atomic.Int64
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("f%08d", seq.Add(1))
		}
		return out
	}
	run := func(name string, op func(string) error) {
		b.Run(name, func(b *testing.B) {
			todo := names(b.N)
			if name != "create" {
				for _, n := range todo {
					if _, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(n), Mode: 0o644}); err != nil {
						b.Fatal(err)
					}
				}
			}
			var next atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1) - 1
					if int(i) >= len(todo) {
						continue
					}
					if err := op(todo[i]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	run("create", func(n string) error {
		_, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(n), Mode: 0o644})
		return err
	})
	run("lookup", func(n string) error {
		_, err := e.c.Lookup(ctx, &mdspb.LookupRequest{Parent: rootIno, Name: []byte(n)})
		return err
	})
	run("unlink", func(n string) error {
		_, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte(n)})
		return err
	})
}

// BenchmarkGetAttrRoot measures the round trip of the cheapest call.
func BenchmarkGetAttrRoot(b *testing.B) {
	e := startEnv(b, testOptions(b), newClock())
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := e.c.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: rootIno}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
