package gds

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"

	"github.com/cespare/xxhash/v2"

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
// region in one buffer, each tensor a range of it.
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

type ctxReaderAt struct {
	ctx context.Context
	f   *File
}

func (c ctxReaderAt) ReadAt(p []byte, off int64) (int, error) { return c.f.cf.ReadAt(c.ctx, p, off) }

// Restore reads the safetensors shard at path into device memory: the
// header (strictly validated by client/ckpt/safetensors) through host
// memory, then the data region, from the first tensor to the last, with
// one ReadAt into dst at dstOff (or into a new buffer when dst is nil).
// Shoal writes shards with the data region 4 KiB aligned in the file, so
// a buffer that starts aligned gets every local cell by the direct path;
// tensors keep their offsets from the header.
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
		if dst, err = r.dev.Alloc(max(h.DataLen, 1), true); err != nil {
			return nil, err
		}
		owned, dstOff = true, 0
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
}

// RestoredCheckpoint is a checkpoint step in device memory.
type RestoredCheckpoint struct {
	Manifest *ckpt.Manifest
	// Shards by manifest name; blob shards are not restored.
	Shards map[string]*Shard
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
// against its tensors' digests.
func (r *Reader) RestoreCheckpoint(ctx context.Context, store *ckpt.Store, job string, step int64, o CheckpointOptions) (*RestoredCheckpoint, error) {
	m, info, err := store.Manifest(ctx, job, step)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range o.Shards {
		want[n] = true
	}
	out := &RestoredCheckpoint{Manifest: m, Shards: map[string]*Shard{}}
	for i := range m.Shards {
		e := &m.Shards[i]
		if e.Kind != ckpt.KindSafetensors || (len(want) > 0 && !want[e.Name]) {
			continue
		}
		delete(want, e.Name)
		p := path.Join(store.Options().Root, job, info.Name, e.Name)
		s, err := r.Restore(ctx, p, nil, 0)
		if err != nil {
			out.Free()
			return nil, err
		}
		out.Shards[e.Name] = s
		out.Report.Add(s.Report)
		var dataLen int64
		for _, t := range s.Tensors {
			dataLen += t.Size
		}
		if e.DataStart+dataLen != e.Size {
			out.Free()
			return nil, fmt.Errorf("gds: shard %s: %d bytes restored at %d, the manifest says %d: %w", e.Name, dataLen, e.DataStart, e.Size, errs.ErrCorrupt)
		}
		if o.VerifyDigests {
			if err := verifyDigests(s, e); err != nil {
				out.Free()
				return nil, err
			}
		}
	}
	if len(want) > 0 {
		out.Free()
		return nil, fmt.Errorf("gds: checkpoint %s step %d has no safetensors shard %v: %w", job, step, keys(want), errs.ErrNotFound)
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
