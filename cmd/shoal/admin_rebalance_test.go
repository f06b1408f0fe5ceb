package main

import (
	"strings"
	"testing"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// TestNoMovesReason: a dry run with no moves says why (issue 18).
func TestNoMovesReason(t *testing.T) {
	for _, tc := range []struct {
		pct, threshold float64
		want           string
	}{
		{3, 5, "nothing to move: the imbalance 3.0% is within --threshold 5%"},
		{14, 5, "nothing to move, though the imbalance 14.0% is above --threshold 5%: no chunk move lowers it. A chunk moves only to an OST in service that holds no other chunk of its extent"},
	} {
		got := noMovesReason(&mdspb.RebalancePlan{ImbalancePct: tc.pct, ImbalanceAfterPct: tc.pct}, tc.threshold)
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("noMovesReason(%v, %v) = %q, want %q...", tc.pct, tc.threshold, got, tc.want)
		}
	}
}
