package csi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalfs/shoal/internal/errs"
)

const (
	rwx = csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	rox = csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
)

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: %v (%s), want %s", what, err, got, want)
	}
}

// TestCSIVolumeLifecycle follows one volume through what Kubernetes does
// with it: made with a capacity, published read-write to one pod and
// read-only to another (through real bind mounts of the node's FUSE
// mount), written and read, measured, expanded, unpublished twice, and
// deleted with the files in it.
func TestCSIVolumeLifecycle(t *testing.T) {
	r := startRig(t)
	ctx := context.Background()
	cc, nc := r.controller(), r.node()
	caps := []*csipb.VolumeCapability{mountCap(rwx)}
	const mib = 1 << 20

	cv, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: caps,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 * mib}})
	if err != nil {
		t.Fatal(err)
	}
	v := cv.GetVolume()
	if v.GetVolumeId() != "pvc-1" || v.GetCapacityBytes() != 64*mib {
		t.Fatalf("CreateVolume: %v", v)
	}
	wantQuota(t, r, "/volumes/pvc-1", 64*mib)
	// Again: the same volume. Another capacity, a block volume, an
	// unknown parameter: refused.
	if again, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: caps,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 64 * mib}}); err != nil || again.GetVolume().GetVolumeId() != "pvc-1" {
		t.Fatalf("CreateVolume again: %v, %v", again, err)
	}
	_, err = cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: caps,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 32 * mib}})
	wantCode(t, "CreateVolume, another capacity", err, codes.AlreadyExists)
	block := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: rwx}}
	_, err = cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-block", VolumeCapabilities: []*csipb.VolumeCapability{block}})
	wantCode(t, "CreateVolume, block", err, codes.InvalidArgument)
	_, err = cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-x", VolumeCapabilities: caps, Parameters: map[string]string{"color": "red"}})
	wantCode(t, "CreateVolume, unknown parameter", err, codes.InvalidArgument)
	_, err = cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "../etc", VolumeCapabilities: caps})
	wantCode(t, "CreateVolume, a name with a slash", err, codes.InvalidArgument)
	vv, err := cc.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: "pvc-1", VolumeCapabilities: []*csipb.VolumeCapability{block}})
	if err != nil || vv.GetConfirmed() != nil {
		t.Fatalf("ValidateVolumeCapabilities of a block volume: %v, %v; want not confirmed", vv, err)
	}

	// Published read-write to one pod, read-only to another.
	base := t.TempDir()
	rw, ro := filepath.Join(base, "pod-a", "mount"), filepath.Join(base, "pod-b", "mount")
	if _, err := nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "pvc-1", TargetPath: rw, VolumeCapability: mountCap(rwx)}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "pvc-1", TargetPath: ro, VolumeCapability: mountCap(rox)}); err != nil {
		t.Fatal(err)
	}
	// Publishing again is success; the same target read-only is not.
	if _, err := nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "pvc-1", TargetPath: rw, VolumeCapability: mountCap(rwx)}); err != nil {
		t.Fatalf("NodePublishVolume again: %v", err)
	}
	_, err = nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "pvc-1", TargetPath: rw, VolumeCapability: mountCap(rwx), Readonly: true})
	wantCode(t, "NodePublishVolume read-only over read-write", err, codes.AlreadyExists)
	_, err = nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "pvc-none", TargetPath: filepath.Join(base, "x"), VolumeCapability: mountCap(rwx)})
	wantCode(t, "NodePublishVolume of no volume", err, codes.NotFound)

	if err := os.MkdirAll(filepath.Join(rw, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	payload := []byte("written by pod a\n")
	if err := os.WriteFile(filepath.Join(rw, "data", "f"), payload, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(ro, "data", "f")); err != nil || string(got) != string(payload) {
		t.Fatalf("read through the read-only target: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(ro, "g"), payload, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write through the read-only target: %v, want EROFS", err)
	}
	// The file is in the volume's directory of the file system, and
	// nowhere above it can be reached from the target.
	if a, err := r.cl.Stat(ctx, "/volumes/pvc-1/data/f"); err != nil || a.Size != uint64(len(payload)) {
		t.Fatalf("the file in the file system: %v, %v", a, err)
	}
	if es, err := os.ReadDir(rw); err != nil || len(es) != 1 || es[0].Name() != "data" {
		t.Fatalf("the target lists %v, %v; want the volume's own entries", es, err)
	}

	st, err := nc.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "pvc-1", VolumePath: rw})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetUsage()) != 2 || st.GetUsage()[0].GetUnit() != csipb.VolumeUsage_BYTES || st.GetUsage()[0].GetTotal() <= 0 {
		t.Fatalf("NodeGetVolumeStats: %v", st)
	}
	t.Logf("volume stats: %v", st.GetUsage())
	_, err = nc.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "pvc-1", VolumePath: base})
	wantCode(t, "NodeGetVolumeStats off the volume", err, codes.NotFound)

	// Expanded: up, never down.
	ex, err := cc.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "pvc-1", CapacityRange: &csipb.CapacityRange{RequiredBytes: 128 * mib}})
	if err != nil || ex.GetCapacityBytes() != 128*mib || ex.GetNodeExpansionRequired() {
		t.Fatalf("ControllerExpandVolume: %v, %v", ex, err)
	}
	wantQuota(t, r, "/volumes/pvc-1", 128*mib)
	ex, err = cc.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "pvc-1", CapacityRange: &csipb.CapacityRange{RequiredBytes: 8 * mib}})
	if err != nil || ex.GetCapacityBytes() != 128*mib {
		t.Fatalf("ControllerExpandVolume down: %v, %v; want it kept at 128 MiB", ex, err)
	}
	wantQuota(t, r, "/volumes/pvc-1", 128*mib)
	_, err = cc.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "pvc-none", CapacityRange: &csipb.CapacityRange{RequiredBytes: 8 * mib}})
	wantCode(t, "ControllerExpandVolume of no volume", err, codes.NotFound)
	if again, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: caps,
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 128 * mib}}); err != nil || again.GetVolume().GetCapacityBytes() != 128*mib {
		t.Fatalf("CreateVolume at the expanded size: %v, %v", again, err)
	}

	// Unpublished, twice each; targets that never were are success too.
	for _, target := range []string{rw, ro, rw, ro, filepath.Join(base, "never")} {
		if _, err := nc.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "pvc-1", TargetPath: target}); err != nil {
			t.Fatalf("NodeUnpublishVolume %s: %v", target, err)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("target %s after unpublish: %v", target, err)
		}
	}

	// Deleted with its files; deleting again is success.
	for range 2 {
		if _, err := cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: "pvc-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.cl.Stat(ctx, "/volumes/pvc-1"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("the volume's directory after DeleteVolume: %v", err)
	}
	if es, err := r.cl.ReadDir(ctx, "/volumes"); err != nil || len(es) != 0 {
		t.Fatalf("/volumes after DeleteVolume: %v, %v; want empty (no staging or trash left)", es, err)
	}
	if qs, err := r.cl.ListQuotas(ctx); err != nil || len(qs) != 0 {
		t.Fatalf("quotas after DeleteVolume: %v, %v; want none", qs, err)
	}
}

// wantQuota checks the byte limit of the quota of directory p.
func wantQuota(t *testing.T, r *rig, p string, limit uint64) {
	t.Helper()
	q, err := r.cl.GetQuota(context.Background(), p)
	if err != nil || q.LimitBytes != limit {
		t.Fatalf("quota of %s: %+v, %v; want a limit of %d bytes", p, q, err, limit)
	}
}

// TestCSIQuota: a pod that writes more than its claim's size through the
// published volume gets EDQUOT, and an expansion lets it write on.
func TestCSIQuota(t *testing.T) {
	r := startRig(t)
	ctx := context.Background()
	cc, nc := r.controller(), r.node()
	const mib = 1 << 20
	if _, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-small", VolumeCapabilities: []*csipb.VolumeCapability{mountCap(rwx)},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 4 * mib}}); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "mount")
	if _, err := nc.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: "pvc-small", TargetPath: target, VolumeCapability: mountCap(rwx)}); err != nil {
		t.Fatal(err)
	}
	defer nc.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "pvc-small", TargetPath: target})
	write := func(name string, n int) error {
		f, err := os.Create(filepath.Join(target, name))
		if err != nil {
			return err
		}
		_, werr := f.Write(make([]byte, n))
		if err := f.Close(); werr == nil {
			werr = err
		}
		return werr
	}
	if err := write("a", 8*mib); !errors.Is(err, syscall.EDQUOT) {
		t.Fatalf("8 MiB into a 4 MiB volume: %v, want EDQUOT", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(target, &st); err == nil {
		t.Logf("df of the volume: %d bytes, %d free", st.Blocks*uint64(st.Bsize), st.Bavail*uint64(st.Bsize))
	}
	if _, err := cc.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: "pvc-small", CapacityRange: &csipb.CapacityRange{RequiredBytes: 32 * mib}}); err != nil {
		t.Fatal(err)
	}
	if err := write("b", 8*mib); err != nil {
		t.Fatalf("8 MiB after the expansion to 32 MiB: %v", err)
	}
	// The volume's stats are its quota's (statfs of a quota directory).
	vs, err := nc.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: "pvc-small", VolumePath: target})
	if err != nil {
		t.Fatal(err)
	}
	if b := vs.GetUsage()[0]; b.GetTotal() != 32*mib || b.GetUsed() < 8*mib {
		t.Fatalf("NodeGetVolumeStats after 8 MiB in a 32 MiB volume: %v", b)
	}
}

// TestCSIRetain: a volume of a StorageClass with onDelete: retain keeps
// its directory and files after DeleteVolume; another onDelete for the
// same name is refused.
func TestCSIRetain(t *testing.T) {
	r := startRig(t)
	ctx := context.Background()
	cc := r.controller()
	caps := []*csipb.VolumeCapability{mountCap(rwx)}
	keep := map[string]string{"onDelete": "retain", "csi.storage.k8s.io/pvc/name": "data"}
	if _, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-kept", VolumeCapabilities: caps, Parameters: keep}); err != nil {
		t.Fatal(err)
	}
	_, err := cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-kept", VolumeCapabilities: caps})
	wantCode(t, "CreateVolume, another onDelete", err, codes.AlreadyExists)
	_, err = cc.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "pvc-y", VolumeCapabilities: caps, Parameters: map[string]string{"onDelete": "archive"}})
	wantCode(t, "CreateVolume, onDelete: archive", err, codes.InvalidArgument)
	f, err := r.cl.Create(ctx, "/volumes/pvc-kept/results", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("keep me"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: "pvc-kept"}); err != nil {
		t.Fatal(err)
	}
	if a, err := r.cl.Stat(ctx, "/volumes/pvc-kept/results"); err != nil || a.Size != 7 {
		t.Fatalf("a retained volume's file after DeleteVolume: %v, %v", a, err)
	}
}
