package erasure

import (
	"bytes"
	"errors"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
)

func row(t *testing.T, c *Coder, k, m, size int, seed uint64) [][]byte {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	cells := make([][]byte, k+m)
	for i := range cells {
		cells[i] = make([]byte, size)
		if i < k {
			for j := range cells[i] {
				cells[i][j] = byte(r.Uint32())
			}
		}
	}
	if err := c.Encode(cells); err != nil {
		t.Fatal(err)
	}
	return cells
}

// TestReconstructEveryPattern loses every subset of up to M cells and checks
// the data comes back bit for bit; losing M+1 gives ErrUnavailable.
func TestReconstructEveryPattern(t *testing.T) {
	for _, l := range []layout.Layout{{K: 4, M: 2, Unit: 4096}, {K: 6, M: 3, Unit: 4096}, {K: 1, M: 2, Unit: 4096}, {K: 3, M: 1, Unit: 4096}} {
		c, err := New(l)
		if err != nil {
			t.Fatal(err)
		}
		n := l.K + l.M
		orig := row(t, c, l.K, l.M, 8192, uint64(n))
		if ok, err := c.Verify(orig); !ok || err != nil {
			t.Fatalf("%v: verify %v %v", l, ok, err)
		}
		for mask := uint(1); mask < 1<<n; mask++ {
			lost := bits.OnesCount(mask)
			cells := make([][]byte, n)
			for i := range cells {
				if mask&(1<<i) == 0 {
					cells[i] = append([]byte(nil), orig[i]...)
				}
			}
			err := c.ReconstructData(cells)
			if lost > l.M {
				dataLost := mask&(1<<l.K-1) != 0
				if dataLost && !errors.Is(err, errs.ErrUnavailable) {
					t.Fatalf("%v mask %b: err %v, want ErrUnavailable", l, mask, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%v mask %b: %v", l, mask, err)
			}
			for i := 0; i < l.K; i++ {
				if !bytes.Equal(cells[i], orig[i]) {
					t.Fatalf("%v mask %b: data cell %d differs", l, mask, i)
				}
			}
		}
	}
}

func TestNoParity(t *testing.T) {
	c, err := New(layout.Layout{K: 4, M: 0, Unit: 4096})
	if err != nil {
		t.Fatal(err)
	}
	cells := row(t, c, 4, 0, 4096, 3)
	cells[1] = nil
	if err := c.ReconstructData(cells); !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
}

func TestBadArgs(t *testing.T) {
	if _, err := New(layout.Layout{K: 0, M: 1, Unit: 4096}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatal(err)
	}
	c, _ := New(layout.Default)
	if err := c.Encode(make([][]byte, 3)); !errors.Is(err, errs.ErrInvalid) {
		t.Fatal(err)
	}
}
