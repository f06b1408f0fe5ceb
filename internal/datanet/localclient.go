package datanet

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/checksum"
)

// errNoLocal: the server has no local endpoint this client can use; the
// request goes over TCP.
var errNoLocal = errors.New("no usable local endpoint")

// Bounds of the client's side of local endpoints.
const (
	// localRetry is how long a server found without a usable local
	// endpoint is reached over TCP before the client looks again.
	localRetry = 30 * time.Second
	// maxLocalFiles bounds the chunk files a client keeps open (two
	// descriptors each with an O_DIRECT twin), and localFileIdle how long
	// one is kept unused. Chunks are immutable, so an open file keeps
	// giving the chunk's bytes; the bounds keep the descriptors few (a
	// sequential reader needs a file for the rows it reads ahead) and let
	// deleted chunks' space go.
	maxLocalFiles = 256
	localFileIdle = 30 * time.Second
)

// localKeyPrefix marks the pool key of a server's local endpoint: no TCP
// address starts with a NUL.
const localKeyPrefix = "\x00local:"

func localKey(addr string) string { return localKeyPrefix + addr }

func isLocalKey(key string) (addr string, ok bool) {
	return strings.CutPrefix(key, localKeyPrefix)
}

// openedChunk is the result of an OpOpen: the chunk's data file, the same
// open with O_DIRECT (or nil), and its checksum table.
type openedChunk struct {
	f, direct *os.File
	tab       checksum.Table
}

// close closes the files of an OpOpen.
func (o *openedChunk) close() {
	if o == nil {
		return
	}
	if o.f != nil {
		o.f.Close()
		o.f = nil
	}
	if o.direct != nil {
		o.direct.Close()
		o.direct = nil
	}
}

// minDirectRead is the smallest read of a local chunk that goes to its
// O_DIRECT file (when aligned): bulk reads skip the page cache, which the
// OST's O_DIRECT writes never filled, and its copy; smaller ones go
// through it, and stay there for the next reader.
const minDirectRead = 128 << 10

// ReadAt reads with O_DIRECT when the read is large and aligned (offset,
// length and buffer) and the file has an O_DIRECT twin, through the page
// cache otherwise.
func (o *openedChunk) ReadAt(p []byte, off int64) (int, error) {
	if o.direct != nil && len(p) >= minDirectRead && off%Align == 0 && len(p)%Align == 0 && IsAligned(p) {
		n, err := o.direct.ReadAt(p, off)
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		// The disk wants a larger alignment: the page cache will do.
	}
	return o.f.ReadAt(p, off)
}

type chunkKey struct {
	addr   string
	extent uint64
	index  uint32
}

// localFile is an open chunk file in the client's cache.
type localFile struct {
	openedChunk
	key  chunkKey
	elem *list.Element
	last time.Time
}

// localState is what a client knows of local endpoints: the servers that
// have none (until when), the chunk files it holds open (most recently
// used first), and a watch connection to each server whose files it
// holds.
//
// A cached file is read only while its server's watch connection is
// open: a server that stops or dies closes it, which the next read sees
// at once (a MSG_PEEK, no wait), so the files of a server that is down
// are not read, as its chunks could not be over TCP. The server closes
// an idle watch connection after its IdleTimeout too; the files are then
// opened again.
type localState struct {
	mu      sync.Mutex
	absent  map[string]time.Time
	files   map[chunkKey]*localFile
	lru     list.List                // of *localFile
	watches map[string]*net.UnixConn // by server address
	opens   singleflight.Group       // OpOpens in flight, by chunk
}

func (s *localState) init() {
	s.absent = map[string]time.Time{}
	s.files = map[chunkKey]*localFile{}
	s.watches = map[string]*net.UnixConn{}
}

// setAbsent records that addr has no usable local endpoint now.
func (s *localState) setAbsent(addr string) {
	s.mu.Lock()
	s.absent[addr] = time.Now().Add(localRetry)
	s.mu.Unlock()
}

// file returns the open file of chunk k, or nil; nil also when its
// server's watch connection has closed, whose files are then all closed.
func (s *localState) file(k chunkKey) *localFile {
	s.mu.Lock()
	lf := s.files[k]
	if lf == nil {
		s.mu.Unlock()
		return nil
	}
	w := s.watches[k.addr]
	if w != nil && peerOpen(w) {
		lf.last = time.Now()
		s.lru.MoveToFront(lf.elem)
		s.mu.Unlock()
		return lf
	}
	closing := s.dropServerLocked(k.addr)
	s.mu.Unlock()
	closeFiles(closing)
	return nil
}

// dropServerLocked forgets addr's watch connection and files, and returns
// the files for the caller to close once s.mu is released.
func (s *localState) dropServerLocked(addr string) []*localFile {
	if w := s.watches[addr]; w != nil {
		w.Close()
		delete(s.watches, addr)
	}
	var out []*localFile
	for k, lf := range s.files {
		if k.addr == addr {
			s.lru.Remove(lf.elem)
			delete(s.files, k)
			out = append(out, lf)
		}
	}
	return out
}

// closeFiles closes fs. A read in progress on one finishes first: os.File
// closes the descriptor when its last use ends.
func closeFiles(fs []*localFile) {
	for _, lf := range fs {
		lf.close()
	}
}

// add keeps o open as chunk k's file and returns the file to read: o's,
// or one another request added first (o is then closed). watch is a new
// connection to k.addr's local endpoint for s to keep when it has none
// (closed otherwise); without one, o is not kept but still returned, to
// be closed by the caller after its read (kept false). Files past the
// bounds are closed.
func (s *localState) add(k chunkKey, o openedChunk, watch *net.UnixConn) (lf *localFile, kept bool) {
	now := time.Now()
	s.mu.Lock()
	if s.watches[k.addr] == nil && watch != nil {
		s.watches[k.addr], watch = watch, nil
	}
	if s.watches[k.addr] == nil {
		s.mu.Unlock()
		return &localFile{openedChunk: o, key: k}, false
	}
	lf = s.files[k]
	if lf == nil {
		lf = &localFile{openedChunk: o, key: k, last: now}
		lf.elem = s.lru.PushFront(lf)
		s.files[k] = lf
		o.f, o.direct = nil, nil
	}
	var evict []*localFile
	for e := s.lru.Back(); e != nil && (s.lru.Len() > maxLocalFiles || now.Sub(e.Value.(*localFile).last) > localFileIdle); e = s.lru.Back() {
		old := e.Value.(*localFile)
		s.lru.Remove(e)
		delete(s.files, old.key)
		evict = append(evict, old)
	}
	s.mu.Unlock()
	if watch != nil {
		watch.Close()
	}
	o.close()
	closeFiles(evict)
	return lf, true
}

// hasWatch reports whether s holds a watch connection to addr.
func (s *localState) hasWatch(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches[addr] != nil
}

// drop closes lf after a failed read.
func (s *localState) drop(lf *localFile) {
	s.mu.Lock()
	if s.files[lf.key] == lf {
		s.lru.Remove(lf.elem)
		delete(s.files, lf.key)
	}
	s.mu.Unlock()
	lf.close()
}

// close closes every open chunk file and watch connection.
func (s *localState) close() {
	s.mu.Lock()
	files, watches := s.files, s.watches
	s.files, s.watches = map[chunkKey]*localFile{}, map[string]*net.UnixConn{}
	s.lru.Init()
	s.mu.Unlock()
	for _, w := range watches {
		w.Close()
	}
	for _, lf := range files {
		lf.close()
	}
}

// peerOpen reports whether the peer of c has not closed it, without
// waiting: a peek that finds no bytes and no end of stream. A server
// never sends on a watch connection, so bytes are a broken peer too.
func peerOpen(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	rc.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = errors.Is(err, unix.EAGAIN)
		return true
	})
	return open
}

// useLocal reports whether a request for addr tries its local endpoint.
// Local reports whether chunk reads from addr go through its local
// endpoint: short-circuit on, and addr not found without one.
func (c *Client) Local(addr string) bool { return c.useLocal(addr) }

func (c *Client) useLocal(addr string) bool {
	if !c.opts.ShortCircuit {
		return false
	}
	c.local.mu.Lock()
	until, ok := c.local.absent[addr]
	if ok && time.Now().After(until) {
		delete(c.local.absent, addr)
		ok = false
	}
	c.local.mu.Unlock()
	return !ok
}

// dialLocal connects to the local endpoint of the server advertised at
// addr and checks that the process serving it runs as root or as this
// process's user. Failures are errNoLocal, and addr is then reached over
// TCP for a while.
func (c *Client) dialLocal(ctx context.Context, addr string) (*clientConn, bool, error) {
	conn, err := c.dialer.DialContext(ctx, "unix", LocalName(addr))
	if err == nil {
		if err = checkLocalPeer(conn); err != nil {
			conn.Close()
		}
	}
	if err != nil {
		c.local.setAbsent(addr)
		return nil, false, fmt.Errorf("datanet: local endpoint of %s: %w (%w)", addr, errNoLocal, err)
	}
	return &clientConn{c: conn, raw: conn}, false, nil
}

// readLocal serves a read of addr's chunk through its local endpoint: from
// the chunk's file, opened by the server (OpOpen) and kept open, with
// every block verified against its checksum here. A chunk that is no
// file of its own (in the server's chunk log), a file that fails to read
// or verify, or a refused open is read with OpRead over the local
// connection, whose server verifies and reports the chunk as on TCP.
// errNoLocal: no local endpoint; dst holds garbage after any error.
func (c *Client) readLocal(ctx context.Context, addr string, req Request, dst [][]byte) error {
	lf, err := c.heldLocal(ctx, addr, req)
	if errors.Is(err, errNoLocal) {
		return err
	}
	if err != nil {
		return c.readOverLocal(ctx, addr, req, dst)
	}
	off := req.Offset
	for _, b := range dst {
		if err := lf.tab.ReadVerified(&lf.openedChunk, off, b, maxLocalRun, c.opts.Bufs.Get, c.opts.Bufs.Put); err != nil {
			c.local.drop(lf)
			return c.readOverLocal(ctx, addr, req, dst)
		}
		off += uint64(len(b))
	}
	c.stats.readBytes.Add(req.Length)
	c.stats.localRead.Add(req.Length)
	return nil
}

// heldLocal returns the chunk file of req (its Extent, Index and Cap),
// opening it through addr's local endpoint when the client does not hold
// it yet.
func (c *Client) heldLocal(ctx context.Context, addr string, req Request) (*localFile, error) {
	k := chunkKey{addr: addr, extent: req.Extent, index: req.Index}
	if lf := c.local.file(k); lf != nil {
		return lf, nil
	}
	// One open of a chunk at a time: the rows fetched ahead of a reader
	// ask for the same chunk files at once, and each open reads the
	// chunk's sidecar, a small read queued behind the large ones.
	v, err, _ := c.local.opens.Do(fmt.Sprintf("%s/%d/%d", addr, req.Extent, req.Index), func() (any, error) {
		// Another reader's open may have ended between this reader's
		// look and its turn here.
		if lf := c.local.file(k); lf != nil {
			return lf, nil
		}
		return c.openLocal(ctx, addr, k, req)
	})
	if err != nil {
		return nil, err
	}
	return v.(*localFile), nil
}

// OpenAhead opens chunk (extent, index) on the server at addr through its
// local endpoint, with capability tok, unless the client holds its file
// already, so that a read of it soon does not wait for the open: a cold
// open costs the server a few small reads of the disk (the chunk's
// directory, inode and checksum sidecar), each queued behind the large
// reads in flight, tens of milliseconds on a busy disk (docs/data-path.md,
// "Opening chunks ahead"). It does nothing without a usable local
// endpoint; a refused open is the read's to handle.
func (c *Client) OpenAhead(ctx context.Context, addr string, extent uint64, index uint32, tok []byte) {
	if !c.useLocal(addr) {
		return
	}
	_, _ = c.heldLocal(ctx, addr, Request{Op: OpRead, Extent: extent, Index: index, Cap: tok})
}

// errNotKept: a chunk file was opened but could not be kept (no watch
// connection to its server): it is closed, and the read goes through the
// server.
var errNotKept = errors.New("chunk file not kept")

// openLocal opens chunk k through addr's local endpoint (OpOpen) and keeps
// the file in the client's cache.
func (c *Client) openLocal(ctx context.Context, addr string, k chunkKey, req Request) (*localFile, error) {
	var out openedChunk
	if err := c.do(ctx, addr, Request{Op: OpOpen, Extent: req.Extent, Index: req.Index, Cap: req.Cap}, nil, nil, true, &out); err != nil {
		return nil, err
	}
	var watch *net.UnixConn
	if !c.local.hasWatch(addr) {
		if cc, _, err := c.dialLocal(ctx, addr); err == nil {
			watch = cc.c.(*net.UnixConn)
		}
	}
	lf, kept := c.local.add(k, out, watch)
	if !kept {
		lf.close()
		return nil, errNotKept
	}
	return lf, nil
}

// maxLocalRun bounds one pread of whole blocks of a local chunk file
// before they are verified (see checksum.Table.ReadVerified): a row's
// cell of 1 MiB is one read.
const maxLocalRun = 1 << 20

// readOverLocal is an OpRead over addr's local connection (transfer
// counts its bytes).
func (c *Client) readOverLocal(ctx context.Context, addr string, req Request, dst [][]byte) error {
	return c.do(ctx, addr, req, nil, dst, true, nil)
}
