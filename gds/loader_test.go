package gds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
)

// TestLoader reads a list of shards through a ring of two buffers: in
// order, every byte right, never more than two buffers out, and a missing
// file reported in its place without stopping the others.
func TestLoader(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 16 << 10}
	c := startCluster(t, lo, 6, 2)
	ctx := context.Background()
	var paths []string
	want := map[string][]byte{}
	for i := 0; i < 6; i++ {
		p := fmt.Sprintf("/shard-%d", i)
		want[p] = randBytes(uint64(100+i), 50000+i*40000)
		c.writeFile(t, p, want[p])
		paths = append(paths, p)
	}
	paths = append(paths[:3], append([]string{"/missing"}, paths[3:]...)...)
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	r := newTestReader(t, c, dev, Options{LocalOSTs: c.localOSTs(t, 2)})
	if _, err := NewLoader(ctx, r, paths, LoaderOptions{}); err == nil {
		t.Fatal("loader sized a missing file")
	}
	l, err := NewLoader(ctx, r, paths, LoaderOptions{Depth: 2, BufSize: 300000})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []*LoadedShard
	for i := 0; ; i++ {
		s, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			if i != len(paths) {
				t.Fatalf("EOF after %d shards", i)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if s.Index != i || s.Path != paths[i] {
			t.Fatalf("shard %d is %d %s", i, s.Index, s.Path)
		}
		if s.Path == "/missing" {
			if !errors.Is(s.Err, errs.ErrNotFound) {
				t.Fatalf("missing shard: %v", s.Err)
			}
		} else {
			if s.Err != nil {
				t.Fatal(s.Err)
			}
			mustEqual(t, s.Path, s.Buf.Host()[:s.Len], want[s.Path])
		}
		held = append(held, s)
		// With both buffers out, the loader cannot prefetch: the next shard
		// waits until one is released.
		if len(held) == 2 && i < len(paths)-1 {
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err := l.Next(wctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("third shard with two held: %v", err)
			}
			held[0].Release()
			held = held[1:]
		}
	}
	for _, s := range held {
		s.Release()
	}
}

// writeSafetensors writes a shard of the given tensors (filled with
// random bytes) in Shoal's format and returns its data region.
func writeSafetensors(t *testing.T, c *testCluster, path string, specs []safetensors.Spec) (*safetensors.Header, []byte) {
	t.Helper()
	h, head, err := safetensors.Layout(map[string]string{"format": "pt"}, specs)
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(uint64(len(path)), int(h.DataLen))
	if err := c.cl.MkdirAll(context.Background(), "/ckpt", 0o755); err != nil {
		t.Fatal(err)
	}
	c.writeFile(t, path, append(head, data...))
	return h, data
}

func TestRestore(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 64 << 10}
	c := startCluster(t, lo, 6, 4)
	ctx := context.Background()
	specs := []safetensors.Spec{
		{Name: "embed.weight", DType: safetensors.BF16, Shape: []int64{512, 300}},
		{Name: "layer.0.bias", DType: safetensors.F32, Shape: []int64{77}},
		{Name: "layer.0.weight", DType: safetensors.F16, Shape: []int64{1024, 513}},
		{Name: "flag", DType: safetensors.BOOL, Shape: []int64{3}},
		{Name: "empty", DType: safetensors.F32, Shape: []int64{0, 4}},
	}
	h, data := writeSafetensors(t, c, "/ckpt/rank0.safetensors", specs)
	if h.DataStart()%Align != 0 {
		t.Fatalf("data starts at %d", h.DataStart())
	}
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	r := newTestReader(t, c, dev, Options{LocalOSTs: c.localOSTs(t, 6)})
	s, err := r.Restore(ctx, "/ckpt/rank0.safetensors", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Buf.Free()
	if len(s.Tensors) != len(specs) || s.Metadata["format"] != "pt" {
		t.Fatalf("restored %+v", s)
	}
	for i, tn := range s.Tensors {
		ti := h.Tensors[i]
		if tn.Name != ti.Name || tn.DType != string(ti.DType) || tn.Size != ti.Size() || tn.Ptr != s.Buf.Addr()+uintptr(ti.Begin) {
			t.Fatalf("tensor %+v, header %+v", tn, ti)
		}
		mustEqual(t, tn.Name, readBack(t, s.Buf, tn.Offset, tn.Size), data[ti.Begin:ti.End])
	}
	// Every cell of an aligned restore with all OSTs local goes direct.
	if s.Report.Remote != 0 || s.Report.Local != h.DataLen {
		t.Fatalf("report %+v", s.Report)
	}

	// A corrupt header is refused, not trusted.
	bad := append([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, make([]byte, 100)...)
	c.writeFile(t, "/ckpt/bad.safetensors", bad)
	if _, err := r.Restore(ctx, "/ckpt/bad.safetensors", nil, 0); !errors.Is(err, errs.ErrCorrupt) {
		t.Fatalf("corrupt header: %v", err)
	}
	trunc := append([]byte(nil), data[:10]...)
	hb, _ := h.Encode()
	c.writeFile(t, "/ckpt/short.safetensors", append(hb, trunc...))
	if _, err := r.Restore(ctx, "/ckpt/short.safetensors", nil, 0); err == nil || !strings.Contains(err.Error(), "safetensors") && !errors.Is(err, errs.ErrCorrupt) {
		t.Fatalf("truncated shard: %v", err)
	}
}

// TestRestoreCheckpoint saves a step with the checkpoint API (client/ckpt)
// and restores it into device memory, digests checked on the device.
func TestRestoreCheckpoint(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 64 << 10}
	c := startCluster(t, lo, 6, 4)
	ctx := context.Background()
	store, err := ckpt.New(c.cl, ckpt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var shards []ckpt.Shard
	want := map[string][]byte{}
	for rank := 0; rank < 2; rank++ {
		sh := ckpt.Shard{Name: fmt.Sprintf("rank%d.safetensors", rank)}
		for i, n := range []int64{100000, 3, 70000} {
			name := fmt.Sprintf("t%d", i)
			d := randBytes(uint64(rank*10+i), int(n*2))
			sh.Tensors = append(sh.Tensors, ckpt.Tensor{Name: name, DType: safetensors.BF16, Shape: []int64{n}, Data: d})
			want[sh.Name+"/"+name] = d
		}
		shards = append(shards, sh)
	}
	shards = append(shards, ckpt.Shard{Name: "optimizer.bin", Blob: []byte("not tensors")})
	if _, err := store.Save(ctx, "job", 100, shards); err != nil {
		t.Fatal(err)
	}
	c.FlushChunkLogs(t) // the local path reads chunk files
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	r := newTestReader(t, c, dev, Options{LocalOSTs: c.localOSTs(t, 3)})
	rc, err := r.RestoreCheckpoint(ctx, store, "job", 100, CheckpointOptions{VerifyDigests: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Free()
	if len(rc.Shards) != 2 || rc.Report.Local == 0 || rc.Report.Remote == 0 {
		t.Fatalf("restored %d shards, report %+v", len(rc.Shards), rc.Report)
	}
	for name, s := range rc.Shards {
		for _, tn := range s.Tensors {
			mustEqual(t, name+"/"+tn.Name, readBack(t, s.Buf, tn.Offset, tn.Size), want[name+"/"+tn.Name])
		}
	}
	// A tensor corrupted on the device after the read is caught by the
	// digest check.
	s := rc.Shards["rank1.safetensors"]
	var e ckpt.ShardEntry
	for _, x := range rc.Manifest.Shards {
		if x.Name == "rank1.safetensors" {
			e = x
		}
	}
	if err := verifyDigests(s, &e); err != nil {
		t.Fatal(err)
	}
	s.Buf.Host()[s.Tensors[0].Offset] ^= 1
	if err := verifyDigests(s, &e); !errors.Is(err, errs.ErrCorrupt) {
		t.Fatalf("digest check of a changed tensor: %v", err)
	}
	if _, err := r.RestoreCheckpoint(ctx, store, "job", 100, CheckpointOptions{Shards: []string{"nope"}}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("missing shard: %v", err)
	}
}

// TestRestoreCheckpointParallel: a step of 6 shards restored one shard at
// a time and 4 at a time (the default) gives the same bytes, the same
// tensors and the same byte counts by path; a missing shard is refused
// before anything is read.
func TestRestoreCheckpointParallel(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 64 << 10}
	c := startCluster(t, lo, 6, 4)
	ctx := context.Background()
	store, err := ckpt.New(c.cl, ckpt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	shards, want := multiShardStep(6, 3, 200000)
	if _, err := store.Save(ctx, "job", 7, shards); err != nil {
		t.Fatal(err)
	}
	c.FlushChunkLogs(t) // the local path reads chunk files
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	r := newTestReader(t, c, dev, Options{LocalOSTs: c.localOSTs(t, 3)})
	var reports []Report
	for _, par := range []int{1, 0} {
		rc, err := r.RestoreCheckpoint(ctx, store, "job", 7, CheckpointOptions{Parallelism: par, VerifyDigests: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(rc.Shards) != len(shards) {
			t.Fatalf("parallelism %d: %d shards restored", par, len(rc.Shards))
		}
		for name, s := range rc.Shards {
			for _, tn := range s.Tensors {
				mustEqual(t, fmt.Sprintf("parallelism %d: %s/%s", par, name, tn.Name), readBack(t, s.Buf, tn.Offset, tn.Size), want[name+"/"+tn.Name])
			}
		}
		reports = append(reports, rc.Report)
		if err := rc.Free(); err != nil {
			t.Fatal(err)
		}
	}
	a, b := reports[0], reports[1]
	if a.Bytes != b.Bytes || a.Local != b.Local || a.Remote != b.Remote || a.Paths != b.Paths {
		t.Fatalf("one at a time: %+v; in parallel: %+v", a, b)
	}
	if _, err := r.RestoreCheckpoint(ctx, store, "job", 7, CheckpointOptions{Shards: []string{"rank0.safetensors", "nope"}}); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("missing shard: %v", err)
	}
}

// multiShardStep makes n shards of per tensors of elems BF16 elements of
// random bytes, and the bytes by "shard/tensor".
func multiShardStep(n, per int, elems int64) ([]ckpt.Shard, map[string][]byte) {
	var shards []ckpt.Shard
	want := map[string][]byte{}
	for rank := range n {
		sh := ckpt.Shard{Name: fmt.Sprintf("rank%d.safetensors", rank)}
		for i := range per {
			name := fmt.Sprintf("t%d", i)
			d := randBytes(uint64(rank*100+i), int(elems*2))
			sh.Tensors = append(sh.Tensors, ckpt.Tensor{Name: name, DType: safetensors.BF16, Shape: []int64{elems}, Data: d})
			want[sh.Name+"/"+name] = d
		}
		shards = append(shards, sh)
	}
	return shards, want
}

// BenchmarkRestoreCheckpoint restores a step on the host backend, one
// shard at a time and DefaultShardParallelism at once: 8 shards of 16
// MiB and 32 shards of 1 MiB (where each shard's open, extent map and
// header round trips weigh more), all through the network (no local
// OSTs) and with every OST local:
//
//	go test ./gds -run '^$' -bench RestoreCheckpoint -benchtime 5x
func BenchmarkRestoreCheckpoint(b *testing.B) {
	c := startCluster(b, layout.Default, 6, 0)
	ctx := context.Background()
	store, err := ckpt.New(c.cl, ckpt.Options{NoCompression: true})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	for _, step := range []struct {
		shards, per int
		elems       int64
	}{{8, 4, 2 << 20}, {32, 1, 512 << 10}} {
		shards, _ := multiShardStep(step.shards, step.per, step.elems)
		stepNo := int64(step.shards)
		if _, err := store.Save(ctx, "job", stepNo, shards); err != nil {
			b.Fatal(err)
		}
		c.FlushChunkLogs(b)
		for _, local := range []int{0, 6} {
			o := Options{}
			if local > 0 {
				o.LocalOSTs = c.localOSTs(b, local)
			}
			r := newTestReader(b, c, dev, o)
			for _, par := range []int{1, DefaultShardParallelism} {
				b.Run(fmt.Sprintf("%dx%dMiB/local%d/par%d", step.shards, int64(step.per)*step.elems*2>>20, local, par), func(b *testing.B) {
					b.SetBytes(int64(step.shards*step.per) * step.elems * 2)
					for b.Loop() {
						rc, err := r.RestoreCheckpoint(ctx, store, "job", stepNo, CheckpointOptions{Parallelism: par})
						if err != nil {
							b.Fatal(err)
						}
						rc.Free()
					}
				})
			}
		}
	}
}
