package ckpt

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/datanet"
)

// CopyFile writes the bytes of one shard's file as stored (step may be
// Latest) to w, checked against the manifest as ReadFile checks them,
// without holding the file in memory: it is read in pieces of pieceSize,
// readsPerShard of them in flight (the reads of Restore and ReadFile),
// each written to w at its offset as soon as it arrives and hashed in
// file order. Each piece handed to WriteAt starts at a multiple of
// pieceSize, in a buffer aligned to datanet.Align. A *CorruptError comes
// after w got the bytes: the caller discards them (`shoal ckpt restore
// --to` writes each file under a temporary name and renames it only when
// CopyFile succeeds). w's
// WriteAt is called from several goroutines at once. It returns the
// shard's manifest entry and whether the bytes were checked (false for
// a checkpoint without a manifest).
func (s *Store) CopyFile(ctx context.Context, job string, step int64, shard string, w io.WriterAt) (*ShardEntry, bool, error) {
	f, in, e, verified, err := s.openShardOf(ctx, job, step, shard)
	if err != nil {
		return nil, false, err
	}
	defer f.Close(ctx)
	var d *digester
	if verified {
		d = newDigester(in, e)
	}
	var done int64
	prog := func(n int64) {
		done += n
		s.progress("restore", job, in.Step, done, e.Size)
	}
	if err := copyPieces(ctx, &s.bufs, f, e.Size, w, d, prog); err != nil {
		return nil, false, fmt.Errorf("ckpt: %s step %d shard %q: %w", job, in.Step, shard, err)
	}
	if d != nil {
		if err := d.finish(); err != nil {
			return nil, false, err
		}
	}
	return e, verified, nil
}

// copyPieces copies bytes [0, size) of f to w in pieces of pieceSize,
// readsPerShard in flight, feeding each to d (nil: none) and prog in
// file order. The pieces are buffers of bufs (aligned for O_DIRECT, as a
// WriterAt may write them to a file opened so, and in huge pages, which
// such a write pins faster), so that a restore of many files reuses the
// memory of the first.
func copyPieces(ctx context.Context, bufs *datanet.BufPool, f *client.File, size int64, w io.WriterAt, d *digester, prog func(int64)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type slot struct {
		buf  []byte
		n    int
		done chan error
	}
	pieces := int((size + pieceSize - 1) / pieceSize)
	slots := make([]slot, min(readsPerShard, pieces))
	for i := range slots {
		slots[i] = slot{buf: bufs.Get(pieceSize), done: make(chan error, 1)}
	}
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait() // the buffers go back only once no read or write holds them
		for _, sl := range slots {
			bufs.Put(sl.buf)
		}
	}()
	start := func(k int) {
		sl := &slots[k%len(slots)]
		off := int64(k) * pieceSize
		sl.n = int(min(pieceSize, size-off))
		p := sl.buf[:sl.n]
		wg.Go(func() {
			err := readFullWith(ctx, f.ReadAtUncached, p, off)
			if err == nil {
				_, err = w.WriteAt(p, off)
			}
			sl.done <- err
		})
	}
	for k := range slots {
		start(k)
	}
	for k := range pieces {
		sl := &slots[k%len(slots)]
		if err := <-sl.done; err != nil {
			return err
		}
		if d != nil {
			d.write(int64(k)*pieceSize, sl.buf[:sl.n])
		}
		prog(int64(sl.n))
		if k+len(slots) < pieces {
			start(k + len(slots))
		}
	}
	return nil
}

// digester checks a file's bytes, fed in order, against the digests of a
// manifest entry: the header and every tensor of a safetensors shard, the
// whole of a blob.
type digester struct {
	in     Info
	e      *ShardEntry
	ranges []digestRange // by offset, apart
	cur    int           // the first range not yet complete
	h      *xxhash.Digest
	err    error // the first mismatch
}

type digestRange struct {
	off, n       int64
	tensor, want string
}

func newDigester(in Info, e *ShardEntry) *digester {
	d := &digester{in: in, e: e, h: xxhash.New()}
	if e.Kind == KindBlob {
		d.ranges = []digestRange{{0, e.Size, "", e.Digest}}
		return d
	}
	d.ranges = append(d.ranges, digestRange{0, e.DataStart, headerTensor, e.HeaderDigest})
	for _, t := range e.Tensors {
		d.ranges = append(d.ranges, digestRange{t.Offset, t.Length, t.Name, t.Digest})
	}
	sort.SliceStable(d.ranges, func(i, j int) bool { return d.ranges[i].off < d.ranges[j].off })
	return d
}

// write feeds b, the bytes at off (just after those fed before).
func (d *digester) write(off int64, b []byte) {
	end := off + int64(len(b))
	for d.cur < len(d.ranges) {
		r := d.ranges[d.cur]
		s, e := max(off, r.off), min(end, r.off+r.n)
		if s > e || (s == e && r.n > 0) {
			return // the range starts after b
		}
		d.h.Write(b[s-off : e-off])
		if e < r.off+r.n {
			return // continued in the next piece
		}
		if got := digestHex(d.h.Sum64()); got != r.want && d.err == nil {
			d.err = &CorruptError{Job: d.in.Job, Step: d.in.Step, Shard: d.e.Name, Tensor: r.tensor, Want: r.want, Got: got}
		}
		d.h.Reset()
		d.cur++
	}
}

// finish returns the first mismatch, or an error when ranges were left
// unchecked (the file ended before them).
func (d *digester) finish() error {
	for d.cur < len(d.ranges) && d.ranges[d.cur].n == 0 {
		d.write(d.ranges[d.cur].off, nil)
	}
	if d.err != nil {
		return d.err
	}
	if d.cur < len(d.ranges) {
		return &CorruptError{Job: d.in.Job, Step: d.in.Step, Shard: d.e.Name, Tensor: d.ranges[d.cur].tensor,
			Detail: "the file ends before it"}
	}
	return nil
}
