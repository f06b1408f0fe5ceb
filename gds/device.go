package gds

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/shoalfs/shoal/internal/errs"
)

// ErrNoGPU is wrapped by every error that says the CUDA backend cannot run
// here: no libcudart or libcufile, a library without the expected symbols,
// no CUDA device, or a driver that does not start.
var ErrNoGPU = errors.New("no GPU")

// Kind is a device backend.
type Kind int

const (
	// KindHost is host memory standing in for device memory.
	KindHost Kind = iota
	// KindCUDA is a CUDA device.
	KindCUDA
)

func (k Kind) String() string {
	if k == KindCUDA {
		return "cuda"
	}
	return "host"
}

// Path is how the bytes of a piece reached the destination.
type Path int

const (
	// PathHost: the host backend (no GPU); local chunks were pread into the
	// buffer, remote ones staged and copied by goroutines.
	PathHost Path = iota
	// PathDirect: cuFileRead with GPUDirect (nvidia-fs or PCIe P2PDMA):
	// storage to GPU memory, no host copy.
	PathDirect
	// PathCompat: cuFileRead in cuFile's compatibility mode: cuFile reads
	// into its own host buffers and copies to the GPU.
	PathCompat
	// PathBounce: read into a pinned host staging slot (network, or pread
	// of a local chunk), then cudaMemcpyAsync to the GPU.
	PathBounce
	// NumPaths is the number of paths.
	NumPaths
)

var pathNames = [NumPaths]string{"host", "direct", "compat", "bounce"}

func (p Path) String() string {
	if p < 0 || p >= NumPaths {
		return fmt.Sprintf("path(%d)", int(p))
	}
	return pathNames[p]
}

// Info describes an open device.
type Info struct {
	Kind Kind
	// Name is the device's name ("host", or the CUDA device and its PCI
	// bus id).
	Name string
	// DirectPath is the path local chunk reads take: PathHost on the host
	// backend; PathCompat when cuFile runs (PathDirect once cuFile's
	// statistics confirmed a direct read; each read's Report says which
	// ran); PathBounce when the CUDA device has no usable cuFile.
	DirectPath Path
	// CuFileMode says which cuFile mode runs and why, when the device
	// opened ("compat: nvidia-fs not loaded, no PCIe P2PDMA", "direct
	// unconfirmed: PCIe P2PDMA supported", "unavailable: ..."); empty on
	// host. A direct mode is confirmed by cuFile's statistics on the first
	// reads (CuFileStatus); until then reads count as compat.
	CuFileMode string
	// Libraries are the files the CUDA backend loaded (and preloaded).
	Libraries []string
	// Streams is the number of copy streams.
	Streams int
	// IOThreads is the number of threads that call cuFileRead.
	IOThreads int
}

// CuFileStats are cuFile's read counters for this process (its level 3
// statistics, summed over GPUs): reads by how they ran.
type CuFileStats struct {
	Reads, P2P, NVFS, POSIX, Bytes uint64
}

// CuFileStatus is what cuFile says now: its mode (Info.CuFileMode, updated
// once a read confirmed or refuted a direct mode) and its counters.
type CuFileStatus struct {
	Mode  string
	Stats CuFileStats
	// StatsErr says why there are no counters ("" when there are).
	StatsErr string
}

// CuFileStatus returns cuFile's mode and counters now; on the host
// backend, or without cuFile, StatsErr says why there are none.
func (d *Device) CuFileStatus() CuFileStatus { return d.eng.cufileStatus() }

// Device is memory that reads land in, and the engine that moves bytes
// there. It is safe for concurrent use.
type Device struct {
	eng  engine
	info Info

	mu struct {
		sync.Mutex
		closed bool
		bufs   map[*Buffer]struct{} // live buffers allocated or registered here
		pinned map[*byte]int        // live staging buffers, by first byte
	}
}

func newDevice(eng engine) *Device {
	d := &Device{eng: eng, info: eng.info()}
	d.mu.bufs = map[*Buffer]struct{}{}
	d.mu.pinned = map[*byte]int{}
	return d
}

// Info describes the device.
func (d *Device) Info() Info { return d.info }

// Kind is the device's backend.
func (d *Device) Kind() Kind { return d.info.Kind }

// Buffer is a range of device memory.
type Buffer struct {
	dev        *Device
	addr       uintptr // device address (CUDA: not dereferenceable on the host)
	n          int64
	host       []byte // host backend: the memory itself
	owned      bool   // allocated by Alloc; freed by Free
	registered bool   // registered with cuFile
	freed      bool
}

// Addr is the device address of the buffer's first byte.
func (b *Buffer) Addr() uintptr { return b.addr }

// Len is the buffer's size in bytes.
func (b *Buffer) Len() int64 { return b.n }

// Device is the buffer's device.
func (b *Buffer) Device() *Device { return b.dev }

// Host returns the buffer's memory on the host backend, nil on CUDA.
func (b *Buffer) Host() []byte { return b.host }

func (b *Buffer) check(off, n int64) error {
	if b == nil {
		return fmt.Errorf("gds: nil buffer: %w", errs.ErrInvalid)
	}
	if b.freed {
		return fmt.Errorf("gds: buffer used after Free: %w", errs.ErrInvalid)
	}
	if off < 0 || n < 0 || off > b.n || n > b.n-off {
		return fmt.Errorf("gds: range [%d,+%d) outside a buffer of %d bytes: %w", off, n, b.n, errs.ErrInvalid)
	}
	return nil
}

// Alloc allocates n bytes of device memory and, on CUDA with cuFile,
// registers it with cuFile once (register = true), which makes direct
// reads into it faster.
func (d *Device) Alloc(n int64, register bool) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("gds: alloc %d bytes: %w", n, errs.ErrInvalid)
	}
	if err := d.live(); err != nil {
		return nil, err
	}
	addr, host, err := d.eng.alloc(n)
	if err != nil {
		return nil, err
	}
	b := &Buffer{dev: d, addr: addr, n: n, host: host, owned: true}
	if register {
		if err := d.eng.register(addr, n); err == nil {
			b.registered = true
		}
	}
	d.track(b)
	return b, nil
}

// Wrap makes a Buffer of n bytes of device memory at p that the caller
// owns (a PyTorch tensor's data_ptr(), say). On the host backend p must be
// host memory that stays valid while the Buffer is used. Free on a
// wrapped buffer only deregisters it.
func (d *Device) Wrap(p unsafe.Pointer, n int64) (*Buffer, error) {
	if p == nil || n <= 0 {
		return nil, fmt.Errorf("gds: wrap %p+%d: %w", p, n, errs.ErrInvalid)
	}
	if err := d.live(); err != nil {
		return nil, err
	}
	b := &Buffer{dev: d, addr: uintptr(p), n: n}
	if d.info.Kind == KindHost {
		b.host = unsafe.Slice((*byte)(p), n)
	}
	d.track(b)
	return b, nil
}

// Register registers b with cuFile (once; a no-op when it already is, on
// the host backend, or without cuFile). Reads into registered buffers
// avoid cuFile's internal bounce buffers.
func (d *Device) Register(b *Buffer) error {
	if err := b.check(0, 0); err != nil {
		return err
	}
	if b.registered {
		return nil
	}
	if err := d.eng.register(b.addr, b.n); err != nil {
		return err
	}
	b.registered = true
	return nil
}

// Free deregisters b and, when Alloc made it, frees its memory.
func (d *Device) Free(b *Buffer) error {
	if b == nil || b.freed {
		return nil
	}
	d.mu.Lock()
	delete(d.mu.bufs, b)
	d.mu.Unlock()
	return d.release(b)
}

// release deregisters and frees b.
func (d *Device) release(b *Buffer) error {
	var err error
	if b.registered {
		err = d.eng.deregister(b.addr)
		b.registered = false
	}
	if b.owned {
		err = errors.Join(err, d.eng.free(b.addr, b.host))
	}
	b.freed = true
	b.host = nil
	return err
}

// Free is b.Device().Free(b).
func (b *Buffer) Free() error { return b.dev.Free(b) }

func (d *Device) track(b *Buffer) {
	d.mu.Lock()
	d.mu.bufs[b] = struct{}{}
	d.mu.Unlock()
}

func (d *Device) live() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return fmt.Errorf("gds: device is closed: %w", errs.ErrInvalid)
	}
	return nil
}

// CopyToHost copies n = len(dst) bytes at off of b to dst (synchronous).
func (b *Buffer) CopyToHost(dst []byte, off int64) error {
	if err := b.check(off, int64(len(dst))); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	return b.dev.eng.copyOut(dst, b, off)
}

// CopyFromHost copies src to b at off (synchronous).
func (b *Buffer) CopyFromHost(off int64, src []byte) error {
	if err := b.check(off, int64(len(src))); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return b.dev.eng.copyInSync(b, off, src)
}

// Zero sets n bytes at off of b to zero.
func (b *Buffer) Zero(off, n int64) error {
	if err := b.check(off, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return b.dev.eng.memset(b, off, n)
}

// Close frees every buffer still allocated and closes the device. Buffers
// must not be used after it.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.mu.closed {
		d.mu.Unlock()
		return nil
	}
	d.mu.closed = true
	bufs, pinned := d.mu.bufs, d.mu.pinned
	d.mu.bufs, d.mu.pinned = map[*Buffer]struct{}{}, map[*byte]int{}
	d.mu.Unlock()
	var err error
	for b := range bufs {
		err = errors.Join(err, d.release(b))
	}
	for p, n := range pinned {
		err = errors.Join(err, d.eng.freePinned(unsafe.Slice(p, n)))
	}
	return errors.Join(err, d.eng.close())
}

// engine is a backend. Buffers passed to it were checked by the caller.
type engine interface {
	info() Info
	alloc(n int64) (addr uintptr, host []byte, err error)
	free(addr uintptr, host []byte) error
	register(addr uintptr, n int64) error
	deregister(addr uintptr) error
	// allocPinned returns n bytes of host memory the device copies from
	// at full speed (page locked); freePinned releases it.
	allocPinned(n int) ([]byte, error)
	freePinned(p []byte) error
	memset(b *Buffer, off, n int64) error
	// openDirect opens a local file for direct reads.
	openDirect(path string) (directFile, error)
	// readDirect reads n bytes at fileOff of f into b at off and returns
	// the path they took; the caller keeps fileOff, n and b.addr+off 4 KiB
	// aligned.
	readDirect(f directFile, b *Buffer, off, fileOff, n int64) (Path, error)
	// copyIn starts copying src to b at off on stream s (mod streams) and
	// returns a channel that yields the copy's result once the device has
	// finished reading src: only then may src be reused.
	copyIn(b *Buffer, off int64, src []byte, s int) <-chan error
	// copyInSync copies src to b at off and waits.
	copyInSync(b *Buffer, off int64, src []byte) error
	// copyOut copies len(dst) bytes at off of b to dst and waits.
	copyOut(dst []byte, b *Buffer, off int64) error
	cufileStatus() CuFileStatus
	close() error
}

// directFile is an open local file for direct reads.
type directFile interface {
	// ReadAt reads from the file into host memory (for the checks and the
	// bounce path).
	ReadAt(p []byte, off int64) (int, error)
	Size() int64
	Close() error
}

// allocPinned returns a staging buffer of n bytes, freed by freePinned
// or by Close.
func (d *Device) allocPinned(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("gds: pinned buffer of %d bytes: %w", n, errs.ErrInvalid)
	}
	if err := d.live(); err != nil {
		return nil, err
	}
	p, err := d.eng.allocPinned(n)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.mu.pinned[&p[0]] = len(p)
	d.mu.Unlock()
	return p, nil
}

// freePinned frees a staging buffer; one the device no longer tracks
// (freed by Close) is left alone.
func (d *Device) freePinned(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	d.mu.Lock()
	_, ok := d.mu.pinned[&p[0]]
	delete(d.mu.pinned, &p[0])
	d.mu.Unlock()
	if !ok {
		return nil
	}
	return d.eng.freePinned(p)
}
