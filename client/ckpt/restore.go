package ckpt

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/errs"
)

// readsPerShard is how many pieces of one shard are read at once.
const readsPerShard = 4

// RestoreOption changes one Restore.
type RestoreOption func(*restoreOpts)

type restoreOpts struct {
	shards   map[string]bool
	sel      func(shard, tensor string) bool
	noVerify bool
	into     func(shard string, t TensorEntry) []byte
}

// Shards restores only the named shards.
func Shards(names ...string) RestoreOption {
	return func(o *restoreOpts) {
		o.shards = map[string]bool{}
		for _, n := range names {
			o.shards[n] = true
		}
	}
}

// Select restores only the tensors for which fn returns true (blobs are
// asked with tensor ""): a rank reads only what it needs.
func Select(fn func(shard, tensor string) bool) RestoreOption {
	return func(o *restoreOpts) { o.sel = fn }
}

// NoVerify skips the checksums (the OSTs still check their blocks).
func NoVerify() RestoreOption { return func(o *restoreOpts) { o.noVerify = true } }

// Into reads each tensor into the buffer fn returns (len must be
// t.Length; nil: a new one), e.g. pinned memory for a device copy.
func Into(fn func(shard string, t TensorEntry) []byte) RestoreOption {
	return func(o *restoreOpts) { o.into = fn }
}

// Checkpoint is a restored checkpoint.
type Checkpoint struct {
	Info Info
	// Manifest is the checkpoint's manifest or, for a mount-protocol
	// checkpoint not yet verified, one described from its files without
	// digests.
	Manifest *Manifest
	// Verified is set when every restored byte was checked against the
	// manifest's digests.
	Verified bool
	Shards   []RestoredShard // the selected shards, in manifest order
}

// RestoredShard is one restored shard.
type RestoredShard struct {
	Name     string
	Kind     string
	Metadata map[string]string
	// Header is a safetensors shard's header as stored: the file's
	// bytes before the data (data_start of them), checked against the
	// manifest. Followed by every tensor's Data in data order, it is the
	// file byte for byte, as its writer made it.
	Header  []byte
	Tensors []Tensor // the selected tensors, in data order
	Blob    []byte
}

// Shard returns the restored shard called name, or nil.
func (c *Checkpoint) Shard(name string) *RestoredShard {
	for i := range c.Shards {
		if c.Shards[i].Name == name {
			return &c.Shards[i]
		}
	}
	return nil
}

// Tensor returns the restored tensor called name, or nil.
func (r *RestoredShard) Tensor(name string) *Tensor {
	for i := range r.Tensors {
		if r.Tensors[i].Name == name {
			return &r.Tensors[i]
		}
	}
	return nil
}

// CorruptError names the shard and tensor whose bytes do not match the
// manifest. It wraps errs.ErrCorrupt.
type CorruptError struct {
	Job    string
	Step   int64
	Shard  string
	Tensor string // "" for a blob or the shard as a whole; "(header)" for a safetensors header
	Want   string // the manifest's digest
	Got    string
	Detail string // instead of digests: what else is wrong (size, header)
}

func (e *CorruptError) Error() string {
	what := fmt.Sprintf("shard %q", e.Shard)
	if e.Tensor != "" {
		what += fmt.Sprintf(" tensor %q", e.Tensor)
	}
	if e.Detail != "" {
		return fmt.Sprintf("ckpt: %s step %d %s: %s: %v", e.Job, e.Step, what, e.Detail, errs.ErrCorrupt)
	}
	return fmt.Sprintf("ckpt: %s step %d %s: xxh64 %s, the manifest says %s: %v", e.Job, e.Step, what, e.Got, e.Want, errs.ErrCorrupt)
}

func (e *CorruptError) Unwrap() error { return errs.ErrCorrupt }

// headerTensor is CorruptError.Tensor for a safetensors header.
const headerTensor = "(header)"

// Restore reads a checkpoint (step may be Latest): every selected shard in
// parallel, every tensor checked against the manifest's digest; a
// mismatch fails the restore with a *CorruptError naming the shard and
// tensor. Reads survive up to m OSTs down (the client rebuilds from
// parity).
func (s *Store) Restore(ctx context.Context, job string, step int64, opts ...RestoreOption) (*Checkpoint, error) {
	var ro restoreOpts
	for _, o := range opts {
		o(&ro)
	}
	in, err := s.Stat(ctx, job, step)
	if err != nil {
		return nil, err
	}
	m, verified, err := s.manifestOrDescribe(ctx, in)
	if err != nil {
		return nil, err
	}
	out := &Checkpoint{Info: in, Manifest: m, Verified: verified && !ro.noVerify}
	type todo struct {
		e  *ShardEntry
		rs *RestoredShard
		ts []int // indexes of the selected tensors
	}
	var todos []todo
	var total int64
	for i := range m.Shards {
		e := &m.Shards[i]
		if ro.shards != nil && !ro.shards[e.Name] {
			continue
		}
		t := todo{e: e}
		if e.Kind == KindSafetensors {
			for j, te := range e.Tensors {
				if ro.sel == nil || ro.sel(e.Name, te.Name) {
					t.ts = append(t.ts, j)
					total += te.Length
				}
			}
		} else {
			if ro.sel != nil && !ro.sel(e.Name, "") {
				continue
			}
			total += e.Size
		}
		todos = append(todos, t)
	}
	for name := range ro.shards {
		if _, ok := m.Shard(name); !ok {
			return nil, fmt.Errorf("ckpt: %s step %d has no shard %q: %w", job, in.Step, name, errs.ErrNotFound)
		}
	}
	out.Shards = make([]RestoredShard, len(todos))
	var done atomic.Int64
	prog := func(n int64) { s.progress("restore", job, in.Step, done.Add(n), total) }
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.o.Parallelism)
	for i, t := range todos {
		rs := &out.Shards[i]
		*rs = RestoredShard{Name: t.e.Name, Kind: t.e.Kind, Metadata: t.e.Metadata}
		g.Go(func() error {
			return s.restoreShard(gctx, in, t.e, t.ts, rs, out.Verified, ro.into, prog)
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// manifestOrDescribe returns a checkpoint's manifest (verified true) or,
// when it has none, a description of its files without digests.
func (s *Store) manifestOrDescribe(ctx context.Context, in Info) (*Manifest, bool, error) {
	m, err := s.readManifest(ctx, in.Ino)
	if err == nil {
		return m, true, nil
	}
	if !errors.Is(err, errs.ErrNotFound) {
		return nil, false, fmt.Errorf("ckpt: %s step %d: %w", in.Job, in.Step, err)
	}
	m, probs, err := s.describe(ctx, in)
	if err != nil {
		return nil, false, err
	}
	if len(probs) > 0 {
		return nil, false, probs[0].Err
	}
	return m, false, nil
}

// openShard opens shard e of checkpoint in and checks its size.
func (s *Store) openShard(ctx context.Context, in Info, e *ShardEntry) (*client.File, error) {
	f, err := s.c.Open(ctx, path.Join(s.jobDir(in.Job), in.Name, e.Name))
	if err != nil {
		return nil, fmt.Errorf("ckpt: %s step %d shard %q: %w", in.Job, in.Step, e.Name, err)
	}
	if f.Size() != e.Size {
		f.Close(ctx)
		return nil, &CorruptError{Job: in.Job, Step: in.Step, Shard: e.Name, Detail: fmt.Sprintf("%d bytes, the manifest says %d", f.Size(), e.Size)}
	}
	return f, nil
}

// openShardOf opens the file of one shard of job's step (step may be
// Latest) and returns it with the checkpoint, the shard's entry and
// whether the entry has digests to check the bytes against (false for a
// checkpoint without a manifest). The caller closes the file.
func (s *Store) openShardOf(ctx context.Context, job string, step int64, shard string) (*client.File, Info, *ShardEntry, bool, error) {
	in, err := s.Stat(ctx, job, step)
	if err != nil {
		return nil, Info{}, nil, false, err
	}
	m, verified, err := s.manifestOrDescribe(ctx, in)
	if err != nil {
		return nil, Info{}, nil, false, err
	}
	e, ok := m.Shard(shard)
	if !ok {
		return nil, Info{}, nil, false, fmt.Errorf("ckpt: %s step %d has no shard %q: %w", job, in.Step, shard, errs.ErrNotFound)
	}
	f, err := s.openShard(ctx, in, e)
	if err != nil {
		return nil, Info{}, nil, false, err
	}
	return f, in, e, verified, nil
}

// checkHeader reads a safetensors shard's header (the file's first
// DataStart bytes, returned as stored), checks its digest (when verify)
// and that it describes the tensors the manifest lists.
func (s *Store) checkHeader(ctx context.Context, in Info, f *client.File, e *ShardEntry, verify bool) ([]byte, error) {
	bad := func(detail string) error {
		return &CorruptError{Job: in.Job, Step: in.Step, Shard: e.Name, Tensor: headerTensor, Detail: detail}
	}
	if e.DataStart > safetensors.MaxHeaderSize+8 {
		return nil, bad(fmt.Sprintf("data start %d", e.DataStart))
	}
	hdr := make([]byte, e.DataStart)
	// Uncached, as the tensors after it: a cached read at 0 would start the
	// read-ahead of the rows after it, bytes the tensors then read again.
	if err := readFullWith(ctx, f.ReadAtUncached, hdr, 0); err != nil {
		return nil, fmt.Errorf("ckpt: %s step %d shard %q: read header: %w", in.Job, in.Step, e.Name, err)
	}
	if verify {
		if got := sumBytes(hdr); got != e.HeaderDigest {
			return nil, &CorruptError{Job: in.Job, Step: in.Step, Shard: e.Name, Tensor: headerTensor, Want: e.HeaderDigest, Got: got}
		}
	}
	h, err := safetensors.Decode(hdr, e.Size)
	if err != nil {
		return nil, bad(err.Error())
	}
	if h.DataStart() != e.DataStart || len(h.Tensors) != len(e.Tensors) {
		return nil, bad("the header and the manifest disagree")
	}
	for i, t := range h.Tensors {
		te := e.Tensors[i]
		if t.Name != te.Name || t.DType != te.DType || h.DataStart()+t.Begin != te.Offset || t.Size() != te.Length {
			return nil, bad(fmt.Sprintf("tensor %q: the header and the manifest disagree", t.Name))
		}
	}
	return hdr, nil
}

// restoreShard reads the selected tensors (or the blob) of one shard.
func (s *Store) restoreShard(ctx context.Context, in Info, e *ShardEntry, sel []int, rs *RestoredShard, verify bool,
	into func(string, TensorEntry) []byte, prog func(int64)) error {
	f, err := s.openShard(ctx, in, e)
	if err != nil {
		return err
	}
	defer f.Close(ctx)
	if e.Kind == KindBlob {
		rs.Blob = make([]byte, e.Size)
		if err := readParallel(ctx, f, []span{{off: 0, buf: rs.Blob}}, prog); err != nil {
			return fmt.Errorf("ckpt: %s step %d shard %q: %w", in.Job, in.Step, e.Name, err)
		}
		if got := sumBytes(rs.Blob); verify && got != e.Digest {
			return &CorruptError{Job: in.Job, Step: in.Step, Shard: e.Name, Want: e.Digest, Got: got}
		}
		return nil
	}
	hdr, err := s.checkHeader(ctx, in, f, e, verify)
	if err != nil {
		return err
	}
	rs.Header = hdr
	rs.Tensors = make([]Tensor, len(sel))
	spans := make([]span, len(sel))
	for i, j := range sel {
		te := e.Tensors[j]
		var buf []byte
		if into != nil {
			buf = into(e.Name, te)
			if buf != nil && int64(len(buf)) != te.Length {
				return fmt.Errorf("ckpt: shard %q tensor %q: Into gave %d bytes for %d: %w", e.Name, te.Name, len(buf), te.Length, errs.ErrInvalid)
			}
		}
		if buf == nil {
			buf = tensorBuf(te)
		}
		rs.Tensors[i] = Tensor{Name: te.Name, DType: te.DType, Shape: te.Shape, Data: buf}
		spans[i] = span{off: te.Offset, buf: buf}
		if verify {
			// Each tensor is checked as soon as its bytes are in, while
			// the reads of the others go on: the hashing of a shard
			// overlaps its reads instead of following them.
			spans[i].done = func() error {
				if got := sumBytes(buf); got != te.Digest {
					return &CorruptError{Job: in.Job, Step: in.Step, Shard: e.Name, Tensor: te.Name, Want: te.Digest, Got: got}
				}
				return nil
			}
		}
	}
	if err := readParallel(ctx, f, spans, prog); err != nil {
		if ce, ok := errors.AsType[*CorruptError](err); ok {
			return ce
		}
		return fmt.Errorf("ckpt: %s step %d shard %q: %w", in.Job, in.Step, e.Name, err)
	}
	return nil
}

// directMin is the smallest tensor that restore allocates for O_DIRECT
// reads (tensorBuf): one of the OSTs' checksum blocks, the unit read
// straight into the caller's buffer.
const directMin = 64 << 10

// tensorBuf allocates the buffer a restore reads tensor te into: for a
// large one, at an address congruent to its file offset modulo
// datanet.Align, so that the chunk reads of its aligned middle go from a
// local OST's disk into it with O_DIRECT (datanet.AlignedAt).
func tensorBuf(te TensorEntry) []byte {
	if te.Length < directMin {
		return make([]byte, te.Length)
	}
	return datanet.AlignedAt(int(te.Length), te.Offset)
}

// span is a byte range of a file and the buffer it is read into; done
// (nil: none) runs once all of buf is in, in the read that completed it.
type span struct {
	off  int64
	buf  []byte
	done func() error
}

// readParallel reads every span, cut into pieces of pieceSize, with up to
// readsPerShard reads in flight, each straight into its span's buffer
// (File.ReadAtUncached): a restore reads each byte once, into the tensor
// that keeps it, so the File's row buffers would be a copy for nothing.
func readParallel(ctx context.Context, f *client.File, spans []span, prog func(int64)) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readsPerShard)
	for _, sp := range spans {
		left := new(atomic.Int64)
		left.Store(int64(len(sp.buf)))
		for k := 0; k < len(sp.buf); k += pieceSize {
			p := sp.buf[k:min(k+pieceSize, len(sp.buf))]
			off := sp.off + int64(k)
			g.Go(func() error {
				if err := readFullWith(gctx, f.ReadAtUncached, p, off); err != nil {
					return err
				}
				prog(int64(len(p)))
				if left.Add(-int64(len(p))) == 0 && sp.done != nil {
					return sp.done()
				}
				return nil
			})
		}
	}
	return g.Wait()
}

// ReadRange reads n bytes at offset off of one tensor: a rank that needs
// a slice of a tensor (resharding on load) reads only that. A range that
// is the whole tensor is checked against the manifest; a partial range
// is checked by the OSTs' block checksums only (the manifest's digest
// covers whole tensors).
func (s *Store) ReadRange(ctx context.Context, job string, step int64, shard, tensor string, off, n int64) ([]byte, error) {
	in, err := s.Stat(ctx, job, step)
	if err != nil {
		return nil, err
	}
	m, verified, err := s.manifestOrDescribe(ctx, in)
	if err != nil {
		return nil, err
	}
	e, ok := m.Shard(shard)
	if !ok {
		return nil, fmt.Errorf("ckpt: %s step %d has no shard %q: %w", job, in.Step, shard, errs.ErrNotFound)
	}
	te, ok := e.Tensor(tensor)
	if !ok {
		return nil, fmt.Errorf("ckpt: %s step %d shard %q has no tensor %q: %w", job, in.Step, shard, tensor, errs.ErrNotFound)
	}
	if off < 0 || n < 0 || off > te.Length || n > te.Length-off {
		return nil, fmt.Errorf("ckpt: range %d+%d of tensor %q (%d bytes): %w", off, n, tensor, te.Length, errs.ErrInvalid)
	}
	f, err := s.openShard(ctx, in, e)
	if err != nil {
		return nil, err
	}
	defer f.Close(ctx)
	buf := make([]byte, n)
	if err := readParallel(ctx, f, []span{{off: te.Offset + off, buf: buf}}, func(int64) {}); err != nil {
		return nil, fmt.Errorf("ckpt: %s step %d shard %q tensor %q: %w", job, in.Step, shard, tensor, err)
	}
	if verified && off == 0 && n == te.Length {
		if got := sumBytes(buf); got != te.Digest {
			return nil, &CorruptError{Job: job, Step: in.Step, Shard: shard, Tensor: tensor, Want: te.Digest, Got: got}
		}
	}
	return buf, nil
}

// hashRange streams bytes [off, off+n) of f through an xxh64 digest,
// reading pieceSize at a time into buf.
func hashRange(ctx context.Context, f *client.File, off, n int64, buf []byte, prog func(int64)) (string, error) {
	d := xxhash.New()
	for n > 0 {
		k := min(n, int64(len(buf)))
		if err := readFull(ctx, f, buf[:k], off); err != nil {
			return "", err
		}
		d.Write(buf[:k])
		prog(k)
		off, n = off+k, n-k
	}
	return digestHex(d.Sum64()), nil
}

// ReadFile returns the bytes of one shard's file as stored (step may be
// Latest), checked against the manifest: the header and every tensor of a
// safetensors shard, the whole of a blob. It holds the whole file in
// memory; CopyFile streams it (`shoal ckpt restore --to`).
func (s *Store) ReadFile(ctx context.Context, job string, step int64, shard string) ([]byte, *ShardEntry, error) {
	f, in, e, verified, err := s.openShardOf(ctx, job, step, shard)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close(ctx)
	buf := make([]byte, e.Size)
	prog := func(n int64) { s.progress("restore", job, in.Step, n, e.Size) }
	var done atomic.Int64
	if err := readParallel(ctx, f, []span{{off: 0, buf: buf}}, func(n int64) { prog(done.Add(n)) }); err != nil {
		return nil, nil, fmt.Errorf("ckpt: %s step %d shard %q: %w", job, in.Step, shard, err)
	}
	if !verified {
		return buf, e, nil
	}
	bad := func(tensor, want string, b []byte) error {
		if got := sumBytes(b); got != want {
			return &CorruptError{Job: job, Step: in.Step, Shard: shard, Tensor: tensor, Want: want, Got: got}
		}
		return nil
	}
	if e.Kind == KindBlob {
		if err := bad("", e.Digest, buf); err != nil {
			return nil, nil, err
		}
		return buf, e, nil
	}
	if err := bad(headerTensor, e.HeaderDigest, buf[:e.DataStart]); err != nil {
		return nil, nil, err
	}
	for _, te := range e.Tensors {
		if err := bad(te.Name, te.Digest, buf[te.Offset:te.Offset+te.Length]); err != nil {
			return nil, nil, err
		}
	}
	return buf, e, nil
}
