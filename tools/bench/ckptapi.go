package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
)

// The ckpt-api group (opt-in: --only ckpt-api) measures the checkpoint
// API (client/ckpt) on one checkpoint of ckptAPIShards safetensors shards
// totalling Size bytes (tensors of 64 KiB to 8 MiB), next to the same
// files written (then fsynced) and read on the bare disk in the same run:
//
//   - ckptapi.save: Save of the checkpoint (parallel shards, manifest,
//     atomic commit; after an unmeasured warm-up save), against the
//     disk's write rate divided by the EC overhead, as every API write
//     figure;
//   - ckptapi.restore: Restore of every tensor, each checked against the
//     manifest, through a new client after the caches are dropped,
//     against the disk's cold read;
//   - ckptapi.async: the checkpoint's bytes over the time SaveAsync held
//     the caller (its stall: a copy into staging memory) on the second of
//     two steps with every tensor changed (the first allocates the
//     staging memory, later ones reuse it), against the disk's write
//     rate: how much sooner training resumes than after a synchronous
//     write to the disk;
//   - ckptapi.clone: Save of a step with no tensor changed (every tensor
//     found unchanged by checksum and shared: no data written), against
//     the disk's write rate.
//
// The group needs the API path (--mds, or the local cluster).

// ckptAPIShards is the number of shards of the ckpt-api checkpoint.
const ckptAPIShards = 8

// optGroups are workload groups run only when --only names them.
var optGroups = []string{"ckpt-api"}

// ckptAPISpecs lists the ckpt-api figures; they are assembled apart from
// specs (assembleCkptAPI), so that a run without the group has exactly
// the figures it had before.
var ckptAPISpecs = []spec{
	{name: "ckptapi.save", unit: "MiB/s", ec: true},
	{name: "ckptapi.restore", unit: "MiB/s"},
	{name: "ckptapi.async", unit: "MiB/s"},
	{name: "ckptapi.clone", unit: "MiB/s"},
}

// assembleCkptAPI is assemble for the ckpt-api figures (API values only).
func assembleCkptAPI(v values, overhead float64) []Figure {
	var out []Figure
	for _, s := range ckptAPISpecs {
		val, ok := v[key(s.name, s.unit, pathAPI)]
		if !ok {
			continue
		}
		f := Figure{Name: s.name + "." + pathAPI, Unit: s.unit, Value: round(val, 2)}
		f.Baseline, f.Vs = v[key(s.name, s.unit, pathDisk)], pathDisk
		if s.ec {
			f.Baseline, f.Vs = f.Baseline/overhead, fmt.Sprintf("disk/%.3g", overhead)
		}
		if f.Baseline > 0 {
			f.Ratio = round(val/f.Baseline, 4)
		}
		f.Baseline = round(f.Baseline, 2)
		out = append(out, f)
	}
	return out
}

// ckptAPIShardsOf builds the checkpoint of step: per shard, tensors cut by
// ckptPieces (the header-like first two pieces left out) holding pattern
// bytes that differ from step to step.
func (r *runner) ckptAPIShardsOf(step int64) ([]ckpt.Shard, int64) {
	return r.ckptAPIShardsSized(step, r.o.Size)
}

// ckptAPIShardsSized is ckptAPIShardsOf for a checkpoint of about size
// bytes.
func (r *runner) ckptAPIShardsSized(step, size int64) ([]ckpt.Shard, int64) {
	per := max(size/ckptAPIShards, 1<<20)
	var total int64
	out := make([]ckpt.Shard, ckptAPIShards)
	for i := range out {
		sh := ckpt.Shard{Name: fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, ckptAPIShards), Metadata: map[string]string{"format": "pt"}}
		var off int64
		for j, n := range ckptPieces(i, per)[2:] {
			sh.Tensors = append(sh.Tensors, ckpt.Tensor{
				Name: fmt.Sprintf("layers.%d.weight", j), DType: safetensors.BF16, Shape: []int64{int64(n / 2)},
				Data: r.pat.at(seedOf(i)+step*1_000_003, off, n&^1),
			})
			off += int64(n)
			total += int64(n &^ 1)
		}
		out[i] = sh
	}
	return out, total
}

// targetOf returns the target of a path, or nil.
func (r *runner) targetOf(path string) *target {
	for _, t := range r.targets {
		if t.path == path {
			return t
		}
	}
	return nil
}

func (r *runner) ckptAPI(ctx context.Context) error {
	api, disk := r.targetOf(pathAPI), r.targetOf(pathDisk)
	if api == nil || disk == nil {
		r.note("ckpt-api: skipped: it needs the API path (--mds or the local cluster)")
		return nil
	}
	shards, size := r.ckptAPIShardsOf(1)
	r.progress("checkpoint API: %d shards, %d MiB in all", ckptAPIShards, size>>20)

	// The disk: the same files, written in parallel and fsynced, then
	// read back cold.
	dir := filepath.Join(r.o.Dir, "baseline-disk", "ckptapi")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m, ok, err := r.timed(ctx, disk, "ckptapi.save", func() (int64, int64, error) {
		return size, ckptAPIShards, parallel(ctx, ckptAPIShards, func(ctx context.Context, i int) error {
			return writeSafetensorsFile(filepath.Join(dir, shards[i].Name), &shards[i])
		})
	})
	if err != nil {
		return err
	}
	if ok {
		for _, fig := range []string{"ckptapi.save", "ckptapi.async", "ckptapi.clone"} {
			r.vals.set(fig, "MiB/s", pathDisk, m.mibps())
		}
	}
	if err := r.coldCaches(); err != nil {
		return err
	}
	m, ok, err = r.timed(ctx, disk, "ckptapi.restore", func() (int64, int64, error) {
		return size, ckptAPIShards, parallel(ctx, ckptAPIShards, func(ctx context.Context, i int) error {
			f, err := os.Open(filepath.Join(dir, shards[i].Name))
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			h, err := safetensors.ReadHeader(f, st.Size())
			if err != nil {
				return err
			}
			buf := make([]byte, h.DataLen)
			_, err = f.ReadAt(buf, h.DataStart())
			return err
		})
	})
	if err != nil {
		return err
	}
	if ok {
		r.vals.set("ckptapi.restore", "MiB/s", pathDisk, m.mibps())
	}

	// The API, under a root of its own, with the run's client.
	afs, isAPI := api.fs.(*apiFS)
	if !isAPI {
		return fmt.Errorf("ckpt-api: the API target is not the client library")
	}
	c := afs.c
	root := "/bench-ckpt-" + time.Now().Format("20060102-150405")
	st, err := ckpt.New(c, ckpt.Options{Root: root})
	if err != nil {
		return err
	}
	defer func() {
		st.Close()
		if !r.o.Keep {
			newAPIFS(ctx, c, "/").RemoveAll(root[1:])
		}
	}()
	const job = "bench"
	// A first save of a new client pays for memory it has not touched
	// yet (write buffers: up to 4 extents in flight per shard), and so do
	// the OSTs: an unmeasured save of up to 512 MiB warms both up.
	warm, _ := r.ckptAPIShardsSized(0, min(size, 512<<20))
	if _, err := st.Save(ctx, job, 0, warm); err != nil {
		_, err = r.try(ctx, api, "ckptapi warm-up", err)
		return err
	}
	m, ok, err = r.timed(ctx, api, "ckptapi.save", func() (int64, int64, error) {
		_, err := st.Save(ctx, job, 1, shards)
		return size, ckptAPIShards, err
	})
	if err != nil || !ok {
		return err
	}
	r.vals.set("ckptapi.save", "MiB/s", pathAPI, m.mibps())

	if err := r.coldCaches(); err != nil {
		return err
	}
	m, ok, err = r.timed(ctx, api, "ckptapi.restore", func() (int64, int64, error) {
		// A new client (the target's cold reader): nothing cached.
		fs, release, err := api.readFS()
		if err != nil {
			return 0, 0, err
		}
		defer release()
		st2, err := ckpt.New(fs.(*apiFS).c, ckpt.Options{Root: root})
		if err != nil {
			return 0, 0, err
		}
		defer st2.Close()
		cp, err := st2.Restore(ctx, job, ckpt.Latest)
		if err == nil && !cp.Verified {
			err = fmt.Errorf("restore was not verified")
		}
		return size, ckptAPIShards, err
	})
	if err != nil || !ok {
		return err
	}
	r.vals.set("ckptapi.restore", "MiB/s", pathAPI, m.mibps())

	// SaveAsync of steps 2 and 3, every tensor changed each time: the
	// caller's stall. The first allocates the staging memory, the second
	// reuses it (as every save of a training run after its first does):
	// the figure is the second's.
	var next []ckpt.Shard
	var stalls []time.Duration
	var res *ckpt.SaveResult
	for step := int64(2); step <= 3; step++ {
		next, _ = r.ckptAPIShardsOf(step)
		var p *ckpt.Pending
		_, ok, err = r.timed(ctx, api, fmt.Sprintf("ckptapi.async (%d)", step-1), func() (int64, int64, error) {
			var err error
			if p, err = st.SaveAsync(ctx, job, step, next); err != nil {
				return 0, 0, err
			}
			res, err = p.Wait(ctx)
			return size, ckptAPIShards, err
		})
		if err != nil || !ok {
			return err
		}
		stalls = append(stalls, p.Stall)
		r.note("ckpt-api: SaveAsync %d of %d MiB held the caller %v; its flush took %v; %d of %d bytes shared with step %v",
			step-1, size>>20, p.Stall.Round(time.Millisecond), res.Elapsed.Round(time.Millisecond), res.Manifest.Shared, res.Manifest.Bytes, baseOf(res.Manifest))
	}
	r.vals.set("ckptapi.async", "MiB/s", pathAPI, float64(size)/(1<<20)/stalls[1].Seconds())

	// Step 4 with nothing changed: every tensor shared.
	var cres *ckpt.SaveResult
	m, ok, err = r.timed(ctx, api, "ckptapi.clone", func() (int64, int64, error) {
		var err error
		cres, err = st.Save(ctx, job, 4, next)
		return size, ckptAPIShards, err
	})
	if err != nil || !ok {
		return err
	}
	r.vals.set("ckptapi.clone", "MiB/s", pathAPI, m.mibps())
	r.note("ckpt-api: the unchanged step wrote %d bytes and shared %d", cres.Manifest.Written, cres.Manifest.Shared)
	return nil
}

func baseOf(m *ckpt.Manifest) string {
	if m.Base == nil {
		return "none"
	}
	return fmt.Sprint(*m.Base)
}

// writeSafetensorsFile writes a shard as a safetensors file on the local
// disk (the same header the API writes), then fsyncs it.
func writeSafetensorsFile(p string, sh *ckpt.Shard) error {
	specs := make([]safetensors.Spec, len(sh.Tensors))
	for i, t := range sh.Tensors {
		specs[i] = safetensors.Spec{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	_, hdr, err := safetensors.Layout(sh.Metadata, specs)
	if err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	off := int64(len(hdr))
	_, err = f.WriteAt(hdr, 0)
	for i := 0; err == nil && i < len(sh.Tensors); i++ {
		_, err = f.WriteAt(sh.Tensors[i].Data, off)
		off += int64(len(sh.Tensors[i].Data))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
