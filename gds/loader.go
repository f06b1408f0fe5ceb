package gds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/shoalfs/shoal/internal/errs"
)

// LoaderOptions configure a Loader.
type LoaderOptions struct {
	// Depth is the number of device buffers in the ring: the shard being
	// used plus Depth-1 prefetched. Default 3.
	Depth int
	// BufSize is the size of each buffer; a file larger than it fails.
	// Default: the largest file of the list.
	BufSize int64
}

// Loader reads a list of files (dataset shards) into a ring of device
// buffers, in order, prefetching the next ones while the caller uses the
// current one. Next hands out shards in list order; a shard's buffer is
// reused once the caller Releases it, so at most Depth shards are in
// device memory at once.
type Loader struct {
	r     *Reader
	paths []string
	ring  []*Buffer
	free  chan *Buffer
	ready chan *LoadedShard

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// LoadedShard is one file of the list in device memory.
type LoadedShard struct {
	Index  int
	Path   string
	Buf    *Buffer // the file's bytes are Buf[0:Len)
	Len    int64
	Report Report
	Err    error

	l    *Loader
	once sync.Once
}

// Release gives the shard's buffer back to the ring.
func (s *LoadedShard) Release() {
	s.once.Do(func() {
		if s.Buf != nil {
			s.l.free <- s.Buf
		}
	})
}

// NewLoader starts prefetching paths into a ring of buffers of r's device.
func NewLoader(ctx context.Context, r *Reader, paths []string, o LoaderOptions) (*Loader, error) {
	if o.Depth <= 0 {
		o.Depth = 3
	}
	if o.BufSize <= 0 {
		for _, p := range paths {
			a, err := r.cl.Stat(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("gds: loader: %w", err)
			}
			o.BufSize = max(o.BufSize, int64(a.Size))
		}
		o.BufSize = max(o.BufSize, 1)
	}
	l := &Loader{r: r, paths: paths, free: make(chan *Buffer, o.Depth), ready: make(chan *LoadedShard, o.Depth), done: make(chan struct{})}
	for i := 0; i < o.Depth; i++ {
		b, err := r.dev.Alloc(o.BufSize, true)
		if err != nil {
			l.freeRing()
			return nil, fmt.Errorf("gds: loader ring: %w", err)
		}
		l.ring = append(l.ring, b)
		l.free <- b
	}
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go l.run(ctx)
	return l, nil
}

func (l *Loader) run(ctx context.Context) {
	defer close(l.done)
	defer close(l.ready)
	for i, p := range l.paths {
		var b *Buffer
		select {
		case b = <-l.free:
		case <-ctx.Done():
			return
		}
		s := &LoadedShard{Index: i, Path: p, Buf: b, l: l}
		s.Len, s.Report, s.Err = l.load(ctx, p, b)
		select {
		case l.ready <- s:
		case <-ctx.Done():
			return
		}
	}
}

func (l *Loader) load(ctx context.Context, p string, b *Buffer) (int64, Report, error) {
	f, err := l.r.Open(ctx, p)
	if err != nil {
		return 0, Report{}, err
	}
	defer f.Close(ctx)
	n := f.Size()
	if n > b.Len() {
		return 0, Report{}, fmt.Errorf("gds: loader: %s has %d bytes, buffers have %d: %w", p, n, b.Len(), errs.ErrTooLarge)
	}
	if n == 0 {
		return 0, Report{}, nil
	}
	rep, err := l.r.ReadAt(ctx, f, b, 0, 0, n)
	if errors.Is(err, io.EOF) { // the file shrank since it was opened
		err = nil
		n = rep.Bytes
	}
	return n, rep, err
}

// Next returns the next shard in list order, waiting for it to be loaded,
// or io.EOF after the last. A shard that failed to load carries its error
// in Err (and still must be Released).
func (l *Loader) Next(ctx context.Context) (*LoadedShard, error) {
	select {
	case s, ok := <-l.ready:
		if !ok {
			return nil, io.EOF
		}
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops prefetching and frees the ring. Shards handed out must not
// be used after it.
func (l *Loader) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		for range l.ready { // unblock the prefetcher
		}
		<-l.done
		err = l.freeRing()
	})
	return err
}

func (l *Loader) freeRing() error {
	var err error
	for _, b := range l.ring {
		err = errors.Join(err, b.Free())
	}
	l.ring = nil
	return err
}
