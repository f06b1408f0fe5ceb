package mds

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shoalfs/shoal/internal/errs"
)

// The committer side of the replica (commit.go): a mutation is durable
// and visible once a quorum has it and it is applied here; early replies
// do not apply.

func (r *replica) commit(ctx context.Context, id string, _ bool, fn func(t *txn) error) error {
	return r.propose(ctx, id, fn)
}

func (r *replica) flush() error { return nil }

// dupError is errDuplicate with the answer the mutation recorded
// (replied; runTxn).
type dupError struct {
	reply   []byte
	replied bool
}

func (e *dupError) Error() string        { return errDuplicate.Error() }
func (e *dupError) Is(target error) bool { return target == errDuplicate }

// propose runs fn as one mutation on the leader: under the mutation lock, over
// the overlay; its writes are proposed as one entry, and propose returns
// once the entry is applied here (so every later read sees it), or fails
// with ErrNotLeader when the term ends first. reqID, when set, makes the
// mutation happen at most once: a batch with the same id applied before
// (or pending) makes propose return errDuplicate without running fn.
func (r *replica) propose(ctx context.Context, reqID string, fn func(t *txn) error) error {
	sm := r.sm
	sm.lockMutations()
	r.mu.Lock()
	if !r.mu.serving || r.ov == nil {
		err := r.notLeaderLocked()
		r.mu.Unlock()
		sm.unlockMutations()
		return err
	}
	term, termCtx := r.mu.servingTerm, r.mu.termCtx
	r.mu.Unlock()

	ov := r.ov
	beforeLen, beforeCount := len(ov.Repr()), ov.Count()
	t := sm.newTxn(ov)
	err := runTxn(t, reqID, fn)
	if err != nil || ov.Count() == beforeCount {
		if ov.Count() != beforeCount {
			if rerr := r.rebuildOverlay(); rerr != nil {
				sm.unlockMutations()
				return rerr
			}
		}
		// The txn wrote nothing, but what it found (EEXIST, ENOENT, a
		// request applied already, nothing to change) may rest on
		// proposals still pending in the overlay: answer only once they
		// are applied, as if it had been proposed after them; if they
		// may never be, the caller tries again (NOT_LEADER). Otherwise a
		// caller could see a write that is then lost with the term, or
		// see it before a read elsewhere does.
		r.mu.Lock()
		var upTo uint64
		if n := len(r.mu.pending); n > 0 {
			upTo = r.mu.pending[n-1].id
		}
		r.mu.Unlock()
		sm.unlockMutations()
		if upTo != 0 {
			if werr := r.waitPending(ctx, term, upTo); werr != nil {
				return werr
			}
		}
		return err
	}
	repr := make([]byte, 12, 12+len(ov.Repr())-beforeLen)
	binary.LittleEndian.PutUint32(repr[8:], ov.Count()-beforeCount)
	repr = append(repr, ov.Repr()[beforeLen:]...)

	r.mu.Lock()
	r.mu.nextProp++
	id := r.mu.nextProp
	w := make(chan error, 1)
	r.mu.waiters[id] = w
	r.mu.pending = append(r.mu.pending, pendingProp{id: id, repr: repr})
	r.mu.Unlock()
	r.m.proposals.Inc()
	if err := r.node.Propose(termCtx, encodeEntry(term, id, repr)); err != nil {
		r.m.proposalsFailed.Inc()
		// Not appended: take it out of the overlay again.
		r.mu.Lock()
		delete(r.mu.waiters, id)
		if n := len(r.mu.pending); n > 0 && r.mu.pending[n-1].id == id {
			r.mu.pending = r.mu.pending[:n-1]
		}
		nl := r.notLeaderLocked()
		r.mu.Unlock()
		if rerr := r.rebuildOverlay(); rerr != nil {
			r.log.Error("rebuild overlay", "err", rerr)
		}
		sm.unlockMutations()
		return fmt.Errorf("propose: %v: %w", err, nl)
	}
	if ov.Len() > overlayMaxBytes {
		if err := r.rebuildOverlay(); err != nil {
			sm.unlockMutations()
			return err
		}
	}
	sm.unlockMutations()
	select {
	case err := <-w:
		if err != nil {
			r.m.proposalsFailed.Inc()
		}
		return err
	case <-ctx.Done():
		// The entry may still be applied; the caller's retry (same
		// request id) will find out.
		return ctx.Err()
	}
}

// overlayMaxBytes bounds the overlay: past it, it is rebuilt from the
// proposals still pending.
const overlayMaxBytes = 4 << 20

// rebuildOverlay makes a new overlay of the pending proposals. The
// mutation lock is held. An entry leaves pending only after it is in the database, so
// nothing is missed; one that is in both is the same writes twice.
func (r *replica) rebuildOverlay() error {
	if r.ov != nil {
		r.ov.Close()
	}
	r.ov = r.db.NewIndexedBatch()
	r.mu.Lock()
	pend := append([]pendingProp(nil), r.mu.pending...)
	r.mu.Unlock()
	for _, p := range pend {
		if err := applyRepr(r.db, r.ov, p.repr); err != nil {
			return err
		}
	}
	return nil
}

// applyRepr appends the writes of a batch representation to b.
func applyRepr(db *pebble.DB, b *pebble.Batch, repr []byte) error {
	tmp := db.NewBatch()
	if err := tmp.SetRepr(append([]byte(nil), repr...)); err != nil {
		return fmt.Errorf("mds: raft entry: %v: %w", err, errs.ErrCorrupt)
	}
	err := b.Apply(tmp, nil)
	tmp.Close()
	return err
}

// waitPending waits until every proposal of term up to id upTo is
// applied; it fails with ErrNotLeader if the term ends first (one of
// them may then never be applied).
func (r *replica) waitPending(ctx context.Context, term, upTo uint64) error {
	for {
		r.mu.Lock()
		if !r.mu.serving || r.mu.servingTerm != term {
			err := r.notLeaderLocked()
			r.mu.Unlock()
			return err
		}
		done := len(r.mu.pending) == 0 || r.mu.pending[0].id > upTo
		ch := r.mu.applyWait
		r.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// settle waits until every proposal made so far in the serving term is
// applied, or the term ends (a change of directory entries whose call
// ended before its proposal was applied: dirlease.go).
func (r *replica) settle() {
	r.mu.Lock()
	serving, term, upTo := r.mu.serving, r.mu.servingTerm, r.mu.nextProp
	r.mu.Unlock()
	if serving {
		_ = r.waitPending(context.Background(), term, upTo)
	}
}
