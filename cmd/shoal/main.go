// Command shoal is the Shoal binary: servers, the all-in-one local cluster,
// the FUSE mount and the client tools. This package parses flags and wires
// components together; it holds no logic of its own.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/internal/wire"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "shoal:", err)
		code := exitCode(err)
		if he := (*healthError)(nil); errors.As(err, &he) {
			code = he.code // shoal admin status: its verdict
		}
		os.Exit(code)
	}
}

type globals struct {
	logLevel, logFormat string
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
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text (key=value) or json (one object a line)")
	// Commands with a config file check the log flags with the rest of
	// their configuration (config.go); the others check them here.
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if cmd.Flags().Lookup("config") != nil {
			return nil
		}
		if p := append(logLevel(cmd, args), logFormat(cmd, args)...); len(p) > 0 {
			return fmt.Errorf("%s", strings.Join(p, "; "))
		}
		// Paths under a Shoal mount, made paths inside the file
		// system (mountpath.go).
		return pathsThroughMounts(cmd, args)
	}
	root.AddCommand(newMDSCmd(g), newOSTCmd(g), newMountCmd(g), newLocalCmd(g), newBenchCmd(g), newAdminCmd(g))
	root.AddCommand(newCkptCmd(g))
	root.AddCommand(newGPUCheckCmd(g))
	root.AddCommand(newWarmupCmd(g), newCacheCmd(g))
	root.AddCommand(newCSICmd(g))
	return root
}

// logger returns the logger of --log-level and --log-format, writing to
// stderr. Lines logged with the context of a request carry its trace id
// as "req" (wire.LogHandler). The daemons validate both flags
// (config.go); elsewhere a bad value falls back to info and text.
func (g *globals) logger() *slog.Logger {
	return newLogger(os.Stderr, g.logLevel, g.logFormat)
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		lvl = slog.LevelInfo
	}
	o := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewTextHandler(w, o)
	if strings.EqualFold(format, "json") {
		h = slog.NewJSONHandler(w, o)
	}
	return slog.New(wire.LogHandler(h))
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// mdsFlag adds the --mds flag, defaulting to $SHOAL_MDS.
func mdsFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "mds", os.Getenv("SHOAL_MDS"), "MDS address HOST[:PORT] (port 7700 if none; default $SHOAL_MDS)")
}

func requireMDS(addr string) error {
	if strings.TrimSpace(addr) == "" {
		return fmt.Errorf("no MDS address: pass --mds ADDR or set SHOAL_MDS (shoal local writes it to DIR/mds.addr)")
	}
	return nil
}
