//go:build linux && (amd64 || arm64)

package gds

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/errs"
)

// CUDAOptions configure the CUDA backend.
type CUDAOptions struct {
	Libs LibOptions
	// Device is the CUDA device ordinal. Default 0.
	Device int
	// Streams is the number of copy streams. Default 4.
	Streams int
	// IOThreads is the number of extra locked OS threads that call
	// cuFileRead; 0 makes the owner thread do it. Default 0.
	IOThreads int
	// NoCuFile does not load libcufile: local chunks take the bounce path.
	NoCuFile bool
	// PollInterval is how often the owner thread polls the events of
	// copies in flight while it has nothing else to do. Default 20µs.
	PollInterval time.Duration
}

// OpenCUDA opens CUDA device o.Device. Errors wrap ErrNoGPU when the
// machine has no usable GPU.
func OpenCUDA(o CUDAOptions) (*Device, error) {
	if o.Streams <= 0 {
		o.Streams = 4
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 20 * time.Microsecond
	}
	rt, err := loadCudart(o.Libs)
	if err != nil {
		return nil, err
	}
	e := &cudaEngine{opts: o, rt: rt, cmds: make(chan func(), 64)}
	ready := make(chan error, 1)
	e.wg.Add(1)
	go e.own(ready)
	if err := <-ready; err != nil {
		e.wg.Wait()
		return nil, err
	}
	if o.NoCuFile {
		e.cfMode = "unavailable: turned off (CUDAOptions.NoCuFile)"
	} else {
		e.openCuFile()
	}
	if e.cf != nil && o.IOThreads > 0 {
		e.ioCmds = make(chan func(), 64)
		for i := 0; i < o.IOThreads; i++ {
			e.wg.Add(1)
			ready := make(chan error, 1)
			go e.ioThread(ready)
			if err := <-ready; err != nil {
				e.close()
				return nil, err
			}
		}
	}
	return newDevice(e), nil
}

type cudaEngine struct {
	opts CUDAOptions
	rt   *cudart
	cf   *cufile // nil: no cuFile

	cfMode     string
	directPath Path
	name       string

	cmds    chan func() // run on the owner thread
	ioCmds  chan func() // run on an I/O thread (nil: owner)
	wg      sync.WaitGroup
	streams []uintptr
	// syncStream carries the synchronous memsets and copies (Zero,
	// CopyFromHost), each waited for with cudaStreamSynchronize.
	syncStream uintptr

	// Owned by the owner thread.
	events  []uintptr // free events
	watches []watch

	// mu guards closed and the sends on cmds and ioCmds.
	mu     sync.RWMutex
	closed bool
}

// watch is a copy in flight: done gets its result once ev has completed.
type watch struct {
	ev   uintptr
	done chan error
}

// own is the owner thread: it initializes the device, then runs commands
// and polls the events of copies in flight.
func (e *cudaEngine) own(ready chan<- error) {
	defer e.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := e.init(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if len(e.watches) == 0 {
			fn, ok := <-e.cmds
			if !ok {
				e.shutdown()
				return
			}
			fn()
			continue
		}
		select {
		case fn, ok := <-e.cmds:
			if !ok {
				e.drain()
				e.shutdown()
				return
			}
			fn()
			continue
		default:
		}
		if e.poll() {
			continue
		}
		timer.Reset(e.opts.PollInterval)
		select {
		case fn, ok := <-e.cmds:
			if !timer.Stop() {
				<-timer.C
			}
			if !ok {
				e.drain()
				e.shutdown()
				return
			}
			fn()
		case <-timer.C:
		}
	}
}

func (e *cudaEngine) init() error {
	rt := e.rt
	var n int32
	if c := rt.GetDeviceCount(&n); c != cudaSuccess {
		return fmt.Errorf("gds: %w: cudaGetDeviceCount: cuda error %d (%s) [%s]", ErrNoGPU, c, rt.GetErrorString(c), rt.path)
	}
	if n == 0 {
		return fmt.Errorf("gds: %w: no CUDA device [%s]", ErrNoGPU, rt.path)
	}
	if e.opts.Device < 0 || e.opts.Device >= int(n) {
		return fmt.Errorf("gds: CUDA device %d of %d: %w", e.opts.Device, n, errs.ErrInvalid)
	}
	if c := rt.SetDevice(int32(e.opts.Device)); c != cudaSuccess {
		return fmt.Errorf("gds: %w: %v", ErrNoGPU, rt.err("cudaSetDevice", c))
	}
	// cudaFree(0) creates the primary context now, not in the first read.
	if c := rt.Free(0); c != cudaSuccess {
		return fmt.Errorf("gds: %w: %v", ErrNoGPU, rt.err("cudaFree(0)", c))
	}
	for i := 0; i < e.opts.Streams; i++ {
		var s uintptr
		if c := rt.StreamCreateWithFlags(&s, cudaStreamNonBlocking); c != cudaSuccess {
			e.shutdown()
			return rt.err("cudaStreamCreateWithFlags", c)
		}
		e.streams = append(e.streams, s)
	}
	if c := rt.StreamCreateWithFlags(&e.syncStream, cudaStreamNonBlocking); c != cudaSuccess {
		e.shutdown()
		return rt.err("cudaStreamCreateWithFlags", c)
	}
	var rv, dv int32
	rt.RuntimeGetVersion(&rv)
	rt.DriverGetVersion(&dv)
	e.name = fmt.Sprintf("cuda:%d runtime %d driver %d", e.opts.Device, rv, dv)
	if rt.DeviceGetPCIBusID != nil {
		buf := make([]byte, 64)
		if rt.DeviceGetPCIBusID(&buf[0], int32(len(buf)), int32(e.opts.Device)) == cudaSuccess {
			if i := strings.IndexByte(string(buf), 0); i > 0 {
				e.name += " pci " + string(buf[:i])
			}
		}
	}
	e.directPath = PathBounce
	e.cfMode = "unavailable: not loaded"
	return nil
}

// openCuFile opens the process's cuFile driver, or takes another
// reference to it; on failure the device works without it (local chunks
// take the bounce path) and Info says why.
func (e *cudaEngine) openCuFile() {
	cf, mode, err := acquireCuFile(e.opts.Libs, e.do)
	if err != nil {
		e.cfMode, e.directPath = "unavailable: "+err.Error(), PathBounce
		return
	}
	e.cf, e.cfMode, e.directPath = cf, mode, PathCompat
	if cufileDriver.directConfirmed() {
		e.directPath = PathDirect
	}
}

// ioThread runs cuFileRead calls on its own locked thread.
func (e *cudaEngine) ioThread(ready chan<- error) {
	defer e.wg.Done()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if c := e.rt.SetDevice(int32(e.opts.Device)); c != cudaSuccess {
		ready <- e.rt.err("cudaSetDevice", c)
		return
	}
	ready <- nil
	for fn := range e.ioCmds {
		fn()
	}
}

// errClosed is returned by calls on a closed device.
var errClosed = fmt.Errorf("gds: device is closed: %w", errs.ErrInvalid)

// do runs fn on the owner thread and waits; it does not run fn and
// returns errClosed once the device is closed.
func (e *cudaEngine) do(fn func()) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return errClosed
	}
	done := make(chan struct{})
	e.cmds <- func() { fn(); close(done) }
	<-done
	return nil
}

// poll completes the watches whose events are done; it reports whether
// any completed.
func (e *cudaEngine) poll() bool {
	completed := false
	kept := e.watches[:0]
	for _, w := range e.watches {
		switch c := e.rt.EventQuery(w.ev); c {
		case cudaErrorNotReady:
			kept = append(kept, w)
			continue
		case cudaSuccess:
			w.done <- nil
		default:
			w.done <- e.rt.err("cudaEventQuery", c)
		}
		e.events = append(e.events, w.ev)
		completed = true
	}
	for i := len(kept); i < len(e.watches); i++ {
		e.watches[i] = watch{}
	}
	e.watches = kept
	return completed
}

// drain waits for every copy in flight (at close).
func (e *cudaEngine) drain() {
	for len(e.watches) > 0 {
		if !e.poll() {
			time.Sleep(e.opts.PollInterval)
		}
	}
}

func (e *cudaEngine) shutdown() {
	for _, ev := range e.events {
		e.rt.EventDestroy(ev)
	}
	e.events = nil
	for _, s := range e.streams {
		e.rt.StreamSynchronize(s)
		e.rt.StreamDestroy(s)
	}
	e.streams = nil
	if e.syncStream != 0 {
		e.rt.StreamSynchronize(e.syncStream)
		e.rt.StreamDestroy(e.syncStream)
		e.syncStream = 0
	}
	if e.cf != nil {
		releaseCuFile(e.cf)
	}
}

func (e *cudaEngine) info() Info {
	return Info{Kind: KindCUDA, Name: e.name, DirectPath: e.directPath, CuFileMode: e.cfMode,
		Libraries: e.libs(), Streams: len(e.streams), IOThreads: max(1, e.opts.IOThreads)}
}

func (e *cudaEngine) libs() []string {
	l := []string{e.rt.path}
	if e.cf != nil {
		for _, p := range e.cf.preloaded {
			l = append(l, p+" (preloaded for libcufile)")
		}
		l = append(l, e.cf.path)
	}
	return l
}

func (e *cudaEngine) cufileStatus() CuFileStatus {
	if e.cf == nil {
		return CuFileStatus{Mode: e.cfMode, StatsErr: "no cuFile"}
	}
	return cuFileStatus()
}

func (e *cudaEngine) alloc(n int64) (uintptr, []byte, error) {
	var p uintptr
	var err error
	if derr := e.do(func() {
		if c := e.rt.Malloc(&p, uintptr(n)); c != cudaSuccess {
			err = e.rt.err(fmt.Sprintf("cudaMalloc(%d)", n), c)
		}
	}); derr != nil {
		return 0, nil, derr
	}
	return p, nil, err
}

func (e *cudaEngine) free(addr uintptr, _ []byte) error {
	var err error
	e.do(func() {
		if c := e.rt.Free(addr); c != cudaSuccess {
			err = e.rt.err("cudaFree", c)
		}
	})
	return err
}

func (e *cudaEngine) register(addr uintptr, n int64) error {
	if e.cf == nil {
		return nil
	}
	var err error
	e.do(func() { err = e.cf.BufRegister(addr, uintptr(n), 0).err("cuFileBufRegister") })
	return err
}

func (e *cudaEngine) deregister(addr uintptr) error {
	if e.cf == nil {
		return nil
	}
	var err error
	e.do(func() { err = e.cf.BufDeregister(addr).err("cuFileBufDeregister") })
	return err
}

func (e *cudaEngine) allocPinned(n int) ([]byte, error) {
	var p unsafe.Pointer
	var err error
	if derr := e.do(func() {
		if c := e.rt.HostAlloc(&p, uintptr(n), 0); c != cudaSuccess {
			err = e.rt.err(fmt.Sprintf("cudaHostAlloc(%d)", n), c)
		}
	}); derr != nil {
		return nil, derr
	}
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

func (e *cudaEngine) freePinned(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var err error
	e.do(func() {
		if c := e.rt.FreeHost(unsafe.Pointer(&b[0])); c != cudaSuccess {
			err = e.rt.err("cudaFreeHost", c)
		}
	})
	return err
}

// memset zeroes on the sync stream and waits for it: cudaMemset on the
// null stream would return before the bytes are zeroed, and nothing
// orders it before a later cuFileRead or copy on another stream.
func (e *cudaEngine) memset(b *Buffer, off, n int64) error {
	var err error
	if derr := e.do(func() {
		if c := e.rt.MemsetAsync(b.addr+uintptr(off), 0, uintptr(n), e.syncStream); c != cudaSuccess {
			err = e.rt.err("cudaMemsetAsync", c)
			return
		}
		if c := e.rt.StreamSynchronize(e.syncStream); c != cudaSuccess {
			err = e.rt.err("cudaStreamSynchronize", c)
		}
	}); derr != nil {
		return derr
	}
	return err
}

// cudaFile is a local file registered with cuFile.
type cudaFile struct {
	f      *os.File // buffered, for host reads
	fd     int      // O_DIRECT where the file system allows it
	handle uintptr  // CUfileHandle_t
	size   int64
	e      *cudaEngine
}

func (f *cudaFile) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }
func (f *cudaFile) Size() int64                             { return f.size }
func (f *cudaFile) Close() error {
	if f.handle != 0 {
		h := f.handle
		f.e.do(func() { f.e.cf.HandleDeregister(h) })
		f.handle = 0
	}
	err := f.f.Close()
	if f.fd >= 0 {
		err = errors.Join(err, unix.Close(f.fd))
		f.fd = -1
	}
	return err
}

func (e *cudaEngine) openDirect(path string) (directFile, error) {
	if e.cf == nil {
		hf, err := openHostFile(path, false)
		if err != nil {
			return nil, err
		}
		return hf, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	cf := &cudaFile{f: f, fd: -1, size: st.Size(), e: e}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		// No O_DIRECT here (tmpfs, overlayfs): cuFile's compatibility mode
		// still reads a buffered descriptor.
		if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			f.Close()
			return nil, err
		}
	}
	cf.fd = fd
	if derr := e.do(func() {
		d := cuFileDescr{Type: cuFileHandleTypeFD, Handle: int64(fd)}
		err = e.cf.HandleRegister(&cf.handle, &d).err("cuFileHandleRegister " + path)
	}); derr != nil {
		err = derr
	}
	if err != nil {
		cf.handle = 0
		cf.Close()
		return nil, err
	}
	return cf, nil
}

func (e *cudaEngine) readDirect(df directFile, b *Buffer, off, fileOff, n int64) (Path, error) {
	cf, ok := df.(*cudaFile)
	if !ok {
		return PathBounce, fmt.Errorf("gds: no cuFile for a direct read: %w", errs.ErrNotSupported)
	}
	var got int64
	var errno int32
	read := func() {
		got = e.cf.Read(cf.handle, b.addr, uintptr(n), fileOff, off)
		if got == -1 {
			errno = threadErrno() // same locked thread, no C call in between
		}
	}
	p, err := readPath(e.cf, e.runIO, read)
	if err != nil {
		return p, err
	}
	return p, cuFileReadErr(got, errno, n, fileOff)
}

// runIO runs fn on an I/O thread, or on the owner thread without them.
func (e *cudaEngine) runIO(fn func()) error {
	if e.ioCmds == nil {
		return e.do(fn)
	}
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return errClosed
	}
	done := make(chan struct{})
	e.ioCmds <- func() { fn(); close(done) }
	e.mu.RUnlock()
	<-done
	return nil
}

// cuFileReadErr reads cuFileRead's result: the bytes read; -1 with errno
// set for a file-system error; -(5000+n) for a cuFile error.
func cuFileReadErr(got int64, errno int32, n, fileOff int64) error {
	switch {
	case got == n:
		return nil
	case got == -1 && errno != 0:
		return fmt.Errorf("gds: cuFileRead %d bytes at %d: %w", n, fileOff, unix.Errno(errno))
	case got == -1:
		return fmt.Errorf("gds: cuFileRead %d bytes at %d: failed (-1) with errno 0", n, fileOff)
	case got < 0 && -got > cuFileOpBaseErr:
		return fmt.Errorf("gds: cuFileRead %d bytes at %d: cufile error %d (%s)", n, fileOff, -got, cuFileErrName(int32(-got)))
	case got < 0:
		return fmt.Errorf("gds: cuFileRead %d bytes at %d: returned %d, neither -1 nor a cuFile error: %w", n, fileOff, got, unix.Errno(-got))
	}
	return fmt.Errorf("gds: cuFileRead %d bytes at %d: short read of %d", n, fileOff, got)
}

func (e *cudaEngine) copyIn(b *Buffer, off int64, src []byte, s int) <-chan error {
	done := make(chan error, 1)
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		done <- errClosed
		return done
	}
	e.cmds <- func() {
		rt := e.rt
		stream := e.streams[s%len(e.streams)]
		if c := rt.MemcpyAsyncHtoD(b.addr+uintptr(off), unsafe.Pointer(&src[0]), uintptr(len(src)), cudaMemcpyHostToDevice, stream); c != cudaSuccess {
			done <- rt.err("cudaMemcpyAsync", c)
			return
		}
		var ev uintptr
		if n := len(e.events); n > 0 {
			ev = e.events[n-1]
			e.events = e.events[:n-1]
		} else if c := rt.EventCreateWithFlags(&ev, cudaEventDisableTiming); c != cudaSuccess {
			// Without an event, wait for the stream.
			if c := rt.StreamSynchronize(stream); c != cudaSuccess {
				done <- rt.err("cudaStreamSynchronize", c)
				return
			}
			done <- nil
			return
		}
		if c := rt.EventRecord(ev, stream); c != cudaSuccess {
			e.events = append(e.events, ev)
			if c := rt.StreamSynchronize(stream); c != cudaSuccess {
				done <- rt.err("cudaStreamSynchronize", c)
				return
			}
			done <- nil
			return
		}
		e.watches = append(e.watches, watch{ev: ev, done: done})
	}
	return done
}

// copyInSync copies on the sync stream and waits for it: cudaMemcpy from
// pageable memory may return before the bytes reach the device.
func (e *cudaEngine) copyInSync(b *Buffer, off int64, src []byte) error {
	var err error
	if derr := e.do(func() {
		if c := e.rt.MemcpyAsyncHtoD(b.addr+uintptr(off), unsafe.Pointer(&src[0]), uintptr(len(src)), cudaMemcpyHostToDevice, e.syncStream); c != cudaSuccess {
			err = e.rt.err("cudaMemcpyAsync HtoD", c)
			return
		}
		if c := e.rt.StreamSynchronize(e.syncStream); c != cudaSuccess {
			err = e.rt.err("cudaStreamSynchronize", c)
		}
	}); derr != nil {
		return derr
	}
	return err
}

func (e *cudaEngine) copyOut(dst []byte, b *Buffer, off int64) error {
	var err error
	e.do(func() {
		if c := e.rt.MemcpyDtoH(unsafe.Pointer(&dst[0]), b.addr+uintptr(off), uintptr(len(dst)), cudaMemcpyDeviceToHost); c != cudaSuccess {
			err = e.rt.err("cudaMemcpy DtoH", c)
		}
	})
	return err
}

func (e *cudaEngine) close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	if e.ioCmds != nil {
		close(e.ioCmds)
	}
	close(e.cmds)
	e.mu.Unlock()
	e.wg.Wait()
	return nil
}
