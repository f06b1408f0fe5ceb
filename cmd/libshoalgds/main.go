//go:build cgo

// Command libshoalgds is Shoal's GPU read path as a C library, for
// programs that are not written in Go (a PyTorch job through ctypes:
// tools/python/shoal_gds.py). Build it with
//
//	go build -buildmode=c-shared -o bin/libshoalgds.so ./cmd/libshoalgds
//
// which also writes bin/libshoalgds.h. Every function takes a buffer for
// an error message (err, errlen; may be NULL) and returns a negative value
// on failure. Strings are UTF-8, NUL-terminated.
//
//	int64_t shoal_gds_open(const char *mds, const char *backend,
//	        const char *ost_dirs, int device, char *err, int64_t errlen);
//	    Connects to the cluster at mds ($SHOAL_MDS when empty) and opens
//	    device memory: backend is "cuda" (device pointers; libcudart and
//	    libcufile found as gds.LibOptionsFromEnv says: SHOAL_CUDA_LIB,
//	    SHOAL_CUFILE_LIB, SHOAL_CUDA_LIB_DIRS, Python's nvidia/*/lib) or
//	    "host" (host pointers, no GPU). ost_dirs is a ':'-separated list
//	    of OST directories on this node (may be empty). It connects with
//	    mutual TLS, as the shoal command: the certificate in SHOAL_CERT,
//	    SHOAL_KEY and SHOAL_CA (. DIR/tls/env of a shoal local), or in
//	    plaintext with SHOAL_INSECURE=1; neither is an error. Returns a
//	    handle > 0.
//	int64_t shoal_gds_open2(const char *mds, const char *backend,
//	        const char *ost_dirs, int device, const char *options,
//	        char *err, int64_t errlen);
//	    shoal_gds_open with options, a JSON object (may be NULL): "cert",
//	    "key", "ca" (files, like --cert, --key, --ca), "insecure" (like
//	    --insecure), "env" (an object of variables that override the
//	    environment the library saw when it was loaded), "python_prefixes"
//	    and "lib_dirs" (searched first for the CUDA libraries).
//	int shoal_gds_close(int64_t h, char *err, int64_t errlen);
//	int64_t shoal_gds_read(int64_t h, const char *path, int64_t off,
//	        int64_t n, void *dst, int64_t dst_len, char *report,
//	        int64_t report_len, char *err, int64_t errlen);
//	    Reads file bytes [off, off+n) of path into dst (device memory of
//	    dst_len bytes, e.g. tensor.data_ptr()); returns the bytes read,
//	    fewer than n only at the end of the file. report, when not NULL,
//	    receives a JSON object: bytes, path, paths {host,direct,compat,
//	    bounce}, local, remote, zero, fallback, elapsed_s.
//	int64_t shoal_gds_register(int64_t h, void *dst, int64_t len, char *err, int64_t errlen);
//	int64_t shoal_gds_unregister(int64_t h, void *dst, char *err, int64_t errlen);
//	    Registers a long-lived device buffer with cuFile once; reads into
//	    it then avoid cuFile's internal bounce buffers.
//	int64_t shoal_gds_header(int64_t h, const char *path, char *buf,
//	        int64_t buflen, char *err, int64_t errlen);
//	    Writes the safetensors header of path as JSON: {"data_start": N,
//	    "data_len": N, "metadata": {...}, "tensors": [{"name", "dtype",
//	    "shape", "begin", "end"}]} (offsets relative to data_start).
//	    Returns the JSON's length; when that is >= buflen, nothing useful
//	    was written: call again with a larger buffer.
//	int64_t shoal_gds_info(int64_t h, char *buf, int64_t buflen, char *err, int64_t errlen);
//	    The device as JSON: kind, name, direct_path, cufile_mode (when it
//	    opened), cufile_mode_now (once reads confirmed it), cufile_stats
//	    {Reads, P2P, NVFS, POSIX, Bytes} and cufile_stats_error,
//	    libraries, streams, glibc.
package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unsafe"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/gds"
	"github.com/shoalfs/shoal/internal/cabi"
)

func main() {}

type handle struct {
	cl  *client.Client
	dev *gds.Device
	r   *gds.Reader

	mu  sync.Mutex
	reg map[uintptr]*gds.Buffer // registered buffers by address
}

// handles are the open devices, by the handle shoal_gds_open returned.
var handles cabi.Handles[*handle]

func getHandle(h C.int64_t) (*handle, error) {
	if hd, ok := handles.Get(int64(h)); ok {
		return hd, nil
	}
	return nil, noHandle(h)
}

func noHandle(h C.int64_t) error { return fmt.Errorf("no open handle %d", int64(h)) }

// setStr copies s, NUL-terminated and cut to fit, into buf.
func setStr(buf *C.char, n C.int64_t, s string) {
	if buf == nil || n <= 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	m := copy(b[:len(b)-1], s)
	b[m] = 0
}

func fail(err *C.char, errlen C.int64_t, e error) C.int64_t {
	setStr(err, errlen, e.Error())
	return -1
}

//export shoal_gds_open
func shoal_gds_open(mds, backend, ostDirs *C.char, device C.int, err *C.char, errlen C.int64_t) C.int64_t {
	return shoal_gds_open2(mds, backend, ostDirs, device, nil, err, errlen)
}

//export shoal_gds_open2
func shoal_gds_open2(mds, backend, ostDirs *C.char, device C.int, options *C.char, err *C.char, errlen C.int64_t) C.int64_t {
	ctx := context.Background()
	opts, e := parseOptions(C.GoString(options))
	if e != nil {
		return fail(err, errlen, e)
	}
	addr := C.GoString(mds)
	if addr == "" {
		addr = opts.getenv("SHOAL_MDS")
	}
	if addr == "" {
		return fail(err, errlen, fmt.Errorf("no MDS address: pass one or set SHOAL_MDS"))
	}
	creds, e := opts.creds()
	if e != nil {
		return fail(err, errlen, e)
	}
	var dev *gds.Device
	switch b := C.GoString(backend); b {
	case "cuda":
		d, e := gds.OpenCUDA(gds.CUDAOptions{Libs: opts.libs(), Device: int(device)})
		if e != nil {
			return fail(err, errlen, e)
		}
		dev = d
	case "host":
		dev = gds.OpenHost(gds.HostOptions{})
	default:
		return fail(err, errlen, fmt.Errorf("backend %q: want cuda or host", b))
	}
	var local map[uint32]string
	if s := C.GoString(ostDirs); s != "" {
		m, e := gds.DiscoverLocalOSTs(strings.Split(s, ":"))
		if e != nil {
			dev.Close()
			return fail(err, errlen, e)
		}
		local = m
	}
	cl, e := client.New(ctx, client.Options{MDS: addr, Name: "libshoalgds", Creds: creds})
	if e != nil {
		dev.Close()
		return fail(err, errlen, e)
	}
	r, e := gds.NewReader(cl, dev, gds.Options{LocalOSTs: local})
	if e != nil {
		cl.Close()
		dev.Close()
		return fail(err, errlen, e)
	}
	return C.int64_t(handles.Add(&handle{cl: cl, dev: dev, r: r, reg: map[uintptr]*gds.Buffer{}}))
}

//export shoal_gds_close
func shoal_gds_close(h C.int64_t, err *C.char, errlen C.int64_t) C.int {
	hd, ok := handles.Remove(int64(h))
	if !ok {
		fail(err, errlen, noHandle(h))
		return -1
	}
	e := errors.Join(hd.r.Close(), hd.dev.Close(), hd.cl.Close())
	if e != nil {
		fail(err, errlen, e)
		return -1
	}
	return 0
}

// buffer returns the registered buffer holding [p, p+n) and the offset of
// p in it, or a new wrapped buffer.
func (hd *handle) buffer(p unsafe.Pointer, n int64) (*gds.Buffer, int64, bool, error) {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	for a, b := range hd.reg {
		if uintptr(p) >= a && uintptr(p)+uintptr(n) <= a+uintptr(b.Len()) {
			return b, int64(uintptr(p) - a), false, nil
		}
	}
	b, err := hd.dev.Wrap(p, n)
	return b, 0, true, err
}

type report struct {
	Bytes    int64            `json:"bytes"`
	Path     string           `json:"path"`
	Paths    map[string]int64 `json:"paths"`
	Local    int64            `json:"local"`
	Remote   int64            `json:"remote"`
	Zero     int64            `json:"zero"`
	Fallback int64            `json:"fallback"`
	Elapsed  float64          `json:"elapsed_s"`
}

func reportOf(r gds.Report) report {
	out := report{Bytes: r.Bytes, Path: r.Path(), Paths: map[string]int64{}, Local: r.Local, Remote: r.Remote, Zero: r.Zero, Fallback: r.Fallback, Elapsed: r.Elapsed.Seconds()}
	for p := gds.Path(0); p < gds.NumPaths; p++ {
		out.Paths[p.String()] = r.Paths[p]
	}
	return out
}

//export shoal_gds_read
func shoal_gds_read(h C.int64_t, path *C.char, off, n C.int64_t, dst unsafe.Pointer, dstLen C.int64_t, rep *C.char, repLen C.int64_t, err *C.char, errlen C.int64_t) C.int64_t {
	hd, e := getHandle(h)
	if e != nil {
		return fail(err, errlen, e)
	}
	if n < 0 || n > dstLen || dst == nil {
		return fail(err, errlen, fmt.Errorf("read of %d bytes into %d bytes at %p", int64(n), int64(dstLen), dst))
	}
	if n == 0 {
		return 0
	}
	ctx := context.Background()
	f, e := hd.r.Open(ctx, C.GoString(path))
	if e != nil {
		return fail(err, errlen, e)
	}
	defer f.Close(ctx)
	b, bOff, temp, e := hd.buffer(dst, int64(dstLen))
	if e != nil {
		return fail(err, errlen, e)
	}
	if temp {
		defer b.Free()
	}
	r, e := hd.r.ReadAt(ctx, f, b, bOff, int64(off), int64(n))
	if e != nil && !errors.Is(e, io.EOF) {
		return fail(err, errlen, e)
	}
	if rep != nil {
		js, _ := json.Marshal(reportOf(r))
		setStr(rep, repLen, string(js))
	}
	return C.int64_t(r.Bytes)
}

//export shoal_gds_register
func shoal_gds_register(h C.int64_t, dst unsafe.Pointer, n C.int64_t, err *C.char, errlen C.int64_t) C.int64_t {
	hd, e := getHandle(h)
	if e != nil {
		return fail(err, errlen, e)
	}
	b, e := hd.dev.Wrap(dst, int64(n))
	if e != nil {
		return fail(err, errlen, e)
	}
	if e := hd.dev.Register(b); e != nil {
		b.Free()
		return fail(err, errlen, e)
	}
	hd.mu.Lock()
	if old, ok := hd.reg[uintptr(dst)]; ok {
		old.Free()
	}
	hd.reg[uintptr(dst)] = b
	hd.mu.Unlock()
	return 0
}

//export shoal_gds_unregister
func shoal_gds_unregister(h C.int64_t, dst unsafe.Pointer, err *C.char, errlen C.int64_t) C.int64_t {
	hd, e := getHandle(h)
	if e != nil {
		return fail(err, errlen, e)
	}
	hd.mu.Lock()
	b, ok := hd.reg[uintptr(dst)]
	delete(hd.reg, uintptr(dst))
	hd.mu.Unlock()
	if !ok {
		return fail(err, errlen, fmt.Errorf("%p is not registered", dst))
	}
	if e := b.Free(); e != nil {
		return fail(err, errlen, e)
	}
	return 0
}

type tensorJSON struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Begin int64   `json:"begin"`
	End   int64   `json:"end"`
}

//export shoal_gds_header
func shoal_gds_header(h C.int64_t, path *C.char, buf *C.char, buflen C.int64_t, err *C.char, errlen C.int64_t) C.int64_t {
	hd, e := getHandle(h)
	if e != nil {
		return fail(err, errlen, e)
	}
	ctx := context.Background()
	f, e := hd.r.Open(ctx, C.GoString(path))
	if e != nil {
		return fail(err, errlen, e)
	}
	defer f.Close(ctx)
	hdr, e := hd.r.ReadHeader(ctx, f)
	if e != nil {
		return fail(err, errlen, e)
	}
	out := struct {
		DataStart int64             `json:"data_start"`
		DataLen   int64             `json:"data_len"`
		Metadata  map[string]string `json:"metadata"`
		Tensors   []tensorJSON      `json:"tensors"`
	}{DataStart: hdr.DataStart(), DataLen: hdr.DataLen, Metadata: hdr.Metadata, Tensors: []tensorJSON{}}
	for _, t := range hdr.Tensors {
		out.Tensors = append(out.Tensors, tensorJSON{t.Name, string(t.DType), t.Shape, t.Begin, t.End})
	}
	js, e := json.Marshal(out)
	if e != nil {
		return fail(err, errlen, e)
	}
	if int64(len(js)) < int64(buflen) {
		setStr(buf, buflen, string(js))
	}
	return C.int64_t(len(js))
}

//export shoal_gds_info
func shoal_gds_info(h C.int64_t, buf *C.char, buflen C.int64_t, err *C.char, errlen C.int64_t) C.int64_t {
	hd, e := getHandle(h)
	if e != nil {
		return fail(err, errlen, e)
	}
	i := hd.dev.Info()
	st := hd.dev.CuFileStatus()
	js, _ := json.Marshal(map[string]any{"kind": i.Kind.String(), "name": i.Name, "direct_path": i.DirectPath.String(),
		"cufile_mode": i.CuFileMode, "cufile_mode_now": st.Mode, "cufile_stats": st.Stats, "cufile_stats_error": st.StatsErr,
		"libraries": i.Libraries, "streams": i.Streams, "glibc": gds.GlibcVersion()})
	if int64(len(js)) < int64(buflen) {
		setStr(buf, buflen, string(js))
	}
	return C.int64_t(len(js))
}
