package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/test/cluster"
)

// Checkpoint tests: save and restore through the API against real servers
// (docs/checkpoints.md). Data sizes are CI-sized; SHOAL_CKPT_TEST_MIB sets
// the multi-shard checkpoint's size (default 64).

// ckptGCGrace is the MDS's GC grace in these tests: short, so that space
// comes back within seconds, but longer than any extent upload takes
// (an allocation not committed within it expires), even under -race.
const ckptGCGrace = 8 * time.Second

// ckptCluster starts a cluster on tmpfs with a short GC grace and session
// lease, so that space comes back within seconds.
func ckptCluster(t *testing.T, o cluster.Options) *cluster.Cluster {
	t.Helper()
	o.Dir = cluster.TmpfsDir(t)
	if o.GCGrace == 0 {
		o.GCGrace = ckptGCGrace
	}
	if o.SessionLease == 0 {
		o.SessionLease = 2 * time.Second
	}
	return cluster.Start(t, o)
}

func newStore(t *testing.T, c *client.Client, o ckpt.Options) *ckpt.Store {
	t.Helper()
	s, err := ckpt.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ckptRand fills n random bytes from seed (ChaCha8: fast enough for GiBs).
func ckptRand(seed uint64, n int) []byte {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// modelShards makes a checkpoint of n safetensors shards of about
// perShard bytes each, with tensors of assorted dtypes and sizes (odd
// sizes, a scalar, an empty tensor), plus a blob of optimizer state.
func modelShards(seed uint64, n int, perShard int) []ckpt.Shard {
	var out []ckpt.Shard
	for i := range n {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		sh := ckpt.Shard{Name: fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n), Metadata: map[string]string{"format": "pt", "rank": strconv.Itoa(i)}}
		add := func(name string, dt safetensors.DType, shape ...int64) {
			sz, _ := safetensors.ByteSize(dt, shape)
			sh.Tensors = append(sh.Tensors, ckpt.Tensor{Name: name, DType: dt, Shape: shape, Data: ckptRand(seed*1000+uint64(i)*100+uint64(len(sh.Tensors)), int(sz))})
		}
		add("step", safetensors.I64)
		add("empty", safetensors.F32, 0, 7)
		left := perShard
		for l := 0; left > 0; l++ {
			rows := int64(1 + r.IntN(512))
			cols := int64(1 + r.IntN(4096))
			sz := int(rows * cols * 2)
			if sz > left {
				rows = int64(max(1, left/int(cols)/2))
				sz = int(rows * cols * 2)
			}
			add(fmt.Sprintf("layers.%d.weight", l), safetensors.BF16, rows, cols)
			add(fmt.Sprintf("layers.%d.norm", l), safetensors.F32, cols)
			left -= sz + int(cols)*4
		}
		out = append(out, sh)
	}
	out = append(out, ckpt.Shard{Name: "optimizer.bin", Blob: ckptRand(seed+7, 3<<20+5)})
	return out
}

// equalShards fails unless the restored checkpoint holds exactly shards.
func equalShards(t *testing.T, got *ckpt.Checkpoint, want []ckpt.Shard) {
	t.Helper()
	if len(got.Shards) != len(want) {
		t.Fatalf("%d shards restored, want %d", len(got.Shards), len(want))
	}
	for _, w := range want {
		g := got.Shard(w.Name)
		if g == nil {
			t.Fatalf("shard %s missing", w.Name)
		}
		if w.Tensors == nil {
			if !bytes.Equal(g.Blob, w.Blob) {
				t.Fatalf("blob %s differs", w.Name)
			}
			continue
		}
		if len(g.Tensors) != len(w.Tensors) || fmt.Sprint(g.Metadata) != fmt.Sprint(w.Metadata) {
			t.Fatalf("shard %s: %d tensors, metadata %v; want %d, %v", w.Name, len(g.Tensors), g.Metadata, len(w.Tensors), w.Metadata)
		}
		for _, wt := range w.Tensors {
			gt := g.Tensor(wt.Name)
			if gt == nil || gt.DType != wt.DType || !slices.Equal(gt.Shape, normShape(wt.Shape)) || !bytes.Equal(gt.Data, wt.Data) {
				t.Fatalf("shard %s tensor %s differs", w.Name, wt.Name)
			}
		}
	}
}

func normShape(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func ckptSize(shards []ckpt.Shard) int64 {
	var n int64
	for _, s := range shards {
		n += int64(len(s.Blob))
		for _, t := range s.Tensors {
			n += int64(len(t.Data))
		}
	}
	return n
}

// chunkBytes sums the data files of every OST's chunks (sidecars not
// counted): the space the cluster's data takes.
func chunkBytes(t *testing.T, cl *cluster.Cluster, osts int) int64 {
	t.Helper()
	var n int64
	for i := range osts {
		if err := cl.OST(i).Server.FlushChunkLog(); err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(cl.OST(i).Dir, "chunks")
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, ".crc") {
				return nil
			}
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
			return nil
		})
	}
	return n
}

// waitChunkBytes waits until the chunks take want bytes (GC done).
func waitChunkBytes(t *testing.T, cl *cluster.Cluster, osts int, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := chunkBytes(t, cl, osts)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("chunks take %d bytes after %v, want %d", got, within, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stableChunkBytes returns the chunk bytes once they stop changing.
func stableChunkBytes(t *testing.T, cl *cluster.Cluster, osts int) int64 {
	t.Helper()
	last := int64(-1)
	for i := 0; i < 100; i++ {
		n := chunkBytes(t, cl, osts)
		if n == last {
			return n
		}
		last = n
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

func TestCkptSaveRestore(t *testing.T) {
	mib := 64
	if v, err := strconv.Atoi(os.Getenv("SHOAL_CKPT_TEST_MIB")); err == nil && v > 0 {
		mib = v
	}
	cl := ckptCluster(t, cluster.Options{})
	ctx := context.Background()
	var progressed atomic.Int64
	s := newStore(t, cl.Client(), ckpt.Options{Progress: func(p ckpt.Progress) { progressed.Store(p.Done) }})
	shards := modelShards(1, 8, mib<<20/8)
	t0 := time.Now()
	res, err := s.Save(ctx, "llm", 100, shards)
	if err != nil {
		t.Fatal(err)
	}
	size := ckptSize(shards)
	t.Logf("saved %d MiB in 9 shards in %v (%.0f MiB/s)", size>>20, time.Since(t0).Round(time.Millisecond), float64(size)/(1<<20)/time.Since(t0).Seconds())
	m := res.Manifest
	if m.Step != 100 || len(m.Shards) != 9 || m.Shared != 0 || m.Written != m.Bytes || progressed.Load() != size {
		t.Fatalf("manifest step %d shards %d shared %d written %d/%d, progress %d/%d", m.Step, len(m.Shards), m.Shared, m.Written, m.Bytes, progressed.Load(), size)
	}

	// The listing, the files as any reader sees them.
	l, err := s.List(ctx, "llm")
	if err != nil || len(l) != 1 || l[0].Step != 100 || l[0].Name != "step-0000000100" || !l[0].HasManifest {
		t.Fatalf("List = %+v, %v", l, err)
	}
	c := cl.Client()
	es, err := c.ReadDir(ctx, "/ckpt/llm")
	if err != nil || len(es) != 1 {
		t.Fatalf("job directory holds %d entries (%v), want only the step", len(es), err)
	}
	f, err := c.Open(ctx, "/ckpt/llm/step-0000000100/"+shards[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeader(apiReaderAt{f}, f.Size())
	f.Close(ctx)
	if err != nil || h.DataStart()%4096 != 0 || len(h.Tensors) != len(shards[0].Tensors) || h.Metadata["rank"] != "0" {
		t.Fatalf("shard header: %v, data start %d", err, h.DataStart())
	}

	// Restore everything (a new client: nothing cached).
	s2 := newStore(t, cl.Client(), ckpt.Options{})
	t0 = time.Now()
	got, err := s2.Restore(ctx, "llm", ckpt.Latest)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restored in %v (%.0f MiB/s)", time.Since(t0).Round(time.Millisecond), float64(size)/(1<<20)/time.Since(t0).Seconds())
	if !got.Verified || got.Info.Step != 100 {
		t.Fatalf("restore: verified %v step %d", got.Verified, got.Info.Step)
	}
	equalShards(t, got, shards)

	// A subset: one rank's norms only.
	sub, err := s2.Restore(ctx, "llm", 100, ckpt.Shards(shards[3].Name), ckpt.Select(func(shard, tensor string) bool {
		return strings.HasSuffix(tensor, ".norm")
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(sub.Shards) != 1 || len(sub.Shards[0].Tensors) == 0 {
		t.Fatalf("subset: %d shards", len(sub.Shards))
	}
	for _, tt := range sub.Shards[0].Tensors {
		if !strings.HasSuffix(tt.Name, ".norm") {
			t.Fatalf("subset holds %s", tt.Name)
		}
		var want []byte
		for _, w := range shards[3].Tensors {
			if w.Name == tt.Name {
				want = w.Data
			}
		}
		if !bytes.Equal(tt.Data, want) {
			t.Fatalf("subset tensor %s differs", tt.Name)
		}
	}

	// A byte range of one tensor (resharding on load).
	w := shards[2].Tensors[2]
	part, err := s2.ReadRange(ctx, "llm", 100, shards[2].Name, w.Name, 3, int64(len(w.Data))-10)
	if err != nil || !bytes.Equal(part, w.Data[3:len(w.Data)-7]) {
		t.Fatalf("range: %v", err)
	}
	if _, err := s2.ReadRange(ctx, "llm", 100, shards[2].Name, w.Name, 1, int64(len(w.Data))); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("range past the tensor: %v", err)
	}

	// Verify reads it all back.
	rep, err := s2.Verify(ctx, "llm", 100)
	if err != nil || rep.Filled || len(rep.Problems) != 0 || rep.Bytes != m.Bytes {
		t.Fatalf("verify: %v %+v", err, rep)
	}

	// The same step again is refused; so is a bad name.
	if _, err := s.Save(ctx, "llm", 100, shards[:1]); !errors.Is(err, errs.ErrExists) {
		t.Fatalf("second save of a step: %v", err)
	}
	if _, err := s.Save(ctx, "../x", 1, shards[:1]); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("bad job name: %v", err)
	}

	// SaveAsync of the next step, with some tensors changed: the caller
	// may scribble over its buffers once it returns.
	next := modelShards(1, 8, mib<<20/8)
	for i := range next {
		if next[i].Tensors != nil {
			next[i].Tensors[2].Data = ckptRand(uint64(500+i), len(next[i].Tensors[2].Data))
		}
	}
	want := make([]ckpt.Shard, len(next))
	for i, sh := range next {
		want[i] = sh
		want[i].Blob = bytes.Clone(sh.Blob)
		want[i].Tensors = slices.Clone(sh.Tensors)
		for j := range want[i].Tensors {
			want[i].Tensors[j].Data = bytes.Clone(sh.Tensors[j].Data)
		}
	}
	p, err := s.SaveAsync(ctx, "llm", 200, next)
	if err != nil {
		t.Fatal(err)
	}
	for i := range next {
		clear(next[i].Blob)
		for j := range next[i].Tensors {
			clear(next[i].Tensors[j].Data)
		}
	}
	r2, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SaveAsync stalled the caller %v; the flush took %v; %d of %d bytes shared with step %d",
		p.Stall.Round(time.Microsecond), r2.Elapsed.Round(time.Millisecond), r2.Manifest.Shared, r2.Manifest.Bytes, *r2.Manifest.Base)
	if r2.Manifest.Base == nil || *r2.Manifest.Base != 100 || r2.Manifest.Shared == 0 || r2.Manifest.Written == 0 {
		t.Fatalf("step 200: base %v shared %d written %d", r2.Manifest.Base, r2.Manifest.Shared, r2.Manifest.Written)
	}
	got2, err := s2.Restore(ctx, "llm", ckpt.Latest)
	if err != nil {
		t.Fatal(err)
	}
	equalShards(t, got2, want)
	// The step before is unchanged by the one that shares its data.
	got1, err := s2.Restore(ctx, "llm", 100)
	if err != nil {
		t.Fatal(err)
	}
	equalShards(t, got1, shards)
}

// apiReaderAt adapts a client.File to io.ReaderAt.
type apiReaderAt struct{ f *client.File }

func (r apiReaderAt) ReadAt(p []byte, off int64) (int, error) {
	return r.f.ReadAt(context.Background(), p, off)
}

// TestCkptCloneUsesNoSpace: a step whose tensors did not change takes no
// new data space (df before and after); a step with one changed tensor
// takes that tensor's space; deleting steps frees only what no other step
// shares, and deleting all frees everything.
func TestCkptCloneUsesNoSpace(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	ctx := context.Background()
	c := cl.Client()
	s := newStore(t, c, ckpt.Options{})
	shards := modelShards(2, 4, 8<<20)
	if _, err := s.Save(ctx, "ft", 1, shards); err != nil {
		t.Fatal(err)
	}
	before := stableChunkBytes(t, cl, 6)
	df0, err := c.StatFs(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Step 2: the same bytes, found by checksum.
	r2, err := s.Save(ctx, "ft", 2, shards)
	if err != nil {
		t.Fatal(err)
	}
	after := stableChunkBytes(t, cl, 6)
	df1, _ := c.StatFs(ctx)
	t.Logf("clone step: chunks %d -> %d bytes (+%d, the manifest); df free %d -> %d MiB; %d of %d bytes shared",
		before, after, after-before, df0.FreeBytes>>20, df1.FreeBytes>>20, r2.Manifest.Shared, r2.Manifest.Bytes)
	if r2.Manifest.Shared != r2.Manifest.Bytes || r2.Manifest.Written != 0 {
		t.Fatalf("unchanged step shared %d of %d", r2.Manifest.Shared, r2.Manifest.Bytes)
	}
	// Only the manifest's chunks are new: a few KiB, erasure coded.
	if after-before > 256<<10 {
		t.Fatalf("an unchanged step took %d bytes of chunks", after-before)
	}

	// Step 3: one tensor changed, one declared unchanged without data
	// (Reuse), everything else found by checksum.
	changed := modelShards(2, 4, 8<<20)
	big := changed[1].Tensors[2]
	changed[1].Tensors[2].Data = ckptRand(99, len(big.Data))
	changed[2].Tensors[3].Data, changed[2].Tensors[3].Reuse = nil, true
	r3, err := s.Save(ctx, "ft", 3, changed)
	if err != nil {
		t.Fatal(err)
	}
	after3 := stableChunkBytes(t, cl, 6)
	grow := after3 - after
	t.Logf("one changed tensor of %d bytes: chunks +%d bytes; written %d, shared %d", len(big.Data), grow, r3.Manifest.Written, r3.Manifest.Shared)
	sh1, _ := r3.Manifest.Shard(changed[1].Name)
	if r3.Manifest.Written != int64(len(big.Data))+sh1.DataStart {
		t.Fatalf("step 3 wrote %d bytes, want the changed tensor's %d and its shard's header", r3.Manifest.Written, len(big.Data))
	}
	// Chunks hold data * 1.5 (RS 4+2) plus cell padding, the header and
	// the manifest.
	if max3 := int64(len(big.Data))*3/2 + 1<<20; grow > max3 {
		t.Fatalf("one changed tensor took %d bytes of chunks (max %d)", grow, max3)
	}
	st3, _, err := s.Manifest(ctx, "ft", 3)
	if err != nil {
		t.Fatal(err)
	}
	if sh, _ := st3.Shard(changed[2].Name); !sh.Tensors[3].Shared {
		t.Fatal("the Reuse tensor is not marked shared")
	}
	got, err := newStore(t, cl.Client(), ckpt.Options{}).Restore(ctx, "ft", 3)
	if err != nil {
		t.Fatal(err)
	}
	changed[2].Tensors[3].Data = shards[2].Tensors[3].Data
	equalShards(t, got, changed)

	// Deleting step 1, whose extents steps 2 and 3 share, frees almost
	// nothing: only its manifest.
	if err := s.Delete(ctx, "ft", 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ckptGCGrace + 2*time.Second) // then the GC round (every 0.5 s) has run
	if del1 := after3 - stableChunkBytes(t, cl, 6); del1 < 0 || del1 > 256<<10 {
		t.Fatalf("deleting a step whose data others share freed %d bytes", del1)
	}
	if _, err := newStore(t, cl.Client(), ckpt.Options{}).Restore(ctx, "ft", 2); err != nil {
		t.Fatalf("step 2 after deleting step 1: %v", err)
	}
	// Deleting the rest frees everything.
	for _, step := range []int64{2, 3} {
		if err := s.Delete(ctx, "ft", step); err != nil {
			t.Fatal(err)
		}
	}
	waitChunkBytes(t, cl, 6, 0, 30*time.Second)
}

// TestCkptCrashBeforeCommit stops saves at seeded points: in a hook
// between phases (a process that dies there) or at a random moment with
// the client abandoned mid-upload (a process killed). Whatever the point,
// the step is either not listed or complete and correct; GC removes the
// staging directories and the MDS frees every orphan chunk.
func TestCkptCrashBeforeCommit(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	ctx := context.Background()
	shards := modelShards(3, 4, 4<<20)
	// Dry runs count the hook points of each phase of a save of these
	// shards, writing everything and sharing with the step before.
	// Sharing saves change one tensor per shard (new bytes every seed),
	// so that they clone the rest and write that one.
	variant := func(seed uint64) []ckpt.Shard {
		out := modelShards(3, 4, 4<<20)
		for i := range out {
			if out[i].Tensors != nil {
				out[i].Tensors[2].Data = ckptRand(seed*10+uint64(i), len(out[i].Tensors[2].Data))
			}
		}
		return out
	}
	counts := map[bool]map[string]int{}
	for _, reuse := range []bool{false, true} {
		counts[reuse] = map[string]int{}
		var so []ckpt.SaveOption
		if !reuse {
			so = append(so, ckpt.NoReuse())
		}
		var mu sync.Mutex
		dry := newStore(t, cl.Client(), ckpt.Options{Hook: func(p ckpt.Point) error {
			mu.Lock()
			counts[reuse][p.Phase]++
			mu.Unlock()
			return nil
		}})
		data := shards
		if reuse {
			data = variant(1000)
		}
		if _, err := dry.Save(ctx, "dry", int64(len(counts)), data, so...); err != nil {
			t.Fatal(err)
		}
	}
	// A committed step to share with.
	if _, err := newStore(t, cl.Client(), ckpt.Options{}).Save(ctx, "crash", 0, shards); err != nil {
		t.Fatal(err)
	}
	t.Logf("hook points per phase: writing everything %v; sharing %v", counts[false], counts[true])
	phases := []string{ckpt.PhaseStaging, ckpt.PhaseCreate, ckpt.PhaseClone, ckpt.PhaseWrite, ckpt.PhaseClose,
		ckpt.PhaseManifest, ckpt.PhaseCommit, ckpt.PhaseDone}
	seeds := 24
	committed := map[int64]bool{}
	for seed := range seeds {
		step := int64(seed + 1)
		r := rand.New(rand.NewPCG(uint64(seed), 77))
		dying := cl.Client()
		// Half the saves share with the step before (clones), half write
		// everything. Even seeds stop in a hook, at the j-th point of a
		// phase (every phase in turn); odd ones are killed at a random
		// moment.
		reuse := seed%4 >= 2
		var so []ckpt.SaveOption
		how := "sharing, "
		data := variant(uint64(seed))
		if !reuse {
			so = append(so, ckpt.NoReuse())
			how = "writing, "
			data = shards
		}
		var o ckpt.Options
		if seed%2 == 0 {
			phase := phases[(seed/2)%len(phases)]
			if counts[reuse][phase] == 0 {
				phase = ckpt.PhaseClose
			}
			k := 1 + r.IntN(counts[reuse][phase])
			var n atomic.Int64
			o.Hook = func(p ckpt.Point) error {
				if p.Phase == phase && n.Add(1) == int64(k) {
					how += fmt.Sprintf("stop at %s #%d %s", phase, k, p.Shard)
					return errors.New("crash")
				}
				return nil
			}
		}
		s := newStore(t, dying, o)
		done := make(chan error, 1)
		go func() {
			_, err := s.Save(ctx, "crash", step, data, so...)
			done <- err
		}()
		if seed%2 == 1 {
			delay := time.Duration(r.Int64N(int64(150 * time.Millisecond)))
			how += fmt.Sprintf("abandon after %v", delay)
			select {
			case <-time.After(delay):
			case <-done:
				done <- nil
			}
		} else {
			<-done
			done <- nil
		}
		dying.Abandon() // the process is gone: no Close, no cleanup
		<-done

		// What a survivor sees: never a partial checkpoint.
		obs := newStore(t, cl.Client(), ckpt.Options{StaleAfter: time.Nanosecond})
		l, err := obs.List(ctx, "crash")
		if err != nil {
			t.Fatal(err)
		}
		listed := false
		for _, in := range l {
			if in.Step == step {
				listed = true
			}
		}
		if listed {
			committed[step] = true
			got, err := obs.Restore(ctx, "crash", step)
			if err != nil {
				t.Fatalf("seed %d (%s): step committed but: %v", seed, how, err)
			}
			equalShards(t, got, data)
		}
		t.Logf("seed %2d: %-40s committed %v", seed, how, listed)
		// GC takes the staging directory of the dead save.
		rep, err := obs.GC(ctx, "crash")
		if err != nil {
			t.Fatalf("seed %d: gc: %v", seed, err)
		}
		es, err := cl.Client().ReadDir(ctx, "/ckpt/crash")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if n := string(e.Name); strings.HasPrefix(n, ".") {
				t.Fatalf("seed %d: %s left after GC (%+v)", seed, n, rep)
			}
		}
	}
	if len(committed) == 0 || len(committed) == seeds {
		t.Logf("note: %d of %d crashed saves committed", len(committed), seeds)
	}
	// Every committed step verifies; then all go, and every chunk with
	// them: nothing leaked by any crash.
	obs := newStore(t, cl.Client(), ckpt.Options{})
	for _, job := range []string{"crash", "dry"} {
		l, err := obs.List(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range l {
			if rep, err := obs.Verify(ctx, job, in.Step); err != nil {
				t.Fatalf("verify %s step %d: %v %+v", job, in.Step, err, rep)
			}
			if err := obs.Delete(ctx, job, in.Step); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitChunkBytes(t, cl, 6, 0, 60*time.Second)
}

// TestCkptRestoreDegraded: with 2 of 6 OSTs down (RS 4+2) a checkpoint
// restores and verifies, from parity.
func TestCkptRestoreDegraded(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	ctx := context.Background()
	shards := modelShards(4, 4, 4<<20)
	if _, err := newStore(t, cl.Client(), ckpt.Options{}).Save(ctx, "deg", 5, shards); err != nil {
		t.Fatal(err)
	}
	cl.StopOST(1)
	cl.KillOST(4)
	s := newStore(t, cl.Client(), ckpt.Options{})
	got, err := s.Restore(ctx, "deg", 5)
	if err != nil {
		t.Fatal(err)
	}
	equalShards(t, got, shards)
	if _, err := s.Verify(ctx, "deg", 5); err != nil {
		t.Fatal(err)
	}
}

// TestCkptCorruptChunk: a byte flipped in a chunk file is caught by the
// OST's block checksum and the client serves the right bytes from parity;
// a byte flipped together with its block checksum (so that the OST cannot
// see it) is caught by the manifest, which names the shard and tensor.
func TestCkptCorruptChunk(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	ctx := context.Background()
	shards := modelShards(5, 2, 8<<20)
	s := newStore(t, cl.Client(), ckpt.Options{})
	if _, err := s.Save(ctx, "bad", 1, shards); err != nil {
		t.Fatal(err)
	}
	m, _, err := s.Manifest(ctx, "bad", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := "/ckpt/bad/step-0000000001/"

	// A plain flip: detected by the OST, served by reconstruction.
	fileOff := flipChunkByte(t, cl, dir+shards[0].Name, false)
	got, err := newStore(t, cl.Client(), ckpt.Options{}).Restore(ctx, "bad", 1)
	if err != nil {
		t.Fatalf("restore with a flipped chunk byte (file offset %d): %v", fileOff, err)
	}
	equalShards(t, got, shards)
	if _, err := newStore(t, cl.Client(), ckpt.Options{}).Verify(ctx, "bad", 1); err != nil {
		t.Fatalf("verify with a flipped chunk byte: %v", err)
	}

	// A flip the OST cannot see (in another shard): the manifest catches
	// it.
	shard := shards[1].Name
	fileOff = flipChunkByte(t, cl, dir+shard, true)
	var victim string
	sh, _ := m.Shard(shard)
	for _, te := range sh.Tensors {
		if te.Offset <= fileOff && fileOff < te.Offset+te.Length {
			victim = te.Name
		}
	}
	_, err = newStore(t, cl.Client(), ckpt.Options{}).Restore(ctx, "bad", 1)
	var ce *ckpt.CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, errs.ErrCorrupt) || ce.Shard != shard || ce.Tensor != victim {
		t.Fatalf("restore of silently corrupted data: %v, want a CorruptError naming %s %s", err, shard, victim)
	}
	t.Logf("restore: %v", err)
	rep, err := newStore(t, cl.Client(), ckpt.Options{}).Verify(ctx, "bad", 1)
	if !errors.Is(err, errs.ErrCorrupt) || len(rep.Problems) != 1 || rep.Problems[0].Shard != shard || rep.Problems[0].Tensor != victim {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	// The other shards still restore.
	if _, err := s.Restore(ctx, "bad", 1, ckpt.Shards(shards[0].Name, shards[2].Name)); err != nil {
		t.Fatal(err)
	}
}

// flipChunkByte flips one byte of data chunk 0 of the first extent of
// file p that holds a full row, 1000 bytes into the row, and returns the
// file offset of that byte. With resum, the chunk's checksum sidecar is
// rewritten to match, so that the OST serves the flipped byte.
func flipChunkByte(t *testing.T, cl *cluster.Cluster, p string, resum bool) int64 {
	t.Helper()
	ctx := context.Background()
	c := cl.Client()
	a, err := c.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.MDSStub(c).GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: a.Ino})
	if err != nil {
		t.Fatal(err)
	}
	const at = 100_000 // inside cell 0 of row 0: extent byte at
	for _, ref := range r.GetExtents() {
		ext := ref.GetExtent()
		lo := ext.GetLayout()
		if ext.GetLength() < uint64(lo.GetK()*lo.GetUnit()) || ref.GetExtentOff() > at || ref.GetExtentOff()+ref.GetLength() <= at {
			continue
		}
		fileOff := int64(ref.GetFileOff() + at - ref.GetExtentOff())
		for i := range 6 {
			o := cl.OST(i)
			if o.Server == nil || o.Server.ID() != ext.GetOsts()[0] {
				continue
			}
			cp := o.Server.ChunkPath(ext.GetId(), 0)
			b, err := os.ReadFile(cp)
			if err != nil {
				t.Fatal(err)
			}
			b[at] ^= 0x10
			if err := os.WriteFile(cp, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if resum {
				old, err := os.ReadFile(cp + ".crc")
				if err != nil {
					t.Fatal(err)
				}
				tab, err := checksum.Decode(old)
				if err != nil {
					t.Fatal(err)
				}
				nt, err := checksum.Compute(b, int(tab.BlockSize))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(cp+".crc", nt.Encode(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return fileOff
		}
	}
	t.Fatalf("%s has no extent with a full row to corrupt", p)
	return 0
}

// TestCkptRetention: keep the last 2 and every 5th step, and the pinned;
// a pinned step cannot be deleted until unpinned.
func TestCkptRetention(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	ctx := context.Background()
	s := newStore(t, cl.Client(), ckpt.Options{Retention: ckpt.Policy{KeepLast: 2, KeepEvery: 5}})
	small := []ckpt.Shard{{Name: "w.safetensors", Tensors: []ckpt.Tensor{{Name: "w", DType: safetensors.F32, Shape: []int64{1024}, Data: ckptRand(1, 4096)}}}}
	for step := int64(0); step < 10; step++ {
		var opts []ckpt.SaveOption
		if step == 3 {
			opts = append(opts, ckpt.Pin())
		}
		small[0].Tensors[0].Data = ckptRand(uint64(step), 4096)
		res, err := s.Save(ctx, "ret", step, small, opts...)
		if err != nil || res.PruneErr != nil {
			t.Fatalf("step %d: %v %v", step, err, res.PruneErr)
		}
	}
	l, err := s.List(ctx, "ret")
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, in := range l {
		steps = append(steps, in.Step)
		if in.Pinned != (in.Step == 3) {
			t.Fatalf("step %d pinned %v", in.Step, in.Pinned)
		}
	}
	if want := []int64{0, 3, 5, 8, 9}; !slices.Equal(steps, want) {
		t.Fatalf("kept %v, want %v", steps, want)
	}
	if err := s.Delete(ctx, "ret", 3); !errors.Is(err, errs.ErrNotPermitted) {
		t.Fatalf("delete pinned: %v", err)
	}
	if err := s.Unpin(ctx, "ret", 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "ret", 3); err != nil {
		t.Fatal(err)
	}
	if in, err := s.Latest(ctx, "ret"); err != nil || in.Step != 9 {
		t.Fatalf("latest %+v %v", in, err)
	}
	if jobs, err := s.Jobs(ctx); err != nil || !slices.Equal(jobs, []string{"ret"}) {
		t.Fatalf("jobs %v %v", jobs, err)
	}
}

// TestCkptMountProtocol: a checkpoint written through the FUSE mount by
// the staging-directory protocol, as a Python job would (plain files in
// job/.step-N.tmp/, then one rename), is listed, gets its manifest from
// Verify, and restores; a crashed one is never listed and GC removes it.
func TestCkptMountProtocol(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	mnt := cl.Mount()
	ctx := context.Background()
	job := filepath.Join(mnt, "ckpt", "py")
	stage := filepath.Join(job, ".step-7.tmp")
	if err := os.MkdirAll(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	// A safetensors file as safetensors.torch.save_file writes it
	// (8-byte alignment), a DCP-style metadata file and a blob.
	w := ckptRand(11, 3<<20)
	b := ckptRand(12, 4000)
	js := `{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[1024,1536],"data_offsets":[0,3145728]},` +
		`"b":{"dtype":"F32","shape":[1000],"data_offsets":[3145728,3149728]}}`
	js += strings.Repeat(" ", (8-len(js)%8)%8)
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	file = append(append(append(file, js...), w...), b...)
	if h, err := safetensors.Decode(file, int64(len(file))); err != nil || h.DataStart()%4096 == 0 {
		t.Fatalf("hand-built file: %v", err)
	}
	for name, data := range map[string][]byte{"model.safetensors": file, ".metadata": []byte("dcp metadata"), "extra_state.pt": ckptRand(13, 777)} {
		if err := os.WriteFile(filepath.Join(stage, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A second, crashed save: never renamed.
	if err := os.MkdirAll(filepath.Join(job, ".step-8.tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(job, ".step-8.tmp", "model.safetensors"), file[:5000], 0o644)

	s := newStore(t, cl.Client(), ckpt.Options{StaleAfter: time.Hour})
	if l, _ := s.List(ctx, "py"); len(l) != 0 {
		t.Fatalf("staging directories listed: %+v", l)
	}
	if err := os.Rename(stage, filepath.Join(job, "step-7")); err != nil {
		t.Fatal(err)
	}
	l, err := s.List(ctx, "py")
	if err != nil || len(l) != 1 || l[0].Step != 7 || l[0].HasManifest {
		t.Fatalf("List after the rename: %+v %v", l, err)
	}
	rep, err := s.Verify(ctx, "py", 7)
	if err != nil || !rep.Filled || rep.Shards != 3 {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	m, in, err := s.Manifest(ctx, "py", 7)
	if err != nil || !in.HasManifest {
		t.Fatalf("manifest: %v %+v", err, in)
	}
	sh, ok := m.Shard("model.safetensors")
	if !ok || sh.Kind != ckpt.KindSafetensors || len(sh.Tensors) != 2 || sh.Tensors[1].Digest == "" {
		t.Fatalf("filled manifest: %+v", m)
	}
	// The manifest is in the directory, readable by anyone.
	if _, err := os.Stat(filepath.Join(job, "step-7", ckpt.ManifestName)); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Verify(ctx, "py", 7); err != nil || rep.Filled {
		t.Fatalf("second verify: %v %+v", err, rep)
	}
	got, err := s.Restore(ctx, "py", ckpt.Latest)
	if err != nil || !got.Verified {
		t.Fatalf("restore: %v", err)
	}
	if tw := got.Shard("model.safetensors").Tensor("w"); tw == nil || !bytes.Equal(tw.Data, w) {
		t.Fatal("tensor w differs")
	}
	if bl := got.Shard(".metadata"); bl == nil || string(bl.Blob) != "dcp metadata" {
		t.Fatal("blob .metadata differs")
	}
	// The crashed staging directory goes once stale.
	gc := newStore(t, cl.Client(), ckpt.Options{StaleAfter: time.Nanosecond})
	if rep, err := gc.GC(ctx, "py"); err != nil || len(rep.Staging) != 1 {
		t.Fatalf("gc: %v %+v", err, rep)
	}
	// GC ran on another client: the mount may show the name for up to
	// its entry timeout (1 s, docs/fuse.md), not longer.
	var serr error
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, serr = os.Stat(filepath.Join(job, ".step-8.tmp")); errors.Is(serr, os.ErrNotExist) || time.Now().After(deadline) {
			break
		}
	}
	if !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("crashed staging directory still there 2 s after its removal by another client: %v", serr)
	}
}

// TestCkptCLI runs `shoal ckpt` as a user types it: save a directory of
// safetensors and other files, list, show, verify, restore it byte for
// byte, save it again (all shared), pin, rm, prune.
func TestCkptCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): builds shoal")
	}
	bin := filepath.Join(t.TempDir(), "shoal")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/shoalfs/shoal/cmd/shoal").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cl := ckptCluster(t, cluster.Options{})
	shoal := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"ckpt"}, args...)...)
		cmd.Env = append(append(os.Environ(), "SHOAL_MDS="+cl.MDSAddr()), cl.TLSEnv()...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := shoal(args...)
		if err != nil {
			t.Fatalf("shoal ckpt %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// A directory as a training script leaves it.
	src := t.TempDir()
	_, enc, err := safetensors.Layout(map[string]string{"format": "pt"}, []safetensors.Spec{
		{Name: "a", DType: safetensors.F16, Shape: []int64{1024, 1024}},
		{Name: "b", DType: safetensors.F32, Shape: []int64{333}},
	})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"model.safetensors":  append(append(enc, ckptRand(21, 2<<20)...), ckptRand(22, 1332)...),
		"trainer_state.json": []byte(`{"global_step": 10}`),
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(src, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := must("save", "--from", src, "cli", "10")
	if !strings.Contains(out, "saved cli step 10: 2 shards") {
		t.Fatalf("save said %q", out)
	}
	var steps []struct {
		Step     int64 `json:"step"`
		Manifest bool  `json:"manifest"`
		Shards   int   `json:"shards"`
	}
	if err := json.Unmarshal([]byte(must("ls", "--json", "cli")), &steps); err != nil || len(steps) != 1 || steps[0].Step != 10 || !steps[0].Manifest || steps[0].Shards != 2 {
		t.Fatalf("ls --json: %v %+v", err, steps)
	}
	if out := must("show", "cli", "10"); !strings.Contains(out, "model.safetensors") || !strings.Contains(out, "F16") || !strings.Contains(out, "[1024 1024]") {
		t.Fatalf("show said %q", out)
	}
	if out := must("verify", "cli"); !strings.HasPrefix(out, "ok: cli step 10: 2 shards") {
		t.Fatalf("verify said %q", out)
	}
	dst := t.TempDir()
	must("restore", "--to", dst, "cli")
	for n, want := range files {
		got, err := os.ReadFile(filepath.Join(dst, n))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("restored %s differs (%v)", n, err)
		}
	}
	// The same files again: everything shared.
	var m ckpt.Manifest
	if err := json.Unmarshal([]byte(must("save", "--json", "--from", src, "cli", "20")), &m); err != nil || m.Shared != m.Bytes || *m.Base != 10 {
		t.Fatalf("second save: %v shared %d of %d", err, m.Shared, m.Bytes)
	}
	must("pin", "cli", "10")
	if out, err := shoal("rm", "cli", "10"); err == nil || !strings.Contains(out, "pinned") {
		t.Fatalf("rm of a pinned step: %v %s", err, out)
	}
	must("save", "--from", src, "cli", "30")
	if out := must("prune", "cli", "--keep-last", "1"); !strings.Contains(out, "deleted steps [20]") {
		t.Fatalf("prune said %q", out)
	}
	must("rm", "--force", "cli", "10")
	if err := json.Unmarshal([]byte(must("ls", "--json", "cli")), &steps); err != nil || len(steps) != 1 || steps[0].Step != 30 {
		t.Fatalf("ls after rm: %v %+v", err, steps)
	}
	if out, err := shoal("show", "cli", "99"); err == nil || !strings.Contains(out, "not found") {
		t.Fatalf("show of a missing step: %v %s", err, out)
	}
	must("gc")
}

// TestCkptGCSparesRunningSave: a save that stalls for longer than
// StaleAfter keeps its staging directory alive (it touches it), so GC
// passes meanwhile leave it alone and the save commits.
func TestCkptGCSparesRunningSave(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	ctx := context.Background()
	const stale = 400 * time.Millisecond
	var once sync.Once
	slow := newStore(t, cl.Client(), ckpt.Options{StaleAfter: stale, Hook: func(p ckpt.Point) error {
		if p.Phase == ckpt.PhaseWrite {
			once.Do(func() { time.Sleep(5 * stale) })
		}
		return nil
	}})
	gc := newStore(t, cl.Client(), ckpt.Options{StaleAfter: stale})
	done := make(chan error, 1)
	go func() {
		_, err := slow.Save(ctx, "live", 1, modelShards(6, 2, 1<<20))
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the slow save: %v", err)
			}
			if l, _ := gc.List(ctx, "live"); len(l) != 1 {
				t.Fatalf("listed %+v", l)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		rep, err := gc.GC(ctx, "live")
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Staging) > 0 {
			t.Fatalf("GC removed the staging directory of a running save: %v", rep.Staging)
		}
	}
}

// TestCkptEarlyReplies: a Store on a client that takes early namespace
// replies (as the mount's does) saves, waits for the MDS's sync after the
// commit, and restores.
func TestCkptEarlyReplies(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{Client: client.Options{EarlyNamespaceReplies: true}})
	ctx := context.Background()
	shards := modelShards(7, 2, 1<<20)
	s := newStore(t, cl.Client(), ckpt.Options{})
	if _, err := s.Save(ctx, "early", 1, shards); err != nil {
		t.Fatal(err)
	}
	got, err := newStore(t, cl.Client(), ckpt.Options{}).Restore(ctx, "early", 1)
	if err != nil {
		t.Fatal(err)
	}
	equalShards(t, got, shards)
}
