package ckpt

import (
	"fmt"
	"slices"

	"github.com/shoalfs/shoal/internal/errs"
)

// Policy says which checkpoints of a job to keep. A step is kept when it
// is one of the KeepLast newest, or a multiple of KeepEvery, or pinned;
// the others are deleted by Prune (and by Save, after its commit, when
// Options.Retention is set). The zero Policy keeps everything. With
// KeepEvery set and KeepLast 0, the newest step is kept all the same: a
// job always keeps its latest checkpoint.
type Policy struct {
	KeepLast  int   // the newest N steps
	KeepEvery int64 // steps that are multiples of K (step 0 included)
}

// IsZero reports whether the policy keeps everything.
func (p Policy) IsZero() bool { return p.KeepLast == 0 && p.KeepEvery == 0 }

// Validate checks the policy's fields.
func (p Policy) Validate() error {
	if p.KeepLast < 0 || p.KeepEvery < 0 {
		return fmt.Errorf("retention keep-last %d, keep-every %d: %w", p.KeepLast, p.KeepEvery, errs.ErrInvalid)
	}
	return nil
}

// StepState is what a retention plan needs to know of one checkpoint.
type StepState struct {
	Step   int64
	Pinned bool
}

// Plan splits steps into those the policy keeps and those it deletes,
// each in ascending order. It is a pure function of its arguments.
func (p Policy) Plan(steps []StepState) (keep, drop []int64) {
	sorted := slices.Clone(steps)
	slices.SortFunc(sorted, func(a, b StepState) int {
		switch {
		case a.Step < b.Step:
			return -1
		case a.Step > b.Step:
			return 1
		}
		return 0
	})
	sorted = slices.CompactFunc(sorted, func(a, b StepState) bool { return a.Step == b.Step })
	last := p.KeepLast
	if last == 0 && p.KeepEvery > 0 {
		last = 1
	}
	for i, s := range sorted {
		newest := len(sorted) - i // 1 for the newest
		switch {
		case p.IsZero(),
			s.Pinned,
			newest <= last,
			p.KeepEvery > 0 && s.Step%p.KeepEvery == 0:
			keep = append(keep, s.Step)
		default:
			drop = append(drop, s.Step)
		}
	}
	return keep, drop
}
