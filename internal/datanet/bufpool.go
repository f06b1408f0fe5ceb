package datanet

import (
	"math/bits"
	"sync"
)

// Align is the alignment of BufPool buffers: the page and O_DIRECT
// granularity.
const Align = 4096

// Size classes of BufPool: powers of two from Align to MaxLength.
const (
	minClassShift = 12 // Align
	maxClassShift = 26 // MaxLength
	numClasses    = maxClassShift - minClassShift + 1
)

// BufPool recycles Align-aligned byte buffers of up to MaxLength bytes, in
// power-of-two size classes, so that the data path neither zeroes nor
// faults in fresh memory for every chunk (MEASUREMENTS.md: touching fresh
// memory runs at a third of the speed of a copy). The zero value is ready
// to use; it is safe for concurrent use.
type BufPool struct {
	classes [numClasses]sync.Pool // *[]byte, len == cap == the class size; huge pages from hugeMin on (hugebuf.go)
}

// class returns the size class holding n bytes (0 < n <= MaxLength).
func class(n int) int {
	if n <= Align {
		return 0
	}
	return bits.Len(uint(n-1)) - minClassShift
}

// Get returns a buffer of length n whose first byte is Align-aligned. Its
// contents are undefined. Buffers over MaxLength are allocated, not pooled.
func (p *BufPool) Get(n int) []byte {
	if n <= 0 {
		return nil
	}
	if n > MaxLength {
		return AlignedBuf(n)
	}
	i := class(n)
	size := 1 << (i + minClassShift)
	if b, ok := p.classes[i].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	if size >= hugeMin {
		return hugeBuf(size)[:n]
	}
	return AlignedBuf(size)[:n]
}

// Put gives b, which Get returned, back to the pool. b must not be used
// after. Buffers that did not come from Get are ignored.
func (p *BufPool) Put(b []byte) {
	c := cap(b)
	if c < Align || c > MaxLength || c&(c-1) != 0 || !IsAligned(b[:1]) {
		return
	}
	b = b[:c]
	p.classes[class(c)].Put(&b)
}

// AlignedBuf allocates a zeroed buffer of n bytes (n > 0) whose first byte
// is Align-aligned and whose capacity is exactly n.
func AlignedBuf(n int) []byte {
	b := make([]byte, n)
	if IsAligned(b) {
		return b
	}
	// Large allocations are page aligned in practice; this is the rare
	// case where they are not.
	b = make([]byte, n+Align)
	off := Align - int(addrOf(b)&(Align-1))
	return b[off : off+n : off+n]
}

// IsAligned reports whether b's first byte is Align-aligned (false for an
// empty slice).
func IsAligned(b []byte) bool {
	return cap(b) > 0 && addrOf(b)&(Align-1) == 0
}
