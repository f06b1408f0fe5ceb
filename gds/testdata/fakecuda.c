/* A stand-in for libcudart and libcufile, for testing gds's CUDA backend
 * on machines without a GPU: "device memory" is malloc'd host memory,
 * copies are memcpy, cuFileRead is pread, and every call checks its
 * arguments the way the real libraries would reject them.
 *
 * The types are declared here as cufile.h and cuda_runtime_api.h declare
 * them (see gds/cudalib.go for where each comes from), so a Go-side
 * layout mistake (CUfileDescr_t, CUfileError_t returned by value,
 * CUfileDrvProps_t, the statistics structs) fails these tests instead of
 * crashing a GPU machine.
 *
 * Where the real libraries leave the host free to run ahead, this fake
 * runs ahead too, as late as the CUDA documentation allows:
 *   - cudaMemset, and cudaMemcpy from pageable host memory to the device,
 *     are queued on the legacy null stream (cudaMemcpy stages the bytes
 *     first) and land only at the next null-stream synchronisation:
 *     cudaMemcpy device to host, cudaStreamSynchronize(0),
 *     cudaDeviceSynchronize, cudaFree. cuFileRead and copies on
 *     non-blocking streams are not ordered after them.
 *   - copies on a stream land when an event recorded after them is
 *     queried the second time, or at cudaStreamSynchronize.
 *   - cuFileRead returns -1 with errno set for a file-system error and
 *     -(5000+n) for cuFile's own errors (GDS API reference, cuFileRead).
 *   - cuFileDriverOpen succeeds again when the driver is open, and one
 *     cuFileDriverClose closes it whatever the number of opens.
 *   - statistics (cuFileGetStatsL1/L3) count only once the level was set
 *     (cuFileSetStatsLevel, or CUFILE_PARAM_PROFILE_STATS before open);
 *     a read is counted as POSIX (compatibility mode) unless
 *     FAKECUDA_P2P_USED=1, even when FAKECUDA_P2P=1 sets the P2P
 *     feature flag (bit 4 of fflags: supported, not used).
 *   - cudaGetDeviceCount fails with cudaErrorInsufficientDriver when the
 *     driver (FAKECUDA_DRIVER_VERSION, default 13000) is of an older major
 *     version than this runtime (FAKE_RUNTIME_VERSION at build, default
 *     13000).
 * Built with -DFAKE_NEEDS_RT, it calls fakert_shm_open, defined only in
 * fakert.c and not linked: like the pip wheel's libcufile.so.0 on glibc
 * older than 2.34 (shm_open in librt), it loads only after that library
 * was loaded with RTLD_GLOBAL.
 *
 * Build: cc -shared -fPIC -Wl,-Bsymbolic -o libfakecuda.so fakecuda.c
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

#ifndef FAKE_RUNTIME_VERSION
#define FAKE_RUNTIME_VERSION 13000
#endif

/* ---- CUDA runtime ---- */
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
       cudaErrorInsufficientDriver = 35, cudaErrorNoDevice = 100, cudaErrorNotReady = 600 };
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

/* Streams: a queue of copies and memsets, run in order. */
#define MAXQ 1024
struct op { void *dst; const void *src; size_t n; int val; int memset; void *owned; };
struct stream { struct op q[MAXQ]; long head, tail; };
struct event { struct stream *s; long upto; int queries; int recorded; };

static struct stream nullstream; /* the legacy default stream */
#define MAXSTREAMS 256
static struct stream *streams[MAXSTREAMS];

static struct stream *sof(cudaStream_t s) { return s ? (struct stream *)s : &nullstream; }
static void run_to(struct stream *s, long upto) {
	for (; s->head < upto && s->head < s->tail; s->head++) {
		struct op *o = &s->q[s->head % MAXQ];
		if (o->memset) memset(o->dst, o->val, o->n);
		else memcpy(o->dst, o->src, o->n);
		free(o->owned);
		o->owned = NULL;
	}
}
static void run_all(struct stream *s) { run_to(s, s->tail); }
static void enqueue(struct stream *s, struct op o) {
	if (s->tail - s->head == MAXQ) run_to(s, s->head + 1);
	s->q[s->tail % MAXQ] = o;
	s->tail++;
}
/* staged copies the bytes now (pageable memory: the runtime copies them to
 * its own staging buffer before it returns) and lands them later. */
static struct op staged(void *dst, const void *src, size_t n) {
	struct op o = { dst, NULL, n, 0, 0, malloc(n ? n : 1) };
	memcpy(o.owned, src, n);
	o.src = o.owned;
	return o;
}

static int current = -1;
static int driver_version(void) {
	const char *e = getenv("FAKECUDA_DRIVER_VERSION");
	return e ? atoi(e) : 13000;
}
cudaError_t cudaGetDeviceCount(int *n) {
	const char *e = getenv("FAKECUDA_DEVICES");
	*n = 0;
	if (driver_version() / 1000 < FAKE_RUNTIME_VERSION / 1000) return cudaErrorInsufficientDriver;
	*n = e ? atoi(e) : 1;
	return *n ? cudaSuccess : cudaErrorNoDevice;
}
cudaError_t cudaSetDevice(int d) { if (d != 0) return cudaErrorInvalidValue; current = d; return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) {
	run_all(&nullstream);
	for (int i = 0; i < MAXSTREAMS; i++) if (streams[i]) run_all(streams[i]);
	return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
	if (current != 0) return cudaErrorInvalidValue;
	*p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	if (!*p || track(*p, n, 0)) return cudaErrorMemoryAllocation;
	memset(*p, 0xAB, n); /* device memory is not zeroed */
	return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
	cudaDeviceSynchronize(); /* cudaFree synchronizes the device */
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
	if (kind == cudaMemcpyHostToDevice && !inside(src, n, 1)) {
		/* From pageable memory: returns once the bytes are staged; the DMA
		 * to the device may not have completed. */
		enqueue(&nullstream, staged(dst, src, n));
		return cudaSuccess;
	}
	run_all(&nullstream); /* ordered after earlier null-stream work, and waited for */
	memcpy(dst, src, n);
	return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
	if (!inside(p, n, 0)) return cudaErrorInvalidValue;
	struct op o = { p, NULL, n, v, 1, NULL };
	enqueue(&nullstream, o); /* asynchronous with respect to the host */
	return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
	if (!inside(p, n, 0)) return cudaErrorInvalidValue;
	struct op o = { p, NULL, n, v, 1, NULL };
	enqueue(sof(s), o);
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
	struct stream *st = calloc(1, sizeof(struct stream));
	if (!st) return cudaErrorMemoryAllocation;
	for (int i = 0; i < MAXSTREAMS; i++)
		if (!streams[i]) { streams[i] = st; *s = st; return cudaSuccess; }
	free(st);
	return cudaErrorMemoryAllocation;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { run_all(sof(s)); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
	if (!s) return cudaErrorInvalidValue;
	run_all(s);
	for (int i = 0; i < MAXSTREAMS; i++) if (streams[i] == s) streams[i] = NULL;
	free(s);
	return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, cudaStream_t st) {
	if (kind != cudaMemcpyHostToDevice || !inside(dst, n, 0)) return cudaErrorInvalidValue;
	if (inside(src, n, 1)) {
		/* From pinned memory: the device reads src when the copy runs, so
		 * reusing src before the copy completed corrupts it. */
		struct op o = { dst, src, n, 0, 0, NULL };
		enqueue(sof(st), o);
	} else {
		enqueue(sof(st), staged(dst, src, n));
	}
	return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
	*e = calloc(1, sizeof(struct event));
	return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
	struct event *e = ev;
	e->s = sof(st); e->upto = e->s->tail; e->queries = 0; e->recorded = 1;
	return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t ev) {
	struct event *e = ev;
	if (!e->recorded) return cudaSuccess;
	if (++e->queries < 2) return cudaErrorNotReady;
	run_to(e->s, e->upto);
	e->recorded = 0;
	return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t ev) { free(ev); return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) {
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	}
	return "fake error";
}
cudaError_t cudaRuntimeGetVersion(int *v) { *v = FAKE_RUNTIME_VERSION; return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int *v) { *v = driver_version(); return cudaSuccess; }
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
enum { CU_FILE_P2P_SUPPORTED = 4 }; /* CUfileFeatureFlags_t: a bit number */
enum { CUFILE_PARAM_PROFILE_STATS = 0 }; /* CUFileSizeTConfigParameter_t */

/* Statistics, as cufile.h of CUDA 13 declares them. */
typedef struct { uint64_t ok, err; } CUfileOpCounter_t;
typedef struct {
	CUfileOpCounter_t read_ops, write_ops, hdl_register_ops, hdl_deregister_ops, buf_register_ops, buf_deregister_ops;
	uint64_t read_bytes, write_bytes, read_bw_bytes_per_sec, write_bw_bytes_per_sec, read_lat_avg_us,
	    write_lat_avg_us, read_ops_per_sec, write_ops_per_sec, read_lat_sum_us, write_lat_sum_us;
	CUfileOpCounter_t batch_submit_ops, batch_complete_ops, batch_setup_ops, batch_cancel_ops, batch_destroy_ops,
	    batch_enqueued_ops, batch_posix_enqueued_ops, batch_processed_ops, batch_posix_processed_ops,
	    batch_nvfs_submit_ops, batch_p2p_submit_ops, batch_aio_submit_ops, batch_iouring_submit_ops,
	    batch_mixed_io_submit_ops, batch_total_submit_ops;
	uint64_t batch_read_bytes, batch_write_bytes, batch_read_bw_bytes, batch_write_bw_bytes,
	    batch_submit_lat_avg_us, batch_completion_lat_avg_us, batch_submit_ops_per_sec,
	    batch_complete_ops_per_sec, batch_submit_lat_sum_us, batch_completion_lat_sum_us,
	    last_batch_read_bytes, last_batch_write_bytes;
	CUfileOpCounter_t readv_ops, writev_ops;
	uint64_t readv_bytes, writev_bytes, readv_bw_bytes_per_sec, writev_bw_bytes_per_sec, readv_lat_avg_us,
	    writev_lat_avg_us, readv_ops_per_sec, writev_ops_per_sec, readv_lat_sum_us, writev_lat_sum_us;
} CUfileStatsLevel1_t;
typedef struct {
	char uuid[16];
	uint64_t read_bytes, read_bw_bytes_per_sec, read_utilization, read_duration_us, n_total_reads,
	    n_p2p_reads, n_nvfs_reads, n_posix_reads, n_unaligned_reads, n_dr_reads, n_sparse_regions,
	    n_inline_regions, n_reads_err, writes_bytes, write_bw_bytes_per_sec, write_utilization,
	    write_duration_us, n_total_writes, n_p2p_writes, n_nvfs_writes, n_posix_writes,
	    n_unaligned_writes, n_dr_writes, n_writes_err, n_mmap, n_mmap_ok, n_mmap_err, n_mmap_free, reg_bytes;
} CUfilePerGpuStats_t;
typedef struct { CUfileStatsLevel1_t basic; uint64_t read_size_kb_hist[32], write_size_kb_hist[32]; } CUfileStatsLevel2_t;
typedef struct { CUfileStatsLevel2_t detailed; uint32_t num_gpus; CUfilePerGpuStats_t per_gpu_stats[16]; } CUfileStatsLevel3_t;

_Static_assert(sizeof(CUfileError_t) == 8, "CUfileError_t");
_Static_assert(sizeof(CUfileDescr_t) == 24 && offsetof(CUfileDescr_t, handle) == 8 && offsetof(CUfileDescr_t, fs_ops) == 16, "CUfileDescr_t");
_Static_assert(sizeof(CUfileDrvProps_t) == 56 && offsetof(CUfileDrvProps_t, fflags) == 32, "CUfileDrvProps_t");
_Static_assert(sizeof(CUfileStatsLevel1_t) == 624 && offsetof(CUfileStatsLevel1_t, read_bytes) == 96, "CUfileStatsLevel1_t");
_Static_assert(sizeof(CUfilePerGpuStats_t) == 248 && offsetof(CUfilePerGpuStats_t, n_p2p_reads) == 56 &&
    offsetof(CUfilePerGpuStats_t, n_nvfs_reads) == 64 && offsetof(CUfilePerGpuStats_t, n_posix_reads) == 72, "CUfilePerGpuStats_t");
_Static_assert(sizeof(CUfileStatsLevel3_t) == 5112 && offsetof(CUfileStatsLevel3_t, num_gpus) == 1136 &&
    offsetof(CUfileStatsLevel3_t, per_gpu_stats) == 1144, "CUfileStatsLevel3_t");

#ifdef FAKE_NEEDS_RT
int fakert_shm_open(void); /* in fakert.c, which this library does not link */
#endif

static int driver_open, stats_level;
static size_t profile_stats; /* CUFILE_PARAM_PROFILE_STATS, read at open */
static CUfileStatsLevel3_t stats;
static CUfileError_t st(CUfileOpError e) { CUfileError_t r = { e, 0 }; return r; }
static int env_on(const char *k) { const char *e = getenv(k); return e && strcmp(e, "1") == 0; }

CUfileError_t cuFileDriverOpen(void) {
#ifdef FAKE_NEEDS_RT
	if (fakert_shm_open() != 0) return st(CU_FILE_INVALID_VALUE);
#endif
	if (!driver_open && profile_stats) stats_level = (int)profile_stats;
	driver_open = 1; /* a second open succeeds too */
	return st(CU_FILE_SUCCESS);
}
/* One close closes the driver, however many opens there were. */
CUfileError_t cuFileDriverClose_v2(void) { driver_open = 0; return st(CU_FILE_SUCCESS); }
CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *p) {
	if (!driver_open) return st(CU_FILE_DRIVER_NOT_INITIALIZED);
	memset(p, 0, sizeof *p);
	p->nvfs.max_direct_io_size = 16 << 20; /* nvfs.major_version 0: no nvidia-fs */
	p->max_batch_io_size = 128;
	if (env_on("FAKECUDA_P2P")) p->fflags |= 1u << CU_FILE_P2P_SUPPORTED;
	return st(CU_FILE_SUCCESS);
}
CUfileError_t cuFileGetVersion(int *v) { *v = 1150; return st(CU_FILE_SUCCESS); }
CUfileError_t cuFileSetParameterSizeT(int param, size_t v) {
	if (driver_open) return st(CU_FILE_DRIVER_ALREADY_OPEN); /* parameters are read at open */
	if (param != CUFILE_PARAM_PROFILE_STATS) return st(CU_FILE_INVALID_VALUE);
	profile_stats = v;
	return st(CU_FILE_SUCCESS);
}
CUfileError_t cuFileSetStatsLevel(int level) {
	if (level < 0 || level > 3) return st(CU_FILE_INVALID_VALUE);
	stats_level = level;
	return st(CU_FILE_SUCCESS);
}
CUfileError_t cuFileGetStatsLevel(int *level) { *level = stats_level; return st(CU_FILE_SUCCESS); }
CUfileError_t cuFileStatsStart(void) { return st(stats_level > 0 ? CU_FILE_SUCCESS : CU_FILE_INVALID_VALUE); }
CUfileError_t cuFileStatsReset(void) { memset(&stats, 0, sizeof stats); return st(CU_FILE_SUCCESS); }
CUfileError_t cuFileGetStatsL1(CUfileStatsLevel1_t *s) {
	if (!driver_open) return st(CU_FILE_DRIVER_NOT_INITIALIZED);
	if (stats_level < 1) return st(CU_FILE_INVALID_VALUE);
	*s = stats.detailed.basic;
	return st(CU_FILE_SUCCESS);
}
CUfileError_t cuFileGetStatsL3(CUfileStatsLevel3_t *s) {
	if (!driver_open) return st(CU_FILE_DRIVER_NOT_INITIALIZED);
	if (stats_level < 3) return st(CU_FILE_INVALID_VALUE);
	*s = stats;
	return st(CU_FILE_SUCCESS);
}

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
static void count_read(size_t n, int ok) {
	if (stats_level < 1) return;
	if (!ok) { stats.detailed.basic.read_ops.err++; return; }
	stats.detailed.basic.read_ops.ok++;
	stats.detailed.basic.read_bytes += n;
	if (stats_level < 3) return;
	CUfilePerGpuStats_t *g = &stats.per_gpu_stats[0];
	stats.num_gpus = 1;
	memcpy(g->uuid, "fakecuda-gpu-000", 16);
	g->read_bytes += n;
	g->n_total_reads++;
	if (env_on("FAKECUDA_P2P") && env_on("FAKECUDA_P2P_USED")) g->n_p2p_reads++;
	else g->n_posix_reads++;
}
/* cuFileRead: bytes read, -1 with errno set on a file-system error, or
 * -(5000+n) (a CUfileOpError) on cuFile's own. It writes device memory
 * directly, ordered after nothing queued on any stream. */
ssize_t cuFileRead(CUfileHandle_t h, void *base, size_t n, off_t off, off_t boff) {
	struct fh *f = h;
	if (!driver_open) return -CU_FILE_DRIVER_NOT_INITIALIZED;
	if (!inside((char *)base + boff, n, 0)) return -CU_FILE_INVALID_VALUE;
	size_t done = 0;
	while (done < n) {
		ssize_t m = pread(f->fd, (char *)base + boff + done, n - done, off + done);
		if (m < 0) { int e = errno; count_read(0, 0); errno = e; return -1; }
		if (m == 0) break;
		done += m;
	}
	count_read(done, 1);
	return done;
}
