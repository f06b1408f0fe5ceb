package datanet

// Local connections: short-circuit reads (docs/data-path.md, "Short-circuit
// reads"; docs/security.md, "Local connections").
//
// A data server may also listen on a local endpoint: the abstract unix
// socket LocalName(addr) of its advertised address addr. Abstract names
// belong to a network namespace, so only processes on the same host (the
// same namespace) can reach it. Both ends check the other's credentials
// (SO_PEERCRED): the peer must run as root or as this process's user, who
// can read the server's chunk files anyway. A local connection carries the
// same requests as TCP, in plaintext since the bytes never leave the host,
// plus OpOpen, which passes the chunk's open data file (SCM_RIGHTS) with
// its checksum table: the client then reads the bytes itself with pread
// and verifies them against the table, with no copy through a socket and
// no work in the server. Capabilities are checked as on TCP.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/errs"
)

// localPrefix starts the abstract socket name of a local endpoint.
const localPrefix = "@shoal-data:"

// LocalName is the abstract unix socket name ("@..." in Go's net package)
// of the local endpoint of the data server advertised at addr.
func LocalName(addr string) string { return localPrefix + addr }

// ListenLocal listens on the local endpoint of the data server advertised
// at addr, for Serve with ServerOptions.Local.
func ListenLocal(addr string) (net.Listener, error) {
	return net.Listen("unix", LocalName(addr))
}

// Opener is implemented by a Handler that serves OpOpen on local
// connections.
type Opener interface {
	// OpenChunk checks req.Cap for reading chunk (req.Extent, req.Index)
	// and returns its data file, open for reading through the page
	// cache, the same file open with O_DIRECT where the file system
	// allows it (else nil), and its encoded checksum table
	// (internal/checksum), which the client verifies the bytes against.
	// A chunk that is not a file of its own gets an error wrapping
	// errs.ErrNotSupported: the client reads it with OpRead.
	OpenChunk(ctx context.Context, req Request) (f, direct *os.File, table []byte, err error)
}

// peerUID returns the user id of the process at the other end of c.
func peerUID(c *net.UnixConn) (uint32, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return cred.Uid, nil
}

// checkLocalPeer allows the peer of a local connection when it runs as
// root or as this process's effective user.
func checkLocalPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("datanet: local connection over %T: %w", c, errs.ErrPermission)
	}
	uid, err := peerUID(uc)
	if err != nil {
		return fmt.Errorf("datanet: credentials of a local peer: %v: %w", err, errs.ErrPermission)
	}
	if me := os.Geteuid(); uid != 0 && uid != uint32(me) {
		return fmt.Errorf("datanet: local peer runs as uid %d, neither root nor uid %d: %w", uid, me, errs.ErrPermission)
	}
	return nil
}

// serveOpen serves an OpOpen request on c: the reply header and the table,
// with the data file's descriptor attached to their first byte.
func (s *Server) serveOpen(c net.Conn, req Request) bool {
	op, ok := s.opts.Handler.(Opener)
	uc, isUnix := c.(*net.UnixConn)
	if !s.opts.Local || !ok || !isUnix {
		return s.replyError(c, req.Op, fmt.Errorf("datanet: open on a connection that is not local: %w", errs.ErrNotSupported), false)
	}
	f, direct, table, err := op.OpenChunk(s.ctx, req)
	c.SetWriteDeadline(time.Now().Add(s.opts.IOTimeout))
	if err != nil {
		return s.replyError(c, req.Op, err, false)
	}
	defer f.Close()
	files := []*os.File{f}
	if direct != nil {
		defer direct.Close()
		files = append(files, direct)
	}
	if len(table) > MaxLength {
		return s.replyError(c, req.Op, fmt.Errorf("datanet: checksum table of %d bytes: %w", len(table), errs.ErrTooLarge), false)
	}
	return s.sendFiles(uc, Reply{Op: OpOpen, Length: uint64(len(table))}, table, files...)
}

// sendFiles sends reply r and its payload on c with files' descriptors
// attached to their first byte (SCM_RIGHTS). The files must stay open
// until it returns.
func (s *Server) sendFiles(c *net.UnixConn, r Reply, payload []byte, files ...*os.File) bool {
	var h [ReplySize]byte
	r.Encode(&h)
	msg := append(h[:], payload...)
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	n, _, werr := c.WriteMsgUnix(msg, unix.UnixRights(fds...), nil)
	if werr == nil && n < len(msg) {
		_, werr = c.Write(msg[n:])
	}
	if werr != nil {
		s.log.Debug("data path: reply with files", "err", werr)
		return false
	}
	return true
}

// maxPassedFiles bounds the descriptors a client takes from one reply; a
// reply with more is a protocol error (all of them are closed).
const maxPassedFiles = 4

// transferOpen is transfer for OpOpen: it reads the reply header with the
// descriptor passed beside it, then the table.
func (c *Client) transferOpen(conn net.Conn, req Request, out *openedChunk) (keep bool, err error) {
	b, fds, keep, err := requestFiles(conn, req)
	defer func() { closeFDs(fds) }() // those not taken
	if err != nil {
		return keep, err
	}
	if len(fds) != 1 && len(fds) != 2 {
		return false, fmt.Errorf("datanet: open reply with %d descriptors, want 1 or 2: %w", len(fds), errs.ErrInvalid)
	}
	tab, err := checksum.Decode(b)
	if err != nil {
		return keep, fmt.Errorf("datanet: open reply's checksum table: %w", err)
	}
	name := fmt.Sprintf("chunk %d.%d", req.Extent, req.Index)
	out.f = os.NewFile(uintptr(fds[0]), name)
	if len(fds) == 2 {
		out.direct = os.NewFile(uintptr(fds[1]), name+" (O_DIRECT)")
	}
	out.tab = tab
	fds = nil
	return keep, nil
}

// requestFiles sends req (its header and capability) on conn, a local
// connection, and reads the reply's payload and the descriptors passed
// with it (which the caller closes, also on error).
func requestFiles(conn net.Conn, req Request) (payload []byte, fds []int, keep bool, err error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil, nil, false, fmt.Errorf("datanet: %v over %T: %w", req.Op, conn, errs.ErrNotSupported)
	}
	var h [RequestSize + MaxCapLength]byte
	req.Encode((*[RequestSize]byte)(h[:RequestSize]))
	n := RequestSize + copy(h[RequestSize:], req.Cap)
	if _, err := conn.Write(h[:n]); err != nil {
		return nil, nil, false, &ioError{err}
	}
	_, payload, fds, keep, err = readReplyWithFiles(uc, req.Op)
	return payload, fds, keep, err
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// readReplyWithFiles reads the reply to a request of op on c, its payload
// and the descriptors passed with it (which the caller closes). A failed
// reply is returned with err its decoded error. keep reports whether the
// connection is still in step.
func readReplyWithFiles(c *net.UnixConn, op Op) (r Reply, payload []byte, fds []int, keep bool, err error) {
	var rh [ReplySize]byte
	oob := make([]byte, unix.CmsgSpace(4*maxPassedFiles))
	for got := 0; got < ReplySize; {
		n, oobn, flags, _, rerr := c.ReadMsgUnix(rh[got:], oob)
		if oobn > 0 {
			more, perr := parseRights(oob[:oobn])
			fds = append(fds, more...)
			if perr != nil {
				return r, nil, fds, false, perr
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			return r, nil, fds, false, fmt.Errorf("datanet: %v reply's control data truncated: %w", op, errs.ErrInvalid)
		}
		got += n
		if rerr != nil && got < ReplySize {
			if errors.Is(rerr, io.EOF) {
				rerr = io.ErrUnexpectedEOF
			}
			return r, nil, fds, false, &ioError{rerr}
		}
	}
	if r, err = DecodeReply(&rh); err != nil {
		return r, nil, fds, false, err
	}
	if r.Op != op {
		return r, nil, fds, false, fmt.Errorf("datanet: reply to %v for %v: %w", r.Op, op, errs.ErrInvalid)
	}
	payload = make([]byte, r.Length)
	if _, err := io.ReadFull(c, payload); err != nil {
		return r, nil, fds, false, &ioError{err}
	}
	if r.Failed {
		return r, nil, fds, !r.Close, DecodeError(payload)
	}
	return r, payload, fds, !r.Close, nil
}

// parseRights returns the descriptors of the SCM_RIGHTS messages in oob,
// at most maxPassedFiles of them (an error past that, with those returned
// so that the caller closes them).
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("datanet: open reply's control data: %v: %w", err, errs.ErrInvalid)
	}
	var fds []int
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		more, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, fmt.Errorf("datanet: open reply's descriptors: %v: %w", err, errs.ErrInvalid)
		}
		fds = append(fds, more...)
	}
	if len(fds) > maxPassedFiles {
		return fds, fmt.Errorf("datanet: open reply with %d descriptors: %w", len(fds), errs.ErrInvalid)
	}
	return fds, nil
}
