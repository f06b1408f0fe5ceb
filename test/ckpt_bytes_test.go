package test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/test/cluster"
)

// Byte-identical checkpoints (docs/checkpoints.md "Headers as written"):
// safetensors files whose headers other serialisers wrote (other spacing,
// key orders, escapes, padding) come back from a save and a restore with
// the bytes they went in with, through the CLI, the API and the mount.

// stTensor is a tensor of a hand-built safetensors file, in data order.
type stTensor struct {
	name  string
	dtype safetensors.DType
	shape []int64
}

// stStyle is how a writer spells a header.
type stStyle struct {
	name       string
	sep, colon string   // between items; between key and value
	keys       []string // the order of dtype, shape and data_offsets
	reverse    bool     // list the tensors in reverse data order
	byName     bool     // list the tensors by name
	meta       string   // the raw JSON of __metadata__ ("" for none)
	metaLast   bool
	indent     bool // json.Indent the object (newlines, two spaces)
	align      int  // pad with spaces so that the data starts at a multiple of align
	extra      int  // then this many more spaces
}

// stFile builds a safetensors file of tensors ts (random data from seed)
// whose header is spelled as st says, and checks that it decodes and that
// Shoal's own encoding of the same header differs from it.
func stFile(t *testing.T, seed uint64, ts []stTensor, st stStyle) []byte {
	t.Helper()
	type placed struct {
		stTensor
		begin, end int64
	}
	var ps []placed
	var off int64
	for _, x := range ts {
		n, err := safetensors.ByteSize(x.dtype, x.shape)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, placed{x, off, off + n})
		off += n
	}
	list := func(v ...int64) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.FormatInt(x, 10)
		}
		return "[" + strings.Join(s, st.sep) + "]"
	}
	order := slices.Clone(ps)
	if st.reverse {
		slices.Reverse(order)
	}
	if st.byName {
		slices.SortFunc(order, func(a, b placed) int { return strings.Compare(a.name, b.name) })
	}
	var items []string
	for _, p := range order {
		v := map[string]string{"dtype": strconv.Quote(string(p.dtype)), "shape": list(p.shape...), "data_offsets": list(p.begin, p.end)}
		var kv []string
		for _, k := range st.keys {
			kv = append(kv, strconv.Quote(k)+st.colon+v[k])
		}
		items = append(items, strconv.Quote(p.name)+st.colon+"{"+strings.Join(kv, st.sep)+"}")
	}
	if st.meta != "" {
		m := `"__metadata__"` + st.colon + st.meta
		if st.metaLast {
			items = append(items, m)
		} else {
			items = append([]string{m}, items...)
		}
	}
	js := "{" + strings.Join(items, st.sep) + "}"
	if st.indent {
		var b bytes.Buffer
		if err := json.Indent(&b, []byte(js), "", "  "); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		js = b.String()
	}
	if st.align > 0 {
		js += strings.Repeat(" ", (st.align-(8+len(js))%st.align)%st.align)
	}
	js += strings.Repeat(" ", st.extra)
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	file = append(append(file, js...), ckptRand(seed, int(off))...)

	h, err := safetensors.Decode(file, int64(len(file)))
	if err != nil {
		t.Fatalf("%s: hand-built file: %v", st.name, err)
	}
	specs := make([]safetensors.Spec, len(h.Tensors))
	for i, x := range h.Tensors {
		specs[i] = safetensors.Spec{Name: x.Name, DType: x.DType, Shape: x.Shape}
	}
	_, enc, err := safetensors.Layout(h.Metadata, specs)
	if err != nil || bytes.Equal(enc, file[:h.DataStart()]) {
		t.Fatalf("%s: Shoal's own encoding of this header is the same (%v): the file tests nothing", st.name, err)
	}
	return file
}

// foreignFiles is a checkpoint directory as other writers leave it: six
// safetensors files whose headers are each spelled another way, and a
// blob.
func foreignFiles(t *testing.T) map[string][]byte {
	t.Helper()
	tensors := []stTensor{
		{"model.embed_tokens.weight", safetensors.BF16, []int64{1000, 384}},
		{"model.layers.0.self_attn.q_proj.weight", safetensors.BF16, []int64{384, 384}},
		{"model.layers.0.input_layernorm.weight", safetensors.F32, []int64{383}},
		{"model.layers.0.mlp.up_proj.weight", safetensors.F16, []int64{1031, 384}},
		{"lm_head.bias", safetensors.F32, []int64{1000}},
		{"step", safetensors.I64, []int64{}},
		{"model.layers.0.attn.rotary.inv_freq", safetensors.F32, []int64{0}},
	}
	compact := []string{"dtype", "shape", "data_offsets"}
	styles := []stStyle{
		// safetensors.torch.save_file: compact, tensors by name, 8-byte padding.
		{name: "reference", sep: ",", colon: ":", keys: compact, byName: true, meta: `{"format":"pt"}`, align: 8},
		// json.dumps: ", " and ": ", other key orders, metadata last.
		{name: "python", sep: ", ", colon: ": ", keys: []string{"data_offsets", "shape", "dtype"}, reverse: true,
			meta: `{"format": "pt", "epoch": "3"}`, metaLast: true, align: 8},
		// json.dumps(indent=2, sort_keys=True): newlines, no padding at all.
		{name: "indented", sep: ",", colon: ":", keys: []string{"data_offsets", "dtype", "shape"}, byName: true,
			meta: `{"a":"1","format":"pt"}`, indent: true},
		// 4 KiB padding as Shoal pads, but unsorted metadata with escapes.
		{name: "aligned", sep: ",", colon: ":", keys: []string{"shape", "dtype", "data_offsets"},
			meta: `{"z":"caf\u00e9","a\/b":"x\ty","format":"pt"}`, align: 4096},
		// Trailing spaces past any alignment, as the format allows.
		{name: "trailing", sep: ",", colon: ":", keys: compact, reverse: true, align: 8, extra: 77},
		// An empty metadata map, odd spacing.
		{name: "empty-metadata", sep: " ,", colon: " : ", keys: compact, meta: `{ }`, metaLast: true, extra: 1},
	}
	files := map[string][]byte{"trainer_state.json": []byte(`{"global_step": 1200, "epoch": 3}` + "\n")}
	for i, st := range styles {
		files[st.name+".safetensors"] = stFile(t, uint64(100+i), tensors, st)
	}
	return files
}

// shardsOf reads files as `shoal ckpt save --from` does: a safetensors
// file as its header bytes and tensors; keep false drops the header
// bytes, as saves before headers were kept did (the header re-laid out).
func shardsOf(t *testing.T, files map[string][]byte, keep bool) []ckpt.Shard {
	t.Helper()
	var out []ckpt.Shard
	for _, name := range slices.Sorted(maps.Keys(files)) {
		b := files[name]
		if !strings.HasSuffix(name, ".safetensors") {
			out = append(out, ckpt.Shard{Name: name, Blob: b})
			continue
		}
		h, err := safetensors.Decode(b, int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		sh := ckpt.Shard{Name: name, Tensors: []ckpt.Tensor{}}
		if keep {
			sh.Header = b[:h.DataStart()]
		} else {
			sh.Metadata = h.Metadata
		}
		for _, x := range h.Tensors {
			sh.Tensors = append(sh.Tensors, ckpt.Tensor{Name: x.Name, DType: x.DType, Shape: x.Shape, Data: b[h.DataStart()+x.Begin : h.DataStart()+x.End]})
		}
		out = append(out, sh)
	}
	return out
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// sameFiles fails unless got holds exactly the files of want, each with
// the same sha256.
func sameFiles(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
		t.Fatalf("%s: files %v, want %v", what, g, w)
	}
	for n, w := range want {
		if g, w := sha256Hex(got[n]), sha256Hex(w); g != w {
			t.Errorf("%s: %s has sha256 %s (%d bytes), the original %s (%d bytes)", what, n, g, len(got[n]), w, len(want[n]))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

// relaidOut is what a save that does not keep headers stores for files:
// each safetensors header re-encoded by Shoal, the data after it.
func relaidOut(t *testing.T, files map[string][]byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, sh := range shardsOf(t, files, false) {
		if sh.Blob != nil {
			out[sh.Name] = sh.Blob
			continue
		}
		specs := make([]safetensors.Spec, len(sh.Tensors))
		for i, x := range sh.Tensors {
			specs[i] = safetensors.Spec{Name: x.Name, DType: x.DType, Shape: x.Shape}
		}
		_, b, err := safetensors.Layout(sh.Metadata, specs)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range sh.Tensors {
			b = append(b, x.Data...)
		}
		out[sh.Name] = b
	}
	return out
}

// TestCkptBytesCLI: `shoal ckpt save --from` then `restore --to` gives
// back every file with the sha256 it had, whatever wrote its header; the
// same directory saved again shares every byte; a checkpoint saved before
// headers were kept (re-laid out) still restores, as it was stored.
func TestCkptBytesCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): builds shoal")
	}
	bin := filepath.Join(t.TempDir(), "shoal")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/shoalfs/shoal/cmd/shoal").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cl := ckptCluster(t, cluster.Options{})
	must := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"ckpt"}, args...)...)
		cmd.Env = append(append(os.Environ(), "SHOAL_MDS="+cl.MDSAddr()), cl.TLSEnv()...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("shoal ckpt %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	files := foreignFiles(t)
	src := t.TempDir()
	writeFiles(t, src, files)

	must("save", "--from", src, "bytes", "10")
	dst := t.TempDir()
	must("restore", "--to", dst, "bytes", "10")
	sameFiles(t, "restore of step 10", readFiles(t, dst), files)
	if out := must("verify", "bytes", "10"); !strings.HasPrefix(out, "ok: bytes step 10: 7 shards") {
		t.Fatalf("verify said %q", out)
	}

	// The manifest records the headers as they are.
	var m ckpt.Manifest
	if err := json.Unmarshal([]byte(must("show", "--json", "bytes", "10")), &m); err != nil {
		t.Fatal(err)
	}
	for _, e := range m.Shards {
		if e.Kind != ckpt.KindSafetensors {
			continue
		}
		h, err := safetensors.Decode(files[e.Name], int64(len(files[e.Name])))
		if err != nil || e.DataStart != h.DataStart() || e.Size != int64(len(files[e.Name])) || len(e.Tensors) != 7 {
			t.Fatalf("%s: manifest data start %d size %d, the file's %d %d (%v)", e.Name, e.DataStart, e.Size, h.DataStart(), len(files[e.Name]), err)
		}
	}

	// Saved again: every byte shared, and still the same bytes.
	if err := json.Unmarshal([]byte(must("save", "--json", "--from", src, "bytes", "20")), &m); err != nil || m.Shared != m.Bytes || m.Base == nil || *m.Base != 10 {
		t.Fatalf("second save: %v shared %d of %d", err, m.Shared, m.Bytes)
	}
	dst2 := t.TempDir()
	must("restore", "--to", dst2, "bytes")
	sameFiles(t, "restore of step 20", readFiles(t, dst2), files)

	// A checkpoint saved as before headers were kept (the header
	// re-encoded, 4 KiB aligned) restores as it was stored.
	s := newStore(t, cl.Client(), ckpt.Options{})
	if _, err := s.Save(context.Background(), "old", 5, shardsOf(t, files, false)); err != nil {
		t.Fatal(err)
	}
	dst3 := t.TempDir()
	must("restore", "--to", dst3, "old", "5")
	sameFiles(t, "restore of a re-laid-out step", readFiles(t, dst3), relaidOut(t, files))
}

// reassembled is the files of a restored checkpoint as the API returns
// them: a safetensors shard's Header followed by its tensors, a blob.
func reassembled(c *ckpt.Checkpoint) map[string][]byte {
	out := map[string][]byte{}
	for _, rs := range c.Shards {
		if rs.Kind == ckpt.KindBlob {
			out[rs.Name] = rs.Blob
			continue
		}
		b := slices.Clone(rs.Header)
		for _, x := range rs.Tensors {
			b = append(b, x.Data...)
		}
		out[rs.Name] = b
	}
	return out
}

// TestCkptBytesAPI: shards saved with their Header (Save and SaveAsync,
// the caller's buffers scribbled over after SaveAsync returns) restore
// byte for byte through Restore (Header and tensors) and ReadFile; a step
// saved without headers restores as Shoal laid it out.
func TestCkptBytesAPI(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	ctx := context.Background()
	s := newStore(t, cl.Client(), ckpt.Options{})
	files := foreignFiles(t)
	check := func(what string, step int64, want map[string][]byte) {
		t.Helper()
		got, err := s.Restore(ctx, "api", step)
		if err != nil || !got.Verified {
			t.Fatalf("%s: restore: %v", what, err)
		}
		sameFiles(t, what+": Restore", reassembled(got), want)
		out := map[string][]byte{}
		for n := range want {
			b, _, err := s.ReadFile(ctx, "api", step, n)
			if err != nil {
				t.Fatalf("%s: ReadFile %s: %v", what, n, err)
			}
			out[n] = b
		}
		sameFiles(t, what+": ReadFile", out, want)
	}

	if _, err := s.Save(ctx, "api", 1, shardsOf(t, files, true)); err != nil {
		t.Fatal(err)
	}
	check("Save", 1, files)

	copies := map[string][]byte{}
	for n, b := range files {
		copies[n] = bytes.Clone(b)
	}
	p, err := s.SaveAsync(ctx, "api", 2, shardsOf(t, copies, true), ckpt.NoReuse())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range copies {
		for i := range b {
			b[i] = '#'
		}
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	check("SaveAsync", 2, files)

	if _, err := s.Save(ctx, "api", 3, shardsOf(t, files, false)); err != nil {
		t.Fatal(err)
	}
	check("a re-laid-out step", 3, relaidOut(t, files))
}

// TestCkptBytesMount: the files of a checkpoint saved with its headers
// read through the FUSE mount with the sha256 they were saved with.
func TestCkptBytesMount(t *testing.T) {
	cl := ckptCluster(t, cluster.Options{})
	mnt := cl.Mount()
	s := newStore(t, cl.Client(), ckpt.Options{})
	files := foreignFiles(t)
	if _, err := s.Save(context.Background(), "mnt", 7, shardsOf(t, files, true)); err != nil {
		t.Fatal(err)
	}
	got := readFiles(t, filepath.Join(mnt, "ckpt", "mnt", ckpt.StepName(7)))
	if _, ok := got[ckpt.ManifestName]; !ok {
		t.Fatalf("no %s in the step directory", ckpt.ManifestName)
	}
	delete(got, ckpt.ManifestName)
	sameFiles(t, "the mount", got, files)
}
