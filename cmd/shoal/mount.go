package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/fuse"
)

func newMountCmd(g *globals) *cobra.Command {
	var mdsAddr, metrics, mountpoint, wireCompression string
	var shortCircuit bool
	var debug, allowOther, syncNamespace bool
	var mdsWait time.Duration
	var tf tlsFlags
	var cf cacheFlags
	cmd := &cobra.Command{
		Use:   "mount [MOUNTPOINT]",
		Short: "Mount a Shoal file system with FUSE",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				mountpoint = args[0]
			}
			if err := requireMDS(mdsAddr); err != nil {
				return err
			}
			if err := refuseStackedMount(mountpoint); err != nil {
				return err
			}
			log := g.logger().With("proc", "mount")
			creds, err := tf.load()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			reloadOnHUP(creds, log.Info, ctx.Done())
			reg := prometheus.NewRegistry()
			c, err := client.New(ctx, client.Options{MDS: mdsAddr, Logger: log, Registry: reg, EarlyNamespaceReplies: !syncNamespace, Creds: creds, WireCompression: wireCompression, NoShortCircuit: !shortCircuit, MDSRetry: mdsRetry(mdsWait)})
			if err != nil {
				return err
			}
			defer c.Close()
			ca, err := cf.open(ctx, c, log, reg)
			if err != nil {
				return err
			}
			if ca != nil {
				defer ca.Close()
			}
			m, err := fuse.Mount(ctx, mountpoint, fuse.Options{Client: c, Logger: log, Debug: debug, AllowOther: allowOther, Registry: reg, FsName: mountSource(mdsAddr),
				Cache: ca, CacheNoPassthrough: cf.noPassthrough})
			if err != nil {
				return err
			}
			serveOps(ctx, log, metrics, reg, func(ctx context.Context) error {
				_, err := c.GetAttr(ctx, client.RootIno) // the MDS answers this node
				return err
			})
			fmt.Printf("shoal mounted at %s (MDS %s); Ctrl-C unmounts\n", mountpoint, mdsAddr)
			err = waitUnmount(log, m)
			log.Info("mount stopped", "mountpoint", mountpoint, "err", err)
			return err
		},
	}
	mdsFlag(cmd, &mdsAddr)
	addTLSFlags(cmd, &tf)
	cmd.Flags().BoolVar(&debug, "debug", false, "log every FUSE request")
	allowOtherFlag(cmd, &allowOther)
	syncNamespaceFlag(cmd, &syncNamespace)
	wireCompressionFlag(cmd, &wireCompression)
	shortCircuitFlag(cmd, &shortCircuit)
	mdsWaitFlag(cmd, &mdsWait)
	addCacheFlags(cmd, &cf)
	cmd.Flags().StringVar(&metrics, "metrics", "", "address to serve Prometheus /metrics, /healthz, /readyz and /debug/pprof on (empty: off)")
	cmd.Flags().StringVar(&mountpoint, "mountpoint", "", "directory to mount on (instead of the MOUNTPOINT argument, for config files)")
	return configurable(cmd, append(mountChecks(), wireCompressionCheck, cacheChecks)...)
}

// wireCompressionFlag is --wire-compression of the commands that mount:
// client.Options.WireCompression.
func wireCompressionFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "wire-compression", client.WireNone,
		"compress chunk bytes on the data path with s2: none, s2 (to every OST), or auto (to OSTs not on loopback); for networks slower than the CPUs (docs/compression.md, \"Wire compression\")")
}

// mdsWaitFlag is --mds-wait of the commands that mount:
// client.Options.MDSRetry.
func mdsWaitFlag(cmd *cobra.Command, dst *time.Duration) {
	cmd.Flags().DurationVar(dst, "mds-wait", client.DefaultMDSRetry,
		"how long a file system call waits for an MDS that cannot be reached (stopped, restarting) before it fails with EIO; 0: it fails at once. A replicated MDS is waited for 30s (docs/reliability.md, \"Server restarts under load\")")
}

// mdsRetry is client.Options.MDSRetry for --mds-wait d.
func mdsRetry(d time.Duration) time.Duration {
	if d <= 0 {
		return -1 // no wait; 0 would be the default
	}
	return d
}

// wireCompressionCheck checks --wire-compression.
func wireCompressionCheck(cmd *cobra.Command, _ []string) []string {
	switch v := flagString(cmd, "wire-compression"); v {
	case client.WireNone, client.WireS2, client.WireAuto:
		return nil
	default:
		return []string{fmt.Sprintf("wire-compression: %q: want none, s2 or auto", v)}
	}
}

// waitUnmount waits for SIGINT/SIGTERM, or for the mount to go away (an
// external umount), and unmounts. A busy mount point is reported and the
// next signal tries again.
func waitUnmount(log *slog.Logger, m *fuse.Mounted) error {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	gone := make(chan struct{})
	go func() { m.Wait(); close(gone) }()
	for {
		select {
		case <-gone:
			return nil
		case <-sig:
		}
		err := m.Unmount()
		if err == nil {
			<-gone
			return nil
		}
		if errors.Is(err, syscall.EBUSY) {
			fmt.Fprintf(os.Stderr, "shoal: %v; close the files and shells using it, then press Ctrl-C again\n", err)
			continue
		}
		log.Error("unmount", "err", err)
		return err
	}
}

// allowOtherFlag adds --allow-other: on by default for root, so that every
// user of the node can use the mount (permissions are still checked).
// syncNamespaceFlag is --sync-namespace of the commands that mount.
func syncNamespaceFlag(cmd *cobra.Command, dst *bool) {
	cmd.Flags().BoolVar(dst, "sync-namespace", false,
		"acknowledge each namespace change (create, unlink, rename...) only once it is durable in the MDS; by default it is acknowledged once visible to all clients and made durable within milliseconds or by fsync, as on a local file system")
}

func allowOtherFlag(cmd *cobra.Command, dst *bool) {
	cmd.Flags().BoolVar(dst, "allow-other", os.Geteuid() == 0,
		"let users other than the one mounting use the mount (default on for root; others need user_allow_other in /etc/fuse.conf)")
}
