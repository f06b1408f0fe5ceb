package mds

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// populate builds a small tree with data and returns a tree dump.
func populate(t *testing.T, e *env) (string, *mdspb.Extent) {
	t.Helper()
	e.registerOsts(6)
	d := e.mkdir(rootIno, "d")
	f := e.create(d.Ino, "f")
	e.create(rootIno, "g")
	if _, err := e.c.Symlink(ctx, &mdspb.SymlinkRequest{Parent: d.Ino, Name: []byte("s"), Target: []byte("f")}); err != nil {
		t.Fatal(err)
	}
	ex := e.alloc(f.Ino, 2)
	e.commit(f.Ino, ref(0, 3*mib, 0, written(ex[0], 3*mib)))
	if _, err := e.c.Rename(ctx, rn(rootIno, "g", d.Ino, "g2", 0)); err != nil {
		t.Fatal(err)
	}
	e.check()
	return dump(t, e) + "\n" + e.mapOf(f.Ino), ex[1]
}

func TestPersistence(t *testing.T) {
	e := newEnv(t)
	before, pend := populate(t, e)
	maxIno := e.create(rootIno, "last").Ino
	lastExt := e.alloc(maxIno, 1)[0].Id
	if _, err := e.c.Unlink(ctx, &mdspb.UnlinkRequest{Parent: rootIno, Name: []byte("last")}); err != nil {
		t.Fatal(err)
	}
	e = e.reopen()
	e.check()
	f, err := e.lookup(rootIno, "d")
	wantErr(t, "lookup d", err, nil)
	f, err = e.lookup(f.Ino, "f")
	wantErr(t, "lookup f", err, nil)
	if after := dump(t, e) + "\n" + e.mapOf(f.Ino); after != before {
		t.Fatalf("after reopen:\n%s\nwant\n%s", after, before)
	}
	// The uncommitted allocation is still pending and can be committed.
	e.heartbeatAll([]uint32{1, 2, 3, 4, 5, 6})
	e.commit(f.Ino, ref(3*mib, mib, 0, written(pend, mib)))
	// Ids are never reused.
	if n := e.create(rootIno, "new").Ino; n <= maxIno {
		t.Fatalf("ino %d reused (max was %d)", n, maxIno)
	}
	if id := e.alloc(f.Ino, 1)[0].Id; id <= lastExt {
		t.Fatalf("extent id %d reused (max was %d)", id, lastExt)
	}
	e.check()
}

// A crash keeps every acknowledged mutation: the MemFS clone holds only
// what was synced when it was taken.
func TestCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	o := testOptions(t)
	o.Dir, o.FS = "/mds", mem
	e := startEnv(t, o, newClock())
	before, _ := populate(t, e)
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	e.stop()

	o.FS = crashed
	e = startEnv(t, o, e.clock)
	e.check()
	d, err := e.lookup(rootIno, "d")
	wantErr(t, "lookup d", err, nil)
	f, err := e.lookup(d.Ino, "f")
	wantErr(t, "lookup f", err, nil)
	if after := dump(t, e) + "\n" + e.mapOf(f.Ino); after != before {
		t.Fatalf("after crash:\n%s\nwant\n%s", after, before)
	}
}

func TestFormatVersion(t *testing.T) {
	o := testOptions(t)
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := pebble.Open(o.Dir, quietPebble())
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(versionKey(), u32(nil, 99), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(context.Background(), o)
	if !errors.Is(err, errs.ErrNotSupported) {
		t.Fatalf("Open of version 99: %v", err)
	}

	// Data without a version is refused too.
	o2 := testOptions(t)
	db, err = pebble.Open(o2.Dir, quietPebble())
	if err != nil {
		t.Fatal(err)
	}
	db.Set([]byte("x"), nil, pebble.Sync)
	db.Close()
	if _, err := Open(context.Background(), o2); !errors.Is(err, errs.ErrCorrupt) {
		t.Fatalf("Open of unversioned data: %v", err)
	}
	if _, err := Open(context.Background(), Options{}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("Open without Dir: %v", err)
	}
}

func TestMetricsAndClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := testOptions(t)
	o.Registry = reg
	e := startEnv(t, o, newClock())
	e.registerOsts(2)
	e.create(rootIno, "f")
	_, err := e.c.Create(ctx, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("f"), Mode: sIFREG, Exclusive: true})
	wantErr(t, "create", err, errs.ErrExists)
	if n := gathered(t, reg, "shoal_mds_ops_total", "create"); n != 2 {
		t.Fatalf("create ops %v", n)
	}
	if n := gathered(t, reg, "shoal_mds_op_errors_total", "create"); n != 1 {
		t.Fatalf("create errors %v", n)
	}
	if n := gathered(t, reg, "shoal_mds_osts_up", ""); n != 2 {
		t.Fatalf("osts up %v", n)
	}
	s := e.s
	e.stop()
	// Calls after Close fail cleanly; the registry can take a new server.
	if _, err := s.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: 1}); !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("after close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	e = startEnv(t, o, e.clock)
	e.getattr(rootIno)
}

// gathered returns the value of metric name (with op label op, if set).
func gathered(t *testing.T, reg *prometheus.Registry, name, op string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := op == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == "op" && l.GetValue() == op)
			}
			if !match {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s{op=%q} not found", name, op)
	return 0
}

func quietPebble() *pebble.Options {
	return &pebble.Options{Logger: pebbleLogger{slog.New(slog.DiscardHandler)}}
}
