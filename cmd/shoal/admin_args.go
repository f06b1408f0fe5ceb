package main

// Checks of the admin commands' arguments, made before anything is
// called or changed (issue 17, item 8): an empty path named the root,
// a --unit over 4 GiB wrapped around, --replicas 0 was ignored, and
// migrate copied a whole file before the MDS refused its layout.

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/layout"
)

// checkPath refuses an empty path, which the client resolves to the
// root: `setstripe ” --k 2` changed the root's layout.
func checkPath(p string) error {
	if strings.TrimSpace(p) == "" {
		return fmt.Errorf("empty path: name a file or directory inside the file system (/ for its root)")
	}
	return nil
}

// layoutFlags are the layout flags of setstripe and migrate: --k, --m,
// --unit and --replicas. A flag left out keeps the file's value.
type layoutFlags struct {
	k, m, replicas uint32
	unit           string
}

func (lf *layoutFlags) register(cmd *cobra.Command, dflt string) {
	cmd.Flags().Uint32Var(&lf.k, "k", 4, "data cells per row, 1 to 32"+dflt)
	cmd.Flags().Uint32Var(&lf.m, "m", 2, "parity cells per row; k+m at most 32"+dflt)
	cmd.Flags().StringVar(&lf.unit, "unit", "1MiB", "cell size, a multiple of 4 KiB from 4 KiB to 16 MiB"+dflt)
	cmd.Flags().Uint32Var(&lf.replicas, "replicas", 0, "N-way replication (k=1, m=N-1) instead of --k/--m, N from 1 to 32")
}

// check checks the flags given, alone, before anything is called.
func (lf *layoutFlags) check(cmd *cobra.Command) error {
	ch := cmd.Flags().Changed
	if ch("replicas") {
		if ch("k") || ch("m") {
			return fmt.Errorf("--replicas excludes --k and --m")
		}
		if lf.replicas < 1 || lf.replicas > layout.MaxShards {
			return fmt.Errorf("--replicas %d: want 1 to %d copies", lf.replicas, layout.MaxShards)
		}
	}
	if ch("k") && (lf.k < 1 || lf.k > layout.MaxShards) {
		return fmt.Errorf("--k %d: want 1 to %d data cells per row", lf.k, layout.MaxShards)
	}
	if ch("m") && lf.m > layout.MaxShards-1 {
		return fmt.Errorf("--m %d: want 0 to %d parity cells per row", lf.m, layout.MaxShards-1)
	}
	if ch("k") && ch("m") && lf.k+lf.m > layout.MaxShards {
		return fmt.Errorf("--k %d --m %d: at most %d cells per row", lf.k, lf.m, layout.MaxShards)
	}
	if ch("unit") {
		if _, err := lf.unitBytes(); err != nil {
			return err
		}
	}
	return nil
}

func (lf *layoutFlags) unitBytes() (uint32, error) {
	u, err := parseBytes(lf.unit)
	if err != nil {
		return 0, fmt.Errorf("--unit: %w", err)
	}
	if u > math.MaxUint32 || u < layout.MinUnit || u > layout.MaxUnit || u%layout.Align != 0 {
		return 0, fmt.Errorf("--unit %s (%d bytes): want a multiple of 4 KiB from 4 KiB to 16 MiB", lf.unit, u)
	}
	return uint32(u), nil
}

// layout returns the layout the flags ask for, the values of cur for the
// flags left out, and checks it whole (k+m, say, when only one of them
// was given).
func (lf *layoutFlags) layout(cmd *cobra.Command, cur client.Layout) (client.Layout, error) {
	ch := cmd.Flags().Changed
	to := client.Layout{K: cur.K, M: cur.M, Unit: cur.Unit}
	switch {
	case ch("replicas"):
		to.K, to.M = 1, lf.replicas-1
	default:
		if ch("k") {
			to.K = lf.k
		}
		if ch("m") {
			to.M = lf.m
		}
	}
	if ch("unit") {
		u, err := lf.unitBytes()
		if err != nil {
			return client.Layout{}, err
		}
		to.Unit = u
	}
	l := layout.Layout{K: int(to.K), M: int(to.M), Unit: int64(to.Unit)}
	if to.M > layout.MaxShards {
		l.M = layout.MaxShards + 1 // no wrap in the check below
	}
	if err := l.Validate(); err != nil {
		return client.Layout{}, fmt.Errorf("k=%d m=%d unit=%d: want k from 1, k+m at most %d, a unit that is a multiple of 4 KiB from 4 KiB to 16 MiB: %w", to.K, to.M, to.Unit, layout.MaxShards, err)
	}
	return to, nil
}

// widthErr says why layout l cannot be placed in full on the cluster: it
// needs k+m distinct OSTs and fewer are registered (removed ones aside).
// nil when it fits, or when the OSTs cannot be listed (the MDS then says
// what is wrong at the first write).
func widthErr(ctx context.Context, c *client.Client, l client.Layout) error {
	r, err := c.ListOsts(ctx)
	if err != nil {
		return nil
	}
	n := 0
	for _, o := range r.OSTs {
		if o.State != "removed" {
			n++
		}
	}
	if w := int(l.K + l.M); w > n {
		return fmt.Errorf("k=%d m=%d: an extent of this layout needs %d OSTs, and the cluster has %d (shoal admin osts)", l.K, l.M, w, n)
	}
	return nil
}

// fitErr says whether setstripe may give a directory layout l (issue
// 18): refuse is set when no file created there could be written (fewer
// OSTs registered than k + min(min-parity, m), the chunks a write must
// place); narrow when its files would be written narrow and never
// widened (fewer than k+m). Both nil when it fits or the OSTs cannot be
// listed.
func fitErr(ctx context.Context, c *client.Client, l client.Layout) (refuse, narrow error) {
	r, err := c.ListOsts(ctx)
	if err != nil {
		return nil, nil
	}
	n := 0
	for _, o := range r.OSTs {
		if o.State != "removed" {
			n++
		}
	}
	w := int(l.K + l.M)
	need := int(l.K) + min(r.MinParity, int(l.M))
	switch {
	case need > n:
		return fmt.Errorf("k=%d m=%d: a write needs %d OSTs (k + min-parity %d), and the cluster has %d (shoal admin osts): no file could be written there beyond the small ones the MDS mirrors (--mirror-below)", l.K, l.M, need, r.MinParity, n), nil
	case w > n:
		return nil, fmt.Errorf("k=%d m=%d: an extent of this layout needs %d OSTs, and the cluster has %d (shoal admin osts): its files are written narrow, with %d parity chunks, until there are enough", l.K, l.M, w, n, n-int(l.K))
	}
	return nil, nil
}
