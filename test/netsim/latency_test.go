package netsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
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
	metrics := fmt.Sprintf("http://%s:%d/metrics", c.MDS[0].IP, mdsMetrics)
	run := func(delay time.Duration, clients int, tag string) []map[string]any {
		r := c.NewRelay(mds, delay)
		defer r.Close()
		ps := make([]*Proc, clients)
		outs := make([]string, clients)
		for i := range clients {
			outs[i] = filepath.Join(c.Dir, fmt.Sprintf("meta-%s-%d.json", tag, i))
			ps[i] = c.StartDriverVia(i, r.Addr, outs[i], "meta", "--dir", fmt.Sprintf("/meta-%s-%d", tag, i), "--n", fmt.Sprint(n), "--metrics", metrics)
		}
		res := make([]map[string]any, clients)
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
	r0, r1 := c.calibrate(t, 0), c.calibrate(t, oneWay)
	rtt := (r1 - r0).Seconds() * 1e3
	t.Logf("relay calibration: TCP ping-pong p50 %.3f ms at 0, %.3f ms at 0.5 ms each way: %.3f ms added per round trip", r0.Seconds()*1e3, r1.Seconds()*1e3, rtt)
	base := run(0, 1, "d0")[0]
	slow := run(oneWay, 1, "d500")[0]
	for _, op := range []string{"create", "stat", "open"} {
		f := func(m map[string]any, k string) float64 { v, _ := m[op+k].(float64); return v }
		t.Logf("%-6s 0 ms: %6.0f/s (p50 %.3f ms); 0.5 ms each way: %6.0f/s (p50 %.3f ms): %.1f round trips; MDS RPCs per op %v",
			op, f(base, "_per_s"), f(base, "_p50_ms"), f(slow, "_per_s"), f(slow, "_p50_ms"),
			(f(slow, "_p50_ms")-f(base, "_p50_ms"))/rtt, base[op+"_mds_rpcs"])
	}
	two := run(oneWay, 2, "two")
	for i, r := range two {
		t.Logf("two clients at 0.5 ms, client %d: create %.0f/s, stat %.0f/s, open %.0f/s", i+1, r["create_per_s"], r["stat_per_s"], r["open_per_s"])
	}
}

// calibrate returns the median time of a 1-byte TCP ping-pong through a
// relay adding delay each way, to an echo server on the bridge.
func (c *Cluster) calibrate(t *testing.T, delay time.Duration) time.Duration {
	ln, err := net.Listen("tcp", c.BridgeIP()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(s, s)
		s.Close()
	}()
	r := c.NewRelay(ln.Addr().String(), delay)
	defer r.Close()
	conn, err := net.Dial("tcp", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b := []byte{1}
	var d []time.Duration
	for range 200 {
		t0 := time.Now()
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, b); err != nil {
			t.Fatal(err)
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	return d[len(d)/2]
}
