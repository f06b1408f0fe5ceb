package mds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	rpb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/peerpb"
)

// requestTTL is how long a request id is remembered: a retry must arrive
// within it. Clients give up wire.GroupRetryFor (30 s) after their first
// send, which comes before the apply that starts the TTL; the rest is a
// margin for the clocks of the members that propose and expire (the TTL
// was 10 minutes: 95 MB of live "q" keys at 3,000 creates/s, now 19).
const requestTTL = 2 * time.Minute

// runTxn runs fn in t, with the request id check and record, and flushes.
// The record ("q" key) goes into the mutation's own batch (so, in a
// replicated MDS, into the same Raft entry), with the answer fn recorded
// (txn.setReply): a retry that finds it gets that answer back
// (errDuplicate carries it), whatever happened to the names since. Only a
// txn that wrote something records its id (in a replica t.b is the
// overlay, which holds other proposals too).
func runTxn(t *txn, reqID string, fn func(t *txn) error) error {
	if reqID != "" {
		if v, err := getValue(t.b, reqKey(reqID)); err == nil {
			reply, ok := decodeReqValue(v)
			return &dupError{reply: reply, replied: ok}
		} else if !errors.Is(err, errs.ErrNotFound) {
			return err
		}
		t.reqID = reqID
	}
	before := t.b.Count()
	if err := fn(t); err != nil {
		return err
	}
	if err := t.flush(); err != nil {
		return err
	}
	if reqID != "" && t.b.Count() != before {
		due := t.now + int64(requestTTL)
		if err := t.b.Set(reqKey(reqID), encodeReqValue(due, t.reply, t.replied), nil); err != nil {
			return err
		}
		if err := t.b.Set(reqExpKey(due, reqID), nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// reqReplied marks a "q" value that carries the mutation's answer.
const reqReplied = 1

// encodeReqValue is a "q" key's value: the expiry, then, when the
// mutation recorded its answer, reqReplied and the encoded answer.
func encodeReqValue(due int64, reply []byte, replied bool) []byte {
	v := encodeU64(uint64(due))
	if !replied {
		return v
	}
	v = append(v, reqReplied)
	return append(v, reply...)
}

// decodeReqValue returns the answer recorded in a "q" value; ok is false
// when there is none (a method that records none, or a record written
// before answers were recorded).
func decodeReqValue(v []byte) (reply []byte, ok bool) {
	if len(v) < 9 || v[8] != reqReplied {
		return nil, false
	}
	return v[9:], true
}

// setReply records m as the answer of the mutation, for a retry with the
// same request id (dedup.go). It encodes m now, so later changes to m
// (a handle opened for the caller) are not part of it. Without a request
// id it does nothing: the hot path of a call without one pays nothing.
func (t *txn) setReply(m proto.Message) error {
	if t.reqID == "" {
		return nil
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	t.reply, t.replied = b, true
	return nil
}

// applyEntries applies committed entries, in order, in one Pebble batch
// that also records the applied index (so an entry is applied exactly once
// across restarts: the log is replayed from the applied index). The batch
// is not synced: the Raft log is, and the state machine is synced before
// the log is compacted.
func (r *replica) applyEntries(ents []*rpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	r.mu.Lock()
	applied := r.mu.applied
	r.mu.Unlock()
	b := r.db.NewBatch()
	defer b.Close()
	type outcome struct {
		id uint64
		ok bool
	}
	var outs []outcome
	var last, lastTerm uint64
	openTerm := uint64(0) // a leader's own first entry: start serving after it
	for _, e := range ents {
		if e.GetIndex() <= applied {
			// In the state machine already (installed from a copy taken
			// past the snapshot's index); but the Raft library must still
			// learn the configuration changes among them.
			if err := r.skipConfChange(e); err != nil {
				return err
			}
			continue
		}
		last, lastTerm = e.GetIndex(), e.GetTerm()
		switch e.GetType() {
		case rpb.EntryType_EntryNormal:
			if len(e.GetData()) == 0 {
				r.mu.Lock()
				if r.mu.role == raft.StateLeader && e.GetTerm() == r.mu.term {
					openTerm = e.GetTerm()
				}
				r.mu.Unlock()
				continue
			}
			term, id, repr, err := decodeEntry(e.GetData())
			if err != nil {
				return err
			}
			ok := term == e.GetTerm()
			if ok {
				if err := applyRepr(r.db, b, repr); err != nil {
					return fmt.Errorf("apply entry %d: %w", e.GetIndex(), err)
				}
			}
			outs = append(outs, outcome{id, ok})
		case rpb.EntryType_EntryConfChange:
			var cc rpb.ConfChange
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return fmt.Errorf("conf change %d: %w", e.GetIndex(), err)
			}
			r.confState = r.node.ApplyConfChange(&cc)
			if err := r.applyMember(b, &cc); err != nil {
				return err
			}
		case rpb.EntryType_EntryConfChangeV2:
			var cc rpb.ConfChangeV2
			if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
				return fmt.Errorf("conf change %d: %w", e.GetIndex(), err)
			}
			r.confState = r.node.ApplyConfChange(&cc)
		}
	}
	if last == 0 {
		return nil
	}
	if err := b.Set(appliedKey(), encodeApplied(last, lastTerm), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("mds: apply raft entries: %w", err)
	}
	r.mu.Lock()
	r.mu.applied, r.mu.appliedTerm = last, lastTerm
	r.appliedLocked()
	for _, o := range outs {
		for i, p := range r.mu.pending {
			if p.id == o.id {
				r.mu.pending = append(r.mu.pending[:i:i], r.mu.pending[i+1:]...)
				break
			}
		}
		if w, ok := r.mu.waiters[o.id]; ok {
			if o.ok {
				w <- nil
			} else {
				w <- r.notLeaderLocked()
			}
			delete(r.mu.waiters, o.id)
		}
	}
	removed := r.removed
	r.mu.Unlock()
	if removed {
		r.stepDown()
	}
	if openTerm != 0 {
		if err := r.startServing(openTerm); err != nil {
			return err
		}
	}
	return nil
}

// skipConfChange gives the Raft library a configuration change that the
// state machine holds already (its "P" keys came with a snapshot copy).
func (r *replica) skipConfChange(e *rpb.Entry) error {
	switch e.GetType() {
	case rpb.EntryType_EntryConfChange:
		var cc rpb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("conf change %d: %w", e.GetIndex(), err)
		}
		r.confState = r.node.ApplyConfChange(&cc)
	case rpb.EntryType_EntryConfChangeV2:
		var cc rpb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("conf change %d: %w", e.GetIndex(), err)
		}
		r.confState = r.node.ApplyConfChange(&cc)
	}
	return nil
}

// applyMember records a configuration change's member address ("P" key).
func (r *replica) applyMember(b *pebble.Batch, cc *rpb.ConfChange) error {
	id := cc.GetNodeId()
	switch cc.GetType() {
	case rpb.ConfChangeType_ConfChangeAddNode, rpb.ConfChangeType_ConfChangeAddLearnerNode:
		if len(cc.GetContext()) == 0 {
			return nil
		}
		r.mu.Lock()
		r.mu.members[id] = string(cc.GetContext())
		r.mu.Unlock()
		return b.Set(memberKey(id), cc.GetContext(), nil)
	case rpb.ConfChangeType_ConfChangeRemoveNode:
		r.mu.Lock()
		delete(r.mu.members, id)
		if id == r.o.ID {
			r.removed = true
		}
		r.mu.Unlock()
		return b.Delete(memberKey(id), nil)
	}
	return nil
}

// maybeCompact takes a snapshot at the applied index once SnapshotEntries
// entries were applied since the last one: it syncs the state machine
// (everything up to the applied index is then durable) and truncates the
// log behind it.
func (r *replica) maybeCompact() error {
	r.mu.Lock()
	applied := r.mu.applied
	r.mu.Unlock()
	if applied < r.snapIndex+r.o.SnapshotEntries {
		return nil
	}
	if err := r.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("mds: sync before compaction: %w", err)
	}
	if err := r.store.compact(applied, r.confState, u64(nil, r.o.ID), r.o.KeepEntries); err != nil {
		return fmt.Errorf("mds: compact raft log at %d: %w", applied, err)
	}
	r.snapIndex = applied
	r.log.Debug("raft log compacted", "index", applied)
	return nil
}

// installSnapshot replaces the state machine with a copy streamed from
// the leader (or the member that made the snapshot). The copy is at an
// applied index at or past the snapshot's; entries up to it are then
// skipped. It marks the database while it writes (snapInstalling) and
// syncs the final applied index, so a crash in between is detected.
func (r *replica) installSnapshot(snap *rpb.Snapshot) error {
	want := snap.GetMetadata().GetIndex()
	r.mu.Lock()
	applied := r.mu.applied
	from := r.mu.leader
	members := make(map[uint64]string, len(r.mu.members))
	for id, a := range r.mu.members {
		members[id] = a
	}
	r.mu.Unlock()
	if applied >= want {
		return nil // already there (a restart after the install)
	}
	if len(snap.GetData()) == 8 {
		if id, err := decodeU64(snap.GetData()); err == nil && (from == 0 || from == r.o.ID) {
			from = id
		}
	}
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		addr := members[from]
		if addr == "" {
			return fmt.Errorf("mds: snapshot at %d: no address for member %d", want, from)
		}
		err := r.fetchSnapshot(addr, want)
		if err == nil {
			return nil
		}
		lastErr = err
		r.log.Warn("snapshot fetch failed", "from", addr, "err", err)
		select {
		case <-r.stop:
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	return lastErr
}

func (r *replica) fetchSnapshot(addr string, want uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cli, err := r.net.client(addr)
	if err != nil {
		return err
	}
	st, err := cli.Snapshot(ctx, &peerpb.SnapshotRequest{})
	if err != nil {
		return err
	}
	first, err := st.Recv()
	if err != nil {
		return err
	}
	idx, term := first.GetAppliedIndex(), first.GetAppliedTerm()
	if idx < want {
		return fmt.Errorf("member %s is at %d, behind the snapshot at %d: %w", addr, idx, want, errs.ErrUnavailable)
	}
	db := r.db
	// Mark, then wipe, then fill.
	b := db.NewBatch()
	if err := b.DeleteRange([]byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, nil); err != nil {
		b.Close()
		return err
	}
	if err := b.Set(appliedKey(), encodeApplied(0, snapInstalling), nil); err != nil {
		b.Close()
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		b.Close()
		return err
	}
	b.Close()
	chunk := first
	n := 0
	for {
		b := db.NewBatch()
		for _, kv := range chunk.GetKvs() {
			if err := b.Set(kv.GetKey(), kv.GetValue(), nil); err != nil {
				b.Close()
				return err
			}
			n++
		}
		done := chunk.GetDone()
		if done {
			if err := b.Set(appliedKey(), encodeApplied(idx, term), nil); err != nil {
				b.Close()
				return err
			}
		}
		err := b.Commit(pebble.Sync)
		b.Close()
		if err != nil {
			return err
		}
		if done {
			break
		}
		if chunk, err = st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("snapshot stream ended early: %w", errs.ErrUnavailable)
			}
			return err
		}
	}
	members := map[uint64]string{}
	if err := scan(db, []byte{prefixMember}, func(k, v []byte) (bool, error) {
		id, err := decodeU64(k[1:])
		if err != nil {
			return false, err
		}
		members[id] = string(v)
		return true, nil
	}); err != nil {
		return err
	}
	r.mu.Lock()
	r.mu.applied, r.mu.appliedTerm = idx, term
	for id, a := range members {
		r.mu.members[id] = a
	}
	r.mu.Unlock()
	r.log.Info("installed snapshot", "from", addr, "applied", idx, "keys", n)
	return nil
}

// sendSnapshot streams this member's state machine (a Pebble snapshot at
// its applied index).
func (r *replica) sendSnapshot(st peerpb.Peer_SnapshotServer) error {
	r.m.snapshotSends.Inc()
	// The applied index is read with the snapshot: both come from one
	// Pebble snapshot.
	snap := r.db.NewSnapshot()
	defer snap.Close()
	v, err := getValue(snap, appliedKey())
	if err != nil {
		return err
	}
	idx, term, ok := decodeApplied(v)
	if !ok || term == snapInstalling {
		return fmt.Errorf("mds: no complete state to send: %w", errs.ErrUnavailable)
	}
	chunk := &peerpb.SnapshotChunk{AppliedIndex: idx, AppliedTerm: term}
	size := 0
	err = scanRange(snap, []byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, func(k, v []byte) (bool, error) {
		if k[0] == prefixApplied {
			return true, nil
		}
		chunk.Kvs = append(chunk.Kvs, &peerpb.KV{Key: append([]byte(nil), k...), Value: append([]byte(nil), v...)})
		size += len(k) + len(v)
		if size >= 1<<20 {
			if err := st.Send(chunk); err != nil {
				return false, err
			}
			chunk = &peerpb.SnapshotChunk{AppliedIndex: idx, AppliedTerm: term}
			size = 0
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	chunk.Done = true
	return st.Send(chunk)
}
