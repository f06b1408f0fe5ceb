//go:build linux && (amd64 || arm64)

package gds

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/internal/layout"
)

// Without libcudart the CUDA backend says "no GPU" and what it tried;
// everything else keeps working.
func TestOpenCUDANoLibrary(t *testing.T) {
	cases := map[string]LibOptions{
		"explicit file missing": {Cudart: "/nonexistent/libcudart.so.13"},
		"nothing found":         {NoSystem: true},
		"empty python wheel":    {NoSystem: true, PythonPrefixes: []string{fakeWheel(t)}},
	}
	if libc := findLibc(); libc != "" {
		cases["not a CUDA runtime"] = LibOptions{Cudart: libc}
	}
	for name, lo := range cases {
		t.Run(name, func(t *testing.T) {
			dev, err := OpenCUDA(CUDAOptions{Libs: lo})
			if err == nil {
				dev.Close()
				t.Fatal("OpenCUDA succeeded")
			}
			if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "no GPU") || !strings.Contains(err.Error(), "libcudart") {
				t.Fatalf("error %q does not say no GPU", err)
			}
			t.Logf("%v", err)
			switch name {
			case "nothing found":
				if !strings.Contains(err.Error(), "no library file found") {
					t.Fatalf("error %q", err)
				}
			case "empty python wheel":
				if !strings.Contains(err.Error(), "nvidia/cu13/lib/libcudart.so.13") {
					t.Fatalf("error %q does not name the wheel's library", err)
				}
			case "not a CUDA runtime":
				if !strings.Contains(err.Error(), "missing symbol cudaGetDeviceCount") {
					t.Fatalf("error %q", err)
				}
			}
		})
	}
	// The host backend is unaffected.
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	b, err := dev.Alloc(Align, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CopyFromHost(0, []byte("still works")); err != nil {
		t.Fatal(err)
	}
}

// fakeWheel makes a Python prefix holding NVIDIA wheel folders with empty
// (unloadable) libraries.
func fakeWheel(t *testing.T) string {
	t.Helper()
	p := t.TempDir()
	for _, f := range []string{"lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13", "lib/python3.12/site-packages/nvidia/cufile/lib/libcufile.so.0"} {
		full := filepath.Join(p, f)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func findLibc() string {
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6", "/lib64/libc.so.6"} {
		if fileExists(p) {
			return p
		}
	}
	return ""
}

func TestCandidates(t *testing.T) {
	p := fakeWheel(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "libcufile.so"), nil, 0o644)
	got := candidates("", cufileNames, LibOptions{Dirs: []string{dir}, PythonPrefixes: []string{p}, NoSystem: true})
	want := []string{filepath.Join(dir, "libcufile.so"), filepath.Join(p, "lib/python3.12/site-packages/nvidia/cufile/lib/libcufile.so.0")}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("candidates %v, want %v", got, want)
	}
	if got := candidates("/x/libcudart.so", cudartNames, LibOptions{Dirs: []string{dir}}); len(got) != 1 || got[0] != "/x/libcudart.so" {
		t.Fatalf("explicit: %v", got)
	}
	all := candidates("", cudartNames, LibOptions{})
	if len(all) < len(cudartNames) || !strings.Contains(strings.Join(all, ","), "libcudart.so.13") {
		t.Fatalf("system candidates %v", all)
	}
	env := map[string]string{"SHOAL_CUDA_LIB": "/a", "SHOAL_CUFILE_LIB": "/b", "SHOAL_CUDA_LIB_DIRS": "/c:/d", "VIRTUAL_ENV": "/v", "HOME": "/h"}
	o := LibOptionsFromEnv(func(k string) string { return env[k] })
	if o.Cudart != "/a" || o.Cufile != "/b" || strings.Join(o.Dirs, ",") != "/c,/d" || strings.Join(o.PythonPrefixes, ",") != "/v,/h/.local" {
		t.Fatalf("from env: %+v", o)
	}
}

// buildFakeCUDA compiles testdata/fakecuda.c, a stand-in for libcudart
// and libcufile, or skips loudly without a C compiler.
func buildFakeCUDA(t *testing.T) string {
	t.Helper()
	return buildFake(t, filepath.Join(t.TempDir(), "libfakecuda.so"), "testdata/fakecuda.c")
}

// buildFake compiles src (and C flags) into the shared library so. Each
// build is a new file, so each test gets a library with fresh state.
func buildFake(t *testing.T, so, src string, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Skip("SKIP: no C compiler (gcc or cc): cannot build the fake CUDA library that checks the bindings; install gcc (tools/deps.sh does)")
		}
	}
	// -Bsymbolic: two fakes loaded at once each call their own functions.
	args := append([]string{"-Wall", "-Werror", "-shared", "-fPIC", "-Wl,-Bsymbolic", "-o", so}, flags...)
	out, err := exec.Command(cc, append(args, src)...).CombinedOutput()
	if err != nil {
		t.Fatalf("build fake CUDA: %v\n%s", err, out)
	}
	return so
}

// TestFakeCUDA drives every CUDA and cuFile binding through a fake library
// compiled from C declarations of the same types: struct layouts, the
// by-value CUfileError_t, the owner thread, copies in flight and events.
func TestFakeCUDA(t *testing.T) {
	so := buildFakeCUDA(t)
	libs := LibOptions{Cudart: so, Cufile: so, NoSystem: true}

	t.Setenv("FAKECUDA_DEVICES", "0")
	if _, err := OpenCUDA(CUDAOptions{Libs: libs}); !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "no CUDA-capable device") {
		t.Fatalf("no device: %v", err)
	}
	t.Setenv("FAKECUDA_DEVICES", "1")

	for _, io := range []int{0, 2} {
		dev, err := OpenCUDA(CUDAOptions{Libs: libs, IOThreads: io, Streams: 2})
		if err != nil {
			t.Fatal(err)
		}
		info := dev.Info()
		if info.Kind != KindCUDA || info.DirectPath != PathCompat || !strings.HasPrefix(info.CuFileMode, "compat: nvidia-fs not loaded") || !strings.Contains(info.Name, "fa:ke") {
			t.Fatalf("info %+v", info)
		}
		b, err := dev.Alloc(3*Align, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Zero(0, b.Len()); err != nil {
			t.Fatal(err)
		}
		if err := b.CopyFromHost(Align, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 7)
		if err := b.CopyToHost(got, Align-1); err != nil {
			t.Fatal(err)
		}
		if string(got) != "\x00hello\x00" {
			t.Fatalf("round trip %q", got)
		}
		// A direct read through cuFile: CUfileDescr_t must reach C intact.
		f := filepath.Join(t.TempDir(), "data")
		data := randBytes(1, 2*Align)
		os.WriteFile(f, data, 0o644)
		df, err := dev.eng.openDirect(f)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := dev.eng.readDirect(df, b, Align, 0, 2*Align); err != nil || p != PathCompat {
			t.Fatal(p, err)
		}
		df.Close()
		mustEqual(t, "cuFileRead", readBack(t, b, Align, 2*Align), data)
		if err := dev.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFakeCUDAReader runs the reader over the fake CUDA library: local
// chunks through cuFile (compat), the rest through pinned slots and async
// copies, a flipped byte caught by the copy-back check.
func TestFakeCUDAReader(t *testing.T) {
	so := buildFakeCUDA(t)
	lo := layout.Layout{K: 4, M: 2, Unit: 16 << 10}
	c := startCluster(t, lo, 6, 2)
	ctx := context.Background()
	data := randBytes(21, int(5*lo.RowData()+3*Align+17))
	c.writeFile(t, "/x", data)
	t.Setenv("FAKECUDA_DEVICES", "1")
	dev, err := OpenCUDA(CUDAOptions{Libs: LibOptions{Cudart: so, Cufile: so, NoSystem: true}, Streams: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	r := newTestReader(t, c, dev, Options{LocalOSTs: c.localOSTs(t, 3), SlotSize: 8 << 10, StagingSlots: 3})
	f, err := r.Open(ctx, "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	n := int64(len(data))
	buf, err := dev.Alloc(n+Align, true)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.ReadAt(ctx, f, buf, 0, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "fake cuda", readBack(t, buf, 0, n), data)
	if rep.Paths[PathCompat] == 0 || rep.Paths[PathBounce] == 0 || rep.Local == 0 || rep.Remote == 0 {
		t.Fatalf("report %+v", rep)
	}
	// Unaligned destination: local pieces bounce too.
	rep, err = r.ReadAt(ctx, f, buf, 5, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "fake cuda unaligned", readBack(t, buf, 5, n), data)
	if rep.Paths[PathCompat] != 0 {
		t.Fatalf("report %+v", rep)
	}
	// A flipped byte in a local chunk: caught after cuFileRead by the
	// copy-back check, served through the client.
	_, refs := f.snapshot()
	ext := refs[0].Extent
	local := c.localOSTs(t, 3)
	for j, id := range ext.OSTs[:lo.K] {
		if dir, ok := local[id]; ok {
			flipByte(t, chunkPath(dir, ext.ID, j), 10)
			break
		}
	}
	rep, err = r.ReadAt(ctx, f, buf, 0, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "fake cuda after corruption", readBack(t, buf, 0, n), data)
	if rep.Fallback == 0 {
		t.Fatalf("report %+v", rep)
	}
}
