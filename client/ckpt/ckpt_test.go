package ckpt

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
)

func TestStepNames(t *testing.T) {
	if got := StepName(1200); got != "step-0000001200" {
		t.Fatalf("StepName(1200) = %q", got)
	}
	// Padded names sort numerically as strings.
	names := []string{StepName(100), StepName(9), StepName(10), StepName(0)}
	slices.Sort(names)
	if want := []string{StepName(0), StepName(9), StepName(10), StepName(100)}; !slices.Equal(names, want) {
		t.Fatalf("sorted %v", names)
	}
	for _, tc := range []struct {
		in   string
		step int64
		ok   bool
	}{
		{"step-0000001200", 1200, true},
		{"step-1200", 1200, true},
		{"step-0", 0, true},
		{"step-9223372036854775807", 1<<63 - 1, true},
		{"step-9223372036854775808", 0, false},
		{"step-", 0, false},
		{"step--1", 0, false},
		{"step-12a", 0, false},
		{"step-+12", 0, false},
		{"Step-12", 0, false},
		{".step-12.tmp", 0, false},
		{"step-12.tmp", 0, false},
		{"step-00000000000000000001", 0, false}, // 20 digits
	} {
		step, ok := ParseStepName(tc.in)
		if ok != tc.ok || step != tc.step {
			t.Errorf("ParseStepName(%q) = %d %v, want %d %v", tc.in, step, ok, tc.step, tc.ok)
		}
	}
	st := stagingName(42)
	if !isStaging(st) || !strings.HasPrefix(st, ".step-0000000042.") || isStaging("step-42") || !isStaging(".step-42.tmp") {
		t.Fatalf("staging name %q", st)
	}
	if _, ok := ParseStepName(st); ok {
		t.Fatal("a staging name parses as a step")
	}
	if tn := trashName("step-0000000042"); !isTrash(tn) || isStaging(tn) {
		t.Fatalf("trash name %q", tn)
	}
	if tn := trashName(strings.Repeat("x", 300)); len(tn) > maxName {
		t.Fatalf("trash name of %d bytes", len(tn))
	}
}

func TestCheckNames(t *testing.T) {
	for _, s := range []string{"", ".hidden", "a/b", "a\x00b", strings.Repeat("x", 256), "\xff"} {
		if checkName("job", s) == nil {
			t.Errorf("checkName(%q) accepted", s)
		}
	}
	for _, n := range []string{ManifestName, ".manifest.json.1234.tmp", ".", "..", "", "a/b"} {
		if err := checkShardName(n); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("shard name %q: %v", n, err)
		}
	}
	for _, n := range []string{".metadata", "__0_0.distcp", "model.safetensors"} {
		if err := checkShardName(n); err != nil {
			t.Errorf("shard name %q: %v", n, err)
		}
	}
	for _, p := range []string{"a", ".metadata", "sub/x.safetensors"} {
		if err := checkRelPath(p); err != nil {
			t.Errorf("checkRelPath(%q): %v", p, err)
		}
	}
	for _, p := range []string{"", "/a", "../a", "a/../b", "a//b", "./a", "a/", ManifestName} {
		if checkRelPath(p) == nil {
			t.Errorf("checkRelPath(%q) accepted", p)
		}
	}
}

func TestRetentionPlan(t *testing.T) {
	st := func(steps ...int64) []StepState {
		var out []StepState
		for _, s := range steps {
			out = append(out, StepState{Step: s})
		}
		return out
	}
	pinned := func(ss []StepState, steps ...int64) []StepState {
		for i := range ss {
			if slices.Contains(steps, ss[i].Step) {
				ss[i].Pinned = true
			}
		}
		return ss
	}
	for _, tc := range []struct {
		name       string
		p          Policy
		steps      []StepState
		keep, drop []int64
	}{
		{"zero keeps all", Policy{}, st(3, 1, 2), []int64{1, 2, 3}, nil},
		{"none", Policy{KeepLast: 2}, nil, nil, nil},
		{"last 2", Policy{KeepLast: 2}, st(10, 20, 30, 40), []int64{30, 40}, []int64{10, 20}},
		{"last more than there are", Policy{KeepLast: 9}, st(1, 2), []int64{1, 2}, nil},
		{"every 100 and last 1", Policy{KeepLast: 1, KeepEvery: 100}, st(0, 50, 100, 150, 200, 250),
			[]int64{0, 100, 200, 250}, []int64{50, 150}},
		{"every alone keeps the newest", Policy{KeepEvery: 100}, st(100, 150, 170), []int64{100, 170}, []int64{150}},
		{"pinned survive", Policy{KeepLast: 1}, pinned(st(1, 2, 3, 4), 2), []int64{2, 4}, []int64{1, 3}},
		{"unsorted input, duplicates", Policy{KeepLast: 2}, st(5, 1, 5, 3), []int64{3, 5}, []int64{1}},
	} {
		keep, drop := tc.p.Plan(tc.steps)
		if !slices.Equal(keep, tc.keep) || !slices.Equal(drop, tc.drop) {
			t.Errorf("%s: keep %v drop %v, want %v %v", tc.name, keep, drop, tc.keep, tc.drop)
		}
	}
	if (Policy{KeepLast: -1}).Validate() == nil {
		t.Error("negative keep-last accepted")
	}
}

func f32s(n int, seed byte) []byte {
	b := make([]byte, 4*n)
	for i := range b {
		b[i] = byte(i)*7 + seed
	}
	return b
}

func testShard() Shard {
	return Shard{Name: "model.safetensors", Metadata: map[string]string{"format": "pt"}, Tensors: []Tensor{
		{Name: "embed", DType: safetensors.F32, Shape: []int64{256, 16}, Data: f32s(4096, 1)},
		{Name: "ln", DType: safetensors.F32, Shape: []int64{16}, Data: f32s(16, 2)},
		{Name: "head", DType: safetensors.F32, Shape: []int64{16, 256}, Data: f32s(4096, 3)},
	}}
}

func TestPlanShard(t *testing.T) {
	sh := testShard()
	p, err := planShard(&sh, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	e := p.e
	if e.Kind != KindSafetensors || e.DataStart != 4096 || e.Size != 4096+16384+64+16384 || e.Shared != 0 || len(p.ranges) != 0 {
		t.Fatalf("plan without base: %+v", e)
	}
	// The header and the three tensors are written; header and first
	// tensor are contiguous.
	if len(p.writes) != 4 || p.writes[0].off != 0 || p.writes[1].off != 4096 {
		t.Fatalf("writes %+v", p.writes)
	}
	if e.Tensors[1].Offset != 4096+16384 || e.Tensors[2].Offset != 4096+16384+64 {
		t.Fatalf("offsets %+v", e.Tensors)
	}
	if e.Digest != shardDigest(e.HeaderDigest, []string{e.Tensors[0].Digest, e.Tensors[1].Digest, e.Tensors[2].Digest}) {
		t.Fatal("shard digest")
	}

	// Unchanged: the whole file is the base's.
	same := testShard()
	p2, err := planShard(&same, &e, false)
	if err != nil {
		t.Fatal(err)
	}
	if !p2.whole || len(p2.writes) != 0 || p2.e.Shared != p2.e.Size || len(p2.ranges) != 1 || p2.ranges[0].Length != e.Size {
		t.Fatalf("unchanged shard: whole %v writes %d shared %d ranges %v", p2.whole, len(p2.writes), p2.e.Shared, p2.ranges)
	}
	if p2.e.Digest != e.Digest {
		t.Fatal("digest of an unchanged shard differs")
	}

	// One tensor changes: the other two are cloned (embed and ln are
	// adjacent in both files: one range), head is written.
	ch := testShard()
	ch.Tensors[2].Data = f32s(4096, 9)
	p3, err := planShard(&ch, &e, false)
	if err != nil {
		t.Fatal(err)
	}
	if p3.whole || len(p3.ranges) != 1 || p3.ranges[0].SrcOff != 4096 || p3.ranges[0].Length != 16384+64 {
		t.Fatalf("ranges %v", p3.ranges)
	}
	if len(p3.writes) != 2 || p3.writes[1].off != e.Tensors[2].Offset || p3.e.Shared != 16384+64 {
		t.Fatalf("writes %+v shared %d", p3.writes, p3.e.Shared)
	}
	if !p3.e.Tensors[0].Shared || !p3.e.Tensors[1].Shared || p3.e.Tensors[2].Shared {
		t.Fatalf("shared flags %+v", p3.e.Tensors)
	}

	// Reuse without data: trusted, digest from the base.
	ru := testShard()
	ru.Tensors[0].Data, ru.Tensors[0].Reuse = nil, true
	p4, err := planShard(&ru, &e, false)
	if err != nil || !p4.whole || p4.e.Tensors[0].Digest != e.Tensors[0].Digest {
		t.Fatalf("reuse: %v %+v", err, p4)
	}
	// ... and without a base it cannot be saved.
	if _, err := planShard(&ru, nil, false); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("reuse without base: %v", err)
	}
	// ... and the plan cannot fall back to writing it.
	if p4.unshare(&ru) {
		t.Fatal("unshare of a data-less tensor")
	}
	// A changed shape is never shared.
	rs := testShard()
	rs.Tensors[1].Shape = []int64{4, 4}
	p5, _ := planShard(&rs, &e, false)
	if p5.e.Tensors[1].Shared {
		t.Fatal("tensor of another shape shared")
	}
	// noReuse shares nothing.
	p6, _ := planShard(&same, &e, true)
	if p6.whole || p6.e.Shared != 0 {
		t.Fatal("noReuse shared")
	}
	// unshare turns a plan into writes.
	if !p3.unshare(&ch) || p3.e.Shared != 0 || len(p3.ranges) != 0 || len(p3.writes) != 4 {
		t.Fatalf("unshare: %+v", p3)
	}

	// Blobs: whole or nothing.
	b := Shard{Name: "rng.bin", Blob: []byte("state")}
	pb, _ := planShard(&b, nil, false)
	pb2, _ := planShard(&b, &pb.e, false)
	if pb.e.Kind != KindBlob || pb.whole || !pb2.whole || pb2.e.Digest != sumBytes([]byte("state")) {
		t.Fatalf("blob plans %+v %+v", pb, pb2)
	}
}

func TestManifestRoundTripAndChecks(t *testing.T) {
	sh := testShard()
	p, _ := planShard(&sh, nil, false)
	bl := Shard{Name: "optim.bin", Blob: []byte{1, 2, 3}}
	pb, _ := planShard(&bl, nil, false)
	base := int64(3)
	m := &Manifest{Format: FormatV1, Job: "j", Step: 4, Created: time.Unix(1, 0).UTC(), Writer: writerSave,
		Checksum: ChecksumXXH64, Base: &base, Shards: []ShardEntry{p.e, pb.e}}
	m.Bytes = p.e.Size + pb.e.Size
	m.Written = m.Bytes
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Step != 4 || len(got.Shards) != 2 || got.Shards[0].Tensors[2].Digest != p.e.Tensors[2].Digest || *got.Base != 3 {
		t.Fatalf("decoded %+v", got)
	}
	bad := func(name string, edit func(s string) string) {
		t.Helper()
		if _, err := DecodeManifest([]byte(edit(string(b)))); !errors.Is(err, errs.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	bad("format", func(s string) string { return strings.Replace(s, FormatV1, "shoal.ckpt/v9", 1) })
	bad("unknown field", func(s string) string { return strings.Replace(s, `"job"`, `"jobb": 1, "job"`, 1) })
	bad("digest", func(s string) string { return strings.Replace(s, p.e.Tensors[1].Digest, "xyz", 1) })
	bad("offset", func(s string) string {
		return strings.Replace(s, fmt.Sprintf(`"offset": %d`, p.e.Tensors[1].Offset), `"offset": 5`, 1)
	})
	bad("totals", func(s string) string {
		return strings.Replace(s, fmt.Sprintf(`"bytes": %d`, m.Bytes), `"bytes": 1`, 1)
	})
	bad("path escape", func(s string) string { return strings.Replace(s, `"optim.bin"`, `"../optim.bin"`, 1) })
	bad("base after step", func(s string) string { return strings.Replace(s, `"base": 3`, `"base": 4`, 1) })
	bad("truncated", func(s string) string { return s[:len(s)/2] })
}

func TestStageCopiesAndPoolReuses(t *testing.T) {
	sh := testShard()
	blob := Shard{Name: "b", Blob: []byte("blob bytes")}
	reuse := testShard()
	reuse.Name = "r.safetensors"
	reuse.Tensors[0].Data, reuse.Tensors[0].Reuse = nil, true
	in := []Shard{sh, blob, reuse}
	var size int64
	for i := range in {
		size += shardSize(&in[i])
	}
	var p stagePool
	a := p.get(size)
	out := stage(in, a.buf)
	for i := range in {
		if !bytes.Equal(out[i].Blob, in[i].Blob) || len(out[i].Tensors) != len(in[i].Tensors) {
			t.Fatalf("shard %d differs", i)
		}
		for j := range in[i].Tensors {
			if !bytes.Equal(out[i].Tensors[j].Data, in[i].Tensors[j].Data) || (in[i].Tensors[j].Data == nil) != (out[i].Tensors[j].Data == nil) {
				t.Fatalf("shard %d tensor %d differs", i, j)
			}
		}
	}
	// The copies do not alias the caller's buffers.
	clear(in[0].Tensors[0].Data)
	if bytes.Equal(out[0].Tensors[0].Data, in[0].Tensors[0].Data) {
		t.Fatal("staged tensor aliases the caller's buffer")
	}
	p.put(a)
	if b := p.get(size / 2); b != a || int64(len(b.buf)) != size/2 {
		t.Fatal("the pool did not reuse its arena")
	}
	if c := p.get(size); c == a {
		t.Fatal("an arena handed out twice")
	}
}
