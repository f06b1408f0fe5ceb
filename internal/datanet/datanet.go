// Package datanet is Shoal's bulk data path: a framed binary protocol on
// TCP for chunk writes and reads, beside the gRPC API that carries
// everything else (DESIGN.md, "Wire"; the measurement that chose it is in
// docs/performance.md, "Data path: framed TCP and O_DIRECT").
//
// With ServerOptions.TLS and ClientOptions.TLS, every connection is mutual
// TLS 1.3 with the ALPN protocol wire.DataALPN (the cluster's certificates,
// as on gRPC; docs/security.md): a TLS server refuses a connection that
// does not complete the handshake, and asks ServerOptions.Authorize
// whether the peer's certificate may use the data path at all; a refused
// peer gets a permission error for its first request, and the connection
// is closed.
//
// A connection carries one request at a time. A request is a fixed
// RequestSize-byte header (Request), followed by the request's capability
// (the header's cap length in bytes, at most MaxCapLength: the token the
// MDS signed, which the handler checks; internal/capability), then for
// OpWrite by Length bytes of chunk data. The reply is a fixed ReplySize-byte header (Reply),
// followed by Length bytes: the chunk data of a successful OpRead, or, for
// a failed request, a google.rpc.Status protobuf made by internal/wire's
// ToStatus, which the client turns back into the same typed error with
// wire.FromStatus. All integers are little endian.
//
//	request:  0 magic "SHDQ" | 4 version u8 | 5 op u8 | 6 flags u16
//	          8 extent u64 | 16 index u32 | 20 cap length u32
//	          24 offset u64 (a write with FlagS2: wire length)
//	          32 length u64                                       = 40 bytes
//	          then cap length bytes of capability
//	reply:    0 magic "SHDR" | 4 version u8 | 5 op u8 | 6 status u8
//	          7 flags u8 (bit 0: the server closes the connection;
//	          bit 1: the payload is an s2 frame)
//	          8 length u64                                        = 16 bytes
//
// Wire compression (optional; docs/compression.md, "Wire compression"):
// a request's flags are FlagS2 on a write whose payload is an s2 frame
// (an s2 block of the chunk's Length bytes, then their CRC-32C; s2.go) of
// the wire length in bytes 24-32 (a write's offset, always 0 otherwise),
// and FlagAcceptS2 on a read whose client takes a reply of an s2 frame
// (reply flag bit 1, the reply's length the frame's). A sender compresses
// a payload only when the frame is under 97% of the bytes; otherwise the
// bytes go raw with the flag clear. The receiver decodes the frame into
// the destination buffer and checks the CRC-32C: a frame that does not
// decode to the length and CRC it claims fails with ErrCorruptPayload,
// never with wrong bytes. Checksums of the chunk (the OST's sidecar) stay
// over the uncompressed bytes.
//
// The capability length was a reserved field (0) before capabilities: a
// request of an older client is one without a capability, which an OST
// that checks capabilities refuses as missing. The flags were 0 before
// wire compression: a server older than it refuses a flagged request as
// INVALID, so both ends must know it before a client turns it on.
//
// A server validates every header field before it allocates anything:
// a bad magic closes the connection without a reply; an unknown version or
// op, unknown or misplaced flags (a compressed write whose wire length is
// not within (4, Length] included), a capability over MaxCapLength or a
// length over MaxLength get an error reply with the close flag, and the
// connection is closed (the server cannot know how many bytes follow).
// Errors of the request itself
// (a missing chunk, a checksum mismatch, no space) get an error reply and
// leave the connection usable. A client closes, and never reuses, a
// connection that saw an I/O or protocol error, a cancelled context, or a
// reply with the close flag.
//
// Local connections (local.go, localwrite.go): a server may also listen
// on an abstract unix socket named after its address, for clients on its
// host, checked by their credentials. They carry the same requests in
// plaintext, and three more: OpOpen passes a chunk's open data file (and
// its O_DIRECT twin) with its checksum table, which the client reads and
// verifies itself; OpCreate passes a new temp file for a chunk, which the
// client writes, and the OpCommit that follows on the connection carries
// the client's checksum table of it.
//
// The package imports no other Shoal package but internal/errs,
// internal/wire and internal/checksum: a server is given a Handler, and
// the client knows nothing of OSTs beyond their data addresses.
package datanet

import (
	"encoding/binary"
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
)

// Version is the protocol version this package speaks.
const Version = 1

// Sizes of the fixed headers.
const (
	RequestSize = 40
	ReplySize   = 16
)

// MaxLength is the largest payload of one request or reply: the largest
// chunk an OST stores (ost.MaxChunkSize).
const MaxLength = 64 << 20

// MaxErrorLength bounds the encoded status of an error reply.
const MaxErrorLength = 64 << 10

// MaxCapLength bounds the capability of a request (internal/capability's
// tokens are 38 bytes).
const MaxCapLength = 256

// The magics open every request and reply header.
const (
	requestMagic = "SHDQ"
	replyMagic   = "SHDR"
)

// Op is a request's operation.
type Op uint8

// Operations.
const (
	OpWrite Op = 1 // store Length bytes as chunk (Extent, Index); Offset must be 0
	OpRead  Op = 2 // return bytes [Offset, Offset+Length) of chunk (Extent, Index)
	// OpOpen, on a local connection only (local.go): return the checksum
	// table of chunk (Extent, Index) and pass its open data file with the
	// reply (SCM_RIGHTS). Offset and Length must be 0.
	OpOpen Op = 3
	// OpCreate, on a local connection only (localwrite.go): reserve
	// Length bytes for chunk (Extent, Index) and pass a new temporary
	// file to write them to (SCM_RIGHTS), with the server's checksum
	// block size (u32) as the reply's payload; the connection's next
	// request must be the OpCommit of the same chunk. Offset must be 0.
	OpCreate Op = 4
	// OpCommit follows an OpCreate: its payload (Length bytes) is the
	// encoded checksum table of the bytes the client wrote; the server
	// stores the file as the chunk, durably. Offset must be 0.
	OpCommit Op = 5
)

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "write"
	case OpRead:
		return "read"
	case OpOpen:
		return "open"
	case OpCreate:
		return "create"
	case OpCommit:
		return "commit"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Request flags: the header's u16 at bytes 6-8.
const (
	// FlagS2, on OpWrite: the payload is an s2 frame of WireLength bytes
	// (an s2 block of the Length bytes of the chunk, then their CRC-32C),
	// which the server decodes before its handler sees the chunk.
	FlagS2 uint16 = 1 << 0
	// FlagAcceptS2, on OpRead: the client takes a reply whose payload is
	// an s2 frame of the Length bytes (reply flag bit 1).
	FlagAcceptS2 uint16 = 1 << 1
	// FlagDirect, on OpCreate: the client writes aligned buffers of
	// aligned lengths, so the file may be opened with O_DIRECT.
	FlagDirect uint16 = 1 << 2

	requestFlags = FlagS2 | FlagAcceptS2 | FlagDirect
)

// Request is a request: its header and its capability.
type Request struct {
	Op     Op
	Flags  uint16 // FlagS2, FlagAcceptS2
	Extent uint64
	Index  uint32
	Offset uint64
	Length uint64 // of the chunk's bytes, compressed on the wire or not
	// WireLength is, with FlagS2 on a write, the length of the s2 frame
	// sent (at most Length); 0 otherwise. It travels in the offset field.
	WireLength uint64
	// Cap is the capability sent after the header (at most MaxCapLength
	// bytes; empty: none). On the server it is the connection's buffer,
	// valid only during the handler's call.
	Cap []byte
}

// Encode writes r's header into b: the capability's length, not its bytes,
// which follow the header on the wire.
func (r Request) Encode(b *[RequestSize]byte) {
	copy(b[0:4], requestMagic)
	b[4] = Version
	b[5] = byte(r.Op)
	binary.LittleEndian.PutUint16(b[6:8], r.Flags)
	binary.LittleEndian.PutUint64(b[8:16], r.Extent)
	binary.LittleEndian.PutUint32(b[16:20], r.Index)
	binary.LittleEndian.PutUint32(b[20:24], uint32(len(r.Cap)))
	binary.LittleEndian.PutUint64(b[24:32], r.Offset)
	if r.Op == OpWrite && r.Flags&FlagS2 != 0 {
		binary.LittleEndian.PutUint64(b[24:32], r.WireLength)
	}
	binary.LittleEndian.PutUint64(b[32:40], r.Length)
}

// Validate checks the fields of a request that the protocol itself
// constrains: a known op, a length of at most MaxLength, a capability of
// at most MaxCapLength, no offset on a write, no overflow of
// Offset+Length, known flags on their op, and a compressed write's wire
// length within (4, Length] (0 without FlagS2). The meaning of the chunk id, range and capability is the
// handler's to check.
func (r Request) Validate() error {
	if len(r.Cap) > MaxCapLength {
		return fmt.Errorf("datanet: capability of %d bytes, over %d: %w", len(r.Cap), MaxCapLength, errs.ErrInvalid)
	}
	if f := r.Flags &^ requestFlags; f != 0 {
		return fmt.Errorf("datanet: reserved header flags set (%#x): %w", f, errs.ErrInvalid)
	}
	switch r.Op {
	case OpWrite:
		if r.Flags&FlagDirect != 0 {
			return fmt.Errorf("datanet: write with FlagDirect: %w", errs.ErrInvalid)
		}
		if r.Offset != 0 {
			return fmt.Errorf("datanet: write at offset %d: writes store whole chunks: %w", r.Offset, errs.ErrInvalid)
		}
		if r.Flags&FlagAcceptS2 != 0 {
			return fmt.Errorf("datanet: write with the read flag FlagAcceptS2: %w", errs.ErrInvalid)
		}
		if r.Flags&FlagS2 != 0 {
			if r.WireLength <= crcSize || r.WireLength > r.Length {
				return fmt.Errorf("datanet: compressed write of %d bytes in %d: %w", r.Length, r.WireLength, errs.ErrInvalid)
			}
		} else if r.WireLength != 0 {
			return fmt.Errorf("datanet: wire length %d without FlagS2: %w", r.WireLength, errs.ErrInvalid)
		}
	case OpRead:
		if r.Flags&FlagDirect != 0 {
			return fmt.Errorf("datanet: read with FlagDirect: %w", errs.ErrInvalid)
		}
		if r.Offset > ^uint64(0)-r.Length {
			return fmt.Errorf("datanet: read of %d bytes at %d overflows: %w", r.Length, r.Offset, errs.ErrInvalid)
		}
		if r.Flags&FlagS2 != 0 || r.WireLength != 0 {
			return fmt.Errorf("datanet: read with a compressed payload: %w", errs.ErrInvalid)
		}
	case OpOpen:
		if r.Offset != 0 || r.Length != 0 || r.Flags != 0 || r.WireLength != 0 {
			return fmt.Errorf("datanet: open with an offset, length or flags: %w", errs.ErrInvalid)
		}
	case OpCreate, OpCommit:
		if r.Offset != 0 || r.WireLength != 0 || r.Flags&^FlagDirect != 0 || (r.Op == OpCommit && r.Flags != 0) || r.Length == 0 {
			return fmt.Errorf("datanet: %v with an offset, no length or flags %#x: %w", r.Op, r.Flags, errs.ErrInvalid)
		}
	default:
		return fmt.Errorf("datanet: unknown %v: %w", r.Op, errs.ErrNotSupported)
	}
	if r.Length > MaxLength {
		return fmt.Errorf("datanet: %v of %d bytes, over %d: %w", r.Op, r.Length, MaxLength, errs.ErrTooLarge)
	}
	return nil
}

// hasRequestMagic reports whether b starts like a request of any version.
func hasRequestMagic(b *[RequestSize]byte) bool { return string(b[0:4]) == requestMagic }

// DecodeRequest decodes and validates a request header. It returns the
// request without its capability, and the length of the capability that
// follows the header (at most MaxCapLength). Its errors wrap the sentinel
// of internal/errs that the error reply carries: errs.ErrInvalid for a bad
// magic, unknown or misplaced flags, a bad wire length or a capability
// over MaxCapLength,
// errs.ErrNotSupported for another version or an unknown op,
// errs.ErrTooLarge for a length over MaxLength. It never allocates more
// than its error.
func DecodeRequest(b *[RequestSize]byte) (r Request, capLen int, err error) {
	if !hasRequestMagic(b) {
		return Request{}, 0, fmt.Errorf("datanet: bad request magic %q: %w", b[0:4], errs.ErrInvalid)
	}
	if b[4] != Version {
		return Request{}, 0, fmt.Errorf("datanet: protocol version %d, this server speaks %d: %w", b[4], Version, errs.ErrNotSupported)
	}
	f := binary.LittleEndian.Uint16(b[6:8])
	if f&^requestFlags != 0 {
		return Request{}, 0, fmt.Errorf("datanet: reserved header flags set (%#x): %w", f, errs.ErrInvalid)
	}
	if n := binary.LittleEndian.Uint32(b[20:24]); n > MaxCapLength {
		return Request{}, 0, fmt.Errorf("datanet: capability of %d bytes, over %d: %w", n, MaxCapLength, errs.ErrInvalid)
	}
	r = Request{
		Op:     Op(b[5]),
		Flags:  f,
		Extent: binary.LittleEndian.Uint64(b[8:16]),
		Index:  binary.LittleEndian.Uint32(b[16:20]),
		Offset: binary.LittleEndian.Uint64(b[24:32]),
		Length: binary.LittleEndian.Uint64(b[32:40]),
	}
	if r.Op == OpWrite && f&FlagS2 != 0 {
		r.WireLength, r.Offset = r.Offset, 0
	}
	if err := r.Validate(); err != nil {
		return Request{}, 0, err
	}
	return r, int(binary.LittleEndian.Uint32(b[20:24])), nil
}

// Reply status values.
const (
	statusOK    = 0
	statusError = 1
)

// Reply flags: replyClose tells the client that the server closes the
// connection after this reply; replyS2 that the payload of a read's reply
// is an s2 frame.
const (
	replyClose = 1
	replyS2    = 2
)

// Reply is a decoded reply header.
type Reply struct {
	Op         Op
	Failed     bool   // the payload is an encoded google.rpc.Status
	Close      bool   // the server closes the connection after this reply
	Compressed bool   // the payload of a successful read is an s2 frame
	Length     uint64 // payload bytes that follow (of the frame when Compressed)
}

// Encode writes r's header into b.
func (r Reply) Encode(b *[ReplySize]byte) {
	copy(b[0:4], replyMagic)
	b[4] = Version
	b[5] = byte(r.Op)
	b[6] = statusOK
	if r.Failed {
		b[6] = statusError
	}
	b[7] = 0
	if r.Close {
		b[7] |= replyClose
	}
	if r.Compressed {
		b[7] |= replyS2
	}
	binary.LittleEndian.PutUint64(b[8:16], r.Length)
}

// DecodeReply decodes and validates a reply header: its magic, version,
// status and flags (the compressed flag only on a successful read, with a
// length over 4), and a length within MaxLength (MaxErrorLength for an
// error reply). Errors wrap errs.ErrInvalid.
func DecodeReply(b *[ReplySize]byte) (Reply, error) {
	if string(b[0:4]) != replyMagic {
		return Reply{}, fmt.Errorf("datanet: bad reply magic %q: %w", b[0:4], errs.ErrInvalid)
	}
	if b[4] != Version {
		return Reply{}, fmt.Errorf("datanet: reply version %d, want %d: %w", b[4], Version, errs.ErrInvalid)
	}
	if b[6] > statusError || b[7]&^(replyClose|replyS2) != 0 {
		return Reply{}, fmt.Errorf("datanet: reply status %d, flags %#x: %w", b[6], b[7], errs.ErrInvalid)
	}
	r := Reply{Op: Op(b[5]), Failed: b[6] == statusError, Close: b[7]&replyClose != 0, Compressed: b[7]&replyS2 != 0,
		Length: binary.LittleEndian.Uint64(b[8:16])}
	if r.Compressed && (r.Failed || r.Op != OpRead || r.Length <= crcSize) {
		return Reply{}, fmt.Errorf("datanet: compressed %v reply of %d bytes (failed: %v): %w", r.Op, r.Length, r.Failed, errs.ErrInvalid)
	}
	limit := uint64(MaxLength)
	if r.Failed {
		limit = MaxErrorLength
	}
	if r.Length > limit {
		return Reply{}, fmt.Errorf("datanet: reply of %d bytes, over %d: %w", r.Length, limit, errs.ErrInvalid)
	}
	return r, nil
}
