package main

import (
	"context"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/csi"
	"github.com/shoalfs/shoal/fuse"
)

func newCSICmd(g *globals) *cobra.Command {
	var mdsAddr, endpoint, nodeID, root, mode, mountDir, name, metrics string
	var tf tlsFlags
	cmd := &cobra.Command{
		Use:   "csi",
		Args:  cobra.NoArgs,
		Short: "Serve the Kubernetes CSI driver (Identity, Controller, Node) on a unix socket (docs/deploy.md, \"Kubernetes CSI driver\")",
		RunE: func(cmd *cobra.Command, args []string) error {
			o := csi.Options{Name: name, Root: root, NodeID: nodeID}
			switch mode {
			case "controller":
				o.Controller = true
			case "node":
				o.Node = true
			case "both":
				o.Controller, o.Node = true, true
			default:
				return fmt.Errorf("--mode %q: want controller, node or both", mode)
			}
			if o.Node && nodeID == "" {
				return fmt.Errorf("--node-id: required with --mode %s (the Kubernetes node name; default $NODE_NAME)", mode)
			}
			if err := requireMDS(mdsAddr); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			log := g.logger().With("proc", "csi")
			o.Logger = log
			creds, err := tf.load()
			if err != nil {
				return err
			}
			reloadOnHUP(creds, log.Info, ctx.Done())
			reg := prometheus.NewRegistry()
			c, err := client.New(ctx, client.Options{MDS: mdsAddr, Logger: log, Registry: reg, EarlyNamespaceReplies: true, Creds: creds})
			if err != nil {
				return err
			}
			defer c.Close()
			o.Namespace = csi.NewNamespace(c)
			if o.Node {
				nm, err := csi.MountNode(ctx, mountDir, fuse.Options{Client: c, Logger: log, AllowOther: true, Registry: reg, FsName: mountSource(mdsAddr)})
				if err != nil {
					return err
				}
				defer func() {
					if err := nm.Close(); err != nil {
						log.Warn("node mount", "err", err)
					}
				}()
				o.MountDir = nm.Dir()
			}
			d, err := csi.New(o)
			if err != nil {
				return err
			}
			l, err := csi.Listen(endpoint)
			if err != nil {
				return err
			}
			serveOps(ctx, log, metrics, reg, func(ctx context.Context) error {
				_, err := c.GetAttr(ctx, client.RootIno)
				return err
			})
			return d.Serve(ctx, l)
		},
	}
	mdsFlag(cmd, &mdsAddr)
	addTLSFlags(cmd, &tf)
	cmd.Flags().StringVar(&endpoint, "endpoint", "unix:///csi/csi.sock", "the CSI socket to serve on (unix:///PATH)")
	cmd.Flags().StringVar(&nodeID, "node-id", os.Getenv("NODE_NAME"), "this node's name, for the node service (default $NODE_NAME)")
	cmd.Flags().StringVar(&root, "root", "/volumes", "directory of the file system, from its root, that holds the volumes (made when missing)")
	cmd.Flags().StringVar(&mode, "mode", "both", "services to serve besides Identity: controller (the Deployment), node (the DaemonSet) or both")
	cmd.Flags().StringVar(&mountDir, "mount-dir", "/var/lib/shoal-csi/mnt", "where the node service mounts the file system, or finds it mounted, to bind-mount volumes from")
	cmd.Flags().StringVar(&name, "driver-name", csi.DefaultName, "the driver's name: the StorageClass's provisioner and the CSIDriver's name")
	cmd.Flags().StringVar(&metrics, "metrics", "", "address to serve Prometheus /metrics, /healthz, /readyz and /debug/pprof on (empty: off)")
	return cmd
}
