package mds

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
)

func TestAdminOptionsInvalid(t *testing.T) {
	for _, c := range []int{-1, MaxAdminConcurrency + 1} {
		_, err := Open(context.Background(), Options{Dir: t.TempDir(), Admin: AdminOptions{Concurrency: c}})
		if !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("Concurrency %d: %v, want ErrInvalid", c, err)
		}
	}
	o := AdminOptions{}
	if err := o.setDefaults(time.Minute); err != nil || o.Concurrency != DefaultAdminConcurrency || o.RetireGrace != time.Minute || o.RebalanceBandwidth != 0 {
		t.Errorf("defaults: %+v %v", o, err)
	}
}

// TestRateConcurrent: the copies of a batch run in parallel and share
// one pacer; together they keep to its bandwidth.
func TestRateConcurrent(t *testing.T) {
	r := newRate(8 << 20) // 8 MiB/s
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { r.wait(context.Background(), 512<<10) })
	}
	wg.Wait()
	// 2 MiB at 8 MiB/s: 250 ms.
	if el := time.Since(start); el < 200*time.Millisecond || el > 5*time.Second {
		t.Errorf("4 x 512 KiB at 8 MiB/s took %v, want about 250ms", el)
	}
}
