// Package gds reads Shoal file ranges straight into GPU memory.
//
// A Device is where bytes land. It has two backends:
//
//   - CUDA (OpenCUDA): libcudart and libcufile loaded at run time with
//     purego (no cgo). Device memory comes from cudaMalloc, staging memory
//     from cudaHostAlloc, copies are cudaMemcpyAsync on several streams
//     with an event per copy, and local chunk files are read with
//     cuFileRead through an O_DIRECT descriptor. A machine without the
//     libraries or without a GPU gets an error wrapping ErrNoGPU.
//   - host (OpenHost): plain memory standing in for device memory, so that
//     every test of the path runs without a GPU. Its "direct" reads are
//     pread (O_DIRECT where the file system and alignment allow) into the
//     buffer, its copies run on goroutines that play the streams.
//
// A Reader reads byte ranges of Shoal files into a Buffer at given
// offsets. It plans each read from the file's extent map (cells of
// internal/layout) and routes every piece:
//
//   - local: the chunk lives on an OST of this node (Options.LocalOSTs)
//     and the piece is 4 KiB aligned in the chunk, in length and in the
//     destination: read from the chunk file straight into the destination
//     (cuFile; the path is "direct" with nvidia-fs or P2PDMA, "compat" in
//     cuFile's compatibility mode, "host" on the host backend), then checked
//     against the chunk's CRC32C sidecar before the read returns.
//   - bounce: any other piece (a remote chunk, an unaligned local piece, a
//     local chunk that failed its check) is read into a pinned staging slot
//     (remote chunks through the client library, which rebuilds from parity
//     when chunks are missing or corrupt) and copied asynchronously to the
//     destination. Slots are reused only once their copy has completed; the
//     number of slots bounds the bytes in flight (back-pressure).
//
// Every read returns a Report of the bytes each path and source carried,
// and counts them in Prometheus metrics (metrics.go).
//
// Threads: the CUDA backend makes every CUDA runtime and cuFile call from
// one goroutine locked to its OS thread (runtime.LockOSThread) that owns
// the device's context, its streams and events, and the buffer
// registrations (each buffer is registered once, when allocated or
// wrapped and asked to). Options.IOThreads adds more locked threads that
// only call cuFileRead, after cudaSetDevice on the same device. Do not fork
// after a CUDA device is open (os/exec is fine: it execs at once).
//
// Lock order: Reader.mu before Device.mu; neither is held across I/O.
package gds
