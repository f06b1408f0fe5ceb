package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestCABI builds libshoalgds as a C shared library and drives it from a C
// program and from the Python module (tools/python/shoal_gds.py) on the
// host backend, against a cluster on loopback that runs mutual TLS, as
// `shoal local` does: the certificate comes from SHOAL_CERT, SHOAL_KEY and
// SHOAL_CA, as for the shoal command.
func TestCABI(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): builds a c-shared library and starts a cluster")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Skip("SKIP: no C compiler (gcc or cc): the C ABI cannot be built or tested here; tools/deps.sh installs gcc")
		}
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libshoalgds.so")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	build := exec.Command(gobin, "build", "-buildmode=c-shared", "-o", lib, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	prog := filepath.Join(dir, "capi_test")
	if out, err := exec.Command(cc, "-Wall", "-Werror", "-o", prog, "testdata/capi_test.c", "-I", dir, "-L", dir, "-lshoalgds", "-Wl,-rpath,"+dir).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}

	lo := layout.Layout{K: 4, M: 2, Unit: 16 << 10}
	c := cluster.Start(t, cluster.Options{Layout: lo})
	tls := c.Creds(pki.RoleAdmin).Files()
	env := append(os.Environ(), "SHOAL_CERT="+tls.Cert, "SHOAL_KEY="+tls.Key, "SHOAL_CA="+tls.CA, "SHOAL_INSECURE=")
	cl := c.Client()
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 5*lo.RowData()+1234)
	for i := range data {
		data[i] = byte(rnd.Uint32())
	}
	write := func(p string, b []byte) {
		f, err := cl.Create(ctx, p, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(ctx, b, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write("/plain", data)
	h, head, err := safetensors.Layout(nil, []safetensors.Spec{
		{Name: "w", DType: safetensors.BF16, Shape: []int64{300, 100}},
		{Name: "b", DType: safetensors.F32, Shape: []int64{100}},
	})
	if err != nil {
		t.Fatal(err)
	}
	st := data[:h.DataLen]
	write("/shard.safetensors", append(head, st...))
	var ostDirs []string
	for i := 0; i < 6; i++ {
		ostDirs = append(ostDirs, c.OST(i).Dir)
	}
	fh := fnv.New64a()
	fh.Write(data)

	capi := exec.Command(prog, c.MDSAddr(), "/plain", strings.Join(ostDirs, ":"), fmt.Sprint(len(data)), fmt.Sprintf("%016x", fh.Sum64()))
	capi.Env = env
	out, err := capi.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "capi: ok") {
		t.Fatalf("C program: %v", err)
	}

	py, err := exec.LookPath("python3")
	if err != nil {
		t.Log("SKIP part: no python3: the ctypes module is not tested here")
		return
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	cmd := exec.Command(py, "../../tools/python/test_shoal_gds.py", c.MDSAddr(), "/plain", fmt.Sprint(len(data)), sum(data), "/shard.safetensors", sum(st), strings.Join(ostDirs[:3], ":"))
	cmd.Env = append(env, "SHOAL_GDS_LIB="+lib)
	out, err = cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "python: ok") {
		t.Fatalf("python: %v", err)
	}
}
