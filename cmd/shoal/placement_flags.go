package main

// Flags of placement (shoal mds) and of an OST's capacity (shoal ost);
// docs/reliability.md, "Writes while OSTs are down or full".

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/ost"
)

type placementFlags struct {
	minParity   int
	nearFull    float64
	full        float64
	mirrorBelow string
}

func addPlacementFlags(cmd *cobra.Command, f *placementFlags) {
	fs := cmd.Flags()
	fs.IntVar(&f.minParity, "min-parity", 0, "parity chunks an extent must have written for a write to go on while OSTs are down or full (Ceph's min_size is k + this); 0: writes go on with k OSTs, without redundancy until the MDS widens them")
	fs.Float64Var(&f.nearFull, "nearfull-ratio", mds.DefaultNearFullRatio, "used fraction of an OST's capacity at which status warns that it is near full")
	fs.Float64Var(&f.full, "full-ratio", mds.DefaultFullRatio, "used fraction of an OST's capacity beyond which no chunk is placed there (status: full)")
	fs.StringVar(&f.mirrorBelow, "mirror-below", "64KiB", "extents of at most this size (a small write and fsync, a small file) are coded with k=1: one data chunk and the layout's m parity copies, as many OST losses survived in fewer chunk writes and reads, for more space; 0: never")
}

func (f *placementFlags) options() mds.PlacementOptions {
	o := mds.PlacementOptions{MinParity: f.minParity, NearFullRatio: f.nearFull, FullRatio: f.full}
	if n, err := parseBytes(f.mirrorBelow); err == nil && n > 0 {
		o.MirrorBelow = int64(min(n, 1<<40))
	} else if err == nil {
		o.MirrorBelow = -1
	}
	return o
}

// placementChecks validates the placement keys.
func placementChecks(cmd *cobra.Command, _ []string) []string {
	var p []string
	fs := cmd.Flags()
	if n, err := fs.GetInt("min-parity"); err == nil && n < 0 {
		p = append(p, fmt.Sprintf("min-parity: %d is negative", n))
	}
	if _, err := parseBytes(flagString(cmd, "mirror-below")); err != nil {
		p = append(p, "mirror-below: "+err.Error())
	}
	near, _ := fs.GetFloat64("nearfull-ratio")
	full, _ := fs.GetFloat64("full-ratio")
	if full <= 0 || full > 1 {
		p = append(p, fmt.Sprintf("full-ratio: %v: want more than 0 and at most 1", full))
	}
	if near <= 0 || near > min(full, 1) {
		p = append(p, fmt.Sprintf("nearfull-ratio: %v: want more than 0 and at most full-ratio (%v)", near, full))
	}
	return p
}

// capacityFlag adds --capacity to shoal ost.
func capacityFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "capacity", "0", "most bytes of chunks this OST holds (e.g. 500GiB), for an OST sharing its disk; beyond it chunk writes fail with ENOSPC and the MDS places chunks elsewhere; 0: the file system's capacity")
}

// capacityCheck validates --capacity.
func capacityCheck(cmd *cobra.Command, _ []string) []string {
	if _, err := parseBytes(flagString(cmd, "capacity")); err != nil {
		return []string{"capacity: " + err.Error()}
	}
	return nil
}

// withCapacity sets an OST's capacity (startOST's tune).
func withCapacity(s string) (func(*ost.Options), error) {
	n, err := parseBytes(s)
	if err != nil {
		return nil, fmt.Errorf("--capacity: %w", err)
	}
	return func(o *ost.Options) { o.Capacity = n }, nil
}
