//go:build cgo

// Command libshoal is Shoal's checkpoint API (client/ckpt) as a C
// library, for programs not written in Go: the Python package in
// python/ loads it with ctypes. Build it with
//
//	go build -buildmode=c-shared -o bin/libshoal.so ./cmd/libshoal
//
// which also writes bin/libshoal.h. Requests and results are JSON
// (UTF-8, NUL-terminated); tensor bytes are passed as pointers, never
// copied through JSON. Every function returns a negative value on failure
// and then sets *err (when err is not NULL) to a JSON object {"kind",
// "message", ...} that the caller frees with shoal_free; kind is one of
// not_found, corrupt (with job, step, shard, tensor, want, got, detail),
// permission, exists, invalid, no_space, unavailable, canceled, error. A
// result (*out) is freed the same way. No function keeps a pointer it was
// given after it returns: a save reads the caller's buffers during the
// call (an async save copies them before it returns), a load writes into
// them during the call.
//
//	int64_t shoal_open(const char *opts_json, char **err);
//	    opts: mds, cert, key, ca, insecure, root, name, parallelism,
//	    keep_last, keep_every, no_reuse. Returns a handle > 0.
//	int64_t shoal_close(int64_t h, char **err);
//	    Waits for async saves, then closes the connection.
//	int64_t shoal_save(int64_t h, const char *req_json, void **ptrs,
//	        int64_t nptrs, char **out, char **err);
//	    req: job, step, rank, world, attempt, async, pin, no_reuse, base,
//	    shards [{name, metadata, blob (index into ptrs), blob_len,
//	    tensors [{name, dtype, shape, ptr (index into ptrs), len}]}].
//	    Returns 0 with the result in *out ({committed, manifest, part,
//	    elapsed_s}), or with async the id (> 0) of a pending save for
//	    shoal_wait (*out: {pending, stall_s}).
//	int64_t shoal_wait(int64_t h, int64_t id, char **out, char **err);
//	    The outcome of a pending save, as shoal_save's result.
//	int64_t shoal_load(int64_t h, const char *req_json, void **ptrs,
//	        int64_t *lens, int64_t nptrs, char **out, char **err);
//	    req: job, step (-1: the latest), verify, tensors [{shard, name,
//	    ptr}] (each read into ptrs[ptr], lens[ptr] bytes, which must be
//	    the tensor's size), blobs [shard names, returned base64 in out].
//	    *out: {step, verified, blobs {name: base64}}.
//	int64_t shoal_call(int64_t h, const char *op, const char *req_json,
//	        char **out, char **err);
//	    op: jobs, list, latest, manifest, verify, prune, delete, pin,
//	    unpin, gc (req: job, step, keep_last, keep_every, force).
//	void shoal_free(char *p);
package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"unsafe"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/internal/cabi"
)

func main() {}

// handle is one open connection: a client and a checkpoint store.
type handle struct {
	cl *client.Client
	st *ckpt.Store

	mu      sync.Mutex
	next    int64
	pending map[int64]*pending // async saves not yet waited for
}

// handles are the open connections, by the handle shoal_open returned.
var handles cabi.Handles[*handle]

func getHandle(h C.int64_t) (*handle, error) {
	if hd, ok := handles.Get(int64(h)); ok {
		return hd, nil
	}
	return nil, noHandle(h)
}

func noHandle(h C.int64_t) error { return invalidf("no open handle %d (closed?)", int64(h)) }

// cstr returns s as a C string for the caller to shoal_free.
func cstr(s []byte) *C.char {
	p := C.malloc(C.size_t(len(s) + 1))
	b := unsafe.Slice((*byte)(p), len(s)+1)
	copy(b, s)
	b[len(s)] = 0
	return (*C.char)(p)
}

// setOut stores v as JSON in *out (when out is not NULL).
func setOut(out **C.char, v any) error {
	if out == nil {
		return nil
	}
	js, err := json.Marshal(v)
	if err != nil {
		return err
	}
	*out = cstr(js)
	return nil
}

// fail stores e in *err and returns -1.
func fail(errp **C.char, e error) C.int64_t {
	if errp != nil {
		js, _ := json.Marshal(errorJSON(e))
		*errp = cstr(js)
	}
	return -1
}

// guard turns a panic into an error, so that a bug in Go never takes the
// calling interpreter down with it.
func guard(errp **C.char, rc *C.int64_t) {
	if r := recover(); r != nil {
		*rc = fail(errp, fmt.Errorf("libshoal: internal error: %v\n%s", r, debug.Stack()))
	}
}

type openOpts struct {
	MDS         string `json:"mds"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	Insecure    bool   `json:"insecure"`
	Root        string `json:"root"`
	Name        string `json:"name"`
	Parallelism int    `json:"parallelism"`
	KeepLast    int    `json:"keep_last"`
	KeepEvery   int64  `json:"keep_every"`
	NoReuse     bool   `json:"no_reuse"`
}

//export shoal_open
func shoal_open(optsJSON *C.char, errp **C.char) (rc C.int64_t) {
	defer guard(errp, &rc)
	var o openOpts
	if e := decodeStrict(C.GoString(optsJSON), &o); e != nil {
		return fail(errp, e)
	}
	cl, e := connect(o)
	if e != nil {
		return fail(errp, e)
	}
	so := ckpt.Options{Root: o.Root, Parallelism: o.Parallelism, NoReuse: o.NoReuse,
		Retention: ckpt.Policy{KeepLast: o.KeepLast, KeepEvery: o.KeepEvery}}
	if h := crashHook(os.Getenv("SHOAL_LIBSHOAL_CRASH_AT")); h != nil {
		so.Hook = h
	}
	st, e := ckpt.New(cl, so)
	if e != nil {
		cl.Close()
		return fail(errp, e)
	}
	return C.int64_t(handles.Add(&handle{cl: cl, st: st, pending: map[int64]*pending{}}))
}

//export shoal_close
func shoal_close(h C.int64_t, errp **C.char) (rc C.int64_t) {
	defer guard(errp, &rc)
	hd, ok := handles.Remove(int64(h))
	if !ok {
		return fail(errp, noHandle(h))
	}
	hd.mu.Lock()
	ps := hd.pending
	hd.pending = nil
	hd.mu.Unlock()
	for _, p := range ps {
		<-p.done
	}
	e1 := hd.st.Close()
	e2 := hd.cl.Close()
	if e1 != nil {
		return fail(errp, e1)
	}
	if e2 != nil {
		return fail(errp, e2)
	}
	return 0
}

//export shoal_save
func shoal_save(h C.int64_t, reqJSON *C.char, ptrs *unsafe.Pointer, nptrs C.int64_t, out, errp **C.char) (rc C.int64_t) {
	defer guard(errp, &rc)
	hd, e := getHandle(h)
	if e != nil {
		return fail(errp, e)
	}
	var req saveReq
	if e := decodeStrict(C.GoString(reqJSON), &req); e != nil {
		return fail(errp, e)
	}
	shards, e := req.shards(cPointers(ptrs, nptrs))
	if e != nil {
		return fail(errp, e)
	}
	ctx := context.Background()
	if req.Async {
		id, stall, e := hd.saveAsync(ctx, &req, shards)
		if e != nil {
			return fail(errp, e)
		}
		if e := setOut(out, map[string]any{"pending": id, "stall_s": stall.Seconds()}); e != nil {
			return fail(errp, e)
		}
		return C.int64_t(id)
	}
	r, e := hd.st.SaveRank(ctx, req.Job, req.Step, req.Rank, max(req.World, 1), req.Attempt, shards, req.options()...)
	if e != nil {
		return fail(errp, e)
	}
	if e := setOut(out, resultOf(r)); e != nil {
		return fail(errp, e)
	}
	return 0
}

//export shoal_wait
func shoal_wait(h C.int64_t, id C.int64_t, out, errp **C.char) (rc C.int64_t) {
	defer guard(errp, &rc)
	hd, e := getHandle(h)
	if e != nil {
		return fail(errp, e)
	}
	hd.mu.Lock()
	p, ok := hd.pending[int64(id)]
	delete(hd.pending, int64(id))
	hd.mu.Unlock()
	if !ok {
		return fail(errp, invalidf("no pending save %d (waited for already?)", int64(id)))
	}
	<-p.done
	if p.err != nil {
		return fail(errp, p.err)
	}
	if e := setOut(out, resultOf(p.res)); e != nil {
		return fail(errp, e)
	}
	return 0
}

//export shoal_load
func shoal_load(h C.int64_t, reqJSON *C.char, ptrs *unsafe.Pointer, lens *C.int64_t, nptrs C.int64_t, out, errp **C.char) (rc C.int64_t) {
	defer guard(errp, &rc)
	hd, e := getHandle(h)
	if e != nil {
		return fail(errp, e)
	}
	var req loadReq
	if e := decodeStrict(C.GoString(reqJSON), &req); e != nil {
		return fail(errp, e)
	}
	var ls []C.int64_t
	if nptrs > 0 {
		ls = unsafe.Slice(lens, int(nptrs))
	}
	bufs := make([][]byte, len(ls))
	for i, p := range cPointers(ptrs, nptrs) {
		if ls[i] < 0 {
			return fail(errp, invalidf("buffer %d: length %d", i, int64(ls[i])))
		}
		if p != nil && ls[i] > 0 {
			bufs[i] = unsafe.Slice((*byte)(p), int(ls[i]))
		} else {
			bufs[i] = []byte{}
		}
	}
	res, e := hd.load(context.Background(), &req, bufs)
	if e != nil {
		return fail(errp, e)
	}
	if e := setOut(out, res); e != nil {
		return fail(errp, e)
	}
	return 0
}

//export shoal_call
func shoal_call(h C.int64_t, op *C.char, reqJSON *C.char, out, errp **C.char) (rc C.int64_t) {
	defer guard(errp, &rc)
	hd, e := getHandle(h)
	if e != nil {
		return fail(errp, e)
	}
	var req callReq
	if e := decodeStrict(C.GoString(reqJSON), &req); e != nil {
		return fail(errp, e)
	}
	v, e := hd.call(context.Background(), C.GoString(op), &req)
	if e != nil {
		return fail(errp, e)
	}
	if e := setOut(out, v); e != nil {
		return fail(errp, e)
	}
	return 0
}

//export shoal_free
func shoal_free(p *C.char) {
	if p != nil {
		C.free(unsafe.Pointer(p))
	}
}

// cPointers returns the C array ptrs[0:n] as a Go slice over C memory
// (valid during the call only).
func cPointers(ptrs *unsafe.Pointer, n C.int64_t) []unsafe.Pointer {
	if ptrs == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice(ptrs, int(n))
}
