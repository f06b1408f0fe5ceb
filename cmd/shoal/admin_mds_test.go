package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/shoalfs/shoal/mds/peerpb"
)

// TestMembersJSON: the admin mds commands print members with admin
// status's field names, every field present, and 64-bit integers as
// JSON numbers.
func TestMembersJSON(t *testing.T) {
	var b bytes.Buffer
	big := uint64(1) << 60
	ms := []*peerpb.Member{{Id: 1, Addr: "a:1", Role: "leader", AppliedIndex: big, CommitIndex: big, Term: 3, Leader: 1}, {Id: 2, Addr: "b:2", Role: "follower"}}
	if err := printJSON(&b, membersJSON(ms)); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Members []map[string]any `json:"members"`
	}
	d := json.NewDecoder(&b)
	d.UseNumber()
	if err := d.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if len(got.Members) != 2 {
		t.Fatalf("members: %v", got.Members)
	}
	for _, k := range []string{"id", "address", "role", "applied_index", "commit_index", "term", "leader"} {
		if _, ok := got.Members[1][k]; !ok {
			t.Errorf("member 2 has no %q: %v", k, got.Members[1])
		}
	}
	if n, ok := got.Members[0]["applied_index"].(json.Number); !ok || n.String() != "1152921504606846976" {
		t.Errorf("applied_index %#v, want the number 1152921504606846976", got.Members[0]["applied_index"])
	}
}
