package cabi

import "testing"

// TestHandles: handles start at 1, are not reused, and a removed one is
// gone.
func TestHandles(t *testing.T) {
	var tb Handles[string]
	if _, ok := tb.Get(1); ok {
		t.Fatal("an empty table has handle 1")
	}
	a, b := tb.Add("a"), tb.Add("b")
	if a != 1 || b != 2 {
		t.Fatalf("handles %d, %d; want 1, 2", a, b)
	}
	if v, ok := tb.Get(b); !ok || v != "b" {
		t.Fatalf("Get(%d) = %q, %v", b, v, ok)
	}
	if v, ok := tb.Remove(a); !ok || v != "a" {
		t.Fatalf("Remove(%d) = %q, %v", a, v, ok)
	}
	if _, ok := tb.Remove(a); ok {
		t.Fatal("a handle removed twice")
	}
	if _, ok := tb.Get(a); ok {
		t.Fatal("a removed handle still open")
	}
	if c := tb.Add("c"); c != 3 {
		t.Fatalf("handle %d after 1 was removed, want 3 (never reused)", c)
	}
}
