//go:build cgo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
)

// TestPythonBench compares save and load of SHOAL_PYBENCH_MIB MiB of
// tensors (16 MiB each, one shard, every byte written) through the Go API
// and through the Python package (python/bench/bench_ckpt.py), on one
// cluster in the same run; best of 2 each. Not run unless the variable is
// set (docs/checkpoints.md, "Python", has the figures):
//
//	SHOAL_PYBENCH_MIB=1024 go test -count=1 -v -run TestPythonBench ./cmd/libshoal
func TestPythonBench(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("SHOAL_PYBENCH_MIB"))
	if mib <= 0 {
		t.Skip("SKIP: a benchmark: set SHOAL_PYBENCH_MIB (e.g. 1024) to run it")
	}
	py := pythonWithNumPy(t)
	lib := buildLib(t, t.TempDir())
	_, env := pyCluster(t, lib)

	// Both clients in processes of their own, as a training job's is: the
	// Go API in this test binary re-run as a helper, then the Python
	// package; twice, alternating, the best of each kept.
	run := func(name string, cmd *exec.Cmd) map[string]float64 {
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		var r struct {
			Bytes int64              `json:"bytes"`
			MiBps map[string]float64 `json:"MiB/s"`
		}
		var line []byte
		for _, l := range bytes.Split(out, []byte("\n")) {
			if bytes.HasPrefix(l, []byte("{")) && bytes.Contains(l, []byte(`"MiB/s"`)) {
				line = l
			}
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%s output %q: %v", name, out, err)
		}
		if r.Bytes != int64(mib)<<20 {
			t.Fatalf("%s: %d bytes, want %d", name, r.Bytes, int64(mib)<<20)
		}
		return r.MiBps
	}
	g, p := map[string]float64{}, map[string]float64{}
	for range 2 {
		h := exec.Command(os.Args[0], "-test.run=^TestGoBenchHelper$", "-test.count=1")
		h.Env = append(env, "SHOAL_GOBENCH_HELPER="+strconv.Itoa(mib))
		for k, v := range run("Go API helper", h) {
			g[k] = max(g[k], v)
		}
		cmd := exec.Command(py, "../../python/bench/bench_ckpt.py", "--mib", strconv.Itoa(mib), "--tensor-mib", strconv.Itoa(tensorMiB), "--repeat", strconv.Itoa(repeat))
		cmd.Env = env
		for k, v := range run("bench_ckpt.py", cmd) {
			p[k] = max(p[k], v)
		}
	}
	goSave, goLoad, goInto := g["save"], g["load"], g["load_into"]
	pr := struct{ MiBps map[string]float64 }{p}
	size := int64(mib) << 20
	rows := []struct {
		name   string
		g, p   float64
		python string
	}{{"save", goSave, pr.MiBps["save"], "ckpt.save"}, {"load", goLoad, pr.MiBps["load"], "ckpt.load()"}, {"load into", goInto, pr.MiBps["load_into"], "ckpt.load(into=)"}}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d MiB in %d tensors of %d MiB, one shard, best of %d:\n", size>>20, int(size>>20)/tensorMiB, tensorMiB, 2*repeat)
	fmt.Fprintf(&b, "| op | Go API MiB/s | Python MiB/s | Python/Go |\n|---|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f |\n", r.name, r.g, r.p, r.p/r.g)
	}
	t.Log("\n" + b.String())
}

const tensorMiB, repeat = 16, 2

// TestGoBenchHelper is TestPythonBench's Go side, run in a process of its
// own (SHOAL_GOBENCH_HELPER=MiB, the cluster in SHOAL_MDS and the
// certificate variables): what bench_ckpt.py does, through the Go API.
func TestGoBenchHelper(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("SHOAL_GOBENCH_HELPER"))
	if mib <= 0 {
		t.Skip("SKIP: TestPythonBench's helper, run by it")
	}
	cl, err := connect(openOpts{MDS: os.Getenv("SHOAL_MDS"), Cert: os.Getenv("SHOAL_CERT"), Key: os.Getenv("SHOAL_KEY"), CA: os.Getenv("SHOAL_CA"), Name: "gobench"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	st, err := ckpt.New(cl, ckpt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	job := fmt.Sprintf("gobench-%d", os.Getpid())
	rnd := rand.New(rand.NewPCG(1, 1))
	var ts []ckpt.Tensor
	var size int64
	for i := range max(1, mib/tensorMiB) {
		b := make([]byte, tensorMiB<<20)
		for j := 0; j < len(b); j += 8 {
			v := rnd.Uint64()
			for k := range 8 {
				b[j+k] = byte(v >> (8 * k))
			}
		}
		ts = append(ts, ckpt.Tensor{Name: fmt.Sprintf("layers.%03d.weight", i), DType: safetensors.F32, Shape: []int64{int64(len(b) / 4)}, Data: b})
		size += int64(len(b))
	}
	shard := []ckpt.Shard{{Name: "model-00001-of-00001.safetensors", Metadata: map[string]string{"format": "np"}, Tensors: ts}}
	if _, err := st.Save(ctx, job, 0, []ckpt.Shard{{Name: "model-00001-of-00001.safetensors", Tensors: []ckpt.Tensor{{Name: "warm", DType: safetensors.F32, Shape: []int64{1 << 20}, Data: make([]byte, 4<<20)}}}}); err != nil {
		t.Fatal(err)
	}
	mibps := func(d time.Duration) float64 { return float64(size) / d.Seconds() / (1 << 20) }
	best := map[string]float64{}
	dst := make([][]byte, len(ts))
	for i := range dst {
		dst[i] = make([]byte, len(ts[i].Data))
	}
	for r := range repeat {
		step := int64(r + 1)
		t0 := time.Now()
		if _, err := st.Save(ctx, job, step, shard, ckpt.NoReuse()); err != nil {
			t.Fatal(err)
		}
		best["save"] = max(best["save"], mibps(time.Since(t0)))
		// Restore into fresh pages, as the Python side does (its freed
		// arrays go back to the OS): not into the heap of the last one.
		debug.FreeOSMemory()
		t0 = time.Now()
		cp, err := st.Restore(ctx, job, step)
		if err != nil {
			t.Fatal(err)
		}
		best["load"] = max(best["load"], mibps(time.Since(t0)))
		if !bytes.Equal(cp.Shards[0].Tensors[0].Data, ts[0].Data) {
			t.Fatal("restored bytes differ")
		}
		cp = nil
		i := 0
		t0 = time.Now()
		if _, err := st.Restore(ctx, job, step, ckpt.Into(func(string, ckpt.TensorEntry) []byte { i++; return dst[i-1] })); err != nil {
			t.Fatal(err)
		}
		best["load_into"] = max(best["load_into"], mibps(time.Since(t0)))
		if err := st.Delete(ctx, job, step); err != nil {
			t.Fatal(err)
		}
	}
	js, _ := json.Marshal(map[string]any{"bytes": size, "tensors": len(ts), "MiB/s": best})
	fmt.Printf("%s\n", js)
}
