package checksum

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

func TestSumKnownVector(t *testing.T) {
	// The CRC-32C check value (RFC 3720, appendix B.4).
	if got := Sum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("Sum(123456789) = %08x, want e3069283", got)
	}
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestComputeEncodeDecode(t *testing.T) {
	tests := []struct {
		name      string
		length    int
		blockSize int
		blocks    int
	}{
		{"empty", 0, 4096, 0},
		{"one byte", 1, 4096, 1},
		{"one block", 4096, 4096, 1},
		{"block plus one", 4097, 4096, 2},
		{"min block", 1000, MinBlockSize, 2},
		{"default block, odd length", 1<<20 + 123, 64 << 10, 17},
		{"max block", 3 << 20, MaxBlockSize, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := randBytes(tt.length, uint64(tt.length))
			tab, err := Compute(data, tt.blockSize)
			if err != nil {
				t.Fatal(err)
			}
			if len(tab.Sums) != tt.blocks {
				t.Fatalf("%d blocks, want %d", len(tab.Sums), tt.blocks)
			}
			enc := tab.Encode()
			if uint64(len(enc)) != EncodedSize(uint64(tt.length), uint32(tt.blockSize)) {
				t.Fatalf("encoded %d bytes, EncodedSize says %d", len(enc), EncodedSize(uint64(tt.length), uint32(tt.blockSize)))
			}
			dec, err := Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if dec.BlockSize != tab.BlockSize || dec.Length != tab.Length || len(dec.Sums) != len(tab.Sums) {
				t.Fatalf("decoded %+v, want %+v", dec, tab)
			}
			for i := range dec.Sums {
				start, end := dec.BlockRange(i)
				if err := dec.Verify(i, data[start:end]); err != nil {
					t.Fatalf("block %d: %v", i, err)
				}
			}
			if tt.length > 0 {
				data[tt.length/2] ^= 0x40
				i := (tt.length / 2) / tt.blockSize
				start, end := dec.BlockRange(i)
				err := dec.Verify(i, data[start:end])
				var me *MismatchError
				if !errors.Is(err, errs.ErrCorrupt) || !errors.As(err, &me) || me.Block != i {
					t.Fatalf("flipped byte in block %d: got %v", i, err)
				}
			}
		})
	}
}

func TestComputeRejects(t *testing.T) {
	tests := []struct {
		name      string
		length    int
		blockSize int
		want      error
	}{
		{"block too small", 10, MinBlockSize - 1, errs.ErrInvalid},
		{"block too large", 10, MaxBlockSize + 1, errs.ErrInvalid},
		{"too many blocks", MinBlockSize*MaxBlocks + 1, MinBlockSize, errs.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Compute(make([]byte, tt.length), tt.blockSize); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestVerifyRejectsBadArguments(t *testing.T) {
	tab, err := Compute(make([]byte, 5000), 4096)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		block int
		n     int
	}{{-1, 4096}, {2, 4096}, {0, 4095}, {1, 4096}} {
		if err := tab.Verify(c.block, make([]byte, c.n)); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("Verify(%d, %d bytes) = %v, want ErrInvalid", c.block, c.n, err)
		}
	}
}

// reseal recomputes the trailing CRC after a test edits a header field, so
// that the field's own check is what fails.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[len(b)-4:], Sum(b[:len(b)-4]))
	return b
}

func TestDecodeRejects(t *testing.T) {
	tab, err := Compute(randBytes(10000, 1), 4096)
	if err != nil {
		t.Fatal(err)
	}
	good := tab.Encode()
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"short", good[:HeaderSize+TrailerSize-1]},
		{"truncated table", good[:len(good)-4]},
		{"extra byte", append(bytes.Clone(good), 0)},
		{"bad magic", edit(func(b []byte) []byte { b[0] = 'X'; return reseal(b) })},
		{"bad version", edit(func(b []byte) []byte { b[4] = 2; return reseal(b) })},
		{"reserved set", edit(func(b []byte) []byte { b[6] = 1; return reseal(b) })},
		{"block size zero", edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 0); return reseal(b) })},
		{"block size huge", edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 1<<31); return reseal(b) })},
		{"length larger", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[12:], 20000); return reseal(b) })},
		{"length huge", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[12:], 1<<63); return reseal(b) })},
		{"length max", edit(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[12:], ^uint64(0)); return reseal(b) })},
		{"table bit flip", edit(func(b []byte) []byte { b[HeaderSize] ^= 1; return b })},
		{"trailer bit flip", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode(tt.in); !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("Decode = %v, want ErrCorrupt", err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, n := range []int{0, 1, 4096, 10000} {
		tab, err := Compute(randBytes(n, uint64(n)), 4096)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tab.Encode())
	}
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := Decode(b)
		if err != nil {
			if !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// Whatever decodes re-encodes to the same bytes, and its table is
		// never larger than its input.
		if 4*len(tab.Sums) > len(b) {
			t.Fatalf("%d sums from %d bytes", len(tab.Sums), len(b))
		}
		if !bytes.Equal(tab.Encode(), b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func BenchmarkSum(b *testing.B) {
	data := randBytes(64<<10, 3)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		Sum(data)
	}
}
