package datanet

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestAlignedAt checks the buffers that restore reads tensors into: the
// address congruent to the offset, the length and capacity exact, zeroed.
func TestAlignedAt(t *testing.T) {
	for _, n := range []int{1, 4095, 64 << 10, 2 << 20, 5<<20 + 3} {
		for _, off := range []int64{0, 1, 4095, 4096, 12345, 1<<40 + 77} {
			b := AlignedAt(n, off)
			if len(b) != n || cap(b) != n {
				t.Fatalf("AlignedAt(%d, %d): len %d cap %d", n, off, len(b), cap(b))
			}
			if got := int(addrOf(b) & (Align - 1)); got != int(off%Align) {
				t.Fatalf("AlignedAt(%d, %d): address %% %d = %d, want %d", n, off, Align, got, off%Align)
			}
			for i, v := range b {
				if v != 0 {
					t.Fatalf("AlignedAt(%d, %d): byte %d is %d", n, off, i, v)
				}
			}
		}
	}
}

// TestAnyResident: memory the program wrote is resident; a fresh mapping
// never touched is not.
func TestAnyResident(t *testing.T) {
	b := hugeBuf(hugeMin)
	b[0] = 1
	if !anyResident(b) {
		t.Fatal("a buffer just written is not resident")
	}
	m, err := unix.Mmap(-1, 0, hugeMin, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if anyResident(m) {
		t.Fatal("an untouched mapping is resident")
	}
	m[hugeMin-1] = 1
	if !anyResident(m) {
		t.Fatal("a mapping with its last page written is not resident")
	}
}
