package mds

import (
	"context"
	"sync"
)

// tasks is the one group of goroutines a Server starts: its GC, session
// and administration loops, the background WAL syncs of early-reply
// mutations (txn.go) and the format of a replicated database
// (raftleader.go). Close stops the group (cancels its context, refuses new
// goroutines) and waits for every goroutine in it before it closes Pebble.
// The Raft replica's own loop and its transport's senders belong to the
// replica, whose close waits for them (raft.go, raftnet.go).
type tasks struct {
	ctx    context.Context // cancelled by stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex // guards stopped, and orders wg.Add before stop's wg.Wait
		stopped    bool
	}
}

// start makes the group's context, which carries parent's values but not
// its cancellation.
func (g *tasks) start(parent context.Context) {
	g.ctx, g.cancel = context.WithCancel(context.WithoutCancel(parent))
}

// Go runs fn on a goroutine of the group, with the group's context. Once
// the group is stopped it starts nothing and returns false.
func (g *tasks) Go(fn func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.stopped || g.ctx == nil {
		return false
	}
	g.wg.Go(func() { fn(g.ctx) })
	return true
}

// stop cancels the group's context, refuses new goroutines and waits for
// those running. It may be called more than once.
func (g *tasks) stop() {
	g.mu.Lock()
	g.mu.stopped = true
	g.mu.Unlock()
	if g.cancel != nil {
		g.cancel()
	}
	g.wg.Wait()
}
