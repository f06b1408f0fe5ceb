// Package compress compresses the bytes of an extent in independently
// decodable blocks, so that a read inside a compressed extent fetches and
// decodes only the blocks it needs.
//
// An extent of L logical bytes is cut into blocks of BlockSize bytes (the
// last one shorter). Each block is encoded on its own, with the codec (s2,
// or zstd at a level) or, for blocks of float elements (ElemSize, or the
// Planes hint), as byte planes (plane j holds byte j of every element),
// each plane entropy coded (planes.go: the transform that makes float
// tensors compress), and is kept raw when encoding does not make it
// smaller. The stored bytes are the blocks back to back; the
// Index says where each block lies in them and how to decode it. The index
// is small (a few bytes per block) and lives in the extent's metadata
// record, so finding a block costs no read.
//
// The whole extent is stored compressed only when that saves at least
// MinSavingPct percent of its bytes (default 10); Encode reports otherwise
// and the caller stores the extent raw.
//
// Everything that decodes (ParseIndex, Index.DecodeBlock) treats its input
// as untrusted: sizes are checked against the index and capped before
// anything is allocated, and a bad index or block is an error wrapping
// errs.ErrCorrupt, never a panic.
//
// Blocks carry a check of their decoded bytes, so that a decoder never
// returns wrong bytes from a damaged block without an error: zstd frames
// their own (a 32-bit xxHash64), s2 blocks a 4-byte trailer (the low 32
// bits of the xxHash64 of the block's logical bytes), byte-plane blocks
// the same check on each huff0 piece's output (format 2; format 1 blocks
// a trailer like s2's).
// Corruption is caught below this anyway (the OSTs' block CRCs cover the
// stored bytes); this is the end-to-end check of the codec.
//
// The package is a leaf: it imports only internal/errs,
// github.com/klauspost/compress, github.com/cespare/xxhash/v2 and
// golang.org/x/sys/cpu.
package compress

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/shoalfs/shoal/internal/errs"
)

// Codec is a block codec. The values are those of mdspb.Codec.
type Codec uint8

const (
	None Codec = 0
	S2   Codec = 1
	Zstd Codec = 2
)

func (c Codec) String() string {
	switch c {
	case None:
		return "none"
	case S2:
		return "s2"
	case Zstd:
		return "zstd"
	}
	return "codec(" + strconv.Itoa(int(c)) + ")"
}

const (
	// DefaultBlockSize is the logical size of a block: the unit of random
	// access inside a compressed extent.
	DefaultBlockSize = 1 << 20
	// MinBlockSize and MaxBlockSize bound BlockSize (a power of two).
	MinBlockSize = 64 << 10
	MaxBlockSize = 16 << 20
	// MaxLogical is the largest extent Encode and ParseIndex accept.
	MaxLogical = 1 << 32
	// DefaultMinSavingPct is the saving below which an extent is stored raw.
	DefaultMinSavingPct = 10
	// DefaultZstdLevel is the zstd level used when none is given.
	DefaultZstdLevel = 3
	// probeBlocks is how many blocks Encode tries before it gives up on
	// an extent that saves less than half the threshold so far.
	probeBlocks = 2
)

// Options says how to compress.
type Options struct {
	Codec Codec
	// Level is the zstd level, 1..22 (0: DefaultZstdLevel). The encoder
	// has four speeds: 1-2 fastest, 3-5 default, 6-9 better, 10+ best.
	Level int
	// BlockSize is the logical block size, a power of two in
	// [MinBlockSize, MaxBlockSize] (0: DefaultBlockSize).
	BlockSize int
	// MinSavingPct is the saving (percent of the logical bytes) under which
	// Encode declines to compress (0: DefaultMinSavingPct; negative: any
	// saving at all).
	MinSavingPct int
	// ElemSize, when 2, 4 or 8, stores every block as byte planes of
	// elements of that width, entropy coded (whatever the codec). Elements are taken to start
	// at logical offsets that are multiples of ElemSize, counting from
	// Base (see Options.Base); bytes before the first whole element of a
	// block and after its last are kept as they are.
	ElemSize int
	// Base is the file offset of the extent's first byte, so that element
	// boundaries (multiples of ElemSize in file offsets) are found inside
	// each block.
	Base int64
	// Planes, when set, overrides ElemSize per block: it returns the
	// element width (0, 1: no planes) and the file offset of an element
	// boundary for the file range [off, off+n) of one block. The checkpoint
	// writer uses it to give each tensor's dtype.
	Planes func(off, n int64) (width int, boundary int64)
	// Raw, when set, names the blocks known not to compress (a sample of
	// their bytes did not): it is called with the file range [off,
	// off+n) of each block, and a block it reports is stored raw without
	// being encoded. An extent whose first blocks it reports is given up
	// at once (the probe below), so data that does not compress costs
	// no encoding at all.
	Raw func(off, n int64) bool
}

// Validate checks o.
func (o Options) Validate() error {
	switch {
	case o.Codec > Zstd:
		return fmt.Errorf("compress: unknown codec %d: %w", o.Codec, errs.ErrInvalid)
	case o.Level < 0 || o.Level > 22:
		return fmt.Errorf("compress: zstd level %d (want 1..22): %w", o.Level, errs.ErrInvalid)
	case o.BlockSize != 0 && (o.BlockSize < MinBlockSize || o.BlockSize > MaxBlockSize || o.BlockSize&(o.BlockSize-1) != 0):
		return fmt.Errorf("compress: block size %d (a power of two in [%d, %d]): %w", o.BlockSize, MinBlockSize, MaxBlockSize, errs.ErrInvalid)
	case o.MinSavingPct > 99:
		return fmt.Errorf("compress: minimum saving %d%%: %w", o.MinSavingPct, errs.ErrInvalid)
	case !validWidth(o.ElemSize):
		return fmt.Errorf("compress: element size %d (want 0, 1, 2, 4 or 8): %w", o.ElemSize, errs.ErrInvalid)
	}
	return nil
}

func validWidth(w int) bool { return w == 0 || w == 1 || w == 2 || w == 4 || w == 8 }

func (o Options) blockSize() int {
	if o.BlockSize == 0 {
		return DefaultBlockSize
	}
	return o.BlockSize
}

func (o Options) minSaving() int {
	switch {
	case o.MinSavingPct == 0:
		return DefaultMinSavingPct
	case o.MinSavingPct < 0:
		return 0
	}
	return o.MinSavingPct
}

// ParseSpec parses a codec as a user types it: none, s2, zstd or
// zstd:LEVEL.
func ParseSpec(s string) (Codec, int, error) {
	name, lvl, hasLevel := strings.Cut(strings.ToLower(strings.TrimSpace(s)), ":")
	var c Codec
	switch name {
	case "none", "off", "":
		c = None
	case "s2":
		c = S2
	case "zstd":
		c = Zstd
	default:
		return 0, 0, fmt.Errorf("compression %q: want none, s2, zstd or zstd:LEVEL: %w", s, errs.ErrInvalid)
	}
	if !hasLevel {
		return c, 0, nil
	}
	if c != Zstd {
		return 0, 0, fmt.Errorf("compression %q: only zstd takes a level: %w", s, errs.ErrInvalid)
	}
	n, err := strconv.Atoi(lvl)
	if err != nil || n < 1 || n > 22 {
		return 0, 0, fmt.Errorf("compression %q: zstd level 1..22: %w", s, errs.ErrInvalid)
	}
	return c, n, nil
}

// Encoders and decoders are costly to make and safe for concurrent use:
// one per zstd speed, one decoder for everything.
var (
	encMu    sync.Mutex
	encoders = map[zstd.EncoderLevel]*zstd.Encoder{}

	decOnce sync.Once
	decoder *zstd.Decoder
	decErr  error
)

func zstdEncoder(level int) (*zstd.Encoder, error) {
	if level == 0 {
		level = DefaultZstdLevel
	}
	l := zstd.EncoderLevelFromZstd(level)
	encMu.Lock()
	defer encMu.Unlock()
	if e, ok := encoders[l]; ok {
		return e, nil
	}
	// Literal entropy coding stays on even where no match is found: the
	// exponent plane of a float tensor has no matches but few symbols.
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithAllLitEntropyCompression(true), zstd.WithWindowSize(MaxBlockSize), zstd.WithSingleSegment(true),
		zstd.WithZeroFrames(true), zstd.WithEncoderCRC(true))
	if err != nil {
		return nil, err
	}
	encoders[l] = e
	return e, nil
}

func zstdDecoder() (*zstd.Decoder, error) {
	decOnce.Do(func() {
		decoder, decErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecoderMaxMemory(MaxBlockSize), zstd.WithDecoderMaxWindow(MaxBlockSize), zstd.WithDecodeAllCapLimit(true))
	})
	return decoder, decErr
}

// Result is what Encode made.
type Result struct {
	// Index describes the stored bytes; Index.Marshal is what the extent
	// record keeps.
	Index *Index
	// Stored is the stored bytes: the blocks back to back.
	Stored []byte
}

// Encode compresses src, whose first byte is at file offset o.Base. It
// appends the stored bytes to dst[:0] (dst may be nil; give a buffer of
// len(src) capacity to avoid allocating) and returns them with their
// index. ok is false when compressing src saves less than o.MinSavingPct
// percent (or o.Codec is None): the caller stores src raw.
func Encode(dst, src []byte, o Options) (r Result, ok bool, err error) {
	if err := o.Validate(); err != nil {
		return Result{}, false, err
	}
	if o.Codec == None || len(src) == 0 {
		return Result{}, false, nil
	}
	if int64(len(src)) > MaxLogical {
		return Result{}, false, fmt.Errorf("compress: extent of %d bytes, over %d: %w", len(src), int64(MaxLogical), errs.ErrTooLarge)
	}
	bs := o.blockSize()
	x := &Index{Codec: o.Codec, BlockSize: int64(bs), Logical: int64(len(src))}
	n := (len(src) + bs - 1) / bs
	x.Blocks = make([]Block, n)
	limit := int64(len(src)) - int64(len(src))*int64(o.minSaving())/100
	if o.minSaving() > 0 && limit == int64(len(src)) {
		limit-- // a saving must be at least one byte
	}
	out := dst[:0]
	for b := 0; b < n; b++ {
		lo := b * bs
		blk := src[lo:min(lo+bs, len(src))]
		start := len(out)
		if o.Raw != nil && o.Raw(o.Base+int64(lo), int64(len(blk))) {
			out = append(out, blk...)
			x.Blocks[b] = Block{Off: int64(start), Len: int64(len(blk)), Raw: true}
			if giveUp(o, b, n, int64(lo+len(blk)), int64(len(out)), limit) {
				return Result{}, false, nil
			}
			continue
		}
		w, skip := o.planesOf(o.Base+int64(lo), int64(len(blk)))
		if w > 1 {
			out, err = encodePlanes(out, blk, w, skip)
		} else {
			out, err = encodeBlock(out, blk, o)
		}
		if err != nil {
			return Result{}, false, err
		}
		if w <= 1 && o.Codec == S2 {
			out = binary.LittleEndian.AppendUint32(out, sum32(blk))
		}
		blen := len(out) - start
		if blen >= len(blk) {
			// Incompressible: keep the block raw (no planes).
			out = append(out[:start], blk...)
			x.Blocks[b] = Block{Off: int64(start), Len: int64(len(blk)), Raw: true}
		} else {
			x.Blocks[b] = Block{Off: int64(start), Len: int64(blen), Width: uint8(w), Skip: uint8(skip), Planes2: w > 1}
		}
		if giveUp(o, b, n, int64(lo+len(blk)), int64(len(out)), limit) {
			return Result{}, false, nil
		}
	}
	if int64(len(out)) > limit {
		return Result{}, false, nil
	}
	x.Stored = int64(len(out))
	return Result{Index: x, Stored: out}, true, nil
}

// giveUp reports whether Encode stops after block b of n, with done
// logical bytes stored in stored bytes so far: when the rest cannot save
// enough even if it shrank to nothing (stored over limit), or when the
// first probeBlocks blocks saved less than half the threshold: an extent
// that does not compress at its start seldom does later, and encoding
// bytes that end up stored raw anyway costs CPU for nothing.
func giveUp(o Options, b, n int, done, stored, limit int64) bool {
	if stored > limit {
		return true
	}
	return b+1 == probeBlocks && b+1 < n && (done-stored)*200 < done*int64(o.minSaving())
}

// planesOf returns the plane width and the skip (bytes before the first
// element boundary) of the block at file offset off of n bytes.
func (o Options) planesOf(off, n int64) (w, skip int) {
	var boundary int64
	switch {
	case o.Planes != nil:
		w, boundary = o.Planes(off, n)
		if !validWidth(w) {
			w = 0
		}
	default:
		w = o.ElemSize
	}
	if w <= 1 || n < int64(w) {
		return 0, 0
	}
	skip = int(((boundary-off)%int64(w) + int64(w)) % int64(w))
	return w, skip
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// encodeBlock appends the encoding of in to out.
func encodeBlock(out, in []byte, o Options) ([]byte, error) {
	switch o.Codec {
	case S2:
		need := s2.MaxEncodedLen(len(in))
		if need < 0 {
			return nil, fmt.Errorf("compress: block of %d bytes too large for s2: %w", len(in), errs.ErrTooLarge)
		}
		if cap(out)-len(out) < need {
			nb := make([]byte, len(out), len(out)+need+(cap(out)-len(out))/2)
			copy(nb, out)
			out = nb
		}
		enc := s2.Encode(out[len(out):len(out)+need], in)
		return out[:len(out)+len(enc)], nil
	case Zstd:
		e, err := zstdEncoder(o.Level)
		if err != nil {
			return nil, err
		}
		return e.EncodeAll(in, out), nil
	}
	return nil, fmt.Errorf("compress: codec %v: %w", o.Codec, errs.ErrInvalid)
}

func sum32(b []byte) uint32 { return uint32(xxhash.Sum64(b)) }
