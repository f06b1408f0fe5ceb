package bench

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"unsafe"
)

// File contents come from one pool of random bytes, so that nothing
// compresses and every read can be checked: byte off of the file with
// seed s is pool[(s+off) mod period].
const (
	poolPeriod = 32 << 20
	poolTail   = 16 << 20 // the longest single read or write
	ioSize     = 1 << 20  // the I/O size of the big-file workloads
	dirAlign   = 4096     // O_DIRECT alignment
)

type pattern struct{ buf []byte }

func newPattern() *pattern {
	p := &pattern{buf: make([]byte, poolPeriod+poolTail)}
	var seed [32]byte
	copy(seed[:], "shoal bench: a fixed, random pool")
	rng := rand.NewChaCha8(seed)
	rng.Read(p.buf[:poolPeriod])
	copy(p.buf[poolPeriod:], p.buf[:poolTail])
	return p
}

// at returns the n bytes at off of the file with seed s; n <= poolTail.
func (p *pattern) at(s, off int64, n int) []byte {
	if n > poolTail {
		panic(fmt.Sprintf("bench: pattern slice of %d bytes", n))
	}
	i := (s + off) % poolPeriod
	return p.buf[i : i+int64(n)]
}

// check compares got, read at off of the file with seed s, with what was
// written. Full compares every byte; otherwise only the first 4 KiB of
// got are compared (a spot check that costs no measurable CPU).
func (p *pattern) check(s, off int64, got []byte, full bool) error {
	n := len(got)
	if !full {
		n = min(n, 4096)
	}
	for done := 0; done < n; {
		m := min(n-done, poolTail)
		if !bytes.Equal(got[done:done+m], p.at(s, off+int64(done), m)) {
			return fmt.Errorf("data read back at offset %d..%d differs from what was written", off+int64(done), off+int64(done+m))
		}
		done += m
	}
	return nil
}

// seedOf gives each file of a workload its own place in the pool.
func seedOf(file int) int64 { return int64(file)*7_654_321 + 12_345 }

// smallSize is the size of small file i: between 4 KiB and 128 KiB,
// spread evenly by a fixed hash.
func smallSize(i int) int {
	const lo, hi = 4 << 10, 128 << 10
	h := uint64(i)*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	h ^= h >> 29
	return lo + int(h%uint64(hi-lo+1))
}

// ckptPieces is the sequence of write sizes of a checkpoint shard of size
// bytes: an 8-byte header length and a JSON-sized header, as safetensors
// writes them, then tensors of 64 KiB to 8 MiB, even-sized (bf16) and not
// aligned to pages, the last one cut to fit.
func ckptPieces(shard int, size int64) []int {
	pieces := []int{8, 12_345 + 2*shard}
	var total int64 = int64(pieces[0] + pieces[1])
	if total >= size {
		return []int{int(size)}
	}
	rng := rand.New(rand.NewPCG(uint64(shard), 42))
	for total < size {
		n := int64(64<<10 + 2*rng.IntN((8<<20-64<<10)/2))
		n = min(n, size-total)
		pieces = append(pieces, int(n))
		total += n
	}
	return pieces
}

// alignedBuf returns n bytes whose address is a multiple of dirAlign.
func alignedBuf(n int) []byte {
	b := make([]byte, n+dirAlign)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (dirAlign - 1))
	if off != 0 {
		off = dirAlign - off
	}
	return b[off : off+n : off+n]
}
