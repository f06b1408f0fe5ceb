package ost

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The space an OST reports is df's: the blocks reserved for root count
// neither as used nor as free (issue 18: 82% used where df said 50%).
func TestStatfsSpace(t *testing.T) {
	for _, c := range []struct {
		name                  string
		blocks, bfree, bavail uint64
		size, free            uint64 // in blocks
		usePct                int
	}{
		{"no reserve", 1000, 500, 500, 1000, 500, 50},
		// ext4's 5%: 50 blocks reserved; df says 450/(450+500) = 48%, not 55%.
		{"5% reserved", 1000, 550, 500, 950, 500, 48},
		// Full for users, root's reserve left: 100%, not below.
		{"reserve only", 1000, 50, 0, 950, 0, 100},
		{"empty", 1000, 1000, 950, 950, 950, 0},
		// More free blocks than blocks (UsedBytes wrapped): none used.
		{"bfree above blocks", 1000, 1010, 950, 950, 950, 0},
	} {
		// As vfs.Default's GetDiskUsage makes it of statfs.
		du := vfs.DiskUsage{TotalBytes: c.blocks * 4096, UsedBytes: (c.blocks - c.bfree) * 4096, AvailBytes: c.bavail * 4096}
		size, free := statfsSpace(du)
		if size != c.size*4096 || free != c.free*4096 {
			t.Errorf("%s: size %d free %d blocks, want %d %d", c.name, size/4096, free/4096, c.size, c.free)
		}
		// Rounded up, as df rounds Use%.
		if pct := int(((size-free)*100 + size - 1) / size); pct != c.usePct {
			t.Errorf("%s: use %d%%, want %d%%", c.name, pct, c.usePct)
		}
	}
}
