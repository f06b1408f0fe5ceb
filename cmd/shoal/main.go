// Command shoal is the Shoal binary: servers, the all-in-one local cluster,
// the FUSE mount and the client tools. This package parses flags and wires
// components together; it holds no logic of its own.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "shoal:", err)
		os.Exit(exitCode(err))
	}
}

type globals struct {
	logLevel string
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "shoal",
		Short:         "Shoal: a parallel, erasure-coded file system for AI checkpoints and datasets",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(newMDSCmd(g), newOSTCmd(g), newMountCmd(g), newLocalCmd(g), newBenchCmd(g), newAdminCmd(g))
	root.AddCommand(newCkptCmd(g))
	root.AddCommand(newGPUCheckCmd(g))
	return root
}

func (g *globals) logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// mdsFlag adds the --mds flag, defaulting to $SHOAL_MDS.
func mdsFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "mds", os.Getenv("SHOAL_MDS"), "MDS address (default $SHOAL_MDS)")
}

func requireMDS(addr string) error {
	if strings.TrimSpace(addr) == "" {
		return fmt.Errorf("no MDS address: pass --mds ADDR or set SHOAL_MDS (shoal local writes it to DIR/mds.addr)")
	}
	return nil
}
