// Package erasure encodes and reconstructs the rows of an extent with
// Reed-Solomon codes (github.com/klauspost/reedsolomon).
//
// A row is K data cells followed by M parity cells, all of one size. Encode
// fills the parity cells; Reconstruct rebuilds missing data cells (nil
// entries) from any K present cells. With M = 0 there is no parity and
// nothing can be rebuilt.
package erasure

import (
	"fmt"

	"github.com/klauspost/reedsolomon"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
)

// Coder encodes rows of one layout. It is safe for concurrent use.
type Coder struct {
	k, m int
	enc  reedsolomon.Encoder // nil when m == 0
}

// New returns a coder for l.
func New(l layout.Layout) (*Coder, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	c := &Coder{k: l.K, m: l.M}
	if l.M > 0 {
		enc, err := reedsolomon.New(l.K, l.M)
		if err != nil {
			return nil, fmt.Errorf("reed-solomon %d+%d: %v: %w", l.K, l.M, err, errs.ErrInvalid)
		}
		c.enc = enc
	}
	return c, nil
}

// Encode computes the M parity cells of a row from its K data cells. cells
// has K+M entries of equal length.
func (c *Coder) Encode(cells [][]byte) error {
	if len(cells) != c.k+c.m {
		return fmt.Errorf("encode: %d cells, want %d: %w", len(cells), c.k+c.m, errs.ErrInvalid)
	}
	if c.enc == nil {
		return nil
	}
	return c.enc.Encode(cells)
}

// ReconstructData rebuilds the nil data cells of a row from the present
// cells. Missing parity cells are left nil. It fails with errs.ErrUnavailable
// when fewer than K cells are present.
func (c *Coder) ReconstructData(cells [][]byte) error {
	if len(cells) != c.k+c.m {
		return fmt.Errorf("reconstruct: %d cells, want %d: %w", len(cells), c.k+c.m, errs.ErrInvalid)
	}
	present := 0
	missingData := false
	for i, cell := range cells {
		if cell != nil {
			present++
		} else if i < c.k {
			missingData = true
		}
	}
	if !missingData {
		return nil
	}
	if present < c.k || c.enc == nil {
		return fmt.Errorf("reconstruct: %d of %d cells present, need %d: %w", present, c.k+c.m, c.k, errs.ErrUnavailable)
	}
	if err := c.enc.ReconstructData(cells); err != nil {
		return fmt.Errorf("reconstruct: %v: %w", err, errs.ErrUnavailable)
	}
	return nil
}

// Verify reports whether the parity cells of a full row match its data.
func (c *Coder) Verify(cells [][]byte) (bool, error) {
	if c.enc == nil {
		return true, nil
	}
	return c.enc.Verify(cells)
}
