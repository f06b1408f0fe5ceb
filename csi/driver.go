// Package csi is Shoal's Kubernetes CSI driver: the CSI Identity,
// Controller and Node services (github.com/container-storage-interface/spec)
// on a unix socket, for `shoal csi`.
//
// A volume is a directory under Options.Root of the file system, named
// after the CreateVolume request, with a directory quota of its capacity.
// Its volume id is that name. The driver keeps what it was asked for in
// trusted.* extended attributes of the directory (trusted.shoal.csi.*:
// root and administrators only), so that a retried CreateVolume finds the
// same volume and DeleteVolume knows whether to keep it.
//
// The node service bind-mounts a volume's directory from one Shoal mount
// of the whole file system per node (Options.MountDir) onto the target
// path; docs/deploy.md, "Kubernetes CSI driver", says why.
package csi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalfs/shoal/internal/errs"
)

// DefaultName is the driver's name: a StorageClass's provisioner and the
// CSIDriver object's name.
const DefaultName = "csi.shoalfs.io"

// Options configure a Driver.
type Options struct {
	// Name of the driver; default DefaultName.
	Name string
	// Version reported by GetPluginInfo; default "dev".
	Version string
	// Controller serves the Controller service; it needs Namespace.
	Controller bool
	// Node serves the Node service; it needs NodeID and MountDir.
	Node bool
	// Namespace is the file system the controller makes volumes in.
	Namespace Namespace
	// Root is the directory of the file system that holds the volumes;
	// default "/volumes". Made when missing.
	Root string
	// NodeID is this node's name (NodeGetInfo): the Kubernetes node name.
	NodeID string
	// MountDir is where the file system's root is mounted on this node;
	// a volume is bind-mounted from MountDir/Root/VOLUME.
	MountDir string
	// Logger; nil discards.
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Root == "" {
		o.Root = "/volumes"
	}
	o.Root = path.Clean("/" + o.Root)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var p []string
	if !o.Controller && !o.Node {
		p = append(p, "neither the controller nor the node service is on")
	}
	if o.Controller && o.Namespace == nil {
		p = append(p, "the controller needs a Namespace")
	}
	if o.Node && o.NodeID == "" {
		p = append(p, "the node service needs a node id")
	}
	if o.Node && o.MountDir == "" {
		p = append(p, "the node service needs the directory of the node's mount")
	}
	if o.Root == "/" {
		p = append(p, "the volumes' root cannot be the file system's root")
	}
	if len(p) > 0 {
		return fmt.Errorf("csi: %s: %w", strings.Join(p, "; "), errs.ErrInvalid)
	}
	return nil
}

// Driver serves the CSI services.
type Driver struct {
	o   Options
	log *slog.Logger
}

// New returns a driver; Serve serves it.
func New(o Options) (*Driver, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	return &Driver{o: o, log: o.Logger}, nil
}

// ParseEndpoint returns the socket path of a CSI endpoint:
// unix:///csi/csi.sock, unix:/csi/csi.sock or a bare path.
func ParseEndpoint(ep string) (string, error) {
	if !strings.Contains(ep, ":") {
		return ep, nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", fmt.Errorf("csi endpoint %q: %w", ep, err)
	}
	if u.Scheme != "unix" {
		return "", fmt.Errorf("csi endpoint %q: only unix sockets are served: %w", ep, errs.ErrInvalid)
	}
	p := u.Path
	if p == "" {
		p = u.Opaque
	}
	if p == "" {
		return "", fmt.Errorf("csi endpoint %q: no path: %w", ep, errs.ErrInvalid)
	}
	return p, nil
}

// Listen removes a stale socket at the endpoint's path and listens on it.
func Listen(endpoint string) (net.Listener, error) {
	p, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("csi: remove stale socket %s: %w", p, err)
	}
	return net.Listen("unix", p)
}

// Serve serves the driver on l until ctx is done, then stops gracefully.
// The controller makes the volumes' root first.
func (d *Driver) Serve(ctx context.Context, l net.Listener) error {
	if d.o.Controller {
		if err := d.o.Namespace.MkdirAll(ctx, d.o.Root, 0o755); err != nil {
			l.Close()
			return fmt.Errorf("csi: volumes' root %s: %w", d.o.Root, err)
		}
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.intercept))
	csipb.RegisterIdentityServer(srv, &identity{d: d})
	if d.o.Controller {
		csipb.RegisterControllerServer(srv, &controller{d: d, ns: d.o.Namespace})
	}
	if d.o.Node {
		csipb.RegisterNodeServer(srv, &node{d: d})
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	d.log.Info("CSI driver serving", "addr", l.Addr().String(), "name", d.o.Name,
		"controller", d.o.Controller, "node", d.o.Node, "root", d.o.Root)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
		<-stopped
	}
	<-done
	return nil
}

// intercept logs every call at debug level and failures at warn, and
// turns the errors of the file system left untranslated into CSI codes.
func (d *Driver) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	t0 := time.Now()
	resp, err := h(ctx, req)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codeOf(err), err.Error())
		}
		d.log.WarnContext(ctx, "csi call failed", "op", path.Base(info.FullMethod), "err", err, "took", time.Since(t0))
		return nil, err
	}
	d.log.DebugContext(ctx, "csi call", "op", path.Base(info.FullMethod), "took", time.Since(t0))
	return resp, nil
}

// codeOf maps the file system's errors to gRPC codes for the CSI
// sidecars, which retry Unavailable and Internal.
func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, errs.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, errs.ErrExists):
		return codes.AlreadyExists
	case errors.Is(err, errs.ErrInvalid), errors.Is(err, errs.ErrNameTooLong):
		return codes.InvalidArgument
	case errors.Is(err, errs.ErrPermission), errors.Is(err, errs.ErrNotPermitted):
		return codes.PermissionDenied
	case errors.Is(err, errs.ErrNoSpace), errors.Is(err, errs.ErrQuota):
		return codes.ResourceExhausted
	case errors.Is(err, errs.ErrUnavailable), errors.Is(err, errs.ErrNotLeader):
		return codes.Unavailable
	}
	if s, ok := status.FromError(errors.Unwrap(err)); ok && s.Code() != codes.Unknown {
		return s.Code()
	}
	return codes.Internal
}

type identity struct {
	csipb.UnimplementedIdentityServer
	d *Driver
}

func (i *identity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: i.d.o.Name, VendorVersion: i.d.o.Version}, nil
}

func (i *identity) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	var caps []*csipb.PluginCapability
	if i.d.o.Controller {
		caps = append(caps,
			&csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{
				Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE}}},
			&csipb.PluginCapability{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{
				Type: csipb.PluginCapability_VolumeExpansion_ONLINE}}})
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe is ready while the node's mount answers (node) and the volumes'
// root is reachable (controller).
func (i *identity) Probe(ctx context.Context, _ *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	if i.d.o.Node {
		if _, err := os.Stat(i.d.o.MountDir); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "node mount %s: %v", i.d.o.MountDir, err)
		}
	}
	if i.d.o.Controller {
		if _, err := i.d.o.Namespace.IsDir(ctx, i.d.o.Root); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "volumes' root %s: %v", i.d.o.Root, err)
		}
	}
	return &csipb.ProbeResponse{}, nil
}
