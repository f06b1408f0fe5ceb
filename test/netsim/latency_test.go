package netsim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLatency measures creates, stats and opens per second of one client
// (one thread) with the MDS reached through the delaying relay (relay.go)
// at 0 and at 0.5 ms each way (1 ms more per round trip), and derives the
// round trips each operation costs from the difference of the medians.
// Then the same with two client hosts at once, each its own directory.
// make scale runs it (SHOAL_SCALE=1).
func TestLatency(t *testing.T) {
	if os.Getenv("SHOAL_SCALE") != "1" {
		t.Skip("SKIP: SHOAL_SCALE=1 runs it (make scale)")
	}
	c := StartCluster(t, ClusterOptions{MDS: 1, OSTs: 3, Clients: 2})
	mds := fmt.Sprintf("%s:%d", c.MDS[0].IP, mdsPort)
	const n = 300
	const oneWay = 500 * time.Microsecond
	run := func(delay time.Duration, clients int, tag string) []map[string]float64 {
		r := c.NewRelay(mds, delay)
		defer r.Close()
		ps := make([]*Proc, clients)
		outs := make([]string, clients)
		for i := range clients {
			outs[i] = filepath.Join(c.Dir, fmt.Sprintf("meta-%s-%d.json", tag, i))
			ps[i] = c.StartDriverVia(i, r.Addr, outs[i], "meta", "--dir", fmt.Sprintf("/meta-%s-%d", tag, i), "--n", fmt.Sprint(n))
		}
		res := make([]map[string]float64, clients)
		for i, p := range ps {
			if ok, err := p.Wait(5 * time.Minute); !ok || err != nil {
				t.Fatalf("meta on %s: %v: %s", p.Host.Name, err, p.Tail())
			}
			b, _ := os.ReadFile(outs[i])
			if err := json.Unmarshal(b, &res[i]); err != nil {
				t.Fatal(err)
			}
		}
		return res
	}
	base := run(0, 1, "d0")[0]
	slow := run(oneWay, 1, "d500")[0]
	rtt := 2 * oneWay.Seconds() * 1e3
	for _, op := range []string{"create", "stat", "open"} {
		t.Logf("%-6s 0 ms: %6.0f/s (p50 %.3f ms); 0.5 ms each way: %6.0f/s (p50 %.3f ms): %.1f round trips",
			op, base[op+"_per_s"], base[op+"_p50_ms"], slow[op+"_per_s"], slow[op+"_p50_ms"],
			(slow[op+"_p50_ms"]-base[op+"_p50_ms"])/rtt)
	}
	two := run(oneWay, 2, "two")
	for i, r := range two {
		t.Logf("two clients at 0.5 ms, client %d: create %.0f/s, stat %.0f/s, open %.0f/s", i+1, r["create_per_s"], r["stat_per_s"], r["open_per_s"])
	}
}
