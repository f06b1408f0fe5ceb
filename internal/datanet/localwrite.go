package datanet

// Short-circuit writes (docs/data-path.md, "Short-circuit reads"): on a
// local connection a client writes a large chunk into a file the server
// creates and passes (OpCreate), then sends the checksum table it computed
// of the bytes (OpCommit), and the server stores the file as the chunk. The
// bytes cross no socket and are read by no one after the client's copy.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/errs"
)

// MinLocalFileWrite is the smallest chunk a client writes by file on a
// local connection; smaller ones go over the socket (OpWrite), where the
// server's chunk log takes the small ones.
const MinLocalFileWrite = 256 << 10

// Creator is implemented by a Handler that takes chunk writes by file on
// local connections (OpCreate, OpCommit).
type Creator interface {
	// CreateChunk checks req.Cap for writing chunk (req.Extent,
	// req.Index) of req.Length bytes, reserves the space and returns a new
	// temporary file for the client to write them to (open with O_DIRECT
	// when req.Flags has FlagDirect and the file system allows it), with
	// the checksum block size the server wants. A store that cannot take
	// a chunk by file returns an error wrapping errs.ErrNotSupported.
	CreateChunk(ctx context.Context, req Request) (PendingChunk, error)
}

// PendingChunk is a chunk being written by file.
type PendingChunk interface {
	// File is the file to pass to the client.
	File() *os.File
	// BlockSize is the checksum block size of the table the client sends.
	BlockSize() uint32
	// Commit stores the file's bytes, whose encoded checksum table is
	// table, as the chunk, durably. It cleans up after itself on error.
	Commit(ctx context.Context, table []byte) error
	// Abort removes the file and releases its space (after a failed or
	// abandoned write; not after Commit).
	Abort()
}

// serveCreate serves an OpCreate request on c and then the OpCommit that
// must follow it on the connection.
func (s *Server) serveCreate(c net.Conn, req Request, hdr *[RequestSize]byte, capBuf []byte) bool {
	cr, ok := s.opts.Handler.(Creator)
	uc, isUnix := c.(*net.UnixConn)
	if !s.opts.Local || !ok || !isUnix {
		return s.replyError(c, req.Op, fmt.Errorf("datanet: create on a connection that is not local: %w", errs.ErrNotSupported), false)
	}
	p, err := cr.CreateChunk(s.ctx, req)
	c.SetWriteDeadline(time.Now().Add(s.opts.IOTimeout))
	if err != nil {
		return s.replyError(c, req.Op, err, false)
	}
	committed := false
	defer func() {
		if !committed {
			p.Abort()
		}
	}()
	var bs [4]byte
	binary.LittleEndian.PutUint32(bs[:], p.BlockSize())
	if !s.sendFiles(uc, Reply{Op: OpCreate, Length: uint64(len(bs))}, bs[:], p.File()) {
		return false
	}
	// The client writes the file, then commits: one I/O timeout for both.
	c.SetDeadline(time.Now().Add(s.opts.IOTimeout))
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		s.log.Debug("data path: no commit after a create", "extent", req.Extent, "index", req.Index, "err", err)
		return false
	}
	creq, capLen, err := DecodeRequest(hdr)
	if err == nil && (creq.Op != OpCommit || creq.Extent != req.Extent || creq.Index != req.Index) {
		err = fmt.Errorf("datanet: %v of chunk %d.%d after the create of %d.%d: %w", creq.Op, creq.Extent, creq.Index, req.Extent, req.Index, errs.ErrInvalid)
	}
	if err != nil {
		s.replyError(c, Op(hdr[5]), err, true)
		return false
	}
	if _, err := io.ReadFull(c, capBuf[:capLen]); err != nil { // a commit needs none: the create's was checked
		return false
	}
	table := make([]byte, creq.Length)
	if _, err := io.ReadFull(c, table); err != nil {
		return false
	}
	committed = true
	err = p.Commit(s.ctx, table)
	c.SetWriteDeadline(time.Now().Add(s.opts.IOTimeout))
	if err != nil {
		return s.replyError(c, OpCommit, err, false)
	}
	return s.reply(c, Reply{Op: OpCommit}, nil)
}

// errFileWrite: the client could not write a chunk by file (a refused
// O_DIRECT write, say); it writes it over the socket instead.
var errFileWrite = errors.New("chunk write by file failed")

// transferCreate is transfer for OpCreate: it takes the file, writes data
// to it, computes the checksum table and commits.
func (c *Client) transferCreate(conn net.Conn, req Request, data [][]byte) (keep bool, err error) {
	b, fds, keep, err := requestFiles(conn, req)
	defer func() { closeFDs(fds) }() // those not taken
	if err != nil {
		return keep, err
	}
	if len(fds) != 1 || len(b) != 4 {
		return false, fmt.Errorf("datanet: create reply with %d descriptors and %d bytes: %w", len(fds), len(b), errs.ErrInvalid)
	}
	bs := binary.LittleEndian.Uint32(b)
	if err := checksum.CheckBlockSize(int(bs)); err != nil {
		return false, fmt.Errorf("datanet: create reply: %w", err)
	}
	// Write the bytes, then checksum them from the same buffers.
	if err := pwriteAll(fds[0], data); err != nil {
		// The server removes the file when the connection closes.
		return false, fmt.Errorf("datanet: chunk %d.%d: %w (%v)", req.Extent, req.Index, errFileWrite, err)
	}
	table := tableOf(data, bs).Encode()
	var h [RequestSize]byte
	Request{Op: OpCommit, Extent: req.Extent, Index: req.Index, Length: uint64(len(table))}.Encode(&h)
	if _, err := (&net.Buffers{h[:], table}).WriteTo(conn); err != nil {
		return false, &ioError{err}
	}
	var rh [ReplySize]byte
	if _, err := io.ReadFull(conn, rh[:]); err != nil {
		return false, &ioError{err}
	}
	r, err := DecodeReply(&rh)
	if err != nil {
		return false, err
	}
	if r.Op != OpCommit || (!r.Failed && r.Length != 0) {
		return false, fmt.Errorf("datanet: reply to %v of %d bytes for commit: %w", r.Op, r.Length, errs.ErrInvalid)
	}
	if r.Failed {
		return readErrorReply(conn, r)
	}
	return !r.Close, nil
}

// pwriteAll writes the concatenation of data to fd from offset 0.
func pwriteAll(fd int, data [][]byte) error {
	var off int64
	for _, b := range data {
		for len(b) > 0 {
			n, err := unix.Pwrite(fd, b, off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if n == 0 {
				return io.ErrShortWrite
			}
			b, off = b[n:], off+int64(n)
		}
	}
	return nil
}

// tableOf is the checksum table, of blocks of bs bytes, of the
// concatenation of data.
func tableOf(data [][]byte, bs uint32) checksum.Table {
	var total uint64
	for _, b := range data {
		total += uint64(len(b))
	}
	t := checksum.Table{BlockSize: bs, Length: total, Sums: make([]uint32, 0, checksum.NumBlocks(total, bs))}
	var crc uint32
	fill := uint32(0) // bytes of the current block so far
	for _, b := range data {
		for len(b) > 0 {
			k := min(uint32(len(b)), bs-fill)
			crc = crc32.Update(crc, castagnoli, b[:k])
			fill += k
			b = b[k:]
			if fill == bs {
				t.Sums = append(t.Sums, crc)
				crc, fill = 0, 0
			}
		}
	}
	if fill > 0 {
		t.Sums = append(t.Sums, crc)
	}
	return t
}

// directWritable reports whether data can be written with O_DIRECT: every
// buffer aligned and of an aligned length.
func directWritable(data [][]byte) bool {
	for _, b := range data {
		if len(b)%Align != 0 || (len(b) > 0 && !IsAligned(b)) {
			return false
		}
	}
	return true
}

// writeByFile writes the chunk of req (OpWrite) through addr's local
// endpoint by file. errNoLocal: no local endpoint; errFileWrite or
// errs.ErrNotSupported: write it over the socket.
func (c *Client) writeByFile(ctx context.Context, addr string, req Request, data [][]byte) error {
	creq := Request{Op: OpCreate, Extent: req.Extent, Index: req.Index, Length: req.Length, Cap: req.Cap}
	if directWritable(data) {
		creq.Flags = FlagDirect
	}
	return c.do(ctx, addr, creq, data, nil, true, nil)
}
