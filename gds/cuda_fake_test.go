//go:build linux && (amd64 || arm64)

package gds

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Each test here fails against testdata/fakecuda.c, which behaves like the
// real libraries where the GPU review (issue 26) found they differ from
// what gds assumed, without the fix it names.

// fakeDevice opens the CUDA backend on a freshly built fake.
func fakeDevice(t *testing.T, o CUDAOptions) *Device {
	t.Helper()
	so := buildFakeCUDA(t)
	t.Setenv("FAKECUDA_DEVICES", "1")
	o.Libs = LibOptions{Cudart: so, Cufile: so, NoSystem: true}
	dev, err := OpenCUDA(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// fakeFile writes n random bytes to a file and opens it for direct reads.
func fakeFile(t *testing.T, dev *Device, seed uint64, n int) ([]byte, directFile) {
	t.Helper()
	data := randBytes(seed, n)
	f := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	df, err := dev.eng.openDirect(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { df.Close() })
	return data, df
}

// cuFileRead returns -1 and sets errno for a file-system error: the error
// must carry that errno, not EPERM (-(-1)).
func TestFakeCUDAReadErrno(t *testing.T) {
	dev := fakeDevice(t, CUDAOptions{})
	b, err := dev.Alloc(4*Align, true)
	if err != nil {
		t.Fatal(err)
	}
	_, df := fakeFile(t, dev, 3, 2*Align)
	cf := df.(*cudaFile)
	// Put a write-only descriptor under the registered one: pread fails
	// with EBADF.
	w, err := unix.Open(filepath.Join(t.TempDir(), "w"), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(w)
	if err := unix.Dup3(w, cf.fd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	_, err = dev.eng.readDirect(df, b, 0, 0, Align)
	if !errors.Is(err, unix.EBADF) {
		t.Fatalf("file-system error: %v, want EBADF", err)
	}
	if errors.Is(err, unix.EPERM) {
		t.Fatalf("EPERM: %v", err)
	}
	// A cuFile error, -(5000+n): a range outside the device allocation.
	_, err = dev.eng.readDirect(df, b, 2*Align, 0, 4*Align)
	if err == nil || !strings.Contains(err.Error(), "cufile error 5022 (invalid arguments)") {
		t.Fatalf("cuFile error: %v", err)
	}
	t.Logf("%v", err)
	for _, c := range []struct {
		got   int64
		errno int32
		want  string
	}{
		{-1, int32(unix.EIO), "input/output error"},
		{-1, 0, "errno 0"},
		{-5044, 0, "cufile error 5044 (cufile io error)"},
		{-5, 0, "neither -1 nor a cuFile error"},
		{100, 0, "short read of 100"},
	} {
		if err := cuFileReadErr(c.got, c.errno, 4096, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("cuFileReadErr(%d, %d) = %v, want %q", c.got, c.errno, err, c.want)
		}
	}
}

// cudaMemset runs on the null stream, asynchronously; cudaMemcpy from
// pageable memory may return before the bytes land. Neither is ordered
// before a cuFileRead: zeroing or copying in, then reading, must leave
// the file's bytes, not zeros or the copied bytes landing late.
func TestFakeCUDAOrdering(t *testing.T) {
	for _, io := range []int{0, 2} {
		dev := fakeDevice(t, CUDAOptions{IOThreads: io})
		b, err := dev.Alloc(2*Align, true)
		if err != nil {
			t.Fatal(err)
		}
		data, df := fakeFile(t, dev, 4, 2*Align)

		if err := b.Zero(0, b.Len()); err != nil {
			t.Fatal(err)
		}
		if _, err := dev.eng.readDirect(df, b, 0, 0, 2*Align); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "zero, then cuFileRead", readBack(t, b, 0, 2*Align), data)

		junk := bytes.Repeat([]byte{0x5a}, 2*Align) // pageable Go memory
		if err := b.CopyFromHost(0, junk); err != nil {
			t.Fatal(err)
		}
		if _, err := dev.eng.readDirect(df, b, 0, 0, 2*Align); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "copy in, then cuFileRead", readBack(t, b, 0, 2*Align), data)

		if err := b.CopyFromHost(Align, junk[:10]); err != nil {
			t.Fatal(err)
		}
		if err := b.Zero(0, 5); err != nil {
			t.Fatal(err)
		}
		got := readBack(t, b, 0, 2*Align)
		want := append(append(make([]byte, 5), data[5:Align]...), append(junk[:10], data[Align+10:]...)...)
		mustEqual(t, "zero and copy in", got, want)
		// The next fake is a new library: the cuFile driver, one per
		// process, must be closed first.
		if err := dev.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// fflags bit 4 says P2PDMA is supported, not used: a read counts as
// direct only once cuFile's statistics counted it as a P2P read.
func TestFakeCUDAModeFromStats(t *testing.T) {
	t.Setenv("FAKECUDA_P2P", "1")
	for _, used := range []string{"0", "1"} {
		t.Run("p2p used "+used, func(t *testing.T) {
			t.Setenv("FAKECUDA_P2P_USED", used)
			dev := fakeDevice(t, CUDAOptions{})
			info := dev.Info()
			if !strings.HasPrefix(info.CuFileMode, "direct unconfirmed: PCIe P2PDMA supported") || info.DirectPath != PathCompat {
				t.Fatalf("info %+v", info)
			}
			b, err := dev.Alloc(2*Align, true)
			if err != nil {
				t.Fatal(err)
			}
			data, df := fakeFile(t, dev, 5, 2*Align)
			p, err := dev.eng.readDirect(df, b, 0, 0, 2*Align)
			if err != nil {
				t.Fatal(err)
			}
			mustEqual(t, "read", readBack(t, b, 0, 2*Align), data)
			st := dev.CuFileStatus()
			t.Logf("path %s, %+v", p, st)
			if st.StatsErr != "" || st.Stats.Reads == 0 {
				t.Fatalf("no statistics: %+v", st)
			}
			want, wantMode := PathCompat, "compat (cuFile statistics counted a POSIX read)"
			if used == "1" {
				want, wantMode = PathDirect, "direct (confirmed by cuFile statistics)"
			}
			if p != want || !strings.HasPrefix(st.Mode, wantMode) {
				t.Fatalf("path %s, mode %q; want %s, %q", p, st.Mode, want, wantMode)
			}
			// Later reads keep the confirmed path.
			if p2, err := dev.eng.readDirect(df, b, 0, 0, Align); err != nil || p2 != want {
				t.Fatalf("second read: %s %v", p2, err)
			}
		})
	}
}

// A second cuFileDriverOpen succeeds, and one cuFileDriverClose closes the
// driver whatever the number of opens: closing one device must leave
// cuFile open for another.
func TestFakeCUDATwoDevices(t *testing.T) {
	so := buildFakeCUDA(t)
	t.Setenv("FAKECUDA_DEVICES", "1")
	libs := LibOptions{Cudart: so, Cufile: so, NoSystem: true}
	a, err := OpenCUDA(CUDAOptions{Libs: libs})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenCUDA(CUDAOptions{Libs: libs, IOThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if a.Info().DirectPath != PathCompat || b.Info().DirectPath != PathCompat {
		t.Fatalf("second device: %+v", b.Info())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	buf, err := a.Alloc(Align, true)
	if err != nil {
		t.Fatal(err)
	}
	data, df := fakeFile(t, a, 6, Align)
	if _, err := a.eng.readDirect(df, buf, 0, 0, Align); err != nil {
		t.Fatalf("cuFile read after another device closed: %v", err)
	}
	mustEqual(t, "read", readBack(t, buf, 0, Align), data)
}

// libcufile.so.0 of the pip wheel loads on glibc < 2.34 only after librt
// was loaded globally; gds preloads it.
func TestFakeCUFileNeedsLibrt(t *testing.T) {
	dir := t.TempDir()
	rt := buildFake(t, filepath.Join(dir, "libfakert.so"), "testdata/fakert.c")
	cufile := buildFake(t, filepath.Join(dir, "libcufile.so.0"), "testdata/fakecuda.c", "-DFAKE_NEEDS_RT")
	saved := cufilePreloads
	defer func() { cufilePreloads = saved }()

	cufilePreloads = nil
	if _, err := loadCufile(LibOptions{Cufile: cufile}); err == nil || !strings.Contains(err.Error(), "fakert_shm_open") {
		t.Fatalf("the fake loaded without its librt: %v", err)
	}
	cufilePreloads = []string{"/nonexistent/librt.so.1", rt}
	cudart := buildFakeCUDA(t)
	t.Setenv("FAKECUDA_DEVICES", "1")
	dev, err := OpenCUDA(CUDAOptions{Libs: LibOptions{Cudart: cudart, Cufile: cufile, NoSystem: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	info := dev.Info()
	libs := strings.Join(info.Libraries, ", ")
	if info.DirectPath != PathCompat || !strings.Contains(libs, rt+" (preloaded for libcufile)") || strings.Contains(libs, "nonexistent") {
		t.Fatalf("info %+v", info)
	}
	if v := GlibcVersion(); !strings.HasPrefix(v, "2.") {
		t.Errorf("glibc version %q", v)
	}
}

// The first runtime whose symbols resolve is not enough: one newer than
// the driver fails every call. gds takes the next runtime instead.
func TestFakeCUDADriverTooOld(t *testing.T) {
	dir := t.TempDir()
	buildFake(t, filepath.Join(dir, "libcudart.so.13"), "testdata/fakecuda.c")
	old := buildFake(t, filepath.Join(dir, "libcudart.so.12"), "testdata/fakecuda.c", "-DFAKE_RUNTIME_VERSION=12080")
	t.Setenv("FAKECUDA_DEVICES", "1")
	t.Setenv("FAKECUDA_DRIVER_VERSION", "12020")
	libs := LibOptions{Dirs: []string{dir}, NoSystem: true, Cufile: old}
	dev, err := OpenCUDA(CUDAOptions{Libs: libs})
	if err != nil {
		t.Fatal(err)
	}
	info := dev.Info()
	dev.Close()
	if info.Libraries[0] != old || !strings.Contains(info.Name, "runtime 12080 driver 12020") {
		t.Fatalf("info %+v", info)
	}
	t.Setenv("FAKECUDA_DRIVER_VERSION", "11080")
	_, err = OpenCUDA(CUDAOptions{Libs: libs})
	if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "runtime 13.0 needs a CUDA 13 driver; the driver is 11.8") || !strings.Contains(err.Error(), "runtime 12.8 needs a CUDA 12 driver") {
		t.Fatalf("driver too old for both: %v", err)
	}
	t.Setenv("FAKECUDA_DRIVER_VERSION", "0")
	if _, err = OpenCUDA(CUDAOptions{Libs: libs}); !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "no CUDA driver installed") {
		t.Fatalf("no driver: %v", err)
	}
}
