package main

import (
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/ost"
)

// TestWorkerAndScrubFlags checks how the flags of shoal mds and shoal ost
// become mds.AdminOptions and ost.ScrubOptions: the "off" values of the
// flags (0) are the options' negative values, their zero being "default".
// Validation is in testdata/script/daemon_flags.txtar.
func TestWorkerAndScrubFlags(t *testing.T) {
	admin := func(args ...string) mds.AdminOptions {
		t.Helper()
		var f workerFlags
		cmd := &cobra.Command{}
		addWorkerFlags(cmd, &f)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		if p := workerChecks(cmd, nil); len(p) > 0 {
			t.Fatalf("%v: %v", args, p)
		}
		o, err := f.options()
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if o, want := admin(), (mds.AdminOptions{Interval: time.Second, RepairAfter: 30 * time.Minute, RetireGrace: 2 * time.Minute, Concurrency: mds.DefaultAdminConcurrency}); o != want {
		t.Errorf("defaults: %+v, want %+v", o, want)
	}
	o := admin("--repair-after", "0", "--move-grace", "10s", "--admin-concurrency", "16", "--rebalance-bandwidth", "100MiB/s", "--admin-interval", "250ms")
	if want := (mds.AdminOptions{Interval: 250 * time.Millisecond, RepairAfter: -1, RetireGrace: 10 * time.Second, Concurrency: 16, RebalanceBandwidth: 100 << 20}); o != want {
		t.Errorf("set: %+v, want %+v", o, want)
	}

	scrub := func(args ...string) ost.ScrubOptions {
		t.Helper()
		var f scrubFlags
		cmd := &cobra.Command{}
		addScrubFlags(cmd, &f)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		if p := scrubChecks(cmd, nil); len(p) > 0 {
			t.Fatalf("%v: %v", args, p)
		}
		o, err := f.options()
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if o, want := scrub(), (ost.ScrubOptions{Rate: ost.DefaultScrubRate, AdminRate: ost.DefaultAdminScrubRate, PassInterval: ost.DefaultScrubPassInterval}); o != want {
		t.Errorf("scrub defaults: %+v, want %+v", o, want)
	}
	if o, want := scrub("--scrub=false", "--scrub-interval", "0", "--scrub-rate", "1GB", "--scrub-admin-rate", "64MiB"), (ost.ScrubOptions{Rate: -1, AdminRate: 64 << 20, PassInterval: -1}); o != want {
		t.Errorf("scrub off: %+v, want %+v", o, want)
	}
	if o := scrub("--scrub-rate", "1GB"); o.Rate != 1e9 {
		t.Errorf("--scrub-rate 1GB: %d", o.Rate)
	}
}

// The placement flags of shoal mds and --capacity of shoal ost, and
// their checks.
func TestPlacementFlags(t *testing.T) {
	parse := func(add func(*cobra.Command), check configCheck, args ...string) (*cobra.Command, []string) {
		t.Helper()
		cmd := &cobra.Command{}
		add(cmd)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		return cmd, check(cmd, nil)
	}
	var f placementFlags
	if _, p := parse(func(c *cobra.Command) { addPlacementFlags(c, &f) }, placementChecks); len(p) > 0 {
		t.Fatalf("defaults: %v", p)
	}
	if o, want := f.options(), (mds.PlacementOptions{NearFullRatio: mds.DefaultNearFullRatio, FullRatio: mds.DefaultFullRatio, MirrorBelow: mds.DefaultMirrorBelow}); o != want {
		t.Errorf("defaults: %+v, want %+v", o, want)
	}
	_, p := parse(func(c *cobra.Command) { addPlacementFlags(c, &f) }, placementChecks, "--min-parity", "1", "--nearfull-ratio", "0.8", "--full-ratio", "0.9", "--mirror-below", "0")
	if o, want := f.options(), (mds.PlacementOptions{MinParity: 1, NearFullRatio: 0.8, FullRatio: 0.9, MirrorBelow: -1}); len(p) > 0 || o != want {
		t.Errorf("set: %+v %v, want %+v", o, p, want)
	}
	_, p = parse(func(c *cobra.Command) { addPlacementFlags(c, &f) }, placementChecks, "--min-parity", "-1", "--nearfull-ratio", "0", "--full-ratio", "1.5", "--mirror-below", "small")
	if len(p) != 4 {
		t.Errorf("bad values: %q, want 4 problems", p)
	}
	var capacity string
	if _, p := parse(func(c *cobra.Command) { capacityFlag(c, &capacity) }, capacityCheck, "--capacity", "lots"); len(p) != 1 {
		t.Errorf("--capacity lots: %q", p)
	}
	parse(func(c *cobra.Command) { capacityFlag(c, &capacity) }, capacityCheck, "--capacity", "2GiB")
	tune, err := withCapacity(capacity)
	var o ost.Options
	if tune(&o); err != nil || o.Capacity != 2<<30 {
		t.Errorf("--capacity 2GiB: %d %v", o.Capacity, err)
	}
}
