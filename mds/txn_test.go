package mds

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Namespace logic is functions over a txn, which needs a batch and a
// txnEnv, not a server: here on a bare in-memory Pebble database.
func TestTxnWithoutServer(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietPebble().Logger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	layout := &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}
	b := db.NewBatch()
	if err := formatBatch(b, 1, layout); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	env := &txnEnv{open: func(uint64) bool { return false }, log: slog.New(slog.DiscardHandler), placement: &PlacementOptions{}}
	mutate := func(fn func(t *txn) error) error {
		tx := &txn{env: env, b: db.NewIndexedBatch(), now: 2, inodes: map[uint64]*cachedInode{}, refs: map[uint64]*refDelta{}}
		defer tx.b.Close()
		if err := runTxn(tx, "", fn); err != nil {
			return err
		}
		return tx.b.Commit(pebble.Sync)
	}
	user := caller{uid: 1000, gid: 1000}
	var ino uint64
	err = mutate(func(tx *txn) error {
		p, err := tx.dir(rootIno)
		if err != nil {
			return err
		}
		n, err := tx.newChild(caller{}, p, &mdspb.CreateRequest{Name: []byte("d"), Uid: 1000, Gid: 1000}, sIFDIR|0o755, 2, "mkdir", nil)
		ino = n.GetAttr().GetIno()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := readInode(db, ino)
	if err != nil || n.GetAttr().GetUid() != 1000 || n.GetAttr().GetLayout().GetK() != 4 || n.GetAttr().GetMtimeNs() != 2 {
		t.Fatalf("made %v, %v: want uid 1000, the root's layout, time 2", n, err)
	}
	// A user without write permission on the root makes nothing.
	err = mutate(func(tx *txn) error {
		p, err := tx.dir(rootIno)
		if err != nil {
			return err
		}
		_, err = tx.newChild(user, p, &mdspb.CreateRequest{Name: []byte("e")}, sIFREG|0o644, 1, "create", nil)
		return err
	})
	if !errors.Is(err, errs.ErrPermission) {
		t.Fatalf("create in root by uid 1000: %v, want EACCES", err)
	}
	if _, _, ok, err := (&txn{env: env, b: db.NewIndexedBatch()}).dentry(rootIno, []byte("e")); ok || err != nil {
		t.Fatalf("entry e after a refused create: %v, %v", ok, err)
	}
}
