package ckpt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
)

// The manifest (manifest.json, docs/checkpoints.md "Format") lists every
// shard of a checkpoint with its size and checksums, and what the save
// shared with the step before. Checksums are xxHash64 (seed 0), written as
// 16 lowercase hex digits:
//
//   - a tensor's digest is the xxh64 of its bytes;
//   - a safetensors shard's header digest is the xxh64 of its first
//     data_start bytes (the length, the JSON and its padding);
//   - a safetensors shard's digest is the xxh64 of the header digest
//     followed by every tensor's digest, in data order, as hex text (the
//     tensors cover the data exactly, so every byte of the file is
//     covered; it is computable without the bytes of a reused tensor);
//   - any other file's (a blob's) digest is the xxh64 of its bytes.

const (
	// FormatV1 is the manifest format this package writes and reads.
	FormatV1 = "shoal.ckpt/v1"
	// ChecksumXXH64 names the checksum algorithm of a manifest.
	ChecksumXXH64 = "xxh64"
	// maxManifestSize bounds a manifest read from disk.
	maxManifestSize = 256 << 20
)

// Shard kinds.
const (
	KindSafetensors = "safetensors"
	KindBlob        = "blob"
)

// Writers of manifests.
const (
	writerSave   = "shoal ckpt api"
	writerVerify = "shoal ckpt verify"
)

// Manifest describes one committed checkpoint.
type Manifest struct {
	Format   string    `json:"format"`
	Job      string    `json:"job"`
	Step     int64     `json:"step"`
	Created  time.Time `json:"created"`
	Writer   string    `json:"writer"`   // the API's Save, or Verify filling in a mount-protocol checkpoint
	Checksum string    `json:"checksum"` // "xxh64"
	// Base is the step whose data this one shares (zero-copy reuse);
	// nil when nothing was shared or the writer did not say.
	Base *int64 `json:"base,omitempty"`
	// Bytes is the size of every shard; Shared the bytes shared with
	// Base (cloned in the MDS, no data written); Written the rest.
	Bytes   int64        `json:"bytes"`
	Shared  int64        `json:"shared_bytes"`
	Written int64        `json:"written_bytes"`
	Shards  []ShardEntry `json:"shards"`
}

// ShardEntry is one file of a checkpoint as the manifest lists it.
type ShardEntry struct {
	Name string `json:"name"` // path relative to the step directory
	Kind string `json:"kind"` // KindSafetensors or KindBlob
	Size int64  `json:"size"`
	// Digest checks the whole shard (see the package's format notes).
	Digest string `json:"digest"`
	// DataStart and HeaderDigest: safetensors shards only.
	DataStart    int64             `json:"data_start,omitempty"`
	HeaderDigest string            `json:"header_digest,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	Tensors      []TensorEntry     `json:"tensors,omitempty"`
	// Shared is the bytes of this shard shared with the base step.
	Shared int64 `json:"shared_bytes,omitempty"`
}

// TensorEntry is one tensor of a safetensors shard.
type TensorEntry struct {
	Name  string            `json:"name"`
	DType safetensors.DType `json:"dtype"`
	Shape []int64           `json:"shape"`
	// Offset is the file offset of the tensor's first byte (data_start
	// plus its data_offsets[0]); Length its size in bytes.
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	Digest string `json:"digest"`
	// Shared is set when the bytes are the base step's (cloned).
	Shared bool `json:"shared,omitempty"`
}

// Shard returns the shard called name.
func (m *Manifest) Shard(name string) (*ShardEntry, bool) {
	for i := range m.Shards {
		if m.Shards[i].Name == name {
			return &m.Shards[i], true
		}
	}
	return nil, false
}

// Tensor returns the tensor called name.
func (s *ShardEntry) Tensor(name string) (*TensorEntry, bool) {
	for i := range s.Tensors {
		if s.Tensors[i].Name == name {
			return &s.Tensors[i], true
		}
	}
	return nil, false
}

// digestHex is the manifest spelling of an xxh64 sum.
func digestHex(sum uint64) string { return fmt.Sprintf("%016x", sum) }

// sumBytes returns the digest of b.
func sumBytes(b []byte) string { return digestHex(xxhash.Sum64(b)) }

// shardDigest combines a safetensors shard's header digest and its
// tensors' digests (in data order).
func shardDigest(header string, tensors []string) string {
	d := xxhash.New()
	d.WriteString(header)
	for _, t := range tensors {
		d.WriteString(t)
	}
	return digestHex(d.Sum64())
}

func validDigest(s string) bool {
	if len(s) != 16 {
		return false
	}
	_, err := strconv.ParseUint(s, 16, 64)
	return err == nil && s == string(bytes.ToLower([]byte(s)))
}

// Encode returns the manifest as indented JSON.
func (m *Manifest) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeManifest parses and checks a manifest read from disk: every field
// in range, names valid and unique, tensors inside their shard and not
// overlapping, digests well formed. Errors wrap errs.ErrCorrupt.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > maxManifestSize {
		return nil, fmt.Errorf("manifest of %d bytes (max %d): %w", len(b), maxManifestSize, errs.ErrCorrupt)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	m := &Manifest{}
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("manifest: %v: %w", err, errs.ErrCorrupt)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("manifest: %v: %w", err, errs.ErrCorrupt)
	}
	return m, nil
}

// check validates a manifest's contents.
func (m *Manifest) check() error {
	switch {
	case m.Format != FormatV1:
		return fmt.Errorf("format %q, this version reads %q", m.Format, FormatV1)
	case m.Checksum != ChecksumXXH64:
		return fmt.Errorf("checksum %q, this version knows %q", m.Checksum, ChecksumXXH64)
	case checkName("job", m.Job) != nil:
		return fmt.Errorf("job %q", m.Job)
	case m.Step < 0:
		return fmt.Errorf("step %d", m.Step)
	case m.Base != nil && (*m.Base < 0 || *m.Base >= m.Step):
		return fmt.Errorf("base step %d of step %d", *m.Base, m.Step)
	}
	names := make(map[string]bool, len(m.Shards))
	var total, shared int64
	for i := range m.Shards {
		s := &m.Shards[i]
		if err := checkRelPath(s.Name); err != nil {
			return err
		}
		if names[s.Name] {
			return fmt.Errorf("shard %q twice", s.Name)
		}
		names[s.Name] = true
		if s.Size < 0 || s.Shared < 0 || s.Shared > s.Size {
			return fmt.Errorf("shard %q: size %d, shared %d", s.Name, s.Size, s.Shared)
		}
		if !validDigest(s.Digest) {
			return fmt.Errorf("shard %q: digest %q", s.Name, s.Digest)
		}
		switch s.Kind {
		case KindBlob:
			if len(s.Tensors) != 0 || s.DataStart != 0 || s.HeaderDigest != "" {
				return fmt.Errorf("blob %q has safetensors fields", s.Name)
			}
		case KindSafetensors:
			if err := s.checkTensors(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("shard %q: kind %q", s.Name, s.Kind)
		}
		total += s.Size
		shared += s.Shared
	}
	if m.Bytes != total || m.Shared != shared || m.Written != total-shared {
		return fmt.Errorf("totals %d/%d/%d disagree with the shards' %d/%d", m.Bytes, m.Shared, m.Written, total, shared)
	}
	return nil
}

// checkTensors checks a safetensors shard's entries against each other:
// in data order, contiguous from data_start to the end of the file, each
// of the size its dtype and shape say.
func (s *ShardEntry) checkTensors() error {
	if s.DataStart < 8+2 || s.DataStart > s.Size || !validDigest(s.HeaderDigest) {
		return fmt.Errorf("shard %q: data start %d, header digest %q", s.Name, s.DataStart, s.HeaderDigest)
	}
	off := s.DataStart
	names := make(map[string]bool, len(s.Tensors))
	for _, t := range s.Tensors {
		n, err := safetensors.ByteSize(t.DType, t.Shape)
		switch {
		case t.Name == "" || t.Name == safetensors.MetadataKey || names[t.Name]:
			return fmt.Errorf("shard %q: tensor name %q empty, reserved or repeated", s.Name, t.Name)
		case err != nil:
			return fmt.Errorf("shard %q: tensor %q: %v", s.Name, t.Name, err)
		case n != t.Length || t.Offset != off:
			return fmt.Errorf("shard %q: tensor %q at %d+%d, want %d+%d", s.Name, t.Name, t.Offset, t.Length, off, n)
		case !validDigest(t.Digest):
			return fmt.Errorf("shard %q: tensor %q: digest %q", s.Name, t.Name, t.Digest)
		}
		names[t.Name] = true
		off += t.Length
	}
	if off != s.Size {
		return fmt.Errorf("shard %q: tensors end at %d, the file at %d", s.Name, off, s.Size)
	}
	return nil
}

// entriesOf turns a decoded safetensors header into manifest entries
// (digests left empty).
func entriesOf(h *safetensors.Header) []TensorEntry {
	out := make([]TensorEntry, len(h.Tensors))
	for i, t := range h.Tensors {
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		out[i] = TensorEntry{Name: t.Name, DType: t.DType, Shape: shape, Offset: h.DataStart() + t.Begin, Length: t.Size()}
	}
	return out
}
