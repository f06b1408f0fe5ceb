package gds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
)

// Tensor is one tensor of a restored shard, in device memory.
type Tensor struct {
	Name  string
	DType string
	Shape []int64
	// Ptr is the device address of the tensor's first byte; Offset the
	// same as an offset in the shard's buffer.
	Ptr    uintptr
	Offset int64
	Size   int64
}

// Shard is a safetensors file restored into device memory: its whole data
// region in one buffer, each tensor a range of it (at Tensor.Offset).
type Shard struct {
	Buf      *Buffer // owned by the caller when Restore allocated it
	Tensors  []Tensor
	Metadata map[string]string
	Report   Report
}

// ReadHeader reads and checks the safetensors header of f (a small read
// into host memory through the client).
func (r *Reader) ReadHeader(ctx context.Context, f *File) (*safetensors.Header, error) {
	return safetensors.ReadHeader(ctxReaderAt{ctx, f}, f.Size())
}

// ctxReaderAt reads a File's bytes into host memory with the client's
// extent reads (Client.ReadExtent) from the File's extent map, not with
// client.File.ReadAt: a small read at the start of a file is a
// sequential read to the client, which then reads ahead 8 rows (32 MiB
// with RS 4+2 and 1 MiB cells) through the network into its row cache,
// bytes that the restore then reads again its own way (a local shard's
// header read cost a third of the restore's CPU that way).
type ctxReaderAt struct {
	ctx context.Context
	f   *File
}

func (c ctxReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.readAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) && c.ctx.Err() == nil &&
		(errors.Is(err, errs.ErrUnavailable) || errors.Is(err, errs.ErrNotFound) || errors.Is(err, errs.ErrStale)) {
		// As Reader.ReadAt: the placement may have moved; read the
		// extent map again and retry once.
		if rerr := c.f.Refresh(c.ctx); rerr == nil {
			n, err = c.readAt(p, off)
		}
	}
	return n, err
}

func (c ctxReaderAt) readAt(p []byte, off int64) (int, error) {
	size, refs := c.f.snapshot()
	if off >= size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), size-off)
	buf := p[:n]
	clear(buf)
	end := off + n
	for _, r := range refs {
		rs, re := r.FileOff, r.FileOff+r.Length
		s, e := max(rs, off), min(re, end)
		if s >= e {
			continue
		}
		if err := c.f.r.cl.ReadExtent(c.ctx, r.Extent, r.ExtentOff+s-rs, buf[s-off:e-off]); err != nil {
			return 0, fmt.Errorf("gds: read %d+%d of inode %d: %w", s, e-s, c.f.ino, err)
		}
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// Restore reads the safetensors shard at path into device memory: the
// header (strictly validated by client/ckpt/safetensors) through host
// memory, then the data region, from the first tensor to the last, with
// one ReadAt into dst at dstOff (or into a new buffer when dst is nil);
// tensors keep their offsets from the header. The direct path serves the
// parts of local cells whose file offsets and device addresses agree
// modulo Align: Shoal lays its own headers out with the data 4 KiB
// aligned, but a header kept as another writer padded it (8 bytes, say;
// `shoal ckpt save --from` keeps them) puts the data anywhere, so the data
// starts that far into a new buffer (up to Align-1 bytes), and a caller's
// dst at dstOff should do the same.
func (r *Reader) Restore(ctx context.Context, path string, dst *Buffer, dstOff int64) (*Shard, error) {
	f, err := r.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close(ctx)
	h, err := r.ReadHeader(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("gds: restore %s: %w", path, err)
	}
	if h.FileSize() != f.Size() {
		return nil, fmt.Errorf("gds: restore %s: header describes %d bytes, the file has %d: %w", path, h.FileSize(), f.Size(), errs.ErrCorrupt)
	}
	owned := false
	if dst == nil {
		// Room to start the data where its addresses agree with its file
		// offsets modulo Align.
		if dst, err = r.dev.Alloc(max(h.DataLen, 1)+Align-1, true); err != nil {
			return nil, err
		}
		owned, dstOff = true, ((h.DataStart()-int64(dst.Addr()%Align))%Align+Align)%Align
	}
	s := &Shard{Buf: dst, Metadata: h.Metadata}
	if h.DataLen > 0 {
		rep, err := r.ReadAt(ctx, f, dst, dstOff, h.DataStart(), h.DataLen)
		if err != nil {
			if owned {
				dst.Free()
			}
			return nil, fmt.Errorf("gds: restore %s: %w", path, err)
		}
		s.Report = rep
	}
	for _, t := range h.Tensors {
		s.Tensors = append(s.Tensors, Tensor{Name: t.Name, DType: string(t.DType), Shape: t.Shape,
			Ptr: dst.Addr() + uintptr(dstOff+t.Begin), Offset: dstOff + t.Begin, Size: t.Size()})
	}
	return s, nil
}

// CheckpointOptions configure RestoreCheckpoint.
type CheckpointOptions struct {
	// Shards restores only these shards (names in the manifest); all
	// safetensors shards when empty.
	Shards []string
	// VerifyDigests also checks every tensor against the manifest's
	// xxh64 digest, by copying it back from the device: an end-to-end
	// check on top of the chunk CRCs that every read checks anyway. It
	// costs a device-to-host copy and a hash of every byte.
	VerifyDigests bool
	// Parallelism is the number of shards restored at once (0:
	// DefaultShardParallelism; 1: one after the other). Each shard's
	// read is pipelined on its own (staging slots, direct workers); the
	// shards of a step share the Reader's staging slots, which bound the
	// host memory and the bytes in flight whatever this is.
	Parallelism int
}

// DefaultShardParallelism is how many shards RestoreCheckpoint restores at
// once by default: enough to keep the staging slots and the direct
// workers busy through each shard's header read, device allocation and
// digest check, few enough that a step of many ranks does not hold many
// device buffers half filled.
const DefaultShardParallelism = 4

// RestoredCheckpoint is a checkpoint step in device memory.
type RestoredCheckpoint struct {
	Manifest *ckpt.Manifest
	// Shards by manifest name; blob shards are not restored.
	Shards map[string]*Shard
	// Report sums the shards' reports; its Elapsed is the wall time of
	// the whole restore.
	Report Report
}

// Free frees every shard's buffer.
func (c *RestoredCheckpoint) Free() error {
	var err error
	for _, s := range c.Shards {
		err = errors.Join(err, s.Buf.Free())
	}
	return err
}

// RestoreCheckpoint restores step of job from a checkpoint store
// (client/ckpt) into device memory: every safetensors shard of the
// manifest (or those in o.Shards) into its own buffer, each checked
// against the manifest's size and data start, and with VerifyDigests
// against its tensors' digests. Shards are restored o.Parallelism at a
// time; the first failure cancels the others and frees every buffer.
func (r *Reader) RestoreCheckpoint(ctx context.Context, store *ckpt.Store, job string, step int64, o CheckpointOptions) (*RestoredCheckpoint, error) {
	m, info, err := store.Manifest(ctx, job, step)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range o.Shards {
		want[n] = true
	}
	var sel []*ckpt.ShardEntry
	for i := range m.Shards {
		e := &m.Shards[i]
		if e.Kind != ckpt.KindSafetensors || (len(want) > 0 && !want[e.Name]) {
			continue
		}
		delete(want, e.Name)
		sel = append(sel, e)
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("gds: checkpoint %s step %d has no safetensors shard %v: %w", job, step, keys(want), errs.ErrNotFound)
	}
	par := o.Parallelism
	if par <= 0 {
		par = DefaultShardParallelism
	}
	start := time.Now()
	shards := make([]*Shard, len(sel))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(par)
	for i, e := range sel {
		g.Go(func() error {
			s, err := r.Restore(gctx, path.Join(store.Options().Root, job, info.Name, e.Name), nil, 0)
			if err != nil {
				return err
			}
			shards[i] = s
			var dataLen int64
			for _, t := range s.Tensors {
				dataLen += t.Size
			}
			if e.DataStart+dataLen != e.Size {
				return fmt.Errorf("gds: shard %s: %d bytes restored at %d, the manifest says %d: %w", e.Name, dataLen, e.DataStart, e.Size, errs.ErrCorrupt)
			}
			if o.VerifyDigests {
				return verifyDigests(s, e)
			}
			return nil
		})
	}
	err = g.Wait()
	out := &RestoredCheckpoint{Manifest: m, Shards: map[string]*Shard{}}
	for i, s := range shards {
		if s != nil {
			out.Shards[sel[i].Name] = s
			out.Report.Add(s.Report)
		}
	}
	// The shards' reads overlap: the step took the wall time, not the
	// sum of theirs.
	out.Report.Elapsed = time.Since(start)
	if err != nil {
		out.Free()
		return nil, err
	}
	return out, nil
}

// verifyDigests checks every tensor of s against its manifest digest.
func verifyDigests(s *Shard, e *ckpt.ShardEntry) error {
	digests := map[string]string{}
	for _, t := range e.Tensors {
		digests[t.Name] = t.Digest
	}
	chunk := make([]byte, 16<<20)
	for _, t := range s.Tensors {
		want, ok := digests[t.Name]
		if !ok {
			return fmt.Errorf("gds: shard %s: tensor %q is not in the manifest: %w", e.Name, t.Name, errs.ErrCorrupt)
		}
		h := xxhash.New()
		for off := int64(0); off < t.Size; off += int64(len(chunk)) {
			p := chunk[:min(int64(len(chunk)), t.Size-off)]
			if err := s.Buf.CopyToHost(p, t.Offset+off); err != nil {
				return err
			}
			h.Write(p)
		}
		if got := fmt.Sprintf("%016x", h.Sum64()); got != want {
			return fmt.Errorf("gds: shard %s tensor %q: xxh64 %s on the device, the manifest says %s: %w", e.Name, t.Name, got, want, errs.ErrCorrupt)
		}
	}
	return nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
