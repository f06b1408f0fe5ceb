package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/test/cluster"
)

// TestRaftMetrics checks the Raft metrics of a replicated MDS's members
// (docs/reliability.md): present on every member, named by STYLE.md's
// rules (lintMetrics), one member leading, terms, indexes and proposals
// counted.
func TestRaftMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	reg := prometheus.NewRegistry()
	cl := cluster.Start(t, cluster.Options{MDSReplicas: 3, Dir: cluster.TmpfsDir(t), OSTs: 3, Registry: reg})
	c := cl.Client()
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if err := c.Mkdir(ctx, fmt.Sprintf("/d%d", i), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.WaitMDSConverged(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range lintMetrics(fams) {
		t.Error(p)
	}
	got := map[string]map[string]float64{} // name -> member -> value
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			member := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "member" {
					member = l.GetValue()
				}
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			if got[f.GetName()] == nil {
				got[f.GetName()] = map[string]float64{}
			}
			got[f.GetName()][member] = v
		}
	}
	for _, name := range []string{"shoal_mds_raft_term", "shoal_mds_raft_is_leader", "shoal_mds_raft_commit_index",
		"shoal_mds_raft_applied_index", "shoal_mds_raft_proposals_total", "shoal_mds_raft_proposals_failed_total",
		"shoal_mds_raft_leader_changes_total", "shoal_mds_raft_snapshot_sends_total",
		"shoal_mds_raft_apply_duration_seconds", "shoal_mds_raft_log_sync_duration_seconds"} {
		if len(got[name]) != 3 {
			t.Errorf("%s: on members %v, want all 3", name, got[name])
		}
	}
	leaders, proposals := 0.0, 0.0
	for m, v := range got["shoal_mds_raft_is_leader"] {
		leaders += v
		proposals += got["shoal_mds_raft_proposals_total"][m]
		if got["shoal_mds_raft_term"][m] < 1 || got["shoal_mds_raft_applied_index"][m] < 20 || got["shoal_mds_raft_commit_index"][m] < 20 {
			t.Errorf("member %s: term %v, applied %v, commit %v", m, got["shoal_mds_raft_term"][m],
				got["shoal_mds_raft_applied_index"][m], got["shoal_mds_raft_commit_index"][m])
		}
		if got["shoal_mds_raft_leader_changes_total"][m] < 1 || got["shoal_mds_raft_apply_duration_seconds"][m] < 1 {
			t.Errorf("member %s: %v leader changes, %v applies", m, got["shoal_mds_raft_leader_changes_total"][m], got["shoal_mds_raft_apply_duration_seconds"][m])
		}
	}
	if leaders != 1 || proposals < 20 {
		t.Errorf("%v members lead, %v proposals; want 1 and at least 20", leaders, proposals)
	}
}
