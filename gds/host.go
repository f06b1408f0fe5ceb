package gds

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/errs"
)

// HostOptions configure the host backend.
type HostOptions struct {
	// Streams is the number of goroutines that play copy streams.
	// Default 4.
	Streams int
	// CopyDelay delays every asynchronous copy, so that tests can see
	// slots held by copies in flight.
	CopyDelay time.Duration
	// NoDirectIO opens local files without O_DIRECT.
	NoDirectIO bool
}

// OpenHost opens the host backend: memory from mmap standing in for
// device memory.
func OpenHost(o HostOptions) *Device {
	if o.Streams <= 0 {
		o.Streams = 4
	}
	e := &hostEngine{opts: o}
	for i := 0; i < o.Streams; i++ {
		q := make(chan hostCopy, 64)
		e.queues = append(e.queues, q)
		e.wg.Add(1)
		go e.stream(q)
	}
	return newDevice(e)
}

type hostEngine struct {
	opts   HostOptions
	queues []chan hostCopy
	wg     sync.WaitGroup
	once   sync.Once
}

type hostCopy struct {
	dst, src []byte
	done     chan error
}

func (e *hostEngine) info() Info {
	return Info{Kind: KindHost, Name: "host", DirectPath: PathHost, Streams: len(e.queues)}
}

// stream runs the copies of one queue in order.
func (e *hostEngine) stream(q chan hostCopy) {
	defer e.wg.Done()
	for c := range q {
		if e.opts.CopyDelay > 0 {
			time.Sleep(e.opts.CopyDelay)
		}
		copy(c.dst, c.src)
		c.done <- nil
	}
}

func mmapAnon(n int64) ([]byte, error) {
	if n > int64(^uint(0)>>1) {
		return nil, fmt.Errorf("gds: %d bytes: %w", n, errs.ErrTooLarge)
	}
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("gds: mmap %d bytes: %w", n, err)
	}
	return b, nil
}

func (e *hostEngine) alloc(n int64) (uintptr, []byte, error) {
	b, err := mmapAnon(n)
	if err != nil {
		return 0, nil, err
	}
	return uintptr(unsafe.Pointer(&b[0])), b, nil
}

func (e *hostEngine) free(_ uintptr, host []byte) error {
	if host == nil {
		return nil
	}
	return unix.Munmap(host)
}

func (e *hostEngine) register(uintptr, int64) error { return nil }
func (e *hostEngine) deregister(uintptr) error      { return nil }

func (e *hostEngine) allocPinned(n int) ([]byte, error) { return mmapAnon(int64(n)) }
func (e *hostEngine) freePinned(p []byte) error         { return unix.Munmap(p) }

func (e *hostEngine) memset(b *Buffer, off, n int64) error {
	clear(b.host[off : off+n])
	return nil
}

// hostFile is a local file open twice: with O_DIRECT for aligned reads
// (where the file system allows it) and buffered for the rest.
type hostFile struct {
	f, direct *os.File // direct may be nil
	size      int64
}

func (f *hostFile) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }
func (f *hostFile) Size() int64                             { return f.size }
func (f *hostFile) Close() error {
	err := f.f.Close()
	if f.direct != nil {
		err = errors.Join(err, f.direct.Close())
	}
	return err
}

func openHostFile(path string, tryDirect bool) (*hostFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	hf := &hostFile{f: f, size: st.Size()}
	if tryDirect {
		if fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0); err == nil {
			hf.direct = os.NewFile(uintptr(fd), path)
		}
	}
	return hf, nil
}

func (e *hostEngine) openDirect(path string) (directFile, error) {
	return openHostFile(path, !e.opts.NoDirectIO)
}

func (e *hostEngine) readDirect(df directFile, b *Buffer, off, fileOff, n int64) (Path, error) {
	f := df.(*hostFile)
	dst := b.host[off : off+n]
	src := f.f
	if f.direct != nil && (b.addr+uintptr(off))%Align == 0 && fileOff%Align == 0 && n%Align == 0 {
		src = f.direct
	}
	m, err := src.ReadAt(dst, fileOff)
	if m == len(dst) {
		return PathHost, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return PathHost, err
}

func (e *hostEngine) copyIn(b *Buffer, off int64, src []byte, s int) <-chan error {
	done := make(chan error, 1)
	e.queues[s%len(e.queues)] <- hostCopy{dst: b.host[off : off+int64(len(src))], src: src, done: done}
	return done
}

func (e *hostEngine) copyInSync(b *Buffer, off int64, src []byte) error {
	copy(b.host[off:], src)
	return nil
}

func (e *hostEngine) cufileStatus() CuFileStatus {
	return CuFileStatus{StatsErr: "no cuFile on the host backend"}
}

func (e *hostEngine) copyOut(dst []byte, b *Buffer, off int64) error {
	copy(dst, b.host[off:])
	return nil
}

func (e *hostEngine) close() error {
	e.once.Do(func() {
		for _, q := range e.queues {
			close(q)
		}
		e.wg.Wait()
	})
	return nil
}
