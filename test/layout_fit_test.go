package test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestLayoutsTheClusterCannotHold (issue 18): a new file system on three
// OSTs gets a root layout of RS 2+1 (the default RS 4+2 needs six), and
// files written through the mount work; in a directory set to RS 4+2 a
// write through the mount fails with EIO, and both the MDS and the mount
// log why ("need 4 OSTs up for RS 4+2, have 3").
func TestLayoutsTheClusterCannotHold(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	var logs lockedBuffer
	cl := cluster.Start(t, cluster.Options{OSTs: 3,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	ctx := context.Background()
	c := cl.Client()
	stub := adminStub(t, cl)
	a, err := stub.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: client.RootIno})
	if err != nil {
		t.Fatal(err)
	}
	if l := a.GetAttr().GetLayout(); l.GetK() != 2 || l.GetM() != 1 {
		t.Fatalf("root layout on 3 OSTs: %v, want RS 2+1", l)
	}
	mnt := cl.Mount()
	data := randBytes(18, 3<<20)
	if err := os.WriteFile(filepath.Join(mnt, "fits"), data, 0o644); err != nil {
		t.Fatalf("write under the root's layout: %v", err)
	}

	if err := c.MkdirAll(ctx, "/wide", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := c.Stat(ctx, "/wide")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stub.SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: d.Ino, Layout: &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	err = os.WriteFile(filepath.Join(mnt, "wide", "f"), data, 0o644)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("write through the mount in a RS 4+2 directory on 3 OSTs: %v, want EIO", err)
	}
	const why = "need 4 OSTs up for RS 4+2, have 3"
	deadline := time.Now().Add(10 * time.Second)
	for {
		mdsLine, mountLine := false, false
		for _, l := range strings.Split(logs.String(), "\n") {
			if !strings.Contains(l, why) {
				continue
			}
			mdsLine = mdsLine || strings.Contains(l, "proc=mds") && strings.Contains(l, `msg="cannot place extent; write refused"`)
			mountLine = mountLine || strings.Contains(l, "proc=client") && strings.Contains(l, `msg="extent write failed"`)
		}
		if mdsLine && mountLine {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logged at the MDS %v, at the mount %v; want both saying %q:\n%s", mdsLine, mountLine, why, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
