package ckpt

import "testing"

// TestCoalesce: writes merge where they are one run in the file and in
// one buffer's memory, and nowhere else.
func TestCoalesce(t *testing.T) {
	b := make([]byte, 100)
	other := make([]byte, 10)
	got := coalesce([]write{
		{0, b[0:10]}, {10, b[10:30]}, {30, b[30:40]}, // one run
		{40, other},                    // the next file bytes, other memory
		{50, b[50:60]}, {60, b[61:70]}, // the file continues, memory does not
		{70, b[70:80:80]}, {80, b[80:90]}, // capacity ends at the boundary
		{95, b[90:95]}, // memory continues, the file does not
	})
	want := []struct{ off, n int64 }{{0, 40}, {40, 10}, {50, 10}, {60, 9}, {70, 10}, {80, 10}, {95, 5}}
	if len(got) != len(want) {
		t.Fatalf("%d writes, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].off != w.off || int64(len(got[i].data)) != w.n {
			t.Fatalf("write %d: %d+%d, want %d+%d", i, got[i].off, len(got[i].data), w.off, w.n)
		}
	}
	if &got[0].data[39] != &b[39] {
		t.Fatal("the merged run is not the buffer's memory")
	}
}
