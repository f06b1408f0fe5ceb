package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// migrate's progress (issue 18): plain lines, no bar, when stderr is not
// a terminal; nothing at all (no bar, no rate) when there is nothing to
// copy.
func TestMigrateProgress(t *testing.T) {
	var b bytes.Buffer
	for _, tty := range []bool{false, true} {
		p := newMigrateProgress(&b, 0, tty, false)
		p.set(0)
		p.done(false)
		if b.Len() != 0 {
			t.Errorf("tty %v, nothing to do: %q", tty, b.String())
		}
	}

	p := newMigrateProgress(&b, 100<<20, false, false)
	p.set(1 << 20) // too soon for a line
	if b.Len() != 0 {
		t.Errorf("a line before %v: %q", migrateLineEvery, b.String())
	}
	p.t0, p.last = p.t0.Add(-10*time.Second), p.last.Add(-10*time.Second)
	p.set(10 << 20)
	p.set(100 << 20) // too soon again
	p.done(true)
	out := b.String()
	if strings.ContainsAny(out, "\r\x1b") || strings.Count(out, "\n") != 2 {
		t.Errorf("plain lines: %q", out)
	}
	if !strings.HasPrefix(out, "migrate: 10.0 MiB of 100.0 MiB copied (10%), ") ||
		!strings.Contains(out, "migrate: 100.0 MiB of 100.0 MiB copied (100%)") {
		t.Errorf("lines:\n%s", out)
	}

	b.Reset()
	p = newMigrateProgress(&b, 100, false, true) // --json: nothing
	p.t0, p.last = p.t0.Add(-time.Minute), p.last.Add(-time.Minute)
	p.set(50)
	p.done(true)
	if b.Len() != 0 {
		t.Errorf("--json: %q", b.String())
	}
}
