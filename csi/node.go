package csi

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// node serves the Node service: a volume is published by a bind mount of
// its directory under the node's Shoal mount (Options.MountDir).
type node struct {
	csipb.UnimplementedNodeServer
	d *Driver

	// mu serializes publishing and unpublishing, which read the mount
	// table and then change it.
	mu sync.Mutex
}

// source returns the directory of volume v under the node's mount, and
// the root that mountinfo shows for a bind mount of it.
func (n *node) source(v string) (dir, root string, err error) {
	ms, err := mounts()
	if err != nil {
		return "", "", status.Errorf(codes.Internal, "mount table: %v", err)
	}
	nm, ok := mountAt(ms, n.d.o.MountDir)
	if !ok || nm.fstype != shoalFSType {
		return "", "", status.Errorf(codes.FailedPrecondition, "no Shoal mount at %s on this node", n.d.o.MountDir)
	}
	rel := path.Join(n.d.o.Root, v)
	dir = filepath.Join(n.d.o.MountDir, rel)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", "", status.Errorf(codes.NotFound, "volume %s: no directory %s", v, rel)
	case err != nil:
		return "", "", status.Errorf(codes.Unavailable, "volume %s: %v", v, err)
	case !fi.IsDir():
		return "", "", status.Errorf(codes.NotFound, "volume %s: %s is not a directory", v, rel)
	}
	return dir, path.Join(nm.root, rel), nil
}

// readOnly reports whether a publish request is for reading only.
func readOnly(r *csipb.NodePublishVolumeRequest) bool {
	switch r.GetVolumeCapability().GetAccessMode().GetMode() {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return r.GetReadonly()
}

func (n *node) NodePublishVolume(ctx context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	v, target := r.GetVolumeId(), r.GetTargetPath()
	if err := checkName("volume id", v); err != nil {
		return nil, err
	}
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "no target path")
	}
	if err := checkCap(r.GetVolumeCapability()); err != nil {
		return nil, err
	}
	target = filepath.Clean(target)
	ro := readOnly(r)
	n.mu.Lock()
	defer n.mu.Unlock()
	src, root, err := n.source(v)
	if err != nil {
		return nil, err
	}
	ms, err := mounts()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "mount table: %v", err)
	}
	if e, ok := mountAt(ms, target); ok {
		if e.fstype == shoalFSType && e.root == root && e.readOnly() == ro {
			return &csipb.NodePublishVolumeResponse{}, nil // published already
		}
		return nil, status.Errorf(codes.AlreadyExists, "%s is mounted already (%s %s, read-only %v)", target, e.fstype, e.root, e.readOnly())
	}
	if r.GetVolumeCapability().GetAccessMode().GetMode() == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		for _, e := range ms {
			if e.fstype == shoalFSType && e.root == root && e.point != target {
				return nil, status.Errorf(codes.FailedPrecondition, "volume %s is single-writer and published at %s already", v, e.point)
			}
		}
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "target %s: %v", target, err)
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind %s on %s: %v", src, target, err)
	}
	if ro {
		// A bind mount takes its read-only flag only from a remount.
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			unix.Unmount(target, 0)
			return nil, status.Errorf(codes.Internal, "remount %s read-only: %v", target, err)
		}
	}
	n.d.log.Info("volume published", "volume", v, "target", target, "ro", ro)
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (n *node) NodeUnpublishVolume(ctx context.Context, r *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if r.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	}
	if r.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "no target path")
	}
	target := filepath.Clean(r.GetTargetPath())
	n.mu.Lock()
	defer n.mu.Unlock()
	// Every mount stacked there, the dead ones of a node mount that went
	// away included (stat would say ENOTCONN; the table still lists
	// them).
	for {
		ms, err := mounts()
		if err != nil {
			return nil, status.Errorf(codes.Internal, "mount table: %v", err)
		}
		if _, ok := mountAt(ms, target); !ok {
			break
		}
		if err := unix.Unmount(target, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			if errors.Is(err, syscall.EBUSY) {
				return nil, status.Errorf(codes.FailedPrecondition, "unmount %s: busy", target)
			}
			return nil, status.Errorf(codes.Internal, "unmount %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove target %s: %v", target, err)
	}
	n.d.log.Info("volume unpublished", "volume", r.GetVolumeId(), "target", target)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (n *node) NodeGetVolumeStats(ctx context.Context, r *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	v, p := r.GetVolumeId(), r.GetVolumePath()
	if v == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	}
	if p == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume path")
	}
	if err := checkName("volume id", v); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q: not a volume of this driver", v)
	}
	_, root, err := n.source(v)
	if err != nil {
		return nil, err
	}
	p = filepath.Clean(p)
	ms, err := mounts()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "mount table: %v", err)
	}
	if e, ok := mountAt(ms, p); !ok || e.fstype != shoalFSType || e.root != root {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s", v, p)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", p, err)
	}
	bs := uint64(st.Bsize)
	return &csipb.NodeGetVolumeStatsResponse{
		Usage: []*csipb.VolumeUsage{
			{Unit: csipb.VolumeUsage_BYTES, Total: clamp(st.Blocks * bs), Available: clamp(st.Bavail * bs), Used: clamp((st.Blocks - min(st.Bfree, st.Blocks)) * bs)},
			{Unit: csipb.VolumeUsage_INODES, Total: clamp(st.Files), Available: clamp(st.Ffree), Used: clamp(st.Files - min(st.Ffree, st.Files))},
		},
	}, nil
}

func clamp(x uint64) int64 { return int64(min(x, 1<<63-1)) }

func (n *node) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	for _, t := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (n *node) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: n.d.o.NodeID}, nil
}
