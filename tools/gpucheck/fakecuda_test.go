//go:build linux && (amd64 || arm64)

package gpucheck

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/gds"
	"github.com/shoalfs/shoal/internal/pki"
)

// TestRunFakeCUDA runs the check on the CUDA backend over gds's fake CUDA
// library: with cuFile it passes and reports compat (the fake counts its
// reads as POSIX); without cuFile the rows that measure cuFile did not
// run, and the check fails instead of printing bounce figures as cuFile's.
func TestRunFakeCUDA(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("SKIP: no gcc: cannot build gds's fake CUDA library")
	}
	so := filepath.Join(t.TempDir(), "libfakecuda.so")
	if out, err := exec.Command(cc, "-Wall", "-Werror", "-shared", "-fPIC", "-Wl,-Bsymbolic", "-o", so, "../../gds/testdata/fakecuda.c").CombinedOutput(); err != nil {
		t.Fatalf("build fake CUDA: %v\n%s", err, out)
	}
	t.Setenv("FAKECUDA_DEVICES", "1")
	c, dirs := startCluster(t)
	libs := gds.LibOptions{Cudart: so, Cufile: so, NoSystem: true}
	o := Options{MDS: c.MDSAddr(), OSTDirs: dirs, Backend: "cuda", CUDA: gds.CUDAOptions{Libs: libs}, Size: 3 << 20, TensorSize: 1 << 20,
		Dir: t.TempDir(), Creds: c.Creds(pki.RoleAdmin)}

	p, err := Probe(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", p)
	if p.TestRead != "compat" || !strings.HasPrefix(p.CuFile.Mode, "compat") || p.CuFile.Stats.POSIX == 0 || !strings.Contains(p.String(), so) {
		t.Fatalf("probe %+v", p)
	}

	var out bytes.Buffer
	o.Out = &out
	res, err := Run(context.Background(), o)
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Rows {
		if !r.Checked || !r.Ran {
			t.Fatalf("row %+v", r)
		}
		if r.Measures == "cuFile" && !strings.Contains(r.Path, "compat") {
			t.Fatalf("row %+v", r)
		}
	}
	if res.CuFileStats == nil || res.CuFileStats.POSIX == 0 || res.CuFileStats.P2P != 0 {
		t.Fatalf("cuFile statistics %+v", res.CuFileStats)
	}

	out.Reset()
	o.CUDA.NoCuFile = true
	res, err = Run(context.Background(), o)
	t.Logf("\n%s", out.String())
	if err == nil || !strings.Contains(err.Error(), "cuFile did not run") || !strings.Contains(out.String(), "CUFILE PATH DID NOT RUN") {
		t.Fatalf("run without cuFile: %v", err)
	}
	if res.Rows[0].Ran || res.Rows[0].Measures != "cuFile" {
		t.Fatalf("rows %+v", res.Rows)
	}
}
