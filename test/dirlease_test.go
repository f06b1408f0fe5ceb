package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/test/cluster"
)

// Directory leases (docs/fuse.md, "Directory leases"): client A answers
// lookups of absent names in a directory from its lease; every change of
// the directory by client B is visible to A's next lookup, because the
// MDS recalls A's lease before it commits B's change. A's own changes
// keep its lease.

// leaseLookups reads a client's count of lookups answered from a lease.
func leaseLookups(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "shoal_client_lease_lookups_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no shoal_client_lease_lookups_total")
	return 0
}

// awaitLease looks up absent names in dir until A answers one from a
// lease.
func awaitLease(t *testing.T, ctx context.Context, a *client.Client, reg *prometheus.Registry, dir uint64) {
	t.Helper()
	before := leaseLookups(t, reg)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; leaseLookups(t, reg) == before; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no lookup answered from a directory lease in 10 s")
		}
		if _, err := a.Lookup(ctx, dir, fmt.Sprintf("absent-%d", i)); !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("lookup of an absent name: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDirLeaseTwoClients(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	a := cl.ClientWith(client.Options{Registry: reg})
	b := cl.Client()
	if err := a.Mkdir(ctx, "/d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := a.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	dir := d.Ino

	mustFind := func(what, name string) {
		t.Helper()
		if _, err := a.Lookup(ctx, dir, name); err != nil {
			t.Fatalf("%s: A's lookup of %s right after: %v", what, name, err)
		}
	}
	mustMiss := func(what, name string) {
		t.Helper()
		if _, err := a.Lookup(ctx, dir, name); !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("%s: A's lookup of %s right after: %v, want not found", what, name, err)
		}
	}
	for i := range 20 {
		x, y := fmt.Sprintf("x%d", i), fmt.Sprintf("y%d", i)
		// Each change by B lands while A holds a lease that lists none
		// of the names.
		awaitLease(t, ctx, a, reg, dir)
		mustMiss("leased", x)
		var err error
		switch i % 5 {
		case 0:
			_, err = b.CreateIn(ctx, dir, x, client.CreateOptions{Mode: 0o644, Exclusive: true})
		case 1:
			_, err = b.MkdirIn(ctx, dir, x, client.CreateOptions{Mode: 0o755})
		case 2:
			_, err = b.SymlinkIn(ctx, dir, x, "target", client.CreateOptions{})
		case 3:
			f, _, ferr := b.CreateFileIn(ctx, dir, x, client.CreateOptions{Mode: 0o644, Exclusive: true})
			if ferr == nil {
				ferr = f.Close(ctx)
			}
			err = ferr
		case 4:
			// B's rename of a name A never saw into a name A misses.
			if _, err = b.CreateIn(ctx, dir, y, client.CreateOptions{Mode: 0o644}); err == nil {
				mustFind("B's create of "+y, y)
				awaitLease(t, ctx, a, reg, dir)
				err = b.RenameIn(ctx, dir, y, dir, x, 0)
			}
		}
		if err != nil {
			t.Fatalf("B's change %d: %v", i, err)
		}
		mustFind(fmt.Sprintf("B's change %d", i), x)
	}

	// A's own creates keep its lease: absent names go on being answered
	// from it, and A's new names are found.
	awaitLease(t, ctx, a, reg, dir)
	before := leaseLookups(t, reg)
	for i := range 20 {
		own := fmt.Sprintf("own%d", i)
		if _, err := a.CreateIn(ctx, dir, own, client.CreateOptions{Mode: 0o644, Exclusive: true}); err != nil {
			t.Fatal(err)
		}
		mustFind("A's own create", own)
		mustMiss("A's own create", fmt.Sprintf("own%d", i+1))
	}
	if got := leaseLookups(t, reg) - before; got < 10 {
		t.Errorf("%v of 20 lookups after A's own creates answered from the lease, want most", got)
	}
	// A's unlink and rename too.
	if err := a.UnlinkIn(ctx, dir, "own0"); err != nil {
		t.Fatal(err)
	}
	mustMiss("A's unlink", "own0")
	if err := a.RenameIn(ctx, dir, "own1", dir, "own0", 0); err != nil {
		t.Fatal(err)
	}
	mustFind("A's rename", "own0")
	mustMiss("A's rename", "own1")
	// And B's removal of a name A created is seen as before.
	if err := b.UnlinkIn(ctx, dir, "own0"); err != nil {
		t.Fatal(err)
	}
	mustMiss("B's unlink", "own0")
	if err := b.RmdirIn(ctx, dir, "x1"); err != nil {
		t.Fatal(err)
	}
	mustMiss("B's rmdir", "x1")
}

// TestDirLeaseTwoMounts: a file created on mount B is found at once on
// mount A, which has been answering lookups of absent names in the
// directory from a lease; and one B removes is gone at once from A once
// A's kernel entry (1 s) has lapsed.
func TestDirLeaseTwoMounts(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	a, b := cl.Mount(), cl.Mount()
	if err := os.Mkdir(filepath.Join(a, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		name := fmt.Sprintf("f%d", i)
		// A looks up absent names for long enough to get a lease.
		for j := range 20 {
			if _, err := os.Stat(filepath.Join(a, "d", fmt.Sprintf("miss%d-%d", i, j))); !os.IsNotExist(err) {
				t.Fatalf("stat of an absent name on A: %v", err)
			}
		}
		if _, err := os.Stat(filepath.Join(a, "d", name)); !os.IsNotExist(err) {
			t.Fatalf("A before B's create: %v", err)
		}
		if err := os.WriteFile(filepath.Join(b, "d", name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(a, "d", name))
		if err != nil || string(got) != name {
			t.Fatalf("A right after B's create of %s: %q, %v", name, got, err)
		}
	}
}

// TestDirLeaseRenewedBigDirectory: a lease taken while the directory was
// small is renewed without a listing (the MDS lists at most 4,096 names
// in a grant), so a client that fills a directory with its own files
// keeps answering lookups of absent names from it for longer than the
// lease (1 s), and still sees another client's change at once.
func TestDirLeaseRenewedBigDirectory(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	a := cl.ClientWith(client.Options{Registry: reg})
	b := cl.Client()
	if err := a.Mkdir(ctx, "/big", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := a.Stat(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	awaitLease(t, ctx, a, reg, d.Ino)
	const n = 4200
	for i := range n {
		if _, err := a.CreateIn(ctx, d.Ino, fmt.Sprintf("e%05d", i), client.CreateOptions{Mode: 0o644, Exclusive: true}); err != nil {
			t.Fatal(err)
		}
	}
	before, lookups := leaseLookups(t, reg), 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); lookups++ {
		if _, err := a.Lookup(ctx, d.Ino, fmt.Sprintf("none%d", lookups)); !errors.Is(err, errs.ErrNotFound) {
			t.Fatalf("lookup of an absent name: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if local := leaseLookups(t, reg) - before; local < float64(lookups)*9/10 {
		t.Errorf("%v of %d lookups over 3 s answered from the lease of a directory of %d entries, want 90%%", local, lookups, n)
	}
	if _, err := b.CreateIn(ctx, d.Ino, "late", client.CreateOptions{Mode: 0o644, Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, d.Ino, "late"); err != nil {
		t.Fatalf("A's lookup right after B's create: %v", err)
	}
}

// A name the MDS refuses gets the MDS's error, not ENOENT from a lease
// (fsx found ENAMETOOLONG answered as ENOENT).
func TestDirLeaseBadNames(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	a := cl.ClientWith(client.Options{Registry: reg})
	awaitLease(t, ctx, a, reg, client.RootIno)
	long := strings.Repeat("M", client.MaxNameLen+1)
	if _, err := a.Lookup(ctx, client.RootIno, long); !errors.Is(err, errs.ErrNameTooLong) {
		t.Errorf("lookup of a name of %d bytes: %v, want ENAMETOOLONG", len(long), err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00b"} {
		if _, err := a.Lookup(ctx, client.RootIno, bad); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("lookup of %q: %v, want EINVAL", bad, err)
		}
	}
}
