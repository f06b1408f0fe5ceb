package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// --json prints 64-bit integers as numbers, not as protojson's strings
// (issue 18: "used": "29380608"), in nested messages and lists too.
func TestPrintJSONNumbers(t *testing.T) {
	r := &mdspb.ListOstsReply{Osts: []*mdspb.OstInfo{{
		Id: 3, Used: 29380608, Capacity: 1 << 62, LastHeartbeatNs: -5, Addr: "127.0.0.1:1", State: "up",
	}}}
	var b bytes.Buffer
	if err := printJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{`"used": 29380608,`, `"capacity": 4611686018427387904,`, `"last_heartbeat_ns": -5,`, `"id": 3,`, `"addr": "127.0.0.1:1",`, `"chunks": 0,`} {
		if !strings.Contains(out, want) {
			t.Errorf("want %s in\n%s", want, out)
		}
	}
	// Exact, through a decoder that keeps numbers: 1<<62 is no float.
	d := json.NewDecoder(strings.NewReader(out))
	d.UseNumber()
	var v struct {
		Osts []struct {
			Capacity json.Number `json:"capacity"`
		} `json:"osts"`
	}
	if err := d.Decode(&v); err != nil || len(v.Osts) != 1 || v.Osts[0].Capacity != "4611686018427387904" {
		t.Errorf("decoded %+v, %v", v, err)
	}
	// Embedded in a report (admin df).
	b.Reset()
	if err := printJSON(&b, dfReport{Osts: []any{protoMap(r.Osts[0])}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"used": 29380608,`) {
		t.Errorf("df report:\n%s", b.String())
	}
}
