package gds

import (
	"bytes"
	"errors"
	"testing"

	"github.com/shoalfs/shoal/internal/checksum"
	"github.com/shoalfs/shoal/internal/errs"
)

// TestVerifyRange checks ranges that start and end inside blocks: the
// fringes come from the file, the middle from the delivered bytes.
func TestVerifyRange(t *testing.T) {
	data := randBytes(1, 300000)
	tbl, err := checksum.Compute(data, 65536)
	if err != nil {
		t.Fatal(err)
	}
	f := bytes.NewReader(data)
	for _, r := range [][2]int64{{0, 300000}, {1, 10}, {65535, 2}, {70000, 200000}, {299999, 1}, {131072, 65536}} {
		got := append([]byte(nil), data[r[0]:r[0]+r[1]]...)
		if err := verifyRange(tbl, r[0], got, f); err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		got[len(got)/2] ^= 1
		var me *checksum.MismatchError
		if err := verifyRange(tbl, r[0], got, f); !errors.As(err, &me) || !errors.Is(err, errs.ErrCorrupt) {
			t.Fatalf("%v: flipped byte: %v", r, err)
		}
	}
	if err := verifyRange(tbl, 299999, []byte{1, 2}, f); !errors.Is(err, errs.ErrCorrupt) {
		t.Fatalf("past the table: %v", err)
	}
}

// BenchmarkVerifyRange measures the check of direct reads on the host:
// CRC32C of 1 MiB cells in 64 KiB blocks.
func BenchmarkVerifyRange(b *testing.B) {
	data := randBytes(1, 64<<20)
	tbl, _ := checksum.Compute(data, 65536)
	f := bytes.NewReader(data)
	b.SetBytes(1 << 20)
	for i := 0; b.Loop(); i++ {
		off := int64(i%64) << 20
		if err := verifyRange(tbl, off, data[off:off+1<<20], f); err != nil {
			b.Fatal(err)
		}
	}
}
