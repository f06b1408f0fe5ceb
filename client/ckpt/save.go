package ckpt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
)

// Shard is one file of a checkpoint to save. A shard with Tensors (or
// Metadata, or Header) is written as a safetensors file, the tensors in
// the order given, its data starting at a 4 KiB boundary (or, with
// Header, where that header puts it); any other shard is an opaque blob (optimizer scalars, data-loader position, RNG
// state: any bytes) stored as Blob.
type Shard struct {
	Name     string // file name in the step directory (no '/'; not manifest.json)
	Metadata map[string]string
	Tensors  []Tensor
	Blob     []byte
	// Header, when set, is the safetensors header of a file another
	// writer made: its first bytes up to the data (the 8-byte length,
	// the JSON, its padding). Save stores it byte for byte instead of
	// laying out a header of its own, and places each tensor where it
	// says, so that the shard's file is the original file, whatever the
	// JSON's spacing, key order or padding (`shoal ckpt save --from`
	// passes it). Tensors must be the header's tensors in data order
	// (safetensors.Decode's order: name, dtype and shape each), and
	// Metadata nil (the header's is recorded) or equal to the header's.
	Header []byte
}

// Tensor is one tensor of a shard: raw little-endian bytes, row major, as
// safetensors stores them.
type Tensor struct {
	Name  string
	DType safetensors.DType
	Shape []int64
	Data  []byte
	// Reuse says that the bytes equal the base step's tensor of the same
	// name in the same shard (frozen weights): the save shares them
	// without hashing Data, which may then be nil. Without it, a tensor
	// whose digest equals the base's is shared all the same.
	Reuse bool
}

// Size returns the tensor's byte size as its dtype and shape say.
func (t *Tensor) Size() (int64, error) { return safetensors.ByteSize(t.DType, t.Shape) }

// SaveOption changes one Save.
type SaveOption func(*saveOpts)

type saveOpts struct {
	base    *int64
	noReuse bool
	pin     bool
}

// Base names the step whose data the save may share (it must be a
// committed step with a manifest). By default the save shares with the
// newest committed step before it that has a manifest.
func Base(step int64) SaveOption { return func(o *saveOpts) { o.base = &step } }

// NoReuse makes the save write every byte, sharing nothing.
func NoReuse() SaveOption { return func(o *saveOpts) { o.noReuse = true } }

// Pin commits the checkpoint pinned: retention never deletes it.
func Pin() SaveOption { return func(o *saveOpts) { o.pin = true } }

// SaveResult is the outcome of a committed save.
type SaveResult struct {
	Manifest *Manifest
	Elapsed  time.Duration
	// Pruned lists the steps the retention policy deleted after the
	// commit; PruneErr is that pass's error (the checkpoint is committed
	// whatever it says).
	Pruned   []int64
	PruneErr error
}

// baseStep is the committed step a save shares with.
type baseStep struct {
	step int64
	ino  uint64
	man  *Manifest
}

// Save writes a checkpoint of job at step and commits it atomically: all
// shards are written in parallel into a staging directory, the manifest
// last, and one rename makes the whole checkpoint visible. Tensors and
// blobs whose bytes equal the base step's are shared with it (cloned in
// the MDS), not written. On an error the staging directory is removed;
// after a crash GC removes it. The caller's buffers may be reused once
// Save returns.
func (s *Store) Save(ctx context.Context, job string, step int64, shards []Shard, opts ...SaveOption) (res *SaveResult, err error) {
	var so saveOpts
	for _, o := range opts {
		o(&so)
	}
	if err := checkSave(job, step, shards); err != nil {
		return nil, err
	}
	start := s.o.Now()
	jobIno, base, err := s.beginSave(ctx, job, step, so)
	if err != nil {
		return nil, err
	}

	staging := stagingName(step)
	st, err := s.c.MkdirIn(ctx, jobIno, staging, client.CreateOptions{Mode: dirMode})
	if err != nil {
		return nil, fmt.Errorf("ckpt: staging directory: %w", err)
	}
	defer func() {
		var crash *crashError
		if err == nil || errors.As(err, &crash) {
			return
		}
		// Best effort: what is left is collected by GC after StaleAfter.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if cerr := s.trash(cctx, jobIno, staging); cerr != nil {
			s.log.Debug("ckpt: remove staging directory after a failed save", "dir", staging, "err", cerr)
		}
	}()
	if err := s.hook(Point{Phase: PhaseStaging}); err != nil {
		return nil, err
	}
	stopBeat := s.heartbeat(ctx, st.Ino)
	defer stopBeat()

	// The shards, in parallel.
	var total int64
	for i := range shards {
		total += shardSize(&shards[i])
	}
	var done atomic.Int64
	prog := func(n int64) { s.progress("save", job, step, done.Add(n), total) }
	entries := make([]ShardEntry, len(shards))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.o.Parallelism)
	for i := range shards {
		g.Go(func() error {
			e, err := s.saveShard(gctx, st.Ino, &shards[i], base, so.noReuse || s.o.NoReuse, prog)
			if err != nil {
				return err
			}
			entries[i] = *e
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	m := &Manifest{
		Format: FormatV1, Job: job, Step: step, Created: start.UTC(), Writer: writerSave,
		Checksum: ChecksumXXH64, Shards: entries,
	}
	for _, e := range entries {
		m.Bytes += e.Size
		m.Shared += e.Shared
	}
	m.Written = m.Bytes - m.Shared
	if m.Shared > 0 {
		m.Base = &base.step
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("ckpt: manifest of %s step %d: %v: %w", job, step, err, errs.ErrInvalid)
	}
	mb, err := m.Encode()
	if err != nil {
		return nil, err
	}
	if err := s.writeNewFile(ctx, st.Ino, ManifestName, mb); err != nil {
		return nil, fmt.Errorf("ckpt: write manifest: %w", err)
	}
	if err := s.hook(Point{Phase: PhaseManifest}); err != nil {
		return nil, err
	}
	if so.pin {
		if _, err := s.c.SetXattr(ctx, st.Ino, pinXattr, []byte("1"), 0); err != nil {
			return nil, fmt.Errorf("ckpt: pin: %w", err)
		}
	}
	if err := s.hook(Point{Phase: PhaseCommit}); err != nil {
		return nil, err
	}
	stopBeat()
	// The commit: one rename, one MDS transaction.
	if err := s.c.RenameIn(ctx, jobIno, staging, jobIno, StepName(step), client.RenameNoReplace); err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			return nil, fmt.Errorf("ckpt: commit %s step %d: the staging directory was collected as stale (no change for %v): %w", job, step, s.o.StaleAfter, err)
		}
		return nil, fmt.Errorf("ckpt: commit %s step %d: %w", job, step, err)
	}
	// A client with early namespace replies has the rename acknowledged
	// before it is durable: wait for it (a no-op otherwise).
	if err := s.c.SyncNamespace(ctx); err != nil {
		return nil, fmt.Errorf("ckpt: commit %s step %d: sync: %w", job, step, err)
	}
	res = &SaveResult{Manifest: m}
	if err := s.hook(Point{Phase: PhaseDone}); err != nil {
		return res, err
	}
	if !s.o.Retention.IsZero() {
		res.Pruned, res.PruneErr = s.Prune(ctx, job, s.o.Retention)
	}
	res.Elapsed = s.o.Now().Sub(start)
	return res, nil
}

// checkSave checks a save's arguments before anything is written.
func checkSave(job string, step int64, shards []Shard) error {
	if err := checkName("job", job); err != nil {
		return fmt.Errorf("ckpt: %w", err)
	}
	if err := checkStep(step); err != nil {
		return fmt.Errorf("ckpt: %w", err)
	}
	seen := make(map[string]bool, len(shards))
	for i := range shards {
		sh := &shards[i]
		if err := checkShardName(sh.Name); err != nil {
			return fmt.Errorf("ckpt: %w", err)
		}
		if seen[sh.Name] {
			return fmt.Errorf("ckpt: shard %q twice: %w", sh.Name, errs.ErrInvalid)
		}
		seen[sh.Name] = true
		if isSafetensors(sh) && sh.Blob != nil {
			return fmt.Errorf("ckpt: shard %q has both tensors and a blob: %w", sh.Name, errs.ErrInvalid)
		}
		for j := range sh.Tensors {
			t := &sh.Tensors[j]
			n, err := t.Size()
			if err != nil {
				return fmt.Errorf("ckpt: shard %q tensor %q: %w", sh.Name, t.Name, err)
			}
			if (t.Data != nil || !t.Reuse) && int64(len(t.Data)) != n {
				return fmt.Errorf("ckpt: shard %q tensor %q: %s%v is %d bytes, data has %d: %w",
					sh.Name, t.Name, t.DType, t.Shape, n, len(t.Data), errs.ErrInvalid)
			}
		}
	}
	return nil
}

func isSafetensors(sh *Shard) bool {
	return sh.Tensors != nil || sh.Metadata != nil || sh.Header != nil
}

// shardSize is the bytes a shard's data takes (headers not counted).
func shardSize(sh *Shard) int64 {
	if !isSafetensors(sh) {
		return int64(len(sh.Blob))
	}
	var n int64
	for j := range sh.Tensors {
		sz, _ := sh.Tensors[j].Size()
		n += sz
	}
	return n
}

// beginSave makes job's directory (ranks that start together may make
// it at once: MkdirAll takes one made since its lookup as made) and
// returns its inode and the base step of a save of step (nil: none), or
// an error when step is already committed.
func (s *Store) beginSave(ctx context.Context, job string, step int64, so saveOpts) (uint64, *baseStep, error) {
	if err := s.c.MkdirAll(ctx, s.jobDir(job), dirMode); err != nil {
		return 0, nil, fmt.Errorf("ckpt: job directory %s: %w", s.jobDir(job), err)
	}
	jobAttr, err := s.c.Stat(ctx, s.jobDir(job))
	if err != nil {
		return 0, nil, fmt.Errorf("ckpt: job directory %s: %w", s.jobDir(job), err)
	}
	steps, err := s.listSteps(ctx, job, jobAttr.Ino, false)
	if err != nil {
		return 0, nil, err
	}
	for _, in := range steps {
		if in.Step == step {
			return 0, nil, fmt.Errorf("ckpt: %s step %d is already committed (%s): %w", job, step, in.Name, errs.ErrExists)
		}
	}
	base, err := s.findBase(ctx, job, steps, step, so)
	if err != nil {
		return 0, nil, err
	}
	return jobAttr.Ino, base, nil
}

// findBase returns the step a save of step shares with: the one named by
// Base, or the newest committed step before it whose manifest reads; nil
// when reuse is off or there is none.
func (s *Store) findBase(ctx context.Context, job string, steps []Info, step int64, so saveOpts) (*baseStep, error) {
	if so.noReuse || s.o.NoReuse {
		return nil, nil
	}
	if so.base != nil {
		for _, in := range steps {
			if in.Step == *so.base {
				m, err := s.readManifest(ctx, in.Ino)
				if err != nil {
					return nil, fmt.Errorf("ckpt: base %s step %d: %w", job, *so.base, err)
				}
				return &baseStep{step: in.Step, ino: in.Ino, man: m}, nil
			}
		}
		return nil, fmt.Errorf("ckpt: base %s step %d: %w", job, *so.base, errs.ErrNotFound)
	}
	tried := 0
	for i := len(steps) - 1; i >= 0 && tried < 3; i-- {
		in := steps[i]
		if in.Step >= step {
			continue
		}
		tried++
		m, err := s.readManifest(ctx, in.Ino)
		if err != nil {
			s.log.Debug("ckpt: no base in step", "job", job, "step", in.Step, "err", err)
			continue
		}
		return &baseStep{step: in.Step, ino: in.Ino, man: m}, nil
	}
	return nil, nil
}

// heartbeat touches directory ino every StaleAfter/8 until the returned
// function is called (which waits for it to stop; calling it twice is
// fine), so that GC never takes a running save for a dead one.
func (s *Store) heartbeat(ctx context.Context, ino uint64) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(s.o.StaleAfter/8, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := s.c.SetAttr(ctx, ino, client.SetAttrs{Valid: client.SetMtimeNow}); err != nil {
				s.log.Debug("ckpt: touch staging directory", "ino", ino, "err", err)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// shardPlan is how one shard is saved: its manifest entry and what is
// cloned from the base and what written.
type shardPlan struct {
	e      ShardEntry
	header []byte // safetensors: the encoded header
	whole  bool   // the whole file is the base's (one clone, no writes)
	// ranges cloned from the base shard (coalesced); writes are the
	// tensors (or the blob) not shared.
	ranges []client.CloneRange
	writes []write
}

type write struct {
	off  int64
	data []byte
}

// coalesce merges the writes (sorted by offset) that are one run both in
// the file and in memory: tensors that are slices of one buffer, in file
// order (a safetensors file mapped by `ckpt save --from`, a framework's
// flat parameter buffer). A merged run of an extent or more goes to the
// OSTs straight from the caller's memory (File.WriteAtStable), where
// tensors apart, each under an extent, are copied into the File's write
// buffer first: that copy was a quarter of `ckpt save --from`'s CPU
// (docs/performance.md). The writes themselves are kept as they are for
// sampling (rawSpans: one dtype each).
func coalesce(ws []write) []write {
	var out []write
	for _, w := range ws {
		if n := len(out); n > 0 {
			last := &out[n-1]
			l := len(last.data)
			if last.off+int64(l) == w.off && len(w.data) > 0 && cap(last.data)-l >= len(w.data) &&
				unsafe.Pointer(unsafe.SliceData(last.data[l:])) == unsafe.Pointer(unsafe.SliceData(w.data)) {
				last.data = last.data[:l+len(w.data)]
				continue
			}
		}
		out = append(out, w)
	}
	return out
}

// planShard lays a shard out, computes its digests and decides what it
// shares with the base shard bs (nil: nothing).
func planShard(sh *Shard, bs *ShardEntry, noReuse bool) (*shardPlan, error) {
	p := &shardPlan{}
	if !isSafetensors(sh) {
		p.e = ShardEntry{Name: sh.Name, Kind: KindBlob, Size: int64(len(sh.Blob)), Digest: sumBytes(sh.Blob)}
		if !noReuse && bs != nil && bs.Kind == KindBlob && bs.Size == p.e.Size && bs.Digest == p.e.Digest && p.e.Size > 0 {
			p.whole = true
			p.e.Shared = p.e.Size
			p.ranges = []client.CloneRange{{SrcOff: 0, DstOff: 0, Length: p.e.Size}}
			return p, nil
		}
		p.writes = []write{{0, sh.Blob}}
		return p, nil
	}
	h, hdr, err := shardHeader(sh)
	if err != nil {
		return nil, err
	}
	if bs != nil && bs.Kind != KindSafetensors {
		bs = nil
	}
	p.header = hdr
	p.e = ShardEntry{
		Name: sh.Name, Kind: KindSafetensors, Size: h.FileSize(), DataStart: h.DataStart(),
		HeaderDigest: sumBytes(hdr), Metadata: h.Metadata,
		Tensors: make([]TensorEntry, len(sh.Tensors)),
	}
	digests := make([]string, len(sh.Tensors))
	allShared := true
	type span struct{ src, dst, n int64 }
	var spans []span
	for i := range sh.Tensors {
		t := &sh.Tensors[i]
		ti := h.Tensors[i]
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		te := TensorEntry{Name: t.Name, DType: t.DType, Shape: shape, Offset: h.DataStart() + ti.Begin, Length: ti.Size()}
		var bt *TensorEntry
		if bs != nil && !noReuse {
			if x, ok := bs.Tensor(t.Name); ok && x.DType == t.DType && slices.Equal(x.Shape, shape) && x.Length == te.Length {
				bt = x
			}
		}
		switch {
		case t.Reuse && bt != nil:
			te.Digest, te.Shared = bt.Digest, true
		case t.Data == nil && t.Reuse && te.Length > 0:
			return nil, fmt.Errorf("shard %q tensor %q: Reuse without data, and the base step has no such tensor of the same dtype and shape: %w",
				sh.Name, t.Name, errs.ErrInvalid)
		default:
			te.Digest = sumBytes(t.Data)
			te.Shared = bt != nil && bt.Digest == te.Digest
		}
		if te.Shared && te.Length > 0 {
			spans = append(spans, span{bt.Offset, te.Offset, te.Length})
			p.e.Shared += te.Length
		} else if !te.Shared {
			allShared = false
			if te.Length > 0 {
				p.writes = append(p.writes, write{te.Offset, t.Data})
			}
		}
		digests[i] = te.Digest
		p.e.Tensors[i] = te
	}
	p.e.Digest = shardDigest(p.e.HeaderDigest, digests)
	if bs != nil && allShared && bs.HeaderDigest == p.e.HeaderDigest && bs.Size == p.e.Size && !noReuse {
		// Same header, every tensor shared: the base's file as it is.
		p.whole = true
		p.e.Shared = p.e.Size
		p.ranges = []client.CloneRange{{SrcOff: 0, DstOff: 0, Length: p.e.Size}}
		p.writes = nil
		return p, nil
	}
	// The header first: a write at 0 continued by the first tensor's is
	// one buffer in the client.
	p.writes = append([]write{{0, hdr}}, p.writes...)
	for _, sp := range spans {
		if n := len(p.ranges); n > 0 {
			last := &p.ranges[n-1]
			if last.SrcOff+last.Length == sp.src && last.DstOff+last.Length == sp.dst {
				last.Length += sp.n
				continue
			}
		}
		p.ranges = append(p.ranges, client.CloneRange{SrcOff: sp.src, DstOff: sp.dst, Length: sp.n})
	}
	return p, nil
}

// shardHeader returns the header of a safetensors shard and its bytes
// (the file's first DataStart bytes): the caller's Header, kept byte for
// byte once checked against the shard's tensors and metadata, or one laid
// out here with the data 4 KiB aligned.
func shardHeader(sh *Shard) (*safetensors.Header, []byte, error) {
	if sh.Header == nil {
		specs := make([]safetensors.Spec, len(sh.Tensors))
		for i, t := range sh.Tensors {
			specs[i] = safetensors.Spec{Name: t.Name, DType: t.DType, Shape: t.Shape}
		}
		h, hdr, err := safetensors.Layout(sh.Metadata, specs)
		if err != nil {
			return nil, nil, fmt.Errorf("shard %q: %w", sh.Name, err)
		}
		return h, hdr, nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("shard %q: Header: "+format+": %w", append([]any{sh.Name}, append(args, errs.ErrInvalid)...)...)
	}
	hdr := sh.Header
	n, err := safetensors.HeaderLen(hdr, int64(len(hdr)))
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	if 8+n != int64(len(hdr)) {
		return nil, nil, bad("%d bytes, its length field says %d (the bytes before the data, no more)", len(hdr), 8+n)
	}
	var dataLen int64
	for i := range sh.Tensors {
		sz, err := sh.Tensors[i].Size() // checkSave checked it
		if err != nil {
			return nil, nil, fmt.Errorf("shard %q tensor %q: %w", sh.Name, sh.Tensors[i].Name, err)
		}
		dataLen += sz
	}
	h, err := safetensors.Decode(hdr, int64(len(hdr))+dataLen)
	if err != nil {
		return nil, nil, bad("%v (with the %d data bytes of Tensors)", err, dataLen)
	}
	if len(h.Tensors) != len(sh.Tensors) {
		return nil, nil, bad("%d tensors, Tensors has %d", len(h.Tensors), len(sh.Tensors))
	}
	for i, ti := range h.Tensors {
		t := &sh.Tensors[i]
		if ti.Name != t.Name || ti.DType != t.DType || !slices.Equal(ti.Shape, t.Shape) {
			return nil, nil, bad("tensor %d in data order is %q %s%v, Tensors[%d] is %q %s%v", i, ti.Name, ti.DType, ti.Shape, i, t.Name, t.DType, t.Shape)
		}
	}
	if sh.Metadata != nil && !maps.Equal(sh.Metadata, h.Metadata) {
		return nil, nil, bad("metadata %v, Metadata %v", h.Metadata, sh.Metadata)
	}
	return h, hdr, nil
}

// unshare turns a plan's shared ranges into writes, when the base went
// away before the clone: possible only when the caller gave every shared
// tensor's data.
func (p *shardPlan) unshare(sh *Shard) bool {
	if !isSafetensors(sh) {
		p.whole, p.ranges, p.e.Shared = false, nil, 0
		p.writes = []write{{0, sh.Blob}}
		return true
	}
	var ws []write
	for i := range sh.Tensors {
		te := &p.e.Tensors[i]
		if te.Shared {
			if sh.Tensors[i].Data == nil && te.Length > 0 {
				return false
			}
			te.Shared = false
		}
		if te.Length > 0 {
			ws = append(ws, write{te.Offset, sh.Tensors[i].Data})
		}
	}
	p.whole, p.ranges, p.e.Shared = false, nil, 0
	p.writes = append([]write{{0, p.header}}, ws...)
	return true
}

// saveShard writes one shard into the staging directory dir.
func (s *Store) saveShard(ctx context.Context, dir uint64, sh *Shard, base *baseStep, noReuse bool, prog func(int64)) (*ShardEntry, error) {
	var bs *ShardEntry
	if base != nil {
		bs, _ = base.man.Shard(sh.Name)
	}
	p, err := planShard(sh, bs, noReuse)
	if err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	a, err := s.c.CreateIn(ctx, dir, sh.Name, client.CreateOptions{Mode: fileMode, Exclusive: true})
	if err != nil {
		return nil, fmt.Errorf("ckpt: create shard %q: %w", sh.Name, err)
	}
	if err := s.hook(Point{Phase: PhaseCreate, Shard: sh.Name}); err != nil {
		return nil, err
	}
	if len(p.ranges) > 0 {
		err := s.clone(ctx, base.ino, sh.Name, a.Ino, p.ranges)
		switch {
		case err == nil && p.whole:
			prog(shardSize(sh)) // progress counts data bytes, not headers
		case err == nil:
			prog(p.e.Shared)
		case errors.Is(err, errs.ErrNotFound) && p.unshare(sh):
			s.log.Debug("ckpt: base shard gone; writing instead", "shard", sh.Name, "err", err)
		default:
			return nil, fmt.Errorf("ckpt: shard %q: share with step %d: %w", sh.Name, base.step, err)
		}
		if err := s.hook(Point{Phase: PhaseClone, Shard: sh.Name}); err != nil {
			return nil, err
		}
	}
	if len(p.writes) > 0 {
		f, err := s.c.OpenIno(ctx, a.Ino)
		if err != nil {
			return nil, fmt.Errorf("ckpt: open shard %q: %w", sh.Name, err)
		}
		var raw []span
		if !s.o.NoCompression {
			raw = s.rawSpans(&p.e, p.writes)
		}
		if err := f.SetCompression(s.shardCompression(&p.e, raw)); err != nil { // compress.go
			f.Close(ctx)
			return nil, fmt.Errorf("ckpt: shard %q: %w", sh.Name, err)
		}
		piece := 0
		for _, w := range coalesce(p.writes) {
			err = writePieces(ctx, f, w.data, w.off, func(int) error {
				piece++
				return s.hook(Point{Phase: PhaseWrite, Shard: sh.Name, Piece: piece - 1})
			})
			var crash *crashError
			if errors.As(err, &crash) {
				return nil, err // as if the process died: the file stays open
			}
			if err != nil {
				break
			}
			if w.off > 0 || !isSafetensors(sh) {
				prog(int64(len(w.data)))
			}
		}
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("ckpt: write shard %q: %w", sh.Name, err)
		}
	}
	if err := s.hook(Point{Phase: PhaseClose, Shard: sh.Name}); err != nil {
		return nil, err
	}
	got, err := s.c.GetAttr(ctx, a.Ino)
	if err != nil {
		return nil, fmt.Errorf("ckpt: shard %q: %w", sh.Name, err)
	}
	if int64(got.Size) != p.e.Size {
		return nil, fmt.Errorf("ckpt: shard %q is %d bytes after the save, want %d: %w", sh.Name, got.Size, p.e.Size, errs.ErrCorrupt)
	}
	return &p.e, nil
}

// clone shares ranges of shard name of the base step (directory baseDir)
// into file dst, in one MDS transaction.
func (s *Store) clone(ctx context.Context, baseDir uint64, name string, dst uint64, ranges []client.CloneRange) error {
	src, err := s.c.Lookup(ctx, baseDir, name)
	if err != nil {
		return err
	}
	return s.c.CloneRanges(ctx, src.Ino, dst, ranges)
}
