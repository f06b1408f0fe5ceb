/* A stand-in for libcudart and libcufile, for testing gds's CUDA backend
 * on machines without a GPU: "device memory" is malloc'd host memory,
 * copies are memcpy, cuFileRead is pread, and every call checks its
 * arguments the way the real libraries would reject them.
 *
 * The types are declared here as cufile.h and cuda_runtime_api.h declare
 * them (see gds/cudalib.go for where each comes from), so a Go-side
 * layout mistake (CUfileDescr_t, CUfileError_t returned by value,
 * CUfileDrvProps_t) fails these tests instead of crashing a GPU machine.
 *
 * Build: cc -shared -fPIC -o libfakecuda.so fakecuda.c
 * FAKECUDA_DEVICES=0 makes cudaGetDeviceCount report no device. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- CUDA runtime ---- */
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
       cudaErrorNoDevice = 100, cudaErrorNotReady = 600 };
enum { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };

#define MAXALLOC 4096
static struct { char *p; size_t n; int pinned; } allocs[MAXALLOC];

static int track(void *p, size_t n, int pinned) {
	for (int i = 0; i < MAXALLOC; i++)
		if (!allocs[i].p) { allocs[i].p = p; allocs[i].n = n; allocs[i].pinned = pinned; return 0; }
	return -1;
}
/* inside reports whether [p, p+n) lies in one live allocation of kind pinned. */
static int inside(const void *p, size_t n, int pinned) {
	const char *c = p;
	for (int i = 0; i < MAXALLOC; i++)
		if (allocs[i].p && allocs[i].pinned == pinned && c >= allocs[i].p && c + n <= allocs[i].p + allocs[i].n) return 1;
	return 0;
}
static int untrack(void *p, int pinned) {
	for (int i = 0; i < MAXALLOC; i++)
		if (allocs[i].p == p && allocs[i].pinned == pinned) { allocs[i].p = NULL; return 0; }
	return -1;
}

static int current = -1;
cudaError_t cudaGetDeviceCount(int *n) {
	const char *e = getenv("FAKECUDA_DEVICES");
	*n = e ? atoi(e) : 1;
	return *n ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int d) { if (d != 0) return cudaErrorInvalidValue; current = d; return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n) {
	if (current != 0) return cudaErrorInvalidValue;
	*p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	if (!*p || track(*p, n, 0)) return cudaErrorMemoryAllocation;
	memset(*p, 0xAB, n); /* device memory is not zeroed */
	return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
	if (!p) return cudaSuccess;
	if (untrack(p, 0)) return cudaErrorInvalidValue;
	free(p);
	return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
	*p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	if (!*p || track(*p, n, 1)) return cudaErrorMemoryAllocation;
	return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
	if (untrack(p, 1)) return cudaErrorInvalidValue;
	free(p);
	return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
	if (kind == cudaMemcpyHostToDevice && !inside(dst, n, 0)) return cudaErrorInvalidValue;
	if (kind == cudaMemcpyDeviceToHost && !inside(src, n, 0)) return cudaErrorInvalidValue;
	if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost) return cudaErrorInvalidValue;
	memcpy(dst, src, n);
	return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
	if (!inside(p, n, 0)) return cudaErrorInvalidValue;
	memset(p, v, n);
	return cudaSuccess;
}

/* Streams run their copies when an event recorded after them is queried
 * for the second time, so that copies really are in flight for a while. */
#define MAXQ 1024
struct copy { void *dst; const void *src; size_t n; };
struct stream { struct copy q[MAXQ]; int len; };
struct event { struct stream *s; int upto; int queries; int recorded; };

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
	*s = calloc(1, sizeof(struct stream));
	return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}
static void run(struct stream *s, int upto) {
	for (int i = 0; i < upto && i < s->len; i++)
		if (s->q[i].n) { memcpy(s->q[i].dst, s->q[i].src, s->q[i].n); s->q[i].n = 0; }
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { run(s, MAXQ); ((struct stream *)s)->len = 0; return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { cudaStreamSynchronize(s); free(s); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t st) {
	struct stream *s = st;
	if (kind != cudaMemcpyHostToDevice || !inside(dst, n, 0)) return cudaErrorInvalidValue;
	if (!inside(src, n, 1)) return cudaErrorInvalidValue; /* gds stages in pinned memory */
	if (s->len == MAXQ) cudaStreamSynchronize(s);
	s->q[s->len].dst = dst; s->q[s->len].src = src; s->q[s->len].n = n;
	s->len++;
	return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
	*e = calloc(1, sizeof(struct event));
	return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
	struct event *e = ev;
	e->s = st; e->upto = ((struct stream *)st)->len; e->queries = 0; e->recorded = 1;
	return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t ev) {
	struct event *e = ev;
	if (!e->recorded) return cudaSuccess;
	if (++e->queries < 2) return cudaErrorNotReady;
	run(e->s, e->upto);
	e->recorded = 0;
	return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t ev) { free(ev); return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) {
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	}
	return "fake error";
}
cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int dev) { strncpy(buf, "0000:fa:ke.0", len); return cudaSuccess; }

/* ---- cuFile ---- */
typedef int CUresult;
typedef enum CUfileOpError { CU_FILE_SUCCESS = 0, CU_FILE_DRIVER_NOT_INITIALIZED = 5001,
	CU_FILE_INVALID_VALUE = 5022, CU_FILE_MEMORY_ALREADY_REGISTERED = 5023,
	CU_FILE_MEMORY_NOT_REGISTERED = 5024, CU_FILE_DRIVER_ALREADY_OPEN = 5026,
	CU_FILE_HANDLE_NOT_REGISTERED = 5027, CU_FILE_INVALID_FILE_TYPE = 5018 } CUfileOpError;
typedef struct CUfileError { CUfileOpError err; CUresult cu_err; } CUfileError_t;
typedef struct CUfileDrvProps {
	struct { unsigned int major_version, minor_version; size_t poll_thresh_size, max_direct_io_size;
	         unsigned int dstatusflags, dcontrolflags; } nvfs;
	unsigned int fflags, max_device_cache_size, per_buffer_cache_size, max_device_pinned_mem_size,
	    max_batch_io_size, max_batch_io_timeout_msecs;
} CUfileDrvProps_t;
enum CUfileFileHandleType { CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1 };
typedef struct CUfileDescr_t {
	enum CUfileFileHandleType type;
	union { int fd; void *handle; } handle;
	const void *fs_ops;
} CUfileDescr_t;
typedef void *CUfileHandle_t;

_Static_assert(sizeof(CUfileError_t) == 8, "CUfileError_t");
_Static_assert(sizeof(CUfileDescr_t) == 24 && offsetof(CUfileDescr_t, handle) == 8 && offsetof(CUfileDescr_t, fs_ops) == 16, "CUfileDescr_t");
_Static_assert(sizeof(CUfileDrvProps_t) == 56 && offsetof(CUfileDrvProps_t, fflags) == 32, "CUfileDrvProps_t");

static int driver_open;
static CUfileError_t st(CUfileOpError e) { CUfileError_t r = { e, 0 }; return r; }
CUfileError_t cuFileDriverOpen(void) {
	if (driver_open) return st(CU_FILE_DRIVER_ALREADY_OPEN);
	driver_open = 1;
	return st(CU_FILE_SUCCESS);
}
CUfileError_t cuFileDriverClose_v2(void) { driver_open = 0; return st(CU_FILE_SUCCESS); }
CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *p) {
	if (!driver_open) return st(CU_FILE_DRIVER_NOT_INITIALIZED);
	memset(p, 0, sizeof *p);
	p->nvfs.max_direct_io_size = 16 << 20; /* nvfs.major_version 0: no nvidia-fs, compat mode */
	p->max_batch_io_size = 128;
	return st(CU_FILE_SUCCESS);
}
CUfileError_t cuFileGetVersion(int *v) { *v = 1150; return st(CU_FILE_SUCCESS); }

struct fh { int fd; };
CUfileError_t cuFileHandleRegister(CUfileHandle_t *h, CUfileDescr_t *d) {
	struct stat s;
	if (!driver_open) return st(CU_FILE_DRIVER_NOT_INITIALIZED);
	if (d->type != CU_FILE_HANDLE_TYPE_OPAQUE_FD || d->fs_ops != NULL) return st(CU_FILE_INVALID_VALUE);
	if (fstat(d->handle.fd, &s) || !S_ISREG(s.st_mode)) return st(CU_FILE_INVALID_FILE_TYPE);
	struct fh *f = malloc(sizeof *f);
	f->fd = d->handle.fd;
	*h = f;
	return st(CU_FILE_SUCCESS);
}
void cuFileHandleDeregister(CUfileHandle_t h) { free(h); }

#define MAXREG 256
static struct { char *p; size_t n; } regs[MAXREG];
CUfileError_t cuFileBufRegister(const void *p, size_t n, int flags) {
	if (!inside(p, n, 0)) return st(CU_FILE_INVALID_VALUE);
	for (int i = 0; i < MAXREG; i++) if (regs[i].p == p) return st(CU_FILE_MEMORY_ALREADY_REGISTERED);
	for (int i = 0; i < MAXREG; i++) if (!regs[i].p) { regs[i].p = (char *)p; regs[i].n = n; return st(CU_FILE_SUCCESS); }
	return st(CU_FILE_INVALID_VALUE);
}
CUfileError_t cuFileBufDeregister(const void *p) {
	for (int i = 0; i < MAXREG; i++) if (regs[i].p == p) { regs[i].p = NULL; return st(CU_FILE_SUCCESS); }
	return st(CU_FILE_MEMORY_NOT_REGISTERED);
}
ssize_t cuFileRead(CUfileHandle_t h, void *base, size_t n, off_t off, off_t boff) {
	struct fh *f = h;
	if (!driver_open) return -CU_FILE_DRIVER_NOT_INITIALIZED;
	if (!inside((char *)base + boff, n, 0)) return -CU_FILE_INVALID_VALUE;
	size_t done = 0;
	while (done < n) {
		ssize_t m = pread(f->fd, (char *)base + boff + done, n - done, off + done);
		if (m < 0) return -errno;
		if (m == 0) break;
		done += m;
	}
	return done;
}
