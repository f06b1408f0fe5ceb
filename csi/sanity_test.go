package csi_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/csi"
	"github.com/shoalfs/shoal/fuse"
	"github.com/shoalfs/shoal/test/cluster"
)

// rig is a CSI driver, controller and node in one, served in-process on a
// unix socket, over a real cluster and a real node mount.
type rig struct {
	c        *cluster.Cluster
	cl       *client.Client
	sock     string
	mountDir string
	root     string
	conn     *grpc.ClientConn
}

// startRig starts a cluster, mounts it for the node service and serves
// the driver; everything stops when the test ends. It skips without FUSE
// or root (the node service bind-mounts).
func startRig(t *testing.T) *rig {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster and mounts it")
	}
	cluster.RequireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP (not root): the CSI node service bind-mounts volumes, which needs root")
	}
	c := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	cl := c.Client()
	dir := t.TempDir()
	r := &rig{c: c, cl: cl, sock: filepath.Join(dir, "csi.sock"), mountDir: filepath.Join(dir, "mnt"), root: "/volumes"}
	ctx := context.Background()
	nm, err := csi.MountNode(ctx, r.mountDir, fuse.Options{Client: cl, AllowOther: true})
	if err != nil {
		t.Fatalf("node mount: %v", err)
	}
	t.Cleanup(func() {
		if err := nm.Close(); err != nil {
			t.Errorf("node mount close: %v", err)
		}
	})
	d, err := csi.New(csi.Options{Controller: true, Node: true, Namespace: csi.NewNamespace(cl), Root: r.root,
		NodeID: "node-1", MountDir: nm.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := csi.Listen("unix://" + r.sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx, l) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	r.conn, err = grpc.NewClient("unix://"+r.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close() })
	return r
}

// TestCSISanity runs the CSI sanity suite of kubernetes-csi/csi-test
// against `shoal csi`'s services (controller and node in one) over a real
// cluster: volumes are directories made through the client, published
// by bind mounts from a real FUSE mount.
func TestCSISanity(t *testing.T) {
	r := startRig(t)
	base := t.TempDir()
	cfg := sanity.NewTestConfig()
	cfg.Address = r.sock
	cfg.TargetPath = filepath.Join(base, "target")
	cfg.StagingPath = filepath.Join(base, "staging")
	cfg.TestVolumeSize = 1 << 30
	cfg.IdempotentCount = 3
	flag.Set("ginkgo.no-color", "true") // plain test logs
	t0 := time.Now()
	sanity.Test(t, cfg)
	t.Logf("sanity suite: %s", time.Since(t0).Round(time.Millisecond))
	// Whatever the suite made, it removed: the volumes' root is empty.
	es, err := r.cl.ReadDir(context.Background(), r.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		t.Errorf("left in %s: %s", r.root, e.Name)
	}
}

// Helpers for the tests of our own (csi_test.go).

func (r *rig) controller() csipb.ControllerClient { return csipb.NewControllerClient(r.conn) }
func (r *rig) node() csipb.NodeClient             { return csipb.NewNodeClient(r.conn) }

func mountCap(mode csipb.VolumeCapability_AccessMode_Mode) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}
