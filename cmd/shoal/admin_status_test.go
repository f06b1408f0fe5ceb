package main

import (
	"strings"
	"testing"
)

// TestStatusJudge: the verdict of `shoal admin status` from the findings.
func TestStatusJudge(t *testing.T) {
	ost := func(id uint32, state string, capacity, free uint64) statusOST {
		return statusOST{ID: id, Addr: "h:1", State: state, Capacity: capacity, Free: free, Chunks: 5}
	}
	healthy := func() *statusReport {
		r := &statusReport{Parity: 2, MDS: []statusMember{{ID: 1, Role: "leader"}}}
		for i := range uint32(6) {
			r.OSTs.List = append(r.OSTs.List, ost(i+1, "up", 100, 60))
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		change func(r *statusReport)
		health string
		reason string // in the first reason
	}{
		{"healthy", func(*statusReport) {}, healthOK, ""},
		{"draining and removed OSTs are fine", func(r *statusReport) {
			r.OSTs.List[0].State, r.OSTs.List[1].State = "draining", "removed"
		}, healthOK, ""},
		{"one OST down", func(r *statusReport) { r.OSTs.List[2].State = "down" }, healthWarn, "OST 3 (h:1) is down"},
		{"three down with m=2", func(r *statusReport) {
			for i := range 3 {
				r.OSTs.List[i].State = "down"
			}
		}, healthErr, "more than the parity (m=2)"},
		{"nothing up", func(r *statusReport) {
			for i := range r.OSTs.List {
				r.OSTs.List[i].State = "down"
			}
		}, healthErr, "no OST is up"},
		{"90% full", func(r *statusReport) {
			for i := range r.OSTs.List {
				r.OSTs.List[i].Free = 10
			}
		}, healthWarn, "90% full"},
		{"97% full", func(r *statusReport) {
			for i := range r.OSTs.List {
				r.OSTs.List[i].Free = 3
			}
		}, healthErr, "97% full"},
		{"failed job", func(r *statusReport) {
			r.Jobs = []statusJob{{Kind: "rebalance", State: "failed", Error: "boom"}}
		}, healthWarn, "the rebalance job failed: boom"},
		{"lost extents", func(r *statusReport) {
			r.Jobs = []statusJob{{Kind: "repair", State: "done", Lost: 4}}
		}, healthErr, "repair found 4 extents"},
		{"lost extents found by a repair, all OSTs back since", func(r *statusReport) {
			r.Jobs = []statusJob{{Kind: "repair", State: "failed", Lost: 540, Error: "540 extents have more than m chunks unreadable"}}
			r.Data = &statusData{Extents: 540}
		}, healthOK, ""},
		{"unreadable extents now", func(r *statusReport) {
			for i := range 3 {
				r.OSTs.List[i].State = "removed" // --force
			}
			r.Data = &statusData{Extents: 540, Degraded: 540, Unreadable: 540}
		}, healthErr, "540 extents have more than m chunks on down or removed OSTs"},
		{"a failed repair that still matters", func(r *statusReport) {
			r.OSTs.List[0].State = "removed"
			r.Jobs = []statusJob{{Kind: "repair", State: "failed", Error: "no progress"}}
			r.Data = &statusData{Extents: 10, Degraded: 10}
		}, healthWarn, "10 extents read degraded"},
		{"a repair that waits", func(r *statusReport) {
			r.OSTs.List[5].State = "down"
			r.Jobs = []statusJob{{Kind: "repair", State: "running", Waiting: "540 chunks of OSTs [6] have nowhere to go"}}
			r.Data = &statusData{Extents: 540, Degraded: 540}
		}, healthWarn, "OST 6 (h:1) is down"},
		{"bad chunks waiting", func(r *statusReport) {
			r.Jobs = []statusJob{{Kind: "scrub", State: "failed", Corrupt: 2, Error: "2 bad chunks could not be rebuilt"}}
			r.Data = &statusData{Extents: 10, Degraded: 2, BadChunksQueued: 2}
		}, healthWarn, "2 bad chunks wait for their rebuild"},
		{"a scrub's finding rebuilt since", func(r *statusReport) {
			r.Jobs = []statusJob{{Kind: "scrub", State: "failed", Corrupt: 2, Error: "2 bad chunks could not be rebuilt"}}
			r.Data = &statusData{Extents: 10}
		}, healthOK, ""},
		{"no OST registered", func(r *statusReport) { r.OSTs.List = nil }, healthWarn, "no OST has registered"},
		{"running job", func(r *statusReport) {
			r.Jobs = []statusJob{{Kind: "rebalance", State: "running"}}
		}, healthOK, ""},
	} {
		r := healthy()
		tc.change(r)
		r.judge()
		if r.Health != tc.health {
			t.Errorf("%s: %s %q, want %s", tc.name, r.Health, r.Reasons, tc.health)
			continue
		}
		if tc.reason != "" && (len(r.Reasons) == 0 || !strings.Contains(r.Reasons[0], tc.reason)) {
			t.Errorf("%s: reasons %q, want the first to say %q", tc.name, r.Reasons, tc.reason)
		}
	}

	// A job that waits says why, after the OST that is down.
	rw := healthy()
	rw.OSTs.List[5].State = "down"
	rw.Jobs = []statusJob{{Kind: "repair", State: "running", Waiting: "540 chunks of OSTs [6] have nowhere to go"}}
	rw.judge()
	if len(rw.Reasons) != 2 || !strings.Contains(rw.Reasons[1], "the repair job waits: 540 chunks of OSTs [6] have nowhere to go") {
		t.Errorf("waiting repair: reasons %q", rw.Reasons)
	}

	// OSTs on one file system count it once.
	r0 := healthy()
	for i := range r0.OSTs.List {
		r0.OSTs.List[i].FsID = "disk"
	}
	r0.judge()
	if r0.OSTs.Capacity != 100 || r0.OSTs.Used != 40 || r0.OSTs.Up != 6 {
		t.Errorf("6 OSTs on one disk of 100 bytes, 60 free: capacity %d, used %d, %d up", r0.OSTs.Capacity, r0.OSTs.Used, r0.OSTs.Up)
	}

	// The MDS group.
	for _, tc := range []struct {
		name    string
		members []statusMember
		health  string
	}{
		{"standalone", []statusMember{{Role: "standalone"}}, healthOK},
		{"one follower unreachable", []statusMember{{ID: 1, Role: "leader"}, {ID: 2, Role: "follower"}, {ID: 3, Role: "unreachable", Error: "refused"}}, healthWarn},
		{"no leader", []statusMember{{ID: 1, Role: "candidate"}, {ID: 2, Role: "unreachable"}}, healthWarn},
	} {
		r := healthy()
		r.MDS = tc.members
		r.judgeMDS(nil)
		r.judge()
		if r.Health != tc.health {
			t.Errorf("%s: %s %q, want %s", tc.name, r.Health, r.Reasons, tc.health)
		}
	}
	r := &statusReport{MDS: []statusMember{{Role: "unreachable", Error: "refused"}}}
	r.judgeMDS(errString("connection refused"))
	r.judge()
	if r.Health != healthErr || !strings.Contains(r.Reasons[0], "the MDS does not answer") {
		t.Errorf("MDS down: %s %q", r.Health, r.Reasons)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
