package main

import (
	"strings"
	"testing"
)

// TestStatusJudgeSpace: a full OST is HEALTH_ERR naming it, a near-full
// one HEALTH_WARN, narrow extents a warning; a full OST that is down is
// reported as down, not full.
func TestStatusJudgeSpace(t *testing.T) {
	healthy := func() *statusReport {
		r := &statusReport{Parity: 2, MDS: []statusMember{{ID: 1, Role: "leader"}}}
		for i := range uint32(6) {
			r.OSTs.List = append(r.OSTs.List, statusOST{ID: i + 1, Addr: "h:1", State: "up", Capacity: 100 << 30, Free: 60 << 30})
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		change func(r *statusReport)
		health string
		reason string // among the reasons
	}{
		{"healthy", func(*statusReport) {}, healthOK, ""},
		{"one near full", func(r *statusReport) {
			r.OSTs.List[3].Nearfull, r.OSTs.List[3].Free = true, 8<<30
		}, healthWarn, "OST 4 (h:1) is near full (92% used, 8.0 GiB free)"},
		{"one full", func(r *statusReport) {
			r.OSTs.List[4].Nearfull, r.OSTs.List[4].Full, r.OSTs.List[4].Free = true, true, 1<<30
		}, healthErr, "OST 5 (h:1) is full (99% used, 1.0 GiB free)"},
		{"full but down", func(r *statusReport) {
			r.OSTs.List[4].Full, r.OSTs.List[4].State = true, "down"
		}, healthWarn, "OST 5 (h:1) is down"},
		{"narrow extents", func(r *statusReport) { r.NarrowExtents = 12 }, healthWarn, "12 extents were written with fewer than k+m chunks"},
	} {
		r := healthy()
		tc.change(r)
		r.judge()
		if r.Health != tc.health {
			t.Errorf("%s: %s %v, want %s", tc.name, r.Health, r.Reasons, tc.health)
			continue
		}
		found := tc.reason == ""
		for _, x := range r.Reasons {
			found = found || strings.Contains(x, tc.reason)
		}
		if !found {
			t.Errorf("%s: reasons %q, want one with %q", tc.name, r.Reasons, tc.reason)
		}
	}
}
