package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/fuse"
)

// NodeMount is the node's mount of the whole file system, which volumes
// are bind-mounted from: one made by MountNode, or one found there (the
// mount DaemonSet's, or a shoal mount service's).
type NodeMount struct {
	dir string
	m   *fuse.Mounted // nil: found, not made
	log *slog.Logger
}

// MountNode mounts the file system of o.Client at dir, or uses the live
// Shoal mount already there. A dead one (its daemon gone: ENOTCONN, as
// after a restart of this driver) is detached first.
func MountNode(ctx context.Context, dir string, o fuse.Options) (*NodeMount, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	ms, err := mounts()
	if err != nil {
		return nil, fmt.Errorf("csi: mount table: %w", err)
	}
	if e, ok := mountAt(ms, dir); ok {
		if e.fstype != shoalFSType {
			return nil, fmt.Errorf("csi: %s holds a mount of %s, not Shoal", dir, e.fstype)
		}
		_, err := os.Stat(dir)
		if err == nil {
			log.Info("using the Shoal mount there", "mountpoint", dir)
			return &NodeMount{dir: dir, log: log}, nil
		}
		log.Warn("detaching a dead Shoal mount", "mountpoint", dir, "err", err)
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return nil, fmt.Errorf("csi: detach dead mount %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("csi: node mount point: %w", err)
	}
	m, err := fuse.Mount(ctx, dir, o)
	if err != nil {
		return nil, err
	}
	return &NodeMount{dir: dir, m: m, log: log}, nil
}

// Dir is the mount point.
func (nm *NodeMount) Dir() string { return nm.dir }

// Close unmounts a mount MountNode made. While volumes are still
// published from it (bind mounts), the mount is detached, not waited
// for: its daemon is this process, and they fail with ENOTCONN once it
// exits, until their pods are restarted.
func (nm *NodeMount) Close() error {
	if nm.m == nil {
		return nil
	}
	if n := nm.published(); n > 0 {
		nm.log.Warn("volumes still published from the node mount: they fail (ENOTCONN) once this process exits, until their pods restart",
			"mountpoint", nm.dir, "volumes", n)
		if err := unix.Unmount(nm.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("csi: detach %s: %w", nm.dir, err)
		}
		return nil
	}
	return nm.m.Unmount()
}

// published counts the other mounts of the node mount's file system:
// the published volumes.
func (nm *NodeMount) published() int {
	ms, err := mounts()
	if err != nil {
		return 0
	}
	e, ok := mountAt(ms, nm.dir)
	if !ok {
		return 0
	}
	n := 0
	for _, x := range ms {
		if x.dev == e.dev && x.point != nm.dir {
			n++
		}
	}
	return n
}
