package csi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalfs/shoal/internal/errs"
)

// The extended attributes a volume's directory carries.
const (
	// xattrCapacity is the capacity the volume was made or expanded to,
	// in bytes (decimal); "0": none asked.
	xattrCapacity = "trusted.shoal.csi.capacity"
	// xattrOnDelete is the StorageClass's onDelete parameter: "delete"
	// or "retain".
	xattrOnDelete = "trusted.shoal.csi.ondelete"
)

// Values of the StorageClass parameter onDelete.
const (
	paramOnDelete = "onDelete"
	onDeleteGo    = "delete"
	onDeleteKeep  = "retain"
)

// volumeMode is the mode of a volume's directory: any uid of a pod may
// use it, as with a fresh local volume; pods that want less chmod it or
// set fsGroup.
const volumeMode = 0o777

// maxNameLen is the longest volume name: one directory name.
const maxNameLen = 255

type controller struct {
	csipb.UnimplementedControllerServer
	d  *Driver
	ns Namespace

	noQuotas sync.Once // warns once that the cluster has no quotas
}

// volumePath is the directory of the volume id (or name) v.
func (c *controller) volumePath(v string) string { return path.Join(c.d.o.Root, v) }

// checkName checks a volume name or id: one directory name, not hidden
// (the driver's own names start with a dot).
func checkName(what, v string) error {
	switch {
	case v == "":
		return status.Errorf(codes.InvalidArgument, "no %s", what)
	case len(v) > maxNameLen, strings.ContainsAny(v, "/\x00"), strings.HasPrefix(v, "."):
		return status.Errorf(codes.InvalidArgument, "%s %q: not a directory name (at most %d bytes, no '/', not starting with '.')", what, v, maxNameLen)
	}
	return nil
}

// capacityOf returns the capacity a request's range asks for: its
// required bytes, or its limit when only that is given; 0 when neither.
func capacityOf(r *csipb.CapacityRange) (uint64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0 || lim < 0:
		return 0, status.Errorf(codes.InvalidArgument, "capacity range %d..%d: negative", req, lim)
	case lim > 0 && req > lim:
		return 0, status.Errorf(codes.InvalidArgument, "capacity range: required %d bytes above the limit %d", req, lim)
	case req > 0:
		return uint64(req), nil
	}
	return uint64(lim), nil
}

// checkCaps checks volume capabilities: at least one, none of them a
// block volume or an unknown access mode.
func checkCaps(caps []*csipb.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	for _, vc := range caps {
		if err := checkCap(vc); err != nil {
			return err
		}
	}
	return nil
}

func checkCap(vc *csipb.VolumeCapability) error {
	if vc == nil {
		return status.Error(codes.InvalidArgument, "no volume capability")
	}
	if vc.GetBlock() != nil {
		return status.Error(codes.InvalidArgument, "block volumes are not supported: Shoal volumes are file systems (volumeMode: Filesystem)")
	}
	if vc.GetMount() == nil {
		return status.Error(codes.InvalidArgument, "volume capability has no access type (mount)")
	}
	switch vc.GetAccessMode().GetMode() {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
		csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "access mode %v is not supported", vc.GetAccessMode().GetMode())
}

// volumeInfo is what a volume's directory records.
type volumeInfo struct {
	capacity uint64
	onDelete string
}

// readVolume returns what the directory of volume v records;
// errs.ErrNotFound when there is no such volume.
func (c *controller) readVolume(ctx context.Context, v string) (volumeInfo, error) {
	p := c.volumePath(v)
	dir, err := c.ns.IsDir(ctx, p)
	if err != nil {
		return volumeInfo{}, err
	}
	if !dir {
		return volumeInfo{}, fmt.Errorf("volume %s: %s is not a directory: %w", v, p, errs.ErrNotFound)
	}
	vi := volumeInfo{onDelete: onDeleteGo}
	b, err := c.ns.GetXattr(ctx, p, xattrCapacity)
	switch {
	case errors.Is(err, errs.ErrNoData):
		// A directory made by hand: no capacity known.
	case err != nil:
		return volumeInfo{}, err
	default:
		if vi.capacity, err = strconv.ParseUint(string(b), 10, 64); err != nil {
			return volumeInfo{}, fmt.Errorf("volume %s: %s %q: %w", v, xattrCapacity, b, errs.ErrCorrupt)
		}
	}
	b, err = c.ns.GetXattr(ctx, p, xattrOnDelete)
	switch {
	case errors.Is(err, errs.ErrNoData):
	case err != nil:
		return volumeInfo{}, err
	default:
		vi.onDelete = string(b)
	}
	return vi, nil
}

// setQuota sets the quota of volume v to capacity bytes (none for 0). A
// cluster without quotas is warned about once and the volume is made
// unenforced.
func (c *controller) setQuota(ctx context.Context, v string, capacity uint64) error {
	err := c.ns.SetQuota(ctx, c.volumePath(v), capacity)
	if errors.Is(err, errs.ErrNotSupported) {
		c.noQuotas.Do(func() {
			c.d.log.Warn("the cluster has no directory quotas: volumes are made without their capacity enforced", "err", err)
		})
		return nil
	}
	return err
}

func (c *controller) CreateVolume(ctx context.Context, r *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	name := r.GetName()
	if err := checkName("volume name", name); err != nil {
		return nil, err
	}
	if err := checkCaps(r.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	if r.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "volume content sources (snapshots, clones) are not supported")
	}
	capacity, err := capacityOf(r.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	onDelete := onDeleteGo
	for k, v := range r.GetParameters() {
		switch {
		case k == paramOnDelete && (v == onDeleteGo || v == onDeleteKeep):
			onDelete = v
		case k == paramOnDelete:
			return nil, status.Errorf(codes.InvalidArgument, "parameter %s: %q: want %s or %s", k, v, onDeleteGo, onDeleteKeep)
		case strings.HasPrefix(k, "csi.storage.k8s.io/"):
			// Set by the provisioner (PVC name and namespace, fstype).
		default:
			return nil, status.Errorf(codes.InvalidArgument, "unknown parameter %q (the StorageClass takes %s)", k, paramOnDelete)
		}
	}
	want := volumeInfo{capacity: capacity, onDelete: onDelete}
	if err := c.makeVolume(ctx, name, want); err != nil {
		return nil, err
	}
	got, err := c.readVolume(ctx, name)
	if err != nil {
		return nil, err
	}
	if got != want {
		return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with capacity %d and onDelete %s, asked %d and %s",
			name, got.capacity, got.onDelete, want.capacity, want.onDelete)
	}
	// Again for a volume that exists: a controller stopped between the
	// rename and the quota left it without one.
	if err := c.setQuota(ctx, name, capacity); err != nil {
		return nil, err
	}
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: name, CapacityBytes: int64(capacity)}}, nil
}

// makeVolume makes the directory of volume name, with its attributes, in
// one step: it makes and labels a hidden directory, then renames it into
// place without replacing. A volume of that name that exists already is
// left as it is (the caller compares).
func (c *controller) makeVolume(ctx context.Context, name string, vi volumeInfo) error {
	if _, err := c.ns.IsDir(ctx, c.volumePath(name)); err == nil {
		return nil
	} else if !errors.Is(err, errs.ErrNotFound) {
		return err
	}
	tmp := c.volumePath(".creating-" + name + "-" + randomSuffix())
	if err := c.ns.Mkdir(ctx, tmp, volumeMode); err != nil {
		return err
	}
	err := c.ns.SetXattr(ctx, tmp, xattrCapacity, []byte(strconv.FormatUint(vi.capacity, 10)))
	if err == nil {
		err = c.ns.SetXattr(ctx, tmp, xattrOnDelete, []byte(vi.onDelete))
	}
	if err == nil {
		err = c.ns.RenameNoReplace(ctx, tmp, c.volumePath(name))
		if errors.Is(err, errs.ErrExists) {
			err = nil // made meanwhile by another call
		}
	}
	if rerr := c.ns.RemoveAll(ctx, tmp); rerr != nil && err == nil {
		c.d.log.Warn("remove a volume's staging directory", "path", tmp, "err", rerr)
	}
	return err
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (c *controller) DeleteVolume(ctx context.Context, r *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	v := r.GetVolumeId()
	if v == "" {
		return nil, status.Error(codes.InvalidArgument, "no volume id")
	}
	if checkName("volume id", v) != nil {
		return &csipb.DeleteVolumeResponse{}, nil // not one of ours: gone
	}
	vi, err := c.readVolume(ctx, v)
	if errors.Is(err, errs.ErrNotFound) {
		return &csipb.DeleteVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if vi.onDelete == onDeleteKeep {
		c.d.log.Info("volume deleted, its directory kept (onDelete: retain)", "volume", v, "path", c.volumePath(v))
		return &csipb.DeleteVolumeResponse{}, nil
	}
	// Out of the way first, in one step, so that a CreateVolume of the
	// same name never finds it half removed; then removed.
	trash := c.volumePath(".deleting-" + v + "-" + randomSuffix())
	if err := c.ns.RenameNoReplace(ctx, c.volumePath(v), trash); err != nil {
		if errors.Is(err, errs.ErrNotFound) {
			return &csipb.DeleteVolumeResponse{}, nil
		}
		return nil, err
	}
	if err := c.ns.RemoveQuota(ctx, trash); err != nil && !errors.Is(err, errs.ErrNotSupported) {
		c.d.log.Warn("remove a deleted volume's quota", "volume", v, "err", err)
	}
	if err := c.ns.RemoveAll(ctx, trash); err != nil {
		return nil, fmt.Errorf("volume %s moved to %s, not removed: %w", v, trash, err)
	}
	c.d.log.Info("volume deleted", "volume", v)
	return &csipb.DeleteVolumeResponse{}, nil
}

func (c *controller) ValidateVolumeCapabilities(ctx context.Context, r *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	v := r.GetVolumeId()
	if err := checkName("volume id", v); err != nil {
		return nil, err
	}
	if len(r.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no volume capabilities")
	}
	if _, err := c.readVolume(ctx, v); err != nil {
		return nil, err
	}
	for _, vc := range r.GetVolumeCapabilities() {
		if err := checkCap(vc); err != nil {
			return &csipb.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
		}
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      r.GetVolumeContext(),
		VolumeCapabilities: r.GetVolumeCapabilities(),
		Parameters:         r.GetParameters(),
	}}, nil
}

func (c *controller) ControllerExpandVolume(ctx context.Context, r *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	v := r.GetVolumeId()
	if err := checkName("volume id", v); err != nil {
		return nil, err
	}
	if r.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "no capacity range")
	}
	if vc := r.GetVolumeCapability(); vc != nil {
		if err := checkCap(vc); err != nil {
			return nil, err
		}
	}
	capacity, err := capacityOf(r.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	vi, err := c.readVolume(ctx, v)
	if err != nil {
		return nil, err
	}
	if capacity > vi.capacity {
		// Quota first: a stop between the two leaves the xattr at the
		// old size, and the retry sets both.
		if err := c.setQuota(ctx, v, capacity); err != nil {
			return nil, err
		}
		if err := c.ns.SetXattr(ctx, c.volumePath(v), xattrCapacity, []byte(strconv.FormatUint(capacity, 10))); err != nil {
			return nil, err
		}
		c.d.log.Info("volume expanded", "volume", v, "from", vi.capacity, "to", capacity)
		vi.capacity = capacity
	}
	return &csipb.ControllerExpandVolumeResponse{CapacityBytes: int64(vi.capacity), NodeExpansionRequired: false}, nil
}

func (c *controller) GetCapacity(ctx context.Context, r *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	for _, vc := range r.GetVolumeCapabilities() {
		if checkCap(vc) != nil {
			return &csipb.GetCapacityResponse{}, nil
		}
	}
	_, free, err := c.ns.StatFs(ctx)
	if err != nil {
		return nil, err
	}
	return &csipb.GetCapacityResponse{AvailableCapacity: int64(min(free, 1<<63-1))}, nil
}

func (c *controller) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	var caps []*csipb.ControllerServiceCapability
	for _, t := range []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csipb.ControllerServiceCapability_RPC_GET_CAPACITY,
		csipb.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{
			Rpc: &csipb.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}
