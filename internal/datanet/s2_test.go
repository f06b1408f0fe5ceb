package datanet

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

// textBytes is n bytes of text-like data (words from a small vocabulary,
// as logs and source are): s2 takes it to about a third.
func textBytes(n int, seed uint64) []byte {
	words := strings.Fields("the quick brown fox jumps over a lazy dog while shoal stores chunks of extents on object storage targets " +
		"error warning info debug request reply capability metadata server client 0 1 2 3 4 5 6 7 8 9 { } ( ) = ; , .")
	r := randBytes(n/2+16, seed)
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[int(r[i%len(r)])%len(words)])
		if r[(i+7)%len(r)]%13 == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.Bytes()[:n]
}

func compressingClient(t testing.TB) *Client {
	c := NewClient(ClientOptions{Compress: func(string) bool { return true }})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestS2RoundTrip: with wire compression on, compressible chunks cross
// compressed both ways and random ones raw, and either comes back byte
// for byte; the handler sees the uncompressed bytes.
func TestS2RoundTrip(t *testing.T) {
	h := newMemHandler()
	s := serve(t, h)
	addr := s.Addr().String()
	ctx := t.Context()
	for i, tc := range []struct {
		name     string
		data     []byte
		compress bool // expected to cross compressed
	}{
		{"text 4 KiB", textBytes(4096, 1), true},
		{"text 1 MiB", textBytes(1<<20, 2), true},
		{"text 3 MiB + 4 KiB", textBytes(3<<20+4096, 3), true},
		{"zeros 4 MiB", make([]byte, 4<<20), true},
		{"random 4 KiB", randBytes(4096, 4), false},
		{"random 1 MiB", randBytes(1<<20, 5), false},
		{"text below MinCompress", textBytes(1000, 6), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := compressingClient(t)
			data, n := tc.data, len(tc.data)
			ext := uint64(i + 1)
			// In pieces, as the client's encoder sends them.
			parts := [][]byte{data[:n/3], nil, data[n/3 : n/2], data[n/2:]}
			if err := c.Write(ctx, addr, ext, 1, nil, parts); err != nil {
				t.Fatalf("write: %v", err)
			}
			h.mu.Lock()
			stored := h.chunks[[2]uint64{ext, 1}]
			h.mu.Unlock()
			if !bytes.Equal(stored, data) {
				t.Fatalf("the handler got other bytes than were written")
			}
			// One destination slice (decoded in place), then several.
			got := make([]byte, n)
			if err := c.Read(ctx, addr, ext, 1, nil, 0, [][]byte{got}); err != nil {
				t.Fatalf("read: %v", err)
			}
			mustSame(t, "read", got, data)
			clear(got)
			if err := c.Read(ctx, addr, ext, 1, nil, 0, [][]byte{got[:n/5], got[n/5 : n/2], got[n/2:]}); err != nil {
				t.Fatalf("read into pieces: %v", err)
			}
			mustSame(t, "read into pieces", got, data)
			part := make([]byte, n/4)
			if err := c.Read(ctx, addr, ext, 1, nil, uint64(n/2), [][]byte{part}); err != nil {
				t.Fatalf("range read: %v", err)
			}
			mustSame(t, "range read", part, data[n/2:n/2+n/4])

			st := c.Stats()
			if st.WriteBytes != uint64(n) || st.ReadBytes != uint64(2*n+n/4) {
				t.Errorf("stats %+v: payload bytes wrong", st)
			}
			if tc.compress {
				if !worthIt(int(st.WriteWireBytes), n) || !worthIt(int(st.ReadWireBytes), int(st.ReadBytes)) {
					t.Errorf("stats %+v: %d compressible bytes crossed uncompressed", st, n)
				}
			} else if st.WriteWireBytes != st.WriteBytes || st.ReadWireBytes != st.ReadBytes {
				t.Errorf("stats %+v: incompressible bytes crossed compressed", st)
			}
			if c.idleConns(addr) != 1 {
				t.Errorf("%d idle connections, want 1", c.idleConns(addr))
			}
		})
	}
	// Without Compress nothing is compressed.
	c := newClient(t)
	data := textBytes(1<<20, 9)
	if err := c.Write(ctx, addr, 99, 0, nil, [][]byte{data}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := c.Read(ctx, addr, 99, 0, nil, 0, [][]byte{got}); err != nil {
		t.Fatal(err)
	}
	mustSame(t, "uncompressed client", got, data)
	if st := c.Stats(); st.WriteWireBytes != st.WriteBytes || st.ReadWireBytes != st.ReadBytes {
		t.Errorf("stats %+v without Compress", st)
	}
}

func mustSame(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from %d wanted, first at %d", what, len(got), len(want), i)
	}
}

// corruptions of a frame: each must fail to decode, never give bytes.
func corruptions(frame []byte) map[string][]byte {
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(frame)) }
	return map[string][]byte{
		"bad crc":         mod(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }),
		"literal flipped": mod(func(b []byte) []byte { b[len(b)/2] ^= 0x20; return b }),
		"length varint":   mod(func(b []byte) []byte { b[0] ^= 0x7f; return b }),
		"cut short":       mod(func(b []byte) []byte { return append(b[:len(b)/2], b[len(b)-crcSize:]...) }),
		"garbage":         append(bytes.Repeat([]byte{0xff}, len(frame)-crcSize), frame[len(frame)-crcSize:]...),
	}
}

// TestS2CorruptWrite: a compressed write whose frame does not decode to
// its bytes is refused with ErrCorruptPayload's error (UNAVAILABLE on the
// wire), never reaches the handler, and leaves the connection usable.
func TestS2CorruptWrite(t *testing.T) {
	h := newMemHandler()
	s := serve(t, h)
	addr := s.Addr().String()
	data := textBytes(64<<10, 1)
	frame := encodeFrame(make([]byte, maxFrameLen(len(data))), data)
	if frame == nil {
		t.Fatal("text did not compress")
	}
	for name, bad := range corruptions(frame) {
		t.Run(name, func(t *testing.T) {
			var b [RequestSize]byte
			Request{Op: OpWrite, Flags: FlagS2, Extent: 7, Length: uint64(len(data)), WireLength: uint64(len(bad))}.Encode(&b)
			conn := rawConn(t, addr, append(b[:], bad...))
			r, err := readReply(t, conn)
			if !r.Failed || r.Close || !errors.Is(err, errs.ErrUnavailable) || !strings.Contains(errString(err), "corrupt compressed payload") {
				t.Fatalf("reply %+v, %v: want a corrupt payload error, connection kept", r, err)
			}
			// The connection is in step: a good compressed write on it.
			Request{Op: OpWrite, Flags: FlagS2, Extent: 8, Length: uint64(len(data)), WireLength: uint64(len(frame))}.Encode(&b)
			if _, err := conn.Write(append(b[:], frame...)); err != nil {
				t.Fatal(err)
			}
			if r, err := readReply(t, conn); err != nil || r.Failed {
				t.Fatalf("good write after a bad one: %+v, %v", r, err)
			}
		})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.chunks[[2]uint64{7, 0}]; ok {
		t.Error("a corrupt compressed write reached the handler")
	}
	if !bytes.Equal(h.chunks[[2]uint64{8, 0}], data) {
		t.Error("the good compressed write stored other bytes")
	}
}

// TestS2CorruptReadReply: a compressed read reply whose frame does not
// decode to the bytes asked for fails the read with ErrCorruptPayload
// (and errs.ErrUnavailable), not with wrong bytes; a compressed reply to
// a read that did not ask for one is a protocol error.
func TestS2CorruptReadReply(t *testing.T) {
	data := textBytes(64<<10, 2)
	frame := encodeFrame(make([]byte, maxFrameLen(len(data))), data)
	var payloadp atomic.Pointer[[]byte] // what the fake server sends, set per case
	f := startFake(t, func(_ int64, conn net.Conn) {
		answer(conn, func(req Request) []byte {
			payload := *payloadp.Load()
			var h [ReplySize]byte
			Reply{Op: req.Op, Compressed: true, Length: uint64(len(payload))}.Encode(&h)
			return append(h[:], payload...)
		}, func(int) bool { return false })
	})
	addr := f.lis.Addr().String()
	ctx := t.Context()
	for name, bad := range corruptions(frame) {
		payloadp.Store(&bad)
		c := compressingClient(t)
		got := make([]byte, len(data))
		err := c.Read(ctx, addr, 1, 0, nil, 0, [][]byte{got})
		if !errors.Is(err, ErrCorruptPayload) || !errors.Is(err, errs.ErrUnavailable) || errors.Is(err, errs.ErrCorrupt) {
			t.Errorf("%s: read %v, want ErrCorruptPayload", name, err)
		}
		if c.idleConns(addr) != 1 {
			t.Errorf("%s: the connection, in step, was not kept", name)
		}
		err = c.Read(ctx, addr, 1, 0, nil, 0, [][]byte{got[:100], got[100:]})
		if !errors.Is(err, ErrCorruptPayload) {
			t.Errorf("%s: read into pieces %v, want ErrCorruptPayload", name, err)
		}
	}
	// The good frame reads.
	payloadp.Store(&frame)
	c := compressingClient(t)
	got := make([]byte, len(data))
	if err := c.Read(ctx, addr, 1, 0, nil, 0, [][]byte{got}); err != nil {
		t.Fatal(err)
	}
	mustSame(t, "good frame", got, data)
	// A compressed reply the client did not ask for.
	plain := newClient(t)
	if err := plain.Read(ctx, addr, 1, 0, nil, 0, [][]byte{got}); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("unasked compressed reply: %v, want ErrInvalid", err)
	}
}

// TestS2Frame: frames of compressible data decode back; incompressible
// data is not framed; a frame never decodes into the wrong length.
func TestS2Frame(t *testing.T) {
	for _, n := range []int{MinCompress, 4096, 1 << 20} {
		src := textBytes(n, uint64(n))
		f := encodeFrame(make([]byte, maxFrameLen(n)), src)
		if f == nil || !worthIt(len(f), n) {
			t.Fatalf("%d bytes of text: frame %d bytes", n, len(f))
		}
		dst := make([]byte, n)
		if err := decodeFrame([][]byte{dst}, f, nil); err != nil {
			t.Fatal(err)
		}
		mustSame(t, fmt.Sprint(n), dst, src)
		if err := decodeFrame([][]byte{make([]byte, n-1)}, f, nil); !errors.Is(err, ErrCorruptPayload) {
			t.Errorf("decode into %d bytes: %v", n-1, err)
		}
		if f := encodeFrame(make([]byte, maxFrameLen(n)), randBytes(n, 1)); f != nil {
			t.Errorf("%d random bytes framed in %d", n, len(f))
		}
	}
	if err := decodeFrame([][]byte{make([]byte, 8)}, []byte{1, 2, 3}, nil); !errors.Is(err, ErrCorruptPayload) {
		t.Errorf("3-byte frame: %v", err)
	}
	var crc [4]byte
	binary.LittleEndian.PutUint32(crc[:], 0)
	if err := decodeFrame([][]byte{make([]byte, 8)}, append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x0f}, crc[:]...), nil); !errors.Is(err, ErrCorruptPayload) {
		t.Errorf("huge varint: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// chunkHandler serves every read from one chunk and discards writes: the
// transport and the codec alone.
type chunkHandler struct{ chunk []byte }

func (chunkHandler) WriteChunk(_ context.Context, _ Request, _ []byte) error { return nil }
func (h chunkHandler) ReadChunk(_ context.Context, req Request, dst []byte) error {
	copy(dst, h.chunk[req.Offset:])
	return nil
}

// BenchmarkTransferS2 writes and reads 4 MiB chunks over loopback,
// plaintext, one connection, with and without wire compression, of
// text-like and random data. wire-MB/op is the payload on the wire per
// 4 MiB chunk (4.19 uncompressed).
func BenchmarkTransferS2(b *testing.B) {
	const size = 4 << 20
	tok := randBytes(38, 1)
	for _, kind := range []string{"text", "random"} {
		data := AlignedBuf(size)
		if kind == "text" {
			copy(data, textBytes(size, 7))
		} else {
			copy(data, randBytes(size, 7))
		}
		s := serve(b, chunkHandler{data})
		addr := s.Addr().String()
		for _, mode := range []string{"none", "s2"} {
			newC := func() *Client {
				o := ClientOptions{}
				if mode == "s2" {
					o.Compress = func(string) bool { return true }
				}
				c := NewClient(o)
				b.Cleanup(func() { c.Close() })
				return c
			}
			b.Run(kind+"/"+mode+"/write", func(b *testing.B) {
				c := newC()
				b.SetBytes(size)
				defer reportCPU(b, size)()
				for b.Loop() {
					if err := c.Write(b.Context(), addr, 1, 0, tok, [][]byte{data}); err != nil {
						b.Fatal(err)
					}
				}
				st := c.Stats()
				b.ReportMetric(float64(st.WriteWireBytes)/float64(st.WriteBytes)*size/1e6, "wire-MB/op")
			})
			b.Run(kind+"/"+mode+"/read", func(b *testing.B) {
				c := newC()
				dst := AlignedBuf(size)
				b.SetBytes(size)
				defer reportCPU(b, size)()
				for b.Loop() {
					if err := c.Read(b.Context(), addr, 1, 0, tok, 0, [][]byte{dst}); err != nil {
						b.Fatal(err)
					}
				}
				st := c.Stats()
				b.ReportMetric(float64(st.ReadWireBytes)/float64(st.ReadBytes)*size/1e6, "wire-MB/op")
			})
		}
	}
}
