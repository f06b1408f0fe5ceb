package datanet

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Buffers of BufPool's size classes from hugeMin up are aligned to 2 MiB
// inside a larger heap allocation and given to the kernel's transparent
// huge pages: madvise(MADV_HUGEPAGE), so that later faults take huge
// pages, and MADV_COLLAPSE, so that the pages the allocation's zeroing
// already faulted in become huge pages now. An O_DIRECT read into 4 KiB
// pages costs the kernel a page pin and a segment per 4 KiB: on this
// machine's VM, 1 MiB O_DIRECT reads of chunk files ran at 1.6-2.1 GB/s
// into heap buffers and 4.0-4.7 GB/s into huge pages, 4 or 16 at once
// (docs/performance.md, "Huge pages for the data path's buffers"). A row
// of the default layout (4 MiB) is such a buffer.
//
// The buffers stay ordinary Go memory, so one that a caller drops without
// Put is collected as before; the price is up to 2 MiB of address space
// per buffer for the alignment (resident only where the allocation was
// zeroed). Where the kernel has no huge pages for it (THP off, or none
// free) the buffer is plain 4 KiB pages.

// hugeMin is the smallest size class with huge-page buffers: one huge
// page.
const hugeMin = 2 << 20

// hugeBuf allocates a zeroed buffer of size bytes (a multiple of hugeMin)
// aligned to hugeMin, asking for huge pages for it.
func hugeBuf(size int) []byte {
	raw := make([]byte, size+hugeMin)
	head := (hugeMin - int(addrOf(raw)&(hugeMin-1))) & (hugeMin - 1)
	b := raw[head : head+size : head+size]
	// Advice only: without it the buffer works, in 4 KiB pages.
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	if anyResident(b) {
		_ = unix.Madvise(b, unix.MADV_COLLAPSE)
	}
	return b
}

// anyResident reports whether any page of b (page aligned) is in memory:
// memory the heap zeroed for the allocation is, in 4 KiB pages, and only
// MADV_COLLAPSE (a synchronous copy) makes it huge now; memory fresh from
// the kernel is not, and after MADV_HUGEPAGE its first touch faults huge
// pages in, so a collapse would cost its copy for nothing (21% of a new
// client's checkpoint restore, docs/performance.md). An error says yes.
func anyResident(b []byte) bool {
	vec := make([]byte, (len(b)+Align-1)/Align)
	// x/sys/unix has no Mincore on Linux.
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, addrOf(b), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return true
	}
	for _, v := range vec {
		if v&1 != 0 {
			return true
		}
	}
	return false
}

// AlignedAt allocates a zeroed buffer of n bytes (n > 0) whose address is
// congruent to off modulo Align: the buffer for file bytes at off, whose
// aligned runs a local chunk read (client.File.ReadAtUncached) can then
// read with O_DIRECT. It is not given to huge pages: a restore reads into
// its tensors once, mostly in a new process, whose fresh memory then
// faulted huge pages in at 0.35-0.45 cpu-s per 256 MiB restored against
// 0.2-0.25 without (the huge pages' faults; compaction is the likely
// cost, not profiled: 2026-12-07, docs/performance.md).
func AlignedAt(n int, off int64) []byte {
	want := int(off & (Align - 1))
	raw := make([]byte, n+Align)
	head := (want - int(addrOf(raw)&(Align-1)) + Align) & (Align - 1)
	return raw[head : head+n : head+n]
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
