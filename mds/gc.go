package mds

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// Garbage collection of chunks.
//
// Two kinds of extents lose their chunks: extents whose refcount fell to
// zero (queued in "g" by the mutation that dropped the last reference, due
// GCGrace later, so a reader holding the old map can finish), and
// allocations never committed ("p" keys older than GCGrace: the client
// died or gave up). Each round first moves expired allocations into the
// queue, due at once, in one batch: from then on a late commit of such an
// extent fails with ErrStale instead of racing the deletion. Then it sends
// DeleteChunks for every due entry to each OST of its placement and removes
// an entry once every OST confirmed. An OST that is down or fails keeps the
// entry, moved back by gcRetryDelay, and the OSTs that did confirm are
// remembered (in memory) and not asked again; an OST no longer registered
// counts as done.

// gcEntry is one due GC-queue entry.
type gcEntry struct {
	key []byte
	ext *mdspb.Extent
}

// gcStore is the namespace as the GC sees it (admin_store.go implements
// it on *Server): pending allocations, the GC queue and the request ids
// to forget (dedup.go).
type gcStore interface {
	// expirePending moves allocations older than grace into the GC
	// queue, due at now, in one transaction (at most gcBatch).
	expirePending(now int64, grace time.Duration) error
	// expireRequests forgets the request ids recorded before now.
	expireRequests(now int64) error
	// dueGC returns up to gcBatch queue entries due at or before now.
	dueGC(now int64) ([]gcEntry, error)
	// requeueGC removes due entries from the queue in one transaction,
	// putting back those not finished, due at retryAt.
	requeueGC(due []gcEntry, finished []bool, retryAt int64) error
}

// gcConfig is what newGC needs.
type gcConfig struct {
	Interval, Grace time.Duration // Options.GCInterval, Options.GCGrace
	Now             func() time.Time
	Log             *slog.Logger
	ChunksDeleted   prometheus.Counter
	ExtentsDone     prometheus.Counter

	Store  gcStore
	Osts   ostDirectory
	Chunks chunkDeleter
	Lead   leadership
}

// gc is the garbage collector. Its state is owned by its goroutine
// (loop); tests call round directly with an Interval long enough that the
// loop never fires.
type gc struct {
	interval, grace            time.Duration
	clock                      func() time.Time
	log                        *slog.Logger
	chunksDeleted, extentsDone prometheus.Counter
	store                      gcStore
	osts                       ostDirectory
	chunks                     chunkDeleter
	lead                       leadership

	// confirmed[extent] holds the OSTs that deleted their chunk of an
	// extent still in the queue (other OSTs failed).
	confirmed map[uint64]map[uint32]bool
	// kick asks the GC goroutine for a round now (runNow); the round's
	// error is sent back on the channel passed.
	kick chan chan error
}

func newGC(c gcConfig) *gc {
	return &gc{
		interval: c.Interval, grace: c.Grace, clock: c.Now, log: c.Log,
		chunksDeleted: c.ChunksDeleted, extentsDone: c.ExtentsDone,
		store: c.Store, osts: c.Osts, chunks: c.Chunks, lead: c.Lead,
		confirmed: make(map[uint64]map[uint32]bool),
		kick:      make(chan chan error),
	}
}

func (g *gc) loop(ctx context.Context) {
	tick := time.NewTicker(g.interval)
	defer tick.Stop()
	for {
		var reply chan error
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case reply = <-g.kick:
		}
		if !g.lead.leading() {
			if reply != nil {
				reply <- g.lead.check()
			}
			continue
		}
		err := g.round(ctx)
		if err != nil && ctx.Err() == nil {
			g.log.Warn("gc round failed", "err", err)
		}
		if reply != nil {
			reply <- err
		}
	}
}

// runNow has the GC goroutine run a round now and returns its error (on
// a follower: why it is not the leader).
func (g *gc) runNow(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case g.kick <- reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// round runs one round of GC. It uses g.confirmed unlocked, so it runs
// only on the GC goroutine (or a test's).
func (g *gc) round(ctx context.Context) error {
	now := g.clock().UnixNano()
	if err := g.store.expirePending(now, g.grace); err != nil {
		return err
	}
	if err := g.store.expireRequests(now); err != nil {
		return err
	}
	due, err := g.store.dueGC(now)
	if err != nil || len(due) == 0 {
		return err
	}
	// Group the chunks by OST, leaving out those an OST already confirmed
	// in an earlier round.
	byOst := make(map[uint32][]*ostpb.ChunkId)
	for _, e := range due {
		for j, id := range e.ext.GetOsts() {
			if !g.confirmed[e.ext.Id][id] {
				byOst[id] = append(byOst[id], &ostpb.ChunkId{Extent: e.ext.Id, Index: uint32(j)})
			}
		}
	}
	infos := g.osts.ostView().infos
	// done[id] is true once OST id confirmed this round (or is not
	// registered).
	done := make(map[uint32]bool, len(byOst))
	for id, chunks := range byOst {
		info, ok := infos[id]
		if !ok || (info.State == StateRemoved && !info.Up) { // a removed OST's chunks are gone
			done[id] = true
			continue
		}
		if !info.Up {
			continue
		}
		if err := g.chunks.deleteChunks(ctx, info, chunks); err != nil {
			g.log.Warn("gc: delete chunks failed", "ost", id, "chunks", len(chunks), "err", err)
			continue
		}
		g.chunksDeleted.Add(float64(len(chunks)))
		done[id] = true
	}
	// Finished entries leave the queue; the others move back by
	// gcRetryDelay so that they do not hold up the entries behind them.
	finished := make([]bool, len(due))
	n := 0
	for i, e := range due {
		conf := g.confirmed[e.ext.Id]
		complete := true
		for _, id := range e.ext.GetOsts() {
			if done[id] {
				if conf == nil {
					conf = make(map[uint32]bool)
					g.confirmed[e.ext.Id] = conf
				}
				conf[id] = true
			}
			complete = complete && conf[id]
		}
		finished[i] = complete
		if complete {
			n++
		} else {
			g.log.Debug("gc: extent kept for retry", "extent", e.ext.Id)
		}
	}
	if err := g.store.requeueGC(due, finished, now+int64(gcRetryDelay)); err != nil {
		return err
	}
	for i, e := range due {
		if finished[i] {
			delete(g.confirmed, e.ext.Id)
		}
	}
	if n > 0 {
		g.extentsDone.Add(float64(n))
		g.log.Debug("gc: extents collected", "count", n)
	}
	return nil
}
