package mds

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/metadata"

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
