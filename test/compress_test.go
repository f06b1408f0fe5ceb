package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/test/cluster"
)

var textWords = []string{"the", "model", "loss", "token", "gradient", "of", "and", "batch", "epoch", "learning",
	"rate", "checkpoint", "shard", "tensor", "layer", "attention", "is", "a", "to", "in", `{"text":`, `"id":`, "},"}

// textData is n bytes of word salad with lines: data that compresses like
// a text or JSON-lines dataset.
func textData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(textWords[r.IntN(len(textWords))])
		if r.IntN(12) == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.Bytes()[:n]
}

// setCompress sets the compression attribute of directory p.
func setCompress(t *testing.T, cl *cluster.Cluster, c *client.Client, p string, comp *mdspb.Compression) {
	t.Helper()
	ctx := context.Background()
	a, err := c.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	l := a.Layout
	if _, err := cl.MDSStub(c).SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: a.Ino, Layout: &mdspb.Layout{K: l.K, M: l.M, Unit: l.Unit, Compression: comp}}); err != nil {
		t.Fatal(err)
	}
}

// extentsOf returns the extent map of p.
func extentsOf(t *testing.T, cl *cluster.Cluster, c *client.Client, p string) []*mdspb.ExtentRef {
	t.Helper()
	ctx := context.Background()
	a, err := c.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.MDSStub(c).GetExtents(ctx, mdsGetExtents(a.Ino))
	if err != nil {
		t.Fatal(err)
	}
	return r.GetExtents()
}

// checkRandomReads reads random ranges of p and compares them with want.
func checkRandomReads(t *testing.T, c *client.Client, p string, want []byte, seed uint64) {
	t.Helper()
	ctx := context.Background()
	f, err := c.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	r := rand.New(rand.NewPCG(seed, 7))
	for range 40 {
		off := r.IntN(len(want))
		n := 1 + r.IntN(min(len(want)-off, 3<<20))
		buf := make([]byte, n)
		got, err := f.ReadAt(ctx, buf, int64(off))
		if err != nil && !(errors.Is(err, io.EOF) && off+got == len(want)) {
			t.Fatalf("read %d+%d: %v", off, n, err)
		}
		mustEqual(t, "random read", buf[:got], want[off:off+got])
	}
}

// TestCompressText: a directory with zstd holds text files in a fraction
// of the space, reads them back byte-identical (whole, and at random
// offsets), stores random data raw, and its files inherit the attribute.
func TestCompressText(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	c := cl.Client()
	ctx := context.Background()
	for _, d := range []string{"/raw", "/z"} {
		if err := c.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	setCompress(t, cl, c, "/z", &mdspb.Compression{Codec: mdspb.Codec_CODEC_ZSTD, Level: 3})
	files := map[string][]byte{
		"big":   textData(1, 40<<20+12345), // 3 extents, a partial last one
		"small": textData(2, 70<<10),
		"tiny":  textData(3, 3000),
	}
	before := chunkBytes(t, cl, 6)
	for name, data := range files {
		writeFile(t, c, "/raw/"+name, data)
	}
	rawBytes := chunkBytes(t, cl, 6) - before
	for name, data := range files {
		writeFile(t, c, "/z/"+name, data)
	}
	zBytes := chunkBytes(t, cl, 6) - before - rawBytes
	t.Logf("text: %d bytes raw, %d compressed (%.1fx)", rawBytes, zBytes, float64(rawBytes)/float64(zBytes))
	if zBytes*2 > rawBytes {
		t.Errorf("zstd text takes %d bytes, raw %d: want at least 2x smaller", zBytes, rawBytes)
	}
	a, err := c.Stat(ctx, "/z/big")
	if err != nil {
		t.Fatal(err)
	}
	if a.Layout.Compression.Codec != client.CodecZstd {
		t.Errorf("file layout %v does not inherit the directory's compression", a.Layout)
	}
	for _, ref := range extentsOf(t, cl, c, "/z/big") {
		e := ref.GetExtent()
		if e.GetLogicalLength() == 0 || len(e.GetCompressIndex()) == 0 || e.GetLength() >= e.GetLogicalLength() {
			t.Errorf("extent %d: stored %d, logical %d, index %d bytes: not compressed", e.GetId(), e.GetLength(), e.GetLogicalLength(), len(e.GetCompressIndex()))
		}
	}
	// A file of one 4 KiB cell per data chunk saves nothing on the OSTs
	// however well it compresses: stored raw.
	for _, ref := range extentsOf(t, cl, c, "/z/tiny") {
		if ref.GetExtent().GetLogicalLength() != 0 {
			t.Errorf("tiny file stored compressed")
		}
	}
	for name, data := range files {
		got, err := readFile(cl.Client(), "/z/"+name)
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, name, got, data)
	}
	checkRandomReads(t, cl.Client(), "/z/big", files["big"], 1)

	// Random bytes do not compress: stored raw, and marked so.
	rnd := randBytes(4, 5<<20)
	writeFile(t, c, "/z/random", rnd)
	for _, ref := range extentsOf(t, cl, c, "/z/random") {
		if e := ref.GetExtent(); e.GetLogicalLength() != 0 || e.GetLength() != ref.GetLength() {
			t.Errorf("random extent %d stored compressed (%d of %d)", e.GetId(), e.GetLength(), e.GetLogicalLength())
		}
	}
	got, err := readFile(cl.Client(), "/z/random")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "random", got, rnd)

	// Overwrite the middle of a compressed file, then append: new extents
	// (compressed) split the old ones.
	f, err := c.Open(ctx, "/z/big")
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), files["big"]...)
	patch := textData(9, 5<<20)
	copy(want[7<<20:], patch)
	tail := textData(10, 1<<20)
	want = append(want, tail...)
	if _, err := f.WriteAt(ctx, patch, 7<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, tail, int64(len(files["big"]))); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = readFile(cl.Client(), "/z/big")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "after overwrite", got, want)
	checkRandomReads(t, cl.Client(), "/z/big", want, 2)

	// Migrate rewrites a raw file compressed (admin migrate --compress).
	before = chunkBytes(t, cl, 6)
	res, err := c.Migrate(ctx, "/raw/big", client.Layout{K: 4, M: 2, Unit: 1 << 20, Compression: client.Compression{Codec: client.CodecS2}}, nil)
	if err != nil || res.Unchanged {
		t.Fatalf("migrate: %+v, %v", res, err)
	}
	for _, ref := range extentsOf(t, cl, c, "/raw/big") {
		if ref.GetExtent().GetLogicalLength() == 0 {
			t.Errorf("migrated extent %d stored raw", ref.GetExtent().GetId())
		}
	}
	got, err = readFile(cl.Client(), "/raw/big")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "migrated", got, files["big"])

	// s2, set on a file with data: only the compression may change.
	setCompress(t, cl, c, "/z/big", &mdspb.Compression{Codec: mdspb.Codec_CODEC_S2})
	a, _ = c.Stat(ctx, "/z/big")
	if _, err := cl.MDSStub(c).SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: a.Ino, Layout: &mdspb.Layout{K: 2, M: 1, Unit: 1 << 20}}); !errors.Is(err, errs.ErrNotEmpty) {
		t.Errorf("reshaping a file with data: %v, want ErrNotEmpty", err)
	}
	// A bad attribute is refused.
	a, _ = c.Stat(ctx, "/z")
	if _, err := cl.MDSStub(c).SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: a.Ino, Layout: &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20, Compression: &mdspb.Compression{Codec: mdspb.Codec_CODEC_ZSTD, Level: 40}}}); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("zstd level 40: %v, want ErrInvalid", err)
	}
}

// TestCompressCorruptAndDegraded: a flipped byte in a chunk of a
// compressed extent is caught by the OST's checksum (which covers the
// stored bytes) and rebuilt from parity; with 2 of 6 OSTs down the
// compressed file still reads back byte-identical.
func TestCompressCorruptAndDegraded(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	c := cl.Client()
	ctx := context.Background()
	if err := c.Mkdir(ctx, "/z", 0o755); err != nil {
		t.Fatal(err)
	}
	setCompress(t, cl, c, "/z", &mdspb.Compression{Codec: mdspb.Codec_CODEC_ZSTD})
	data := textData(5, 20<<20)
	writeFile(t, c, "/z/c", data)
	for _, ref := range extentsOf(t, cl, c, "/z/c") {
		if ref.GetExtent().GetLogicalLength() == 0 {
			t.Fatal("extent not compressed")
		}
	}
	if n := flipDataChunks(t, cl, c, "/z/c"); n == 0 {
		t.Fatal("found no chunk file to corrupt")
	}
	got, err := readFile(cl.Client(), "/z/c")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "read of a corrupted compressed chunk", got, data)
	checkRandomReads(t, cl.Client(), "/z/c", data, 3)

	cl.StopOST(0)
	cl.StopOST(1)
	got, err = readFile(cl.Client(), "/z/c")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "degraded read of a compressed file", got, data)
	checkRandomReads(t, cl.Client(), "/z/c", data, 4)
}

// normalTensor returns n elements of random-normal values (std 0.02, as
// weights are initialized) in dtype F32 or BF16, little endian.
func normalTensor(dt safetensors.DType, n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 11))
	w := 4
	if dt == safetensors.BF16 {
		w = 2
	}
	b := make([]byte, n*w)
	for i := range n {
		v := math.Float32bits(float32(r.NormFloat64() * 0.02))
		if w == 2 {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(v>>16))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], v)
		}
	}
	return b
}

// normalShards is a model of shards of F32 and BF16 random-normal
// tensors (odd sizes included), an int tensor and a text blob.
func normalShards(dt safetensors.DType, shards, perShard int, seed uint64) []ckpt.Shard {
	var out []ckpt.Shard
	for s := range shards {
		var ts []ckpt.Tensor
		w := 4
		if dt == safetensors.BF16 {
			w = 2
		}
		left := perShard
		for i := 0; left > 0; i++ {
			n := min(left/w, []int{1 << 20, 333_333, 1 << 18, 4097}[i%4])
			if n == 0 {
				break
			}
			ts = append(ts, ckpt.Tensor{Name: fmt.Sprintf("layers.%d.weight", i), DType: dt, Shape: []int64{int64(n)}, Data: normalTensor(dt, n, seed+uint64(s*100+i))})
			left -= n * w
		}
		ts = append(ts, ckpt.Tensor{Name: "step", DType: safetensors.I64, Shape: []int64{1}, Data: make([]byte, 8)})
		out = append(out, ckpt.Shard{Name: fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards), Tensors: ts})
	}
	return append(out, ckpt.Shard{Name: "trainer_state.json", Blob: textData(seed, 300<<10)})
}

// TestCompressCkpt: checkpoints of random-normal F32 and BF16 tensors
// saved with the checkpoint codec (the default) take less space than
// without it (BF16 >= 25%, F32 >= 12% saved), restore bit-identical
// (whole, a subset, a range), and their shards read as plain safetensors
// files; `Storage` reports the ratio per tensor.
func TestCompressCkpt(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	c := cl.Client()
	ctx := context.Background()
	plain := newStore(t, c, ckpt.Options{NoCompression: true, NoReuse: true})
	packed := newStore(t, c, ckpt.Options{NoReuse: true})
	for _, tc := range []struct {
		dt      safetensors.DType
		maxPart float64 // the largest stored/plain accepted
	}{{safetensors.BF16, 0.75}, {safetensors.F32, 0.88}} {
		shards := normalShards(tc.dt, 2, 12<<20, 7)
		job := "m-" + strings.ToLower(string(tc.dt))
		b0 := chunkBytes(t, cl, 6)
		if _, err := plain.Save(ctx, job, 1, shards); err != nil {
			t.Fatal(err)
		}
		b1 := chunkBytes(t, cl, 6)
		if _, err := packed.Save(ctx, job, 2, shards); err != nil {
			t.Fatal(err)
		}
		b2 := chunkBytes(t, cl, 6)
		raw, comp := b1-b0, b2-b1
		t.Logf("%s: %d bytes of chunks without the codec, %d with (%.3f)", tc.dt, raw, comp, float64(comp)/float64(raw))
		if float64(comp) > tc.maxPart*float64(raw) {
			t.Errorf("%s: compressed checkpoint takes %d of %d bytes: want <= %.2f", tc.dt, comp, raw, tc.maxPart)
		}
		st, err := packed.Storage(ctx, job, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			for _, ts := range s.Tensors {
				if ts.Logical >= 1<<20 && ts.Ratio() > tc.maxPart {
					t.Errorf("%s %s: ratio %.3f", s.Name, ts.Name, ts.Ratio())
				}
			}
		}
		st1, err := plain.Storage(ctx, job, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r := st1[0].Tensors[0].Ratio(); r != 1 {
			t.Errorf("uncompressed tensor ratio %.3f", r)
		}
		// Restore: every tensor checked against the manifest, and compared.
		cp, err := packed.Restore(ctx, job, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range shards {
			rs := cp.Shard(sh.Name)
			if rs == nil {
				t.Fatalf("shard %s not restored", sh.Name)
			}
			if sh.Blob != nil {
				continue
			}
			for _, tn := range sh.Tensors {
				mustEqual(t, sh.Name+" "+tn.Name, rs.Tensor(tn.Name).Data, tn.Data)
			}
		}
		// A rank's slice: one tensor, and a range inside another.
		sub, err := packed.Restore(ctx, job, 2, ckpt.Shards(shards[1].Name), ckpt.Select(func(_, tensor string) bool { return tensor == "layers.1.weight" }))
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "subset", sub.Shard(shards[1].Name).Tensor("layers.1.weight").Data, shards[1].Tensors[1].Data)
		part, err := packed.ReadRange(ctx, job, 2, shards[0].Name, "layers.0.weight", 1000, 300_001)
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "range", part, shards[0].Tensors[0].Data[1000:301_001])
		// The shard is a plain safetensors file to any reader of the file
		// system, byte-identical to the uncompressed one.
		p1, err := readFile(c, "/ckpt/"+job+"/step-0000000001/"+shards[0].Name)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := readFile(c, "/ckpt/"+job+"/step-0000000002/"+shards[0].Name)
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "shard file", p2, p1)
		h, err := safetensors.ReadHeader(bytes.NewReader(p2), int64(len(p2)))
		if err != nil {
			t.Fatal(err)
		}
		ti, ok := h.Tensor("layers.2.weight")
		if !ok {
			t.Fatal("tensor missing from the header")
		}
		mustEqual(t, "tensor via header", p2[h.DataStart()+ti.Begin:h.DataStart()+ti.End], shards[0].Tensors[2].Data)
	}
}
