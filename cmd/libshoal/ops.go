//go:build cgo

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errs.ErrInvalid)...)
}

// decodeStrict decodes a request, refusing unknown fields (a misspelt
// option is an error, not a silent default).
func decodeStrict(s string, v any) error {
	if s == "" {
		s = "{}"
	}
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return invalidf("libshoal: request: %v", err)
	}
	return nil
}

// connect makes the client: certificates as given, or plaintext.
func connect(o openOpts) (*client.Client, error) {
	if o.MDS == "" {
		return nil, invalidf("no MDS address: pass mds or set SHOAL_MDS")
	}
	co := client.Options{MDS: o.MDS, Name: o.Name}
	if co.Name == "" {
		co.Name = "libshoal"
	}
	tf := wire.TLSFiles{Cert: o.Cert, Key: o.Key, CA: o.CA}
	switch {
	case o.Insecure && !tf.IsZero():
		return nil, invalidf("insecure (plaintext) was asked for, but certificate files are named too: choose one")
	case !o.Insecure && tf.IsZero():
		return nil, invalidf("no certificate: set SHOAL_CERT, SHOAL_KEY and SHOAL_CA (shoal admin cert issue; `. DIR/env` for shoal local), or SHOAL_INSECURE=1 for a plaintext cluster")
	case !o.Insecure:
		c, err := wire.LoadCreds(tf)
		if err != nil {
			return nil, fmt.Errorf("certificates: %w", err)
		}
		co.Creds = c
	}
	return client.New(context.Background(), co)
}

// crashHook, for tests, kills this process at a point of every save:
// spec is "PHASE" or "PHASE:PIECE" (ckpt.Point), e.g. "write:1" (the
// second piece of any shard) or "manifest" (after a rank's part).
func crashHook(spec string) func(ckpt.Point) error {
	if spec == "" {
		return nil
	}
	phase, piece, hasPiece := strings.Cut(spec, ":")
	n, _ := strconv.Atoi(piece)
	return func(p ckpt.Point) error {
		if p.Phase == phase && (!hasPiece || p.Piece == n) {
			fmt.Fprintf(os.Stderr, "libshoal: SHOAL_LIBSHOAL_CRASH_AT=%s: killing process %d at %s %s\n", spec, os.Getpid(), p.Phase, p.Shard)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns
		}
		return nil
	}
}

// errorJSON is what a caller receives for an error: its kind (the
// sentinel it wraps) and message.
func errorJSON(e error) map[string]any {
	out := map[string]any{"kind": errorKind(e), "message": e.Error()}
	var ce *ckpt.CorruptError
	if errors.As(e, &ce) {
		out["job"], out["step"], out["shard"], out["tensor"] = ce.Job, ce.Step, ce.Shard, ce.Tensor
		out["want"], out["got"], out["detail"] = ce.Want, ce.Got, ce.Detail
	}
	return out
}

// errorKinds maps the sentinel errors to the kinds the Python package
// turns into exceptions; the first that matches wins.
var errorKinds = []struct {
	err  error
	kind string
}{
	{errs.ErrCorrupt, "corrupt"},
	{errs.ErrNotFound, "not_found"},
	{errs.ErrPermission, "permission"},
	{errs.ErrNotPermitted, "permission"},
	{errs.ErrExists, "exists"},
	{errs.ErrInvalid, "invalid"},
	{errs.ErrNameTooLong, "invalid"},
	{errs.ErrNoSpace, "no_space"},
	{errs.ErrUnavailable, "unavailable"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "canceled"},
}

func errorKind(e error) string {
	for _, k := range errorKinds {
		if errors.Is(e, k.err) {
			return k.kind
		}
	}
	return "error"
}

type tensorReq struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Ptr   int     `json:"ptr"`
	Len   int64   `json:"len"`
}

type shardReq struct {
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata"`
	Tensors  []tensorReq       `json:"tensors"`
	Blob     *int              `json:"blob"`
	BlobLen  int64             `json:"blob_len"`
}

type saveReq struct {
	Job     string     `json:"job"`
	Step    int64      `json:"step"`
	Rank    int        `json:"rank"`
	World   int        `json:"world"`
	Attempt string     `json:"attempt"`
	Async   bool       `json:"async"`
	Pin     bool       `json:"pin"`
	NoReuse bool       `json:"no_reuse"`
	Base    *int64     `json:"base"`
	Shards  []shardReq `json:"shards"`
}

func (r *saveReq) options() []ckpt.SaveOption {
	var o []ckpt.SaveOption
	if r.Pin {
		o = append(o, ckpt.Pin())
	}
	if r.NoReuse {
		o = append(o, ckpt.NoReuse())
	}
	if r.Base != nil {
		o = append(o, ckpt.Base(*r.Base))
	}
	return o
}

// bytesAt returns ptrs[i] as n bytes of C memory.
func bytesAt(ptrs []unsafe.Pointer, i int, n int64) ([]byte, error) {
	if i < 0 || i >= len(ptrs) {
		return nil, invalidf("pointer index %d of %d", i, len(ptrs))
	}
	if n < 0 {
		return nil, invalidf("length %d", n)
	}
	if n == 0 {
		return []byte{}, nil
	}
	if ptrs[i] == nil {
		return nil, invalidf("NULL pointer for %d bytes", n)
	}
	return unsafe.Slice((*byte)(ptrs[i]), int(n)), nil
}

// shards returns the request's shards over the caller's buffers.
func (r *saveReq) shards(ptrs []unsafe.Pointer) ([]ckpt.Shard, error) {
	out := make([]ckpt.Shard, len(r.Shards))
	for i, sr := range r.Shards {
		sh := ckpt.Shard{Name: sr.Name, Metadata: sr.Metadata}
		if sr.Blob != nil {
			b, err := bytesAt(ptrs, *sr.Blob, sr.BlobLen)
			if err != nil {
				return nil, fmt.Errorf("shard %q: %w", sr.Name, err)
			}
			sh.Blob = b
		} else {
			sh.Tensors = make([]ckpt.Tensor, len(sr.Tensors))
			for j, tr := range sr.Tensors {
				b, err := bytesAt(ptrs, tr.Ptr, tr.Len)
				if err != nil {
					return nil, fmt.Errorf("shard %q tensor %q: %w", sr.Name, tr.Name, err)
				}
				shape := tr.Shape
				if shape == nil {
					shape = []int64{}
				}
				sh.Tensors[j] = ckpt.Tensor{Name: tr.Name, DType: safetensors.DType(tr.DType), Shape: shape, Data: b}
			}
		}
		out[i] = sh
	}
	return out, nil
}

// pending is an async save.
type pending struct {
	done chan struct{}
	res  *ckpt.RankResult
	err  error
}

// saveAsync starts a save that returns once the caller's buffers are
// copied: SaveAsync (its staging memory reused from save to save) for a
// single rank, a copy and SaveRank in the background for a rank of many.
func (hd *handle) saveAsync(ctx context.Context, req *saveReq, shards []ckpt.Shard) (int64, time.Duration, error) {
	t0 := time.Now()
	p := &pending{done: make(chan struct{})}
	if max(req.World, 1) == 1 {
		ap, err := hd.st.SaveAsync(ctx, req.Job, req.Step, shards, req.options()...)
		if err != nil {
			return 0, 0, err
		}
		go func() {
			defer close(p.done)
			res, err := ap.Wait(context.Background())
			if err != nil {
				p.err = err
				return
			}
			p.res = &ckpt.RankResult{Part: res.Manifest.Shards, Committed: true, Result: res, Elapsed: res.Elapsed}
		}()
	} else {
		copied := copyShards(shards)
		go func() {
			defer close(p.done)
			p.res, p.err = hd.st.SaveRank(context.Background(), req.Job, req.Step, req.Rank, req.World, req.Attempt, copied, req.options()...)
		}()
	}
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.pending == nil {
		return 0, 0, invalidf("handle closed")
	}
	hd.next++
	hd.pending[hd.next] = p
	return hd.next, time.Since(t0), nil
}

// copyShards copies the shards' bytes into Go memory, 4 copies at once.
func copyShards(shards []ckpt.Shard) []ckpt.Shard {
	out := make([]ckpt.Shard, len(shards))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	cp := func(dst *[]byte, src []byte) {
		b := make([]byte, len(src))
		*dst = b
		wg.Add(1)
		sem <- struct{}{}
		go func() { defer wg.Done(); copy(b, src); <-sem }()
	}
	for i, sh := range shards {
		out[i] = sh
		if sh.Blob != nil {
			cp(&out[i].Blob, sh.Blob)
		}
		if sh.Tensors != nil {
			out[i].Tensors = make([]ckpt.Tensor, len(sh.Tensors))
			for j, t := range sh.Tensors {
				out[i].Tensors[j] = t
				cp(&out[i].Tensors[j].Data, t.Data)
			}
		}
	}
	wg.Wait()
	return out
}

type saveResult struct {
	Committed bool              `json:"committed"`
	Manifest  json.RawMessage   `json:"manifest,omitempty"`
	Part      []ckpt.ShardEntry `json:"part"`
	Pruned    []int64           `json:"pruned"`
	PruneErr  string            `json:"prune_error,omitempty"`
	Elapsed   float64           `json:"elapsed_s"`
}

func resultOf(r *ckpt.RankResult) saveResult {
	out := saveResult{Committed: r.Committed, Part: r.Part, Elapsed: r.Elapsed.Seconds()}
	if r.Result != nil {
		out.Manifest, _ = r.Result.Manifest.Encode()
		out.Pruned = r.Result.Pruned
		if r.Result.PruneErr != nil {
			out.PruneErr = r.Result.PruneErr.Error()
		}
	}
	return out
}

type loadTensor struct {
	Shard string `json:"shard"`
	Name  string `json:"name"`
	Ptr   int    `json:"ptr"`
}

type loadReq struct {
	Job     string       `json:"job"`
	Step    int64        `json:"step"`
	Verify  *bool        `json:"verify"`
	Tensors []loadTensor `json:"tensors"`
	Blobs   []string     `json:"blobs"`
}

type key struct{ shard, name string }

// load reads the requested tensors into the caller's buffers (every
// byte checked against the manifest unless verify is false).
func (hd *handle) load(ctx context.Context, req *loadReq, bufs [][]byte) (any, error) {
	want := map[key]int{}
	shardSet := map[string]bool{}
	for _, t := range req.Tensors {
		if t.Ptr < 0 || t.Ptr >= len(bufs) {
			return nil, invalidf("tensor %q: pointer index %d of %d", t.Name, t.Ptr, len(bufs))
		}
		want[key{t.Shard, t.Name}] = t.Ptr
		shardSet[t.Shard] = true
	}
	for _, b := range req.Blobs {
		want[key{b, ""}] = -1
		shardSet[b] = true
	}
	names := make([]string, 0, len(shardSet))
	for n := range shardSet {
		names = append(names, n)
	}
	opts := []ckpt.RestoreOption{
		ckpt.Shards(names...),
		ckpt.Select(func(shard, tensor string) bool { _, ok := want[key{shard, tensor}]; return ok }),
		ckpt.Into(func(shard string, t ckpt.TensorEntry) []byte { return bufs[want[key{shard, t.Name}]] }),
	}
	if req.Verify != nil && !*req.Verify {
		opts = append(opts, ckpt.NoVerify())
	}
	cp, err := hd.st.Restore(ctx, req.Job, req.Step, opts...)
	if err != nil {
		return nil, err
	}
	got := map[key]bool{}
	blobs := map[string][]byte{}
	for _, rs := range cp.Shards {
		if rs.Kind == ckpt.KindBlob {
			got[key{rs.Name, ""}] = true
			blobs[rs.Name] = rs.Blob
		}
		for _, t := range rs.Tensors {
			got[key{rs.Name, t.Name}] = true
		}
	}
	for k := range want {
		if !got[k] {
			what := fmt.Sprintf("tensor %q of shard %q", k.name, k.shard)
			if k.name == "" {
				what = fmt.Sprintf("blob %q", k.shard)
			}
			return nil, fmt.Errorf("%s step %d has no %s: %w", req.Job, cp.Info.Step, what, errs.ErrNotFound)
		}
	}
	return map[string]any{"step": cp.Info.Step, "verified": cp.Verified, "blobs": blobs}, nil
}

type callReq struct {
	Job       string `json:"job"`
	Step      *int64 `json:"step"`
	KeepLast  int    `json:"keep_last"`
	KeepEvery int64  `json:"keep_every"`
	Force     bool   `json:"force"`
}

type infoJSON struct {
	Job         string    `json:"job"`
	Step        int64     `json:"step"`
	Name        string    `json:"name"`
	Time        time.Time `json:"time"`
	Pinned      bool      `json:"pinned"`
	HasManifest bool      `json:"has_manifest"`
}

func infoOf(in ckpt.Info) infoJSON {
	return infoJSON{in.Job, in.Step, in.Name, in.Time, in.Pinned, in.HasManifest}
}

// call runs one of the small operations.
func (hd *handle) call(ctx context.Context, op string, r *callReq) (any, error) {
	st := hd.st
	step := ckpt.Latest
	if r.Step != nil {
		step = *r.Step
	}
	needStep := func() error {
		if r.Step == nil {
			return invalidf("%s needs a step", op)
		}
		return nil
	}
	switch op {
	case "jobs":
		return st.Jobs(ctx)
	case "list":
		l, err := st.List(ctx, r.Job)
		if err != nil {
			return nil, err
		}
		out := make([]infoJSON, len(l))
		for i, in := range l {
			out[i] = infoOf(in)
		}
		return out, nil
	case "latest":
		in, err := st.Latest(ctx, r.Job)
		if err != nil {
			return nil, err
		}
		return infoOf(in), nil
	case "manifest":
		m, in, err := st.Manifest(ctx, r.Job, step)
		if err != nil {
			return nil, err
		}
		mb, err := m.Encode()
		if err != nil {
			return nil, err
		}
		return map[string]any{"info": infoOf(in), "manifest": json.RawMessage(mb)}, nil
	case "verify":
		rep, err := st.Verify(ctx, r.Job, step)
		if rep == nil {
			return nil, err
		}
		probs := make([]map[string]any, len(rep.Problems))
		for i, p := range rep.Problems {
			probs[i] = map[string]any{"shard": p.Shard, "tensor": p.Tensor, "kind": errorKind(p.Err), "message": p.Err.Error()}
		}
		return map[string]any{"info": infoOf(rep.Info), "shards": rep.Shards, "bytes": rep.Bytes, "filled": rep.Filled,
			"problems": probs, "unlisted": rep.Unlisted, "ok": err == nil}, nil
	case "prune":
		p := ckpt.Policy{KeepLast: r.KeepLast, KeepEvery: r.KeepEvery}
		if p.IsZero() {
			return nil, invalidf("prune: keep_last or keep_every is needed (the zero policy keeps everything)")
		}
		return st.Prune(ctx, r.Job, p)
	case "delete":
		if err := needStep(); err != nil {
			return nil, err
		}
		if r.Force {
			if err := st.Unpin(ctx, r.Job, step); err != nil {
				return nil, err
			}
		}
		return nil, st.Delete(ctx, r.Job, step)
	case "pin", "unpin":
		if err := needStep(); err != nil {
			return nil, err
		}
		if op == "pin" {
			return nil, st.Pin(ctx, r.Job, step)
		}
		return nil, st.Unpin(ctx, r.Job, step)
	case "gc":
		rep, err := st.GC(ctx, r.Job)
		if err != nil {
			return nil, err
		}
		return map[string]any{"staging": rep.Staging, "trash": rep.Trash}, nil
	}
	return nil, invalidf("unknown operation %q", op)
}
