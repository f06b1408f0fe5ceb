package mds

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// TestCrashStrictMem crashes a single MDS at seeded points on Pebble's
// crashable in-memory file system (vfs.NewCrashableMem and CrashClone, the
// successor of the strict MemFS: what was not synced is thrown away),
// reopens it, and checks the metadata invariants and that every
// acknowledged mutation survived. SHOAL_CRASH_POINTS sets the number of
// crash points (default 200; `make soak` should run 1000 or more).
func TestCrashStrictMem(t *testing.T) {
	points := 200
	if v, err := strconv.Atoi(os.Getenv("SHOAL_CRASH_POINTS")); err == nil && v > 0 {
		points = v
	}
	if testing.Short() {
		points = 10
	}
	for seed := 0; seed < points; seed++ {
		crashOnce(t, uint64(seed))
	}
}

func crashOnce(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5ca1ab1e))
	fs := vfs.NewCrashableMem()
	o := Options{Dir: "/mds", FS: fs, GCInterval: time.Hour, GCGrace: time.Minute}
	ctx := context.Background()
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	// acked[name] is true when the name's create was acknowledged and
	// no unlink or rename of it was attempted since.
	acked := map[string]bool{}
	var names []string
	crashAt := rng.IntN(120)
	for i := 0; i < crashAt; i++ {
		switch op := rng.IntN(10); {
		case op < 6 || len(names) == 0:
			name := fmt.Sprintf("f%d-%d", seed, i)
			mode := uint32(sIFREG | 0o644)
			if rng.IntN(4) == 0 {
				mode = sIFDIR | 0o755
			}
			var err error
			if mode&sIFMT == sIFDIR {
				_, err = s.Mkdir(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(name), Mode: mode})
			} else {
				_, err = s.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte(name), Mode: mode, Exclusive: true})
			}
			if err != nil {
				t.Fatalf("seed %d: create: %v", seed, err)
			}
			acked[name] = true
			names = append(names, name)
		case op < 8:
			j := rng.IntN(len(names))
			old := names[j]
			nn := old + "r"
			delete(acked, old)
			if _, err := s.Rename(ctx, &mdspb.RenameRequest{OldParent: rootIno, OldName: []byte(old), NewParent: rootIno, NewName: []byte(nn)}); err != nil {
				t.Fatalf("seed %d: rename: %v", seed, err)
			}
			names[j] = nn
			acked[nn] = true
		default:
			j := rng.IntN(len(names))
			n := names[j]
			delete(acked, n)
			var err error
			if _, err = s.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte(n)}); err != nil {
				_, err = s.Rmdir(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte(n)})
			}
			if err != nil {
				t.Fatalf("seed %d: remove %s: %v", seed, n, err)
			}
			names = append(names[:j], names[j+1:]...)
		}
	}
	// Crash: the clone holds what was synced and, for half of the seeds,
	// a random part of what was not (as a real disk may have written
	// some of it back); nothing the server does afterwards reaches it.
	cfg := vfs.CrashCloneCfg{}
	if seed%2 == 1 {
		cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(seed, 7))}
	}
	crashed := fs.CrashClone(cfg)
	s.Close()
	o.FS = crashed
	s2, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("seed %d: reopen after crash at op %d: %v", seed, crashAt, err)
	}
	defer s2.Close()
	if err := s2.snapshot(checkInvariants); err != nil {
		t.Fatalf("seed %d: invariants after crash at op %d: %v", seed, crashAt, err)
	}
	for n := range acked {
		if _, err := s2.Lookup(ctx, &mdspb.LookupRequest{Parent: rootIno, Name: []byte(n)}); err != nil {
			t.Fatalf("seed %d: acknowledged %s lost in crash at op %d: %v", seed, n, crashAt, err)
		}
	}
}
