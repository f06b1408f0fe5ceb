package mds

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	rpb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// raftLog is a member's durable Raft log: entries, hard state and the
// metadata of the last snapshot, in a Pebble database of its own
// (dir/raft), mirrored in a raft.MemoryStorage that the Raft library reads.
// save writes with pebble.Sync before the Ready loop sends any message, as
// etcd raft requires.
//
//	"e" + index(8)   raftpb.Entry
//	"h"              raftpb.HardState
//	"s"              raftpb.Snapshot (metadata only: the state machine is the data)
type raftLog struct {
	db  *pebble.DB
	mem *raft.MemoryStorage
	// term and vote of the last hard state written: a hard state that
	// changes neither (only the commit index) needs no sync.
	term, vote uint64
}

func entryKey(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'e'}, i) }

var (
	hardStateKey = []byte{'h'}
	snapMetaKey  = []byte{'s'}
)

// openRaftLog opens dir/raft and loads it into memory. fresh reports an
// empty log (a member that never ran).
func openRaftLog(fs vfs.FS, dir string, lg pebble.Logger) (_ *raftLog, fresh bool, err error) {
	db, err := pebble.Open(filepath.Join(dir, "raft"), &pebble.Options{FS: fs, Logger: lg})
	if err != nil {
		return nil, false, fmt.Errorf("mds: open raft log: %w", err)
	}
	l := &raftLog{db: db, mem: raft.NewMemoryStorage()}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	fresh = true
	var snap rpb.Snapshot
	if v, err := getValue(db, snapMetaKey); err == nil {
		fresh = false
		if err := proto.Unmarshal(v, &snap); err != nil {
			return nil, false, fmt.Errorf("mds: raft snapshot metadata: %w", err)
		}
		if err := l.mem.ApplySnapshot(&snap); err != nil {
			return nil, false, err
		}
	}
	var ents []*rpb.Entry
	err = scan(db, []byte{'e'}, func(_, v []byte) (bool, error) {
		e := &rpb.Entry{}
		if err := proto.Unmarshal(v, e); err != nil {
			return false, fmt.Errorf("mds: raft entry: %w", err)
		}
		if e.GetIndex() > snap.GetMetadata().GetIndex() {
			ents = append(ents, e)
		}
		return true, nil
	})
	if err != nil {
		return nil, false, err
	}
	if len(ents) > 0 {
		fresh = false
		if err := l.mem.Append(ents); err != nil {
			return nil, false, err
		}
	}
	if v, err := getValue(db, hardStateKey); err == nil {
		fresh = false
		var hs rpb.HardState
		if err := proto.Unmarshal(v, &hs); err != nil {
			return nil, false, fmt.Errorf("mds: raft hard state: %w", err)
		}
		if err := l.mem.SetHardState(&hs); err != nil {
			return nil, false, err
		}
		l.term, l.vote = hs.GetTerm(), hs.GetVote()
	}
	return l, fresh, nil
}

// save persists what a Ready asks to persist, then makes it visible to
// the Raft library. Entries replace any at the same or later indexes (a
// new leader may overwrite an uncommitted tail). The write is synced
// unless it holds only a new commit index (etcd's MustSync): a commit
// index lost in a crash is learnt again from the leader, and one below
// the state machine's applied index is raised to it at the next start
// (raiseCommit). synced reports a synced write.
func (l *raftLog) save(hs *rpb.HardState, ents []*rpb.Entry, snap *rpb.Snapshot) (synced bool, _ error) {
	hasSnap := snap != nil && !raft.IsEmptySnap(snap)
	hasHS := hs != nil && !raft.IsEmptyHardState(hs)
	if !hasSnap && !hasHS && len(ents) == 0 {
		return false, nil
	}
	sync := hasSnap || len(ents) > 0 || (hasHS && (hs.GetTerm() != l.term || hs.GetVote() != l.vote))
	b := l.db.NewBatch()
	defer b.Close()
	if hasSnap {
		meta := &rpb.Snapshot{Metadata: snap.GetMetadata()}
		v, err := proto.Marshal(meta)
		if err != nil {
			return false, err
		}
		if err := b.Set(snapMetaKey, v, nil); err != nil {
			return false, err
		}
		if err := b.DeleteRange(entryKey(0), entryKey(snap.GetMetadata().GetIndex()+1), nil); err != nil {
			return false, err
		}
	}
	if len(ents) > 0 {
		// Entries past the new ones (an uncommitted tail a new leader
		// replaces) go. Only then: a range deletion per write piles up
		// tombstones that make every memtable flush slow (it was 70% of
		// a group's CPU under creates).
		last, err := l.mem.LastIndex()
		if err != nil {
			return false, err
		}
		if first, end := ents[0].GetIndex(), ents[len(ents)-1].GetIndex(); first <= last && end < last {
			if err := b.DeleteRange(entryKey(end+1), entryKey(last+1), nil); err != nil {
				return false, err
			}
		}
		for _, e := range ents {
			v, err := proto.Marshal(e)
			if err != nil {
				return false, err
			}
			if err := b.Set(entryKey(e.GetIndex()), v, nil); err != nil {
				return false, err
			}
		}
	}
	if hasHS {
		v, err := proto.Marshal(hs)
		if err != nil {
			return false, err
		}
		if err := b.Set(hardStateKey, v, nil); err != nil {
			return false, err
		}
	}
	wo := pebble.NoSync
	if sync {
		wo = pebble.Sync
	}
	if err := b.Commit(wo); err != nil {
		return false, fmt.Errorf("mds: write raft log: %w", err)
	}
	if hasHS {
		l.term, l.vote = hs.GetTerm(), hs.GetVote()
	}
	if hasSnap {
		if err := l.mem.ApplySnapshot(snap); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
			return false, err
		}
	}
	if len(ents) > 0 {
		if err := l.mem.Append(ents); err != nil {
			return false, err
		}
	}
	if hasHS {
		if err := l.mem.SetHardState(hs); err != nil {
			return false, err
		}
	}
	return sync, nil
}

// raiseCommit raises the hard state's commit index to applied, the
// state machine's applied index, when a crash lost the (unsynced) write
// of a commit index that the state machine had already applied: every
// applied entry was committed, and the log holds it (entries are synced
// before they are acknowledged).
func (l *raftLog) raiseCommit(applied uint64) error {
	hs, _, err := l.mem.InitialState()
	if err != nil || hs.GetCommit() >= applied {
		return err
	}
	last, err := l.mem.LastIndex()
	if err != nil {
		return err
	}
	if applied > last {
		return fmt.Errorf("mds: state machine at index %d is past the raft log's last entry %d", applied, last)
	}
	hs = proto.Clone(hs).(*rpb.HardState)
	hs.Commit = &applied
	return l.mem.SetHardState(hs)
}

// compact records a snapshot at index (the state machine, durable up to
// index, is its data) and drops the entries up to it, keeping the last
// keep entries so that a follower a little behind catches up from the log.
func (l *raftLog) compact(index uint64, cs *rpb.ConfState, data []byte, keep uint64) error {
	snap, err := l.mem.CreateSnapshot(index, cs, data)
	if err != nil {
		if errors.Is(err, raft.ErrSnapOutOfDate) {
			return nil
		}
		return err
	}
	meta, err := proto.Marshal(&rpb.Snapshot{Metadata: snap.GetMetadata(), Data: data})
	if err != nil {
		return err
	}
	b := l.db.NewBatch()
	defer b.Close()
	if err := b.Set(snapMetaKey, meta, nil); err != nil {
		return err
	}
	cut := uint64(0)
	if index > keep {
		cut = index - keep
	}
	if cut > 0 {
		if err := b.DeleteRange(entryKey(0), entryKey(cut+1), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return err
	}
	if cut > 0 {
		if err := l.mem.Compact(cut); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	return nil
}

func (l *raftLog) close() error { return l.db.Close() }
