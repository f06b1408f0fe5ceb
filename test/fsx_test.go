package test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/test/cluster"
	"github.com/shoalfs/shoal/test/fsx"
)

// fsxCase is one configuration of the random-operation checker against a
// mount: the cluster's layout and the checker's settings.
type fsxCase struct {
	name   string
	layout layout.Layout // zero: the default RS 4+2, 1 MiB
	cfg    fsx.Config    // Seed and Ops are the CI run's
	osts   int           // zero: the cluster's default (6)
	// faults, when set, returns the checker's Hook: faults injected into
	// the cluster between operations. Such cases run only in the soak:
	// their failures depend on timing and may not shrink.
	faults func(cl *cluster.Cluster) func(i int) error
}

// fsxCases are run by `make test` with fixed seeds (TestFsx) and by `make
// soak` with many more operations (TestFsxSoak). Small cells (4 KiB, so 16
// KiB rows and 64 KiB extents) put many row and extent boundaries inside a
// few hundred KiB; the default layout checks the real geometry, with far
// writes across 16 MiB extents.
var fsxCases = []fsxCase{
	{name: "file-small-cells", layout: layout.Layout{K: 4, M: 2, Unit: 4096},
		cfg: fsx.Config{Seed: 1, Ops: 25_000, Mode: fsx.File, MaxLen: 64 << 10, MaxSize: 512 << 10, FarSize: 4 << 20}},
	{name: "file-default-layout", layout: layout.Layout{},
		cfg: fsx.Config{Seed: 2, Ops: 20_000, Mode: fsx.File}},
	{name: "tree-small-cells", layout: layout.Layout{K: 4, M: 2, Unit: 4096},
		cfg: fsx.Config{Seed: 3, Ops: 25_000, Mode: fsx.Tree}},
	{name: "tree-default-layout", layout: layout.Layout{},
		cfg: fsx.Config{Seed: 4, Ops: 15_000, Mode: fsx.Tree}},
	// Descriptors stay open on files whose last name goes (unlink, rename
	// over them): they must stay readable and writable.
	{name: "tree-open-unlinked", layout: layout.Layout{},
		cfg: fsx.Config{Seed: 5, Ops: 15_000, Mode: fsx.Tree, OpenUnlinked: true}},
	// Soak only: one of 7 OSTs stopped and started again in turn, so that
	// writes retry around a dead OST and reads rebuild from parity.
	{name: "file-ost-restarts", layout: layout.Layout{K: 4, M: 2, Unit: 64 << 10},
		cfg:  fsx.Config{Seed: 6, Mode: fsx.File, MaxSize: 2 << 20, FarSize: 16 << 20},
		osts: 7, faults: ostRestarts},
	// Soak only: the MDS restarts every 2,000 operations under open files
	// and mounts, which must reconnect and carry on.
	{name: "tree-mds-restarts", layout: layout.Layout{},
		cfg:    fsx.Config{Seed: 7, Mode: fsx.Tree, OpenUnlinked: true},
		faults: mdsRestarts},
}

// mdsRestarts restarts the MDS every 2,000 operations.
func mdsRestarts(cl *cluster.Cluster) func(int) error {
	return func(i int) error {
		if i%2000 == 1999 {
			cl.RestartMDS()
		}
		return nil
	}
}

// ostRestarts stops one OST every 1,000 operations and starts it again
// 1,000 operations later, a different one each time.
func ostRestarts(cl *cluster.Cluster) func(int) error {
	down := -1
	return func(i int) error {
		if i%1000 != 999 {
			return nil
		}
		if down >= 0 {
			err := cl.StartOST(down)
			down = -1
			return err
		}
		down = (i / 1000) % 7
		cl.StopOST(down)
		return nil
	}
}

// TestFsx runs the checker's CI operations (100,000 in all) against a
// mount, each case on its own cluster, with a local directory on the real
// disk as the reference.
func TestFsx(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): random-operation checker on a mount")
	}
	cluster.RequireFUSE(t)
	total := 0
	for _, tc := range fsxCases {
		if tc.faults != nil {
			continue
		}
		total += tc.cfg.Ops
		t.Run(tc.name, func(t *testing.T) {
			// Each case waits mostly on its mount and the reference's
			// fsyncs (about a quarter of two cores busy): two at a time
			// (go test's -parallel, GOMAXPROCS) halve the wall time.
			t.Parallel()
			runFsx(t, tc, tc.cfg)
		})
	}
	if total < 100_000 {
		t.Errorf("CI runs %d checker operations, want at least 100,000", total)
	}
}

// TestFsxSoak runs the checker for SHOAL_FSX_OPS operations per case
// (`make soak`), including the cases with injected faults. Every case
// uses seed SHOAL_FSX_SEED when it is set, else one from the clock (plus
// the case's index). SHOAL_FSX_CASE picks cases by name prefix,
// SHOAL_FSX_MODE (file or tree) by mode. A failure prints the command that
// reruns it.
func TestFsxSoak(t *testing.T) {
	ops, _ := strconv.Atoi(os.Getenv("SHOAL_FSX_OPS"))
	if ops <= 0 {
		t.Skip("SKIP: set SHOAL_FSX_OPS (make soak) to soak the random-operation checker")
	}
	cluster.RequireFUSE(t)
	seed, fixed := uint64(time.Now().UnixNano()), false
	if s := os.Getenv("SHOAL_FSX_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SHOAL_FSX_SEED: %v", err)
		}
		seed, fixed = v, true
	}
	for i, tc := range fsxCases {
		if p := os.Getenv("SHOAL_FSX_CASE"); p != "" && !strings.HasPrefix(tc.name, p) {
			continue
		}
		if m := os.Getenv("SHOAL_FSX_MODE"); m != "" && m != tc.cfg.Mode.String() {
			continue
		}
		cfg := tc.cfg
		cfg.Ops = ops
		cfg.Seed = seed
		if !fixed {
			cfg.Seed += uint64(i)
		}
		t.Run(tc.name, func(t *testing.T) { runFsx(t, tc, cfg) })
	}
}

func runFsx(t *testing.T, tc fsxCase, cfg fsx.Config) {
	// The servers keep their state on tmpfs: the checker tests semantics,
	// and the disk's fsyncs would triple its time. The reference stays on
	// the real disk.
	cl := cluster.Start(t, cluster.Options{Layout: tc.layout, OSTs: tc.osts, Dir: cluster.TmpfsDir(t)})
	mnt := cl.Mount()
	if tc.faults != nil {
		cfg.Hook = tc.faults(cl)
	}
	fresh := func() (string, string, error) {
		dut, err := os.MkdirTemp(mnt, "fsx-")
		return t.TempDir(), dut, err
	}
	ref, dut, err := fresh()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st, err := fsx.Run(cfg, ref, dut)
	el := time.Since(start)
	t.Logf("%s: seed %d, %d ops in %v (%.0f ops/s)\n%s", tc.name, cfg.Seed, st.Ops, el.Round(time.Millisecond),
		float64(st.Ops)/el.Seconds(), st.Slowest())
	var f *fsx.Failure
	if errors.As(err, &f) {
		t.Logf("first failure (shrinking now):\n%v", f)
		f = fsx.Shrink(f, fresh)
		t.Fatalf("case %s: %v\nrerun: SHOAL_FSX_CASE=%s SHOAL_FSX_SEED=%d SHOAL_FSX_OPS=%d go test -count=1 -v -run TestFsxSoak ./test/",
			tc.name, f, tc.name, f.Config.Seed, f.Config.Ops)
	}
	if err != nil {
		t.Fatal(err)
	}
}
