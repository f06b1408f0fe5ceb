package datanet

import (
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Buffers of BufPool's size classes from hugeMin up live in memory mapped
// apart from the Go heap and aligned to 2 MiB, with madvise(MADV_HUGEPAGE)
// so that the kernel backs them with transparent huge pages where it can
// ("madvise" or "always" in /sys/kernel/mm/transparent_hugepage/enabled).
// An O_DIRECT read into 4 KiB pages costs the kernel a page pin and a
// segment per 4 KiB: on this machine's VM, 1 MiB O_DIRECT reads of chunk
// files ran at 1.6-2.1 GB/s into heap buffers and 4.0-4.7 GB/s into huge
// pages, 4 or 16 at once (docs/performance.md, "Huge pages for the data
// path's buffers"). A row of the default layout (4 MiB) is such a buffer.
//
// A mapping is unmapped when the pool drops it (sync.Pool lets go of
// what it holds at garbage collections): a cleanup on its region, which
// the pool holds while it is free and inUse while it is lent out.

// hugeMin is the smallest size class with huge-page buffers: one huge
// page.
const hugeMin = 2 << 20

// hugeRegion is one mapping, of exactly a size class's length.
type hugeRegion struct {
	mem []byte
}

// hugeLent holds the regions lent out, by the address of their first
// byte, so that Put finds a region from the slice it is given back.
type hugeLent struct {
	mu sync.Mutex
	m  map[uintptr]*hugeRegion
}

// getHuge returns a buffer of size (a size class at least hugeMin) from
// class pool cp, mapping a new region when the pool has none; nil when
// the mapping fails (the caller falls back to the heap).
func (p *BufPool) getHuge(cp *sync.Pool, size int) []byte {
	r, _ := cp.Get().(*hugeRegion)
	if r == nil {
		r = mapHuge(size)
		if r == nil {
			return nil
		}
	}
	p.lent.mu.Lock()
	if p.lent.m == nil {
		p.lent.m = map[uintptr]*hugeRegion{}
	}
	p.lent.m[addrOf(r.mem)] = r
	p.lent.mu.Unlock()
	return r.mem
}

// putHuge gives back b, reporting false when b is not a region lent out
// by this pool (a heap buffer of a huge class, after a failed mapping).
func (p *BufPool) putHuge(cp *sync.Pool, b []byte) bool {
	a := addrOf(b)
	p.lent.mu.Lock()
	r := p.lent.m[a]
	delete(p.lent.m, a)
	p.lent.mu.Unlock()
	if r == nil {
		return false
	}
	cp.Put(r)
	return true
}

// mapHuge maps size bytes (a multiple of hugeMin) aligned to hugeMin and
// asks for huge pages for them; nil if the kernel refuses the mapping.
func mapHuge(size int) *hugeRegion {
	raw, err := unix.Mmap(-1, 0, size+hugeMin, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	// Trim the mapping to the aligned part.
	head := (hugeMin - int(addrOf(raw)&(hugeMin-1))) & (hugeMin - 1)
	if head > 0 {
		unix.Munmap(raw[:head])
	}
	if tail := hugeMin - head; tail > 0 {
		unix.Munmap(raw[head+size:])
	}
	mem := raw[head : head+size : head+size]
	// Without huge pages (THP off) the buffer still works, in 4 KiB
	// pages.
	_ = unix.Madvise(mem, unix.MADV_HUGEPAGE)
	r := &hugeRegion{mem: mem}
	runtime.AddCleanup(r, func(mem []byte) { unix.Munmap(mem) }, mem)
	return r
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
