package mds

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Creates acknowledged early leave their WAL sync to a goroutine of the
// server; Close racing them waits for those syncs before it closes Pebble
// (run with -race: a sync on a closed database panics or races).
func TestEarlyReplyRacingClose(t *testing.T) {
	early := metadata.NewIncomingContext(ctx, metadata.Pairs(mdspb.CommitHeader, mdspb.CommitEarly))
	for round := range 20 {
		o := testOptions(t)
		o.Now = newClock().Now
		s, err := Open(ctx, o)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					name := fmt.Appendf(nil, "r%d-w%d-%d", round, w, i)
					if _, err := s.Create(early, &mdspb.CreateRequest{Parent: rootIno, Name: name, Mode: 0o644}); err != nil {
						return // closed
					}
				}
			})
		}
		for i := 0; ; i++ {
			if _, err := s.Create(early, &mdspb.CreateRequest{Parent: rootIno, Name: fmt.Appendf(nil, "r%d-main-%d", round, i), Mode: 0o644}); err != nil {
				t.Fatalf("create: %v", err)
			}
			if i == 20*(round+1) {
				break
			}
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wg.Wait()
	}
}

// An Open that fails after the Raft replica started (a corrupt OST
// record) closes the replica again: its metrics are unregistered and its
// log released, so that the next Open, with the record repaired, on the
// same registry, succeeds.
func TestOpenFailureClosesReplica(t *testing.T) {
	o := testOptions(t)
	o.Now = newClock().Now
	o.Registry = prometheus.NewRegistry()
	o.Raft = &RaftOptions{ID: 1, Peers: map[uint64]string{1: "127.0.0.1:1"}, TickInterval: 10 * time.Millisecond}
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	setKey := func(v []byte) {
		t.Helper()
		db, err := pebble.Open(o.Dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if v == nil {
			err = db.Delete(ostKey(9), pebble.Sync)
		} else {
			err = db.Set(ostKey(9), v, pebble.Sync)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	setKey([]byte("not an OST record"))
	if _, err := Open(ctx, o); !errors.Is(err, errs.ErrCorrupt) {
		t.Fatalf("Open with a corrupt OST record: %v, want ErrCorrupt", err)
	}
	setKey(nil)
	s, err = Open(ctx, o)
	if err != nil {
		t.Fatalf("Open after the failed one: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
