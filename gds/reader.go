package gds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/errs"
)

// Options configure a Reader.
type Options struct {
	// LocalOSTs maps the OSTs on this node to their directories (see
	// DiscoverLocalOSTs). Chunks on them are read from their files; the
	// others through the client.
	LocalOSTs map[uint32]string
	// Registry receives the metrics; nil registers none.
	Registry prometheus.Registerer
	// Logger receives warnings about local chunks that fail; nil discards.
	Logger *slog.Logger
	// StagingSlots is the number of pinned staging slots shared by all
	// reads: the pieces fetched or being copied at once. Default 8.
	StagingSlots int
	// SlotSize is the size of a staging slot. Default 4 MiB.
	SlotSize int
	// DirectWorkers is the number of local pieces read at once. Default 4.
	DirectWorkers int
	// TrustLocal skips the checksum check of direct reads. For measuring
	// what the check costs only: it gives up DESIGN.md's invariant 5.
	TrustLocal bool
}

func (o *Options) setDefaults() {
	if o.StagingSlots <= 0 {
		o.StagingSlots = 8
	}
	if o.SlotSize <= 0 {
		o.SlotSize = 4 << 20
	}
	o.SlotSize = (o.SlotSize + Align - 1) / Align * Align
	if o.DirectWorkers <= 0 {
		o.DirectWorkers = 4
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Reader reads Shoal files into device memory. It is safe for concurrent
// use; reads share its staging slots.
type Reader struct {
	cl   *client.Client
	dev  *Device
	opts Options
	log  *slog.Logger
	m    *metrics

	slots chan []byte // free staging slots
	all   [][]byte    // every slot, for Close
	// scratch holds pinned buffers for copying direct reads back to check
	// them (CUDA only), grown on demand.
	scratch chan []byte

	// onSlot, when set (tests), is called with the number of busy slots
	// each time one is taken.
	onSlot func(busy int)

	mu struct {
		sync.Mutex
		busy   int
		closed bool
	}
}

// NewReader returns a reader that places bytes in dev.
func NewReader(cl *client.Client, dev *Device, o Options) (*Reader, error) {
	if cl == nil || dev == nil {
		return nil, fmt.Errorf("gds: reader needs a client and a device: %w", errs.ErrInvalid)
	}
	o.setDefaults()
	r := &Reader{cl: cl, dev: dev, opts: o, log: o.Logger, m: newMetrics(o.Registry),
		slots: make(chan []byte, o.StagingSlots), scratch: make(chan []byte, o.DirectWorkers)}
	for i := 0; i < o.StagingSlots; i++ {
		s, err := dev.allocPinned(o.SlotSize)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("gds: staging slot: %w", err)
		}
		r.all = append(r.all, s)
		r.slots <- s
	}
	for i := 0; i < o.DirectWorkers; i++ {
		r.scratch <- nil
	}
	return r, nil
}

// Device is the reader's device.
func (r *Reader) Device() *Device { return r.dev }

// Close frees the staging slots. Reads must have returned.
func (r *Reader) Close() error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil
	}
	r.mu.closed = true
	r.mu.Unlock()
	var err error
	for _, s := range r.all {
		err = errors.Join(err, r.dev.freePinned(s))
	}
	r.all = nil
	for len(r.scratch) > 0 {
		if s := <-r.scratch; s != nil {
			err = errors.Join(err, r.dev.freePinned(s))
		}
	}
	return err
}

// File is a Shoal file open for reads into device memory. Its extent map
// is read at open; Refresh reads it again.
type File struct {
	r   *Reader
	cf  *client.File
	ino uint64

	mu   sync.Mutex
	size int64
	refs []client.ExtentRef
}

// Open opens the file at path.
func (r *Reader) Open(ctx context.Context, path string) (*File, error) {
	cf, err := r.cl.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	return r.newFile(ctx, cf)
}

// OpenIno opens inode ino.
func (r *Reader) OpenIno(ctx context.Context, ino uint64) (*File, error) {
	cf, err := r.cl.OpenIno(ctx, ino)
	if err != nil {
		return nil, err
	}
	return r.newFile(ctx, cf)
}

func (r *Reader) newFile(ctx context.Context, cf *client.File) (*File, error) {
	f := &File{r: r, cf: cf, ino: cf.Ino()}
	if err := f.Refresh(ctx); err != nil {
		cf.Close(ctx)
		return nil, err
	}
	return f, nil
}

// Refresh reads the file's size and extent map from the MDS again.
func (f *File) Refresh(ctx context.Context) error {
	size, refs, err := f.r.cl.ExtentMap(ctx, f.ino)
	if err != nil {
		return fmt.Errorf("gds: %w", err)
	}
	f.mu.Lock()
	f.size, f.refs = size, refs
	f.mu.Unlock()
	return nil
}

// Size is the file's size as of the last Refresh.
func (f *File) Size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// Ino is the file's inode number.
func (f *File) Ino() uint64 { return f.ino }

// Client returns the client's File, for reads into host memory.
func (f *File) Client() *client.File { return f.cf }

// Close releases the open file.
func (f *File) Close(ctx context.Context) error { return f.cf.Close(ctx) }

func (f *File) snapshot() (int64, []client.ExtentRef) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size, f.refs
}

// Report says what a read did.
type Report struct {
	// Bytes is the bytes placed in the destination, holes included.
	Bytes int64
	// Paths is the bytes each path carried, indexed by Path.
	Paths [NumPaths]int64
	// Local, Remote and Zero split Bytes by source: local chunk files,
	// the client (network; rebuilt from parity when chunks are lost), and
	// holes (zeroed on the device).
	Local, Remote, Zero int64
	// Fallback is the bytes of local pieces that failed (missing, short,
	// checksum mismatch) and were read through the client instead;
	// LocalFailures says why, one line each.
	Fallback      int64
	LocalFailures []string
	// Pieces is the number of pieces the read was cut into.
	Pieces int
	// Verify is the time spent checking direct reads' checksums.
	Verify time.Duration
	// Elapsed is the read's duration.
	Elapsed time.Duration
}

// Path returns the paths that carried bytes, the busiest first, as
// "direct" or "direct+bounce".
func (rep Report) Path() string {
	type pb struct {
		p Path
		n int64
	}
	var ps []pb
	for p := Path(0); p < NumPaths; p++ {
		if rep.Paths[p] > 0 {
			ps = append(ps, pb{p, rep.Paths[p]})
		}
	}
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].n > ps[j-1].n; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
	var names []string
	for _, x := range ps {
		names = append(names, x.p.String())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// Add adds o's counts to rep (for reads made of several ReadAt calls).
func (rep *Report) Add(o Report) {
	rep.Bytes += o.Bytes
	for i := range rep.Paths {
		rep.Paths[i] += o.Paths[i]
	}
	rep.Local += o.Local
	rep.Remote += o.Remote
	rep.Zero += o.Zero
	rep.Fallback += o.Fallback
	rep.LocalFailures = append(rep.LocalFailures, o.LocalFailures...)
	rep.Pieces += o.Pieces
	rep.Verify += o.Verify
	rep.Elapsed += o.Elapsed
}

// tally accumulates a Report from concurrent pieces.
type tally struct {
	mu  sync.Mutex
	rep Report
}

func (t *tally) add(p Path, local bool, n int64) {
	t.mu.Lock()
	t.rep.Paths[p] += n
	if local {
		t.rep.Local += n
	} else {
		t.rep.Remote += n
	}
	t.mu.Unlock()
}

func (t *tally) failed(sp span, err error) {
	t.mu.Lock()
	t.rep.Fallback += sp.n
	t.rep.LocalFailures = append(t.rep.LocalFailures, fmt.Sprintf("%s [%d,+%d): %v", sp.local, sp.chunkOff, sp.n, err))
	t.mu.Unlock()
}

// ReadAt reads file bytes [off, off+n) into dst at dstOff. Holes read as
// zeros. A range past the end of the file is cut there and the read
// returns io.EOF with the bytes it placed; dst past them is untouched.
// Every byte is checked against its chunk's CRC32C before ReadAt returns.
func (r *Reader) ReadAt(ctx context.Context, f *File, dst *Buffer, dstOff, off, n int64) (Report, error) {
	start := time.Now()
	rep, err := r.readAt(ctx, f, dst, dstOff, off, n)
	if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil &&
		(errors.Is(err, errs.ErrUnavailable) || errors.Is(err, errs.ErrNotFound) || errors.Is(err, errs.ErrStale)) {
		// The placement may have moved (DESIGN.md invariant 8): read the
		// extent map again and retry once.
		if rerr := f.Refresh(ctx); rerr == nil {
			rep, err = r.readAt(ctx, f, dst, dstOff, off, n)
		}
	}
	rep.Elapsed = time.Since(start)
	r.m.reads.Inc()
	r.m.seconds.Observe(rep.Elapsed.Seconds())
	if err != nil && !errors.Is(err, io.EOF) {
		r.m.readErrors.Inc()
	}
	return rep, err
}

func (r *Reader) readAt(ctx context.Context, f *File, dst *Buffer, dstOff, off, n int64) (Report, error) {
	if f == nil || f.r != r {
		return Report{}, fmt.Errorf("gds: file not opened by this reader: %w", errs.ErrInvalid)
	}
	if err := dst.check(dstOff, n); err != nil {
		return Report{}, err
	}
	if dst.dev != r.dev {
		return Report{}, fmt.Errorf("gds: buffer of another device: %w", errs.ErrInvalid)
	}
	if off < 0 {
		return Report{}, fmt.Errorf("gds: read at %d: %w", off, errs.ErrInvalid)
	}
	size, refs := f.snapshot()
	if n == 0 {
		return Report{}, nil
	}
	if off >= size {
		return Report{}, io.EOF
	}
	var eof error
	if n > size-off {
		n, eof = size-off, io.EOF
	}
	spans, holes, err := plan(refs, off, n, dst.addr, dstOff, r.local)
	if err != nil {
		return Report{}, err
	}
	t := &tally{}
	t.rep.Pieces = len(spans)
	for _, h := range holes {
		if err := dst.Zero(h.dstOff, h.n); err != nil {
			return Report{}, err
		}
		t.rep.Zero += h.n
		r.m.bytes.WithLabelValues(r.dev.info.DirectPath.String(), "zero").Add(float64(h.n))
	}
	var direct, bounce []span
	for _, sp := range spans {
		if sp.direct && r.dev.info.DirectPath != PathBounce {
			direct = append(direct, sp)
		} else {
			bounce = append(bounce, sp)
		}
	}
	files := newFileCache(r.dev)
	defer files.close()

	var fmu sync.Mutex
	var fallback []span
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return r.runDirect(gctx, direct, dst, files, t, func(sp span, err error) {
			r.localFailed(sp, err, t)
			fmu.Lock()
			fallback = append(fallback, sp)
			fmu.Unlock()
		})
	})
	g.Go(func() error { return r.stage(gctx, bounce, dst, files, t) })
	if err := g.Wait(); err != nil {
		return Report{}, err
	}
	if len(fallback) > 0 {
		for i := range fallback {
			fallback[i].local, fallback[i].direct = "", false
		}
		if err := r.stage(ctx, fallback, dst, files, t); err != nil {
			return Report{}, err
		}
	}
	t.rep.Bytes = n
	return t.rep, eof
}

func (r *Reader) local(id uint32) (string, bool) {
	d, ok := r.opts.LocalOSTs[id]
	return d, ok
}

func (r *Reader) localFailed(sp span, err error, t *tally) {
	reason := "io"
	switch {
	case errors.Is(err, errs.ErrCorrupt):
		reason = "corrupt"
	case errors.Is(err, errs.ErrNotFound):
		reason = "missing"
	}
	r.m.localFailed.WithLabelValues(reason).Inc()
	r.log.Warn("local chunk failed; reading it through the client", "extent", sp.ext.ID, "chunk", sp.chunk, "path", sp.local, "reason", reason, "err", err)
	t.failed(sp, err)
}

// runDirect reads the direct spans with DirectWorkers workers. A span that
// fails (file missing or short, checksum mismatch) is handed to fail and
// read again through the client afterwards; only context errors stop it.
func (r *Reader) runDirect(ctx context.Context, spans []span, dst *Buffer, files *fileCache, t *tally, fail func(span, error)) error {
	if len(spans) == 0 {
		return nil
	}
	work := make(chan span)
	var wg sync.WaitGroup
	for i := 0; i < min(r.opts.DirectWorkers, len(spans)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sp := range work {
				if err := r.readDirectSpan(ctx, sp, dst, files, t); err != nil && ctx.Err() == nil {
					fail(sp, err)
				}
			}
		}()
	}
	var err error
loop:
	for _, sp := range spans {
		select {
		case work <- sp:
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		}
	}
	close(work)
	wg.Wait()
	return err
}

// readDirectSpan reads one local span straight into dst and checks it.
func (r *Reader) readDirectSpan(ctx context.Context, sp span, dst *Buffer, files *fileCache, t *tally) error {
	lf, err := files.get(sp)
	if err != nil {
		return err
	}
	p, err := r.dev.eng.readDirect(lf.f, dst, sp.dstOff, sp.chunkOff, sp.n)
	if err != nil {
		return err
	}
	if !r.opts.TrustLocal {
		vstart := time.Now()
		var data []byte
		if dst.host != nil {
			data = dst.host[sp.dstOff : sp.dstOff+sp.n]
		} else {
			s, err := r.takeScratch(int(sp.n))
			if err != nil {
				return err
			}
			defer func() { r.scratch <- s }()
			data = s[:sp.n]
			if err := r.dev.eng.copyOut(data, dst, sp.dstOff); err != nil {
				return err
			}
		}
		err := verifyRange(lf.table, sp.chunkOff, data, lf.f)
		d := time.Since(vstart)
		r.m.verifySecs.Add(d.Seconds())
		t.mu.Lock()
		t.rep.Verify += d
		t.mu.Unlock()
		if err != nil {
			return err
		}
	}
	t.add(p, true, sp.n)
	r.m.bytes.WithLabelValues(p.String(), "local").Add(float64(sp.n))
	return nil
}

// takeScratch returns a pinned buffer of at least n bytes (put it back in
// r.scratch).
func (r *Reader) takeScratch(n int) ([]byte, error) {
	s := <-r.scratch
	if len(s) >= n {
		return s, nil
	}
	if s != nil {
		r.dev.freePinned(s)
	}
	s, err := r.dev.allocPinned(max(n, r.opts.SlotSize))
	if err != nil {
		r.scratch <- nil
		return nil, err
	}
	return s, nil
}

// stage runs spans through the staging slots: each piece (at most a slot)
// is fetched into a free slot, copied to dst asynchronously, and its slot
// is freed once the copy has completed. Taking a slot waits while all are
// busy, which bounds the bytes in flight.
func (r *Reader) stage(ctx context.Context, spans []span, dst *Buffer, files *fileCache, t *tally) error {
	if len(spans) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	fail := func(err error) {
		once.Do(func() { firstErr = err; cancel() })
	}
	stream := 0
	slotSize := int64(r.opts.SlotSize)
outer:
	for _, sp := range spans {
		for from := int64(0); from < sp.n; from += slotSize {
			part := sp
			part.extOff += from
			part.dstOff += from
			part.chunkOff += from
			part.n = min(slotSize, sp.n-from)
			var slot []byte
			select {
			case slot = <-r.slots:
			case <-ctx.Done():
				break outer
			}
			r.takeSlot()
			s := stream
			stream++
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer r.giveSlot(slot)
				buf := slot[:part.n]
				local, err := r.fetch(ctx, part, buf, files, t)
				if err != nil {
					fail(err)
					return
				}
				if err := <-r.dev.eng.copyIn(dst, part.dstOff, buf, s); err != nil {
					fail(err)
					return
				}
				p := PathBounce
				if r.dev.info.Kind == KindHost {
					p = PathHost
				}
				t.add(p, local, part.n)
				src := "remote"
				if local {
					src = "local"
				}
				r.m.bytes.WithLabelValues(p.String(), src).Add(float64(part.n))
			}()
		}
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

func (r *Reader) takeSlot() {
	r.mu.Lock()
	r.mu.busy++
	busy := r.mu.busy
	r.mu.Unlock()
	r.m.slotsBusy.Inc()
	if r.onSlot != nil {
		r.onSlot(busy)
	}
}

func (r *Reader) giveSlot(s []byte) {
	r.mu.Lock()
	r.mu.busy--
	r.mu.Unlock()
	r.m.slotsBusy.Dec()
	r.slots <- s
}

// fetch fills buf with the bytes of part: from the local chunk file,
// checked against its sidecar, when part is local and the file is good;
// else through the client, which rebuilds lost chunks from parity. It
// reports whether the bytes came from the local file.
func (r *Reader) fetch(ctx context.Context, part span, buf []byte, files *fileCache, t *tally) (bool, error) {
	if part.local != "" {
		err := func() error {
			lf, err := files.get(part)
			if err != nil {
				return err
			}
			if err := readFull(lf.f, buf, part.chunkOff); err != nil {
				return err
			}
			return verifyRange(lf.table, part.chunkOff, buf, lf.f)
		}()
		if err == nil {
			return true, nil
		}
		r.localFailed(part, err, t)
	}
	if err := r.cl.ReadExtent(ctx, part.ext, part.extOff, buf); err != nil {
		return false, fmt.Errorf("gds: extent %d [%d,+%d): %w", part.ext.ID, part.extOff, len(buf), err)
	}
	return false, nil
}

// fileCache holds the local chunk files a read opened, each opened once.
type fileCache struct {
	dev *Device
	mu  sync.Mutex
	m   map[string]*localFile
}

type localFile struct {
	once  sync.Once
	f     directFile
	table checksum.Table
	err   error
}

func newFileCache(dev *Device) *fileCache {
	return &fileCache{dev: dev, m: map[string]*localFile{}}
}

// get opens the chunk file of sp and loads its checksums; the data file
// must be as long as the extent's chunks.
func (c *fileCache) get(sp span) (*localFile, error) {
	c.mu.Lock()
	lf, ok := c.m[sp.local]
	if !ok {
		lf = &localFile{}
		c.m[sp.local] = lf
	}
	c.mu.Unlock()
	lf.once.Do(func() {
		g, err := geometry(sp.ext)
		if err != nil {
			lf.err = err
			return
		}
		f, err := c.dev.eng.openDirect(sp.local)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				err = fmt.Errorf("%v: %w", err, errs.ErrNotFound)
			}
			lf.err = err
			return
		}
		if f.Size() != g.ChunkLen() {
			f.Close()
			lf.err = fmt.Errorf("gds: %s has %d bytes, the chunk %d: %w", sp.local, f.Size(), g.ChunkLen(), errs.ErrCorrupt)
			return
		}
		t, err := loadTable(sp.local, f.Size())
		if err != nil {
			f.Close()
			lf.err = err
			return
		}
		lf.f, lf.table = f, t
	})
	return lf, lf.err
}

func (c *fileCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, lf := range c.m {
		if lf.f != nil {
			lf.f.Close()
		}
	}
	c.m = nil
}
