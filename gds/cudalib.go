//go:build linux && (amd64 || arm64)

package gds

// Bindings to libcudart and libcufile, loaded at run time with purego.
//
// Where each signature and layout comes from (all checked against the C
// declarations, not guessed):
//
//   - cuFile: cufile.h of the CUDA 12.x/13.x toolkits ("cuFile C APIs"), as
//     mirrored by NVIDIA/cuda-python cuda_bindings/cuda/bindings/cycufile.pxd
//     ("generated across versions from 12.9.1 to 13.4.0"):
//     CUfileError_t is { CUfileOpError err; CUresult cu_err; }: two 32-bit
//     enums, 8 bytes, returned by value (in RAX on amd64, X0 on arm64; purego
//     returns small structs by value on linux/amd64 and linux/arm64).
//     CUfileDescr_t is { enum CUfileFileHandleType type; union { int fd;
//     void *handle; } handle; const CUfileFSOps_t *fs_ops; }: type at 0,
//     the union at 8 (it holds a pointer, so it is 8-aligned), fs_ops at 16,
//     24 bytes. CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1. CUfileDrvProps_t is
//     { struct { unsigned major_version, minor_version; size_t
//     poll_thresh_size, max_direct_io_size; unsigned dstatusflags,
//     dcontrolflags; } nvfs; unsigned fflags, max_device_cache_size,
//     per_buffer_cache_size, max_device_pinned_mem_size, max_batch_io_size,
//     max_batch_io_timeout_msecs; }: 56 bytes. cuFileDriverClose is
//     #defined to cuFileDriverClose_v2 (the exported symbol).
//     CUFILEOP_BASE_ERR = 5000. cuFileRead returns -1 with errno set on a
//     file-system error and -(5000+n), a CUfileOpError, on cuFile's own
//     (GDS API reference, "cuFileRead", return values; cufile.h's
//     IS_CUFILE_ERR(err) is abs(err) > CUFILEOP_BASE_ERR): errno is read
//     on the calling thread right after the call (__errno_location), which
//     the locked owner and I/O threads make safe.
//     CUFileBoolConfigParameter_t counts from 0:
//     CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, _ALLOW_COMPAT_MODE (1),
//     CUFILE_PARAM_FORCE_COMPAT_MODE (2), ... (cuFile 1.14 / CUDA 12.9+).
//     CUfileFeatureFlags: CU_FILE_P2P_SUPPORTED is bit 4 of fflags (the
//     platform supports P2PDMA; it does not say cuFile uses it).
//     CUFileSizeTConfigParameter_t: CUFILE_PARAM_PROFILE_STATS = 0 (set
//     before cuFileDriverOpen). Statistics (cuFileSetStatsLevel,
//     cuFileStatsStart, cuFileGetStatsL3; cuFile 1.15 / CUDA 13): level 1
//     counts reads and bytes but not how they ran; level 3 adds, per GPU,
//     n_p2p_reads, n_nvfs_reads and n_posix_reads (CUfilePerGpuStats_t:
//     char uuid[16] then 29 uint64_t, 248 bytes; CUfileStatsLevel1_t 624
//     bytes: 23 CUfileOpCounter_t {ok, err} and 38 uint64_t;
//     CUfileStatsLevel2_t adds two uint64_t[32] histograms, 1136;
//     CUfileStatsLevel3_t adds uint32_t num_gpus, padding and
//     per_gpu_stats[16] at 1144, 5112 bytes). See cufilemode.go.
//   - CUDA runtime: cuda_runtime_api.h / driver_types.h: every function
//     returns cudaError_t (a 32-bit enum; cudaSuccess 0, cudaErrorNotReady
//     600, cudaErrorNoDevice 100, cudaErrorInsufficientDriver 35);
//     cudaMemcpyKind HostToDevice 1, DeviceToHost 2; cudaStream_t and
//     cudaEvent_t are pointers; cudaStreamNonBlocking 1;
//     cudaEventDisableTiming 2; cudaHostAllocDefault 0. Versions are
//     1000*major + 10*minor; cudaDriverGetVersion gives 0 without a
//     driver. A runtime needs a driver of at least its major version
//     (minor version compatibility within a major, CUDA 11.1+).
//     Ordering ("API synchronization behavior" in the runtime API
//     reference): cudaMemset is asynchronous with respect to the host and
//     runs on the legacy null stream, which does not order with
//     non-blocking streams nor with cuFile; cudaMemcpy from pageable host
//     memory returns once the bytes are staged, possibly before the DMA
//     to the device completed. So gds zeroes with cudaMemsetAsync and
//     copies in with cudaMemcpyAsync on its own stream, each followed by
//     cudaStreamSynchronize of that stream.
//
// The Go structs below carry size assertions; gds/testdata/fakecuda.c
// declares the same C types and the tests (cuda_test.go) drive every
// binding through it when a C compiler is present, so a layout mistake on
// the Go side shows up without a GPU.

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuFileError is CUfileError_t.
type cuFileError struct {
	Err   int32 // CUfileOpError
	CuErr int32 // CUresult
}

// cuFileDescr is CUfileDescr_t.
type cuFileDescr struct {
	Type   int32   // enum CUfileFileHandleType, offset 0
	_      int32   // padding: the union is 8-aligned
	Handle int64   // union { int fd; void *handle; }, offset 8: fd in the low 4 bytes
	FSOps  uintptr // const CUfileFSOps_t *, offset 16
}

// cuFileDrvProps is CUfileDrvProps_t.
type cuFileDrvProps struct {
	NvfsMajor, NvfsMinor        uint32 // 0, 4
	PollThreshSize              uint64 // 8
	MaxDirectIOSize             uint64 // 16
	DStatusFlags, DControlFlags uint32 // 24, 28
	FFlags                      uint32 // 32
	MaxDeviceCacheSize          uint32 // 36
	PerBufferCacheSize          uint32 // 40
	MaxDevicePinnedMemSize      uint32 // 44
	MaxBatchIOSize              uint32 // 48
	MaxBatchIOTimeoutMsecs      uint32 // 52
}

// Compile-time layout checks.
var (
	_ [8]byte  = [unsafe.Sizeof(cuFileError{})]byte{}
	_ [24]byte = [unsafe.Sizeof(cuFileDescr{})]byte{}
	_ [8]byte  = [unsafe.Offsetof(cuFileDescr{}.Handle)]byte{}
	_ [16]byte = [unsafe.Offsetof(cuFileDescr{}.FSOps)]byte{}
	_ [56]byte = [unsafe.Sizeof(cuFileDrvProps{})]byte{}
	_ [24]byte = [unsafe.Offsetof(cuFileDrvProps{}.DStatusFlags)]byte{}
	_ [32]byte = [unsafe.Offsetof(cuFileDrvProps{}.FFlags)]byte{}
)

const (
	cuFileSuccess          = 0
	cuFileOpBaseErr        = 5000
	cuFileHandleTypeFD     = 1
	cuFileParamForceCompat = 2
	cuFileP2PSupportedBit  = 4

	cudaSuccess            = 0
	cudaErrorNotReady      = 600
	cudaMemcpyHostToDevice = 1
	cudaMemcpyDeviceToHost = 2
	cudaStreamNonBlocking  = 1
	cudaEventDisableTiming = 2
)

// cudart is libcudart's functions.
type cudart struct {
	path string

	GetDeviceCount        func(n *int32) int32
	SetDevice             func(dev int32) int32
	Malloc                func(p *uintptr, n uintptr) int32
	Free                  func(p uintptr) int32
	HostAlloc             func(p *unsafe.Pointer, n uintptr, flags uint32) int32
	FreeHost              func(p unsafe.Pointer) int32
	MemcpyDtoH            func(dst unsafe.Pointer, src uintptr, n uintptr, kind int32) int32 // cudaMemcpy
	MemcpyAsyncHtoD       func(dst uintptr, src unsafe.Pointer, n uintptr, kind int32, stream uintptr) int32
	MemsetAsync           func(p uintptr, v int32, n uintptr, stream uintptr) int32
	StreamCreateWithFlags func(s *uintptr, flags uint32) int32
	StreamDestroy         func(s uintptr) int32
	StreamSynchronize     func(s uintptr) int32
	EventCreateWithFlags  func(e *uintptr, flags uint32) int32
	EventRecord           func(e, s uintptr) int32
	EventQuery            func(e uintptr) int32
	EventDestroy          func(e uintptr) int32
	GetErrorString        func(err int32) string
	RuntimeGetVersion     func(v *int32) int32
	DriverGetVersion      func(v *int32) int32
	DeviceGetPCIBusID     func(buf *byte, n int32, dev int32) int32 // cudaDeviceGetPCIBusId
}

// cufile is libcufile's functions.
type cufile struct {
	path string

	DriverOpen          func() cuFileError
	DriverClose         func() cuFileError // cuFileDriverClose_v2
	DriverGetProperties func(p *cuFileDrvProps) cuFileError
	HandleRegister      func(fh *uintptr, d *cuFileDescr) cuFileError
	HandleDeregister    func(fh uintptr)
	BufRegister         func(p uintptr, n uintptr, flags int32) cuFileError
	BufDeregister       func(p uintptr) cuFileError
	Read                func(fh uintptr, base uintptr, n uintptr, fileOff int64, bufOff int64) int64
	GetVersion          func(v *int32) cuFileError               // optional
	GetParameterBool    func(param int32, v *bool) cuFileError   // optional (cuFile 1.14+)
	SetParameterSizeT   func(param int32, v uintptr) cuFileError // optional (cuFile 1.14+)
	SetStatsLevel       func(level int32) cuFileError            // optional (cuFile 1.15+)
	StatsStart          func() cuFileError                       // optional
	GetStatsL3          func(s *cuFileStatsL3Buf) cuFileError    // optional

	// preloaded are the libraries loaded before it (librt).
	preloaded []string
}

// symbol binds fptr to name in lib; optional symbols may be missing.
type symbol struct {
	fptr     any
	name     string
	optional bool
}

// dlopenFirst opens the first loadable candidate, binds syms and, when
// check is not nil, keeps it only if check (run after binding) accepts
// it; it returns what it tried for the error message.
func dlopenFirst(cands []string, syms func(path string) []symbol, check func() error) (string, []string, error) {
	var tried []string
	var lastErr error
	for _, c := range cands {
		h, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			tried = append(tried, err.Error())
			lastErr = err
			continue
		}
		if err := bind(h, syms(c)); err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", c, err))
			lastErr = err
			// Not the library we want: leave it loaded (dlclose of a library
			// whose constructors ran is not safe in general).
			continue
		}
		if check != nil {
			if err := check(); err != nil {
				tried = append(tried, fmt.Sprintf("%s (%v)", c, err))
				lastErr = err
				continue
			}
		}
		return c, tried, nil
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("no candidate files")
	}
	return "", tried, lastErr
}

func bind(h uintptr, syms []symbol) error {
	for _, s := range syms {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			if s.optional {
				continue
			}
			return fmt.Errorf("missing symbol %s", s.name)
		}
		purego.RegisterFunc(s.fptr, p)
	}
	return nil
}

func loadCudart(o LibOptions) (*cudart, error) {
	var l *cudart
	syms := func(path string) []symbol {
		l = &cudart{path: path}
		return []symbol{
			{&l.GetDeviceCount, "cudaGetDeviceCount", false},
			{&l.SetDevice, "cudaSetDevice", false},
			{&l.Malloc, "cudaMalloc", false},
			{&l.Free, "cudaFree", false},
			{&l.HostAlloc, "cudaHostAlloc", false},
			{&l.FreeHost, "cudaFreeHost", false},
			{&l.MemcpyDtoH, "cudaMemcpy", false},
			{&l.MemcpyAsyncHtoD, "cudaMemcpyAsync", false},
			{&l.MemsetAsync, "cudaMemsetAsync", false},
			{&l.StreamCreateWithFlags, "cudaStreamCreateWithFlags", false},
			{&l.StreamDestroy, "cudaStreamDestroy", false},
			{&l.StreamSynchronize, "cudaStreamSynchronize", false},
			{&l.EventCreateWithFlags, "cudaEventCreateWithFlags", false},
			{&l.EventRecord, "cudaEventRecord", false},
			{&l.EventQuery, "cudaEventQuery", false},
			{&l.EventDestroy, "cudaEventDestroy", false},
			{&l.GetErrorString, "cudaGetErrorString", false},
			{&l.RuntimeGetVersion, "cudaRuntimeGetVersion", false},
			{&l.DriverGetVersion, "cudaDriverGetVersion", false},
			{&l.DeviceGetPCIBusID, "cudaDeviceGetPCIBusId", true},
		}
	}
	cands := candidates(o.Cudart, cudartNames, o)
	if _, tried, err := dlopenFirst(cands, syms, func() error { return checkDriver(l) }); err != nil {
		return nil, fmt.Errorf("gds: %w: cannot load libcudart: %s", ErrNoGPU, triedList(tried, cands, err))
	}
	return l, nil
}

func loadCufile(o LibOptions) (*cufile, error) {
	var l *cufile
	syms := func(path string) []symbol {
		l = &cufile{path: path}
		return []symbol{
			{&l.DriverOpen, "cuFileDriverOpen", false},
			{&l.DriverGetProperties, "cuFileDriverGetProperties", false},
			{&l.HandleRegister, "cuFileHandleRegister", false},
			{&l.HandleDeregister, "cuFileHandleDeregister", false},
			{&l.BufRegister, "cuFileBufRegister", false},
			{&l.BufDeregister, "cuFileBufDeregister", false},
			{&l.Read, "cuFileRead", false},
			{&l.GetVersion, "cuFileGetVersion", true},
			{&l.GetParameterBool, "cuFileGetParameterBool", true},
			{&l.SetParameterSizeT, "cuFileSetParameterSizeT", true},
			{&l.SetStatsLevel, "cuFileSetStatsLevel", true},
			{&l.StatsStart, "cuFileStatsStart", true},
			{&l.GetStatsL3, "cuFileGetStatsL3", true},
		}
	}
	// libcufile.so.0 of the pip wheel uses librt (shm_open) without
	// naming it on glibc older than 2.34, where librt is separate: it
	// loads only once librt is loaded globally (a known upstream issue).
	// On newer glibc librt.so.1 is an empty stub, so load it always.
	var pre []string
	for _, p := range cufilePreloads {
		if _, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
			pre = append(pre, p)
		}
	}
	cands := candidates(o.Cufile, cufileNames, o)
	path, tried, err := dlopenFirst(cands, syms, nil)
	if err != nil {
		return nil, fmt.Errorf("gds: cannot load libcufile: %s", triedList(tried, cands, err))
	}
	l.preloaded = pre
	// cuFileDriverClose is a macro for cuFileDriverClose_v2 in cufile.h;
	// older libraries export only the plain name.
	h, _ := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err := bind(h, []symbol{{&l.DriverClose, "cuFileDriverClose_v2", true}}); err != nil || l.DriverClose == nil {
		if err := bind(h, []symbol{{&l.DriverClose, "cuFileDriverClose", false}}); err != nil {
			return nil, fmt.Errorf("gds: %s: %v", path, err)
		}
	}
	return l, nil
}

// cufilePreloads are loaded with RTLD_GLOBAL before libcufile.
var cufilePreloads = []string{"librt.so.1"}

// checkDriver refuses a runtime that the installed driver is too old for
// (or that finds no driver), so that an older runtime further down the
// candidates gets its turn: libcudart.so.13 of a pip wheel on a machine
// whose driver is CUDA 12 binds every symbol, then fails every call with
// cudaErrorInsufficientDriver.
func checkDriver(l *cudart) error {
	var rv, dv int32
	if c := l.RuntimeGetVersion(&rv); c != cudaSuccess {
		return fmt.Errorf("cudaRuntimeGetVersion: cuda error %d", c)
	}
	if c := l.DriverGetVersion(&dv); c != cudaSuccess {
		return fmt.Errorf("cudaDriverGetVersion: cuda error %d", c)
	}
	if dv == 0 {
		return fmt.Errorf("no CUDA driver installed (cudaDriverGetVersion 0)")
	}
	if dv/1000 < rv/1000 {
		return fmt.Errorf("runtime %s needs a CUDA %d driver; the driver is %s", cudaVersion(rv), rv/1000, cudaVersion(dv))
	}
	return nil
}

// cudaVersion formats 1000*major + 10*minor.
func cudaVersion(v int32) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

func triedList(tried, cands []string, err error) string {
	if len(cands) == 0 {
		return "no library file found in the search path"
	}
	if len(tried) == 0 {
		return err.Error()
	}
	return "tried " + strings.Join(tried, "; ")
}

// cudaErr formats a CUDA runtime error.
func (l *cudart) err(op string, code int32) error {
	return fmt.Errorf("gds: %s: cuda error %d (%s)", op, code, l.GetErrorString(code))
}

// err formats a cuFile error.
func (e cuFileError) err(op string) error {
	if e.Err == cuFileSuccess {
		return nil
	}
	return fmt.Errorf("gds: %s: cufile error %d (%s), cuda %d", op, e.Err, cuFileErrName(e.Err), e.CuErr)
}

// cuFileErrName names the common cuFile errors (cufile.h CUFILEOP_STATUS_ENTRIES).
func cuFileErrName(code int32) string {
	switch code - cuFileOpBaseErr {
	case 1:
		return "nvidia-fs driver is not loaded; set allow_compat_mode in cufile.json"
	case 7:
		return "GPUDirect Storage not supported on this platform"
	case 8:
		return "GPUDirect Storage not supported on this file"
	case 9:
		return "GPUDirect Storage not supported on this GPU"
	case 11:
		return "CUDA driver error"
	case 12:
		return "invalid device pointer"
	case 14:
		return "pointer range exceeds allocated address range"
	case 15:
		return "CUDA context mismatch"
	case 18:
		return "unsupported file type"
	case 19:
		return "unsupported file open flags"
	case 20:
		return "fd direct IO not set"
	case 22:
		return "invalid arguments"
	case 23:
		return "device pointer already registered"
	case 24:
		return "device pointer not registered"
	case 26:
		return "driver already open"
	case 29:
		return "GPU device not found"
	case 30:
		return "internal error"
	case 44:
		return "cufile io error"
	}
	return "see cufile.h"
}
