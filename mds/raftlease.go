package mds

import (
	"context"
	"encoding/binary"
	"time"

	"go.etcd.io/raft/v3"
)

// check reports whether this member takes calls now; if not, the error
// to answer with. A serving leader whose read lease has lapsed (a slow
// heartbeat round) waits up to an election timeout for it to be renewed.
func (r *replica) check() error {
	deadline := time.Now().Add(time.Duration(r.o.ElectionTicks) * r.o.TickInterval)
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if !r.mu.serving || !r.mu.formatted {
			return r.notLeaderLocked()
		}
		now := time.Now()
		if !r.mu.leaseHold && now.Before(r.mu.leaseUntil) {
			return nil
		}
		if now.After(deadline) {
			return r.notLeaderLocked()
		}
		wait := r.mu.leaseWait
		r.mu.Unlock()
		select {
		case <-wait:
		case <-time.After(r.o.TickInterval):
		}
		r.mu.Lock()
	}
}

// The read lease. A serving leader answers every call, reads included,
// from its applied state, which is linearizable only while no other
// member can have been elected. CheckQuorum alone does not ensure it:
// the leader checks its quorum once per election timeout, so it may go
// on serving for up to two of them after it was cut off, while the
// others can elect after one (TestRaftPartition saw 870 ms and 530 ms).
// So the lease is explicit: every tick the loop makes a ReadIndex
// request (ReadOnlySafe: confirmed by a heartbeat round that a quorum
// answers); once confirmed, the lease runs to the time the request was
// sent plus ElectionTicks-2 ticks. A follower that received that
// heartbeat neither votes for another member nor campaigns for at least
// ElectionTicks-1 ticks after it (CheckQuorum's in-lease rule, and its
// election timeout), and a new leader needs one of them; the tick left
// over covers a read that started just before the lease ended and the
// tick granularity. Assumes clocks that tick at the same rate within
// that margin (not synchronized clocks), as every lease does. A
// leadership transfer (which bypasses the in-lease rule) drops the
// lease first.

// renewLease makes a ReadIndex request to renew the lease, on a serving
// leader. Ready loop only.
func (r *replica) renewLease() {
	r.mu.Lock()
	serving, term, hold := r.mu.serving, r.mu.servingTerm, r.mu.leaseHold
	r.mu.Unlock()
	now := time.Now()
	for tok, q := range r.leaseReqs {
		if now.Sub(q.sent) > time.Duration(2*r.o.ElectionTicks)*r.o.TickInterval {
			delete(r.leaseReqs, tok)
		}
	}
	if !serving || hold {
		return
	}
	r.leaseToken++
	r.leaseReqs[r.leaseToken] = leaseReq{sent: now, term: term}
	ctx, cancel := context.WithTimeout(r.ctx, r.o.TickInterval)
	defer cancel()
	if err := r.node.ReadIndex(ctx, binary.BigEndian.AppendUint64(nil, r.leaseToken)); err != nil {
		delete(r.leaseReqs, r.leaseToken)
	}
}

// extendLease extends the lease by the ReadIndex requests a Ready
// confirms. Ready loop only.
func (r *replica) extendLease(rss []raft.ReadState) {
	if len(rss) == 0 {
		return
	}
	d := time.Duration(r.o.ElectionTicks-2) * r.o.TickInterval
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range rss {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		tok := binary.BigEndian.Uint64(rs.RequestCtx)
		q, ok := r.leaseReqs[tok]
		delete(r.leaseReqs, tok)
		if !ok || !r.mu.serving || r.mu.leaseHold || q.term != r.mu.servingTerm || r.mu.term != q.term {
			continue
		}
		if until := q.sent.Add(d); until.After(r.mu.leaseUntil) {
			r.mu.leaseUntil = until
			close(r.mu.leaseWait)
			r.mu.leaseWait = make(chan struct{})
		}
	}
}

// holdLease drops the lease and stops renewing it (before a leadership
// transfer), or lets it be renewed again.
func (r *replica) holdLease(hold bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.leaseHold = hold
	if hold {
		r.mu.leaseUntil = time.Time{}
	}
}

func (r *replica) stopCtx() context.Context { return r.ctx }

func (r *replica) leading() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.serving
}
