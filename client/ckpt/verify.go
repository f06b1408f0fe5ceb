package ckpt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
)

// Problem is one thing Verify found wrong.
type Problem struct {
	Shard  string
	Tensor string // "" for the shard as a whole, "(header)" for its header
	Err    error
}

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	Info   Info
	Shards int
	Bytes  int64 // bytes read and checked
	// Filled is set when the checkpoint had no manifest (written through
	// the mount) and Verify computed and wrote one.
	Filled bool
	// Problems lists every mismatch, missing or unreadable shard.
	Problems []Problem
	// Unlisted names files in the step directory the manifest does not
	// list (not an error).
	Unlisted []string
}

// Verify reads every byte of a checkpoint (step may be Latest) and checks
// it against the manifest, reporting every shard and tensor that fails.
// A checkpoint without a manifest (saved through the mount) gets one:
// Verify computes the digests of its files (safetensors files tensor by
// tensor, other files whole) and writes manifest.json into it. The error
// wraps errs.ErrCorrupt when there are problems; the report is returned
// in any case once the checkpoint was found.
func (s *Store) Verify(ctx context.Context, job string, step int64) (*VerifyReport, error) {
	in, err := s.Stat(ctx, job, step)
	if err != nil {
		return nil, err
	}
	rep := &VerifyReport{Info: in}
	m, err := s.readManifest(ctx, in.Ino)
	fill := false
	switch {
	case err == nil:
	case errors.Is(err, errs.ErrNotFound):
		fill = true
		var probs []Problem
		if m, probs, err = s.describe(ctx, in); err != nil {
			return nil, err
		}
		rep.Problems = append(rep.Problems, probs...)
	case errors.Is(err, errs.ErrCorrupt):
		rep.Problems = append(rep.Problems, Problem{Shard: ManifestName, Err: err})
		return rep, fmt.Errorf("ckpt: verify %s step %d: %w", job, in.Step, err)
	default:
		return nil, fmt.Errorf("ckpt: verify %s step %d: %w", job, in.Step, err)
	}
	var total int64
	for _, e := range m.Shards {
		total += e.Size
	}
	rep.Shards = len(m.Shards)
	var done atomic.Int64
	prog := func(n int64) { s.progress("verify", job, in.Step, done.Add(n), total) }
	probs := make([][]Problem, len(m.Shards))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.o.Parallelism)
	for i := range m.Shards {
		g.Go(func() error {
			var err error
			probs[i], err = s.verifyShard(gctx, in, &m.Shards[i], fill, prog)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, p := range probs {
		rep.Problems = append(rep.Problems, p...)
	}
	rep.Bytes = done.Load()
	if !fill {
		files, err := s.stepFiles(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if _, ok := m.Shard(f.name); !ok {
				rep.Unlisted = append(rep.Unlisted, f.name)
			}
		}
	}
	if len(rep.Problems) > 0 {
		return rep, fmt.Errorf("ckpt: verify %s step %d: %d problems, the first: %w", job, in.Step, len(rep.Problems), rep.Problems[0].Err)
	}
	if fill {
		if err := s.fillManifest(ctx, in, m); err != nil {
			return rep, err
		}
		rep.Filled = true
	}
	return rep, nil
}

// verifyShard checks (or, with fill, computes) the digests of one shard.
// Mismatches are problems; an error is returned only when the operation
// itself cannot go on (ctx ended).
func (s *Store) verifyShard(ctx context.Context, in Info, e *ShardEntry, fill bool, prog func(int64)) ([]Problem, error) {
	var probs []Problem
	problem := func(tensor string, err error) {
		probs = append(probs, Problem{Shard: e.Name, Tensor: tensor, Err: err})
	}
	f, err := s.openShard(ctx, in, e)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		problem("", err)
		return probs, nil
	}
	defer f.Close(ctx)
	buf := make([]byte, min(pieceSize, max(e.Size, 1)))
	check := func(tensor string, off, n int64, want *string) bool {
		got, err := hashRange(ctx, f, off, n, buf, prog)
		switch {
		case err != nil && ctx.Err() != nil:
			return false
		case err != nil:
			problem(tensor, fmt.Errorf("ckpt: %s step %d shard %q: read: %w", in.Job, in.Step, e.Name, err))
		case fill:
			*want = got
		case got != *want:
			problem(tensor, &CorruptError{Job: in.Job, Step: in.Step, Shard: e.Name, Tensor: tensor, Want: *want, Got: got})
		}
		return true
	}
	if e.Kind == KindBlob {
		if !check("", 0, e.Size, &e.Digest) {
			return nil, ctx.Err()
		}
		return probs, nil
	}
	if !check(headerTensor, 0, e.DataStart, &e.HeaderDigest) {
		return nil, ctx.Err()
	}
	if !fill {
		if _, err := s.checkHeader(ctx, in, f, e, false); err != nil {
			problem(headerTensor, err)
			return probs, nil
		}
	}
	digests := make([]string, len(e.Tensors))
	for i := range e.Tensors {
		te := &e.Tensors[i]
		if !check(te.Name, te.Offset, te.Length, &te.Digest) {
			return nil, ctx.Err()
		}
		digests[i] = te.Digest
	}
	if got := shardDigest(e.HeaderDigest, digests); fill {
		e.Digest = got
	} else if got != e.Digest && len(probs) == 0 {
		problem("", &CorruptError{Job: in.Job, Step: in.Step, Shard: e.Name, Want: e.Digest, Got: got})
	}
	return probs, nil
}

// stepFile is a regular file of a step directory.
type stepFile struct {
	name string // relative path
	size int64
}

// stepFiles lists every regular file under a step directory but the
// manifest and its temporary files, depth first, in name order.
func (s *Store) stepFiles(ctx context.Context, in Info) ([]stepFile, error) {
	var out []stepFile
	var walk func(ino uint64, prefix string, depth int) error
	walk = func(ino uint64, prefix string, depth int) error {
		if depth > 16 {
			return fmt.Errorf("ckpt: %s step %d: directories nested deeper than 16: %w", in.Job, in.Step, errs.ErrInvalid)
		}
		es, err := s.readDirPlus(ctx, ino)
		if err != nil {
			return err
		}
		for _, e := range es {
			name := path.Join(prefix, e.Name)
			switch e.Mode & client.ModeType {
			case client.ModeDir:
				if err := walk(e.Ino, name, depth+1); err != nil {
					return err
				}
			case client.ModeRegular:
				if name == ManifestName || (prefix == "" && strings.HasPrefix(name, "."+ManifestName)) {
					continue
				}
				out = append(out, stepFile{name: name, size: int64(e.Attr.Size)})
			}
		}
		return nil
	}
	if err := walk(in.Ino, "", 0); err != nil {
		return nil, fmt.Errorf("ckpt: %s step %d: %w", in.Job, in.Step, err)
	}
	return out, nil
}

// describe builds a manifest without digests from a step directory's
// files: *.safetensors files whose header decodes are safetensors
// shards, everything else a blob. A .safetensors file whose header does
// not decode is a problem.
func (s *Store) describe(ctx context.Context, in Info) (*Manifest, []Problem, error) {
	files, err := s.stepFiles(ctx, in)
	if err != nil {
		return nil, nil, err
	}
	m := &Manifest{Format: FormatV1, Job: in.Job, Step: in.Step, Created: in.Time.UTC(), Writer: writerVerify, Checksum: ChecksumXXH64}
	var probs []Problem
	for _, fi := range files {
		e := ShardEntry{Name: fi.name, Kind: KindBlob, Size: fi.size}
		if strings.HasSuffix(fi.name, ".safetensors") {
			h, err := s.readHeader(ctx, in, fi)
			if err != nil {
				probs = append(probs, Problem{Shard: fi.name, Tensor: headerTensor, Err: err})
				continue
			}
			e.Kind, e.DataStart, e.Metadata, e.Tensors = KindSafetensors, h.DataStart(), h.Metadata, entriesOf(h)
		}
		m.Shards = append(m.Shards, e)
		m.Bytes += fi.size
	}
	m.Written = m.Bytes
	return m, probs, nil
}

// readHeader reads and decodes the safetensors header of a file of a
// step.
func (s *Store) readHeader(ctx context.Context, in Info, fi stepFile) (*safetensors.Header, error) {
	f, err := s.c.Open(ctx, path.Join(s.jobDir(in.Job), in.Name, fi.name))
	if err != nil {
		return nil, err
	}
	defer f.Close(ctx)
	h, err := safetensors.ReadHeader(readerAt{ctx, f}, f.Size())
	if err != nil {
		return nil, &CorruptError{Job: in.Job, Step: in.Step, Shard: fi.name, Tensor: headerTensor, Detail: err.Error()}
	}
	return h, nil
}

// fillManifest writes the manifest Verify computed into a committed step
// directory: under a temporary name, then renamed, so that no reader
// ever sees half of it. If another Verify got there first, its manifest
// stays.
func (s *Store) fillManifest(ctx context.Context, in Info, m *Manifest) error {
	for i := range m.Shards {
		slices.SortStableFunc(m.Shards[i].Tensors, func(a, b TensorEntry) int { return cmp.Compare(a.Offset, b.Offset) })
	}
	if err := m.check(); err != nil {
		return fmt.Errorf("ckpt: manifest of %s step %d: %v: %w", in.Job, in.Step, err, errs.ErrCorrupt)
	}
	b, err := m.Encode()
	if err != nil {
		return err
	}
	tmp := "." + ManifestName + "." + tag() + stagingSuffix
	if err := s.writeNewFile(ctx, in.Ino, tmp, b); err != nil {
		return fmt.Errorf("ckpt: write manifest of %s step %d: %w", in.Job, in.Step, err)
	}
	err = s.c.RenameIn(ctx, in.Ino, tmp, in.Ino, ManifestName, client.RenameNoReplace)
	if err != nil {
		s.c.UnlinkIn(ctx, in.Ino, tmp)
		if errors.Is(err, errs.ErrExists) {
			return nil
		}
		return fmt.Errorf("ckpt: commit manifest of %s step %d: %w", in.Job, in.Step, err)
	}
	return s.c.SyncNamespace(ctx)
}
