package fsx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two local directories on one file system must always agree.
func TestLocalAgainstLocal(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"file", Config{Seed: 1, Ops: 3000, Mode: File, MaxSize: 1 << 20, FarSize: 8 << 20}},
		{"file-nommap", Config{Seed: 2, Ops: 1000, Mode: File, NoMmap: true}},
		{"tree", Config{Seed: 3, Ops: 3000, Mode: Tree}},
		{"tree-open-unlinked", Config{Seed: 4, Ops: 2000, Mode: Tree, OpenUnlinked: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Run(tc.cfg, t.TempDir(), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if st.Ops != tc.cfg.Ops {
				t.Fatalf("ran %d ops, want %d", st.Ops, tc.cfg.Ops)
			}
			t.Logf("%+v", st.ByKind)
		})
	}
}

// The same seed gives the same operations, whatever the run's length.
func TestPrefixStable(t *testing.T) {
	for _, mode := range []Mode{File, Tree} {
		cfg := Config{Seed: 9, Mode: mode}
		long, short := mustFail(t, cfg, 25).Tail, mustFail(t, cfg, 15).Tail
		if len(short) >= tailLen || len(short) > len(long) ||
			strings.Join(long[:len(short)], "\n") != strings.Join(short, "\n") {
			t.Fatalf("%s mode: a shorter run is not a prefix:\n%s\n--\n%s", mode, strings.Join(long, "\n"), strings.Join(short, "\n"))
		}
	}
}

// mustFail runs cfg with a corruption of the tree under test before op
// ops-1 (the last), so the final comparison fails.
func mustFail(t *testing.T, cfg Config, ops int) *Failure {
	t.Helper()
	ref, dut := t.TempDir(), t.TempDir()
	cfg.Ops = ops
	cfg.Hook = func(i int) error {
		if i == ops-1 {
			return os.WriteFile(filepath.Join(dut, "intruder"), nil, 0o644)
		}
		return nil
	}
	_, err := Run(cfg, ref, dut)
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("corrupted run: %v, want a *Failure", err)
	}
	return f
}

// A difference injected before op 700 of 2000 is found at the end, and
// Shrink reports the shortest prefix that still sees it: 701 operations.
func TestShrink(t *testing.T) {
	const at = 700
	var dut string
	fresh := func() (string, string, error) {
		dut = t.TempDir()
		return t.TempDir(), dut, nil
	}
	cfg := Config{Seed: 5, Ops: 2000, Mode: File, MaxSize: 256 << 10, FarSize: 1 << 20}
	cfg.Hook = func(i int) error {
		if i == at {
			return os.WriteFile(filepath.Join(dut, "intruder"), []byte("x"), 0o644)
		}
		return nil
	}
	ref, d, _ := fresh()
	_, err := Run(cfg, ref, d)
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("run with an intruder: %v, want a *Failure", err)
	}
	if !strings.Contains(f.Msg, "intruder") {
		t.Fatalf("failure does not name the intruder: %v", f)
	}
	s := Shrink(f, fresh)
	t.Logf("shrunk:\n%v", s)
	if !s.Shrunk || s.Config.Ops != at+1 {
		t.Fatalf("shrunk to %d ops, want %d", s.Config.Ops, at+1)
	}
	msg := s.Error()
	for _, want := range []string{"seed 5", "shortest failing prefix: 701 ops", "op log tail", "#700 "} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message lacks %q:\n%s", want, msg)
		}
	}
}
