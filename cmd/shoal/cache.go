package main

// The node-local read cache of the commands that mount (--cache-dir,
// --cache-size), and `shoal cache status|drop` (docs/fuse.md,
// "Node-local cache").

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/cache"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/tools/bench"
)

// cacheFlags are --cache-dir, --cache-size and --cache-passthrough.
type cacheFlags struct {
	dir, size     string
	fillMemory    string
	noPassthrough bool
}

func addCacheFlags(cmd *cobra.Command, cf *cacheFlags) {
	cmd.Flags().StringVar(&cf.dir, "cache-dir", "", "directory of the node-local read cache (empty: no cache); kept across mounts")
	cmd.Flags().StringVar(&cf.size, "cache-size", "10GiB", "bound of the node-local read cache, e.g. 500GiB; the least recently used files are evicted")
	cmd.Flags().StringVar(&cf.fillMemory, "cache-fill-memory", "auto",
		"memory for blocks read and not yet written to the cache directory (auto: an eighth of the machine's, 64MiB-4GiB); a read that finds it taken is not cached, never slowed")
	cmd.Flags().BoolVar(&cf.noPassthrough, "cache-no-passthrough", false,
		"serve cached files from the daemon, never by kernel passthrough (with passthrough, opening for writing a file open for reading on the same node fails with EIO)")
}

// cacheChecks checks --cache-size.
func cacheChecks(cmd *cobra.Command, _ []string) []string {
	if n, err := bench.ParseSize(flagString(cmd, "cache-size")); err != nil || n <= 0 {
		return []string{fmt.Sprintf("cache-size: %q: want a size such as 100GiB", flagString(cmd, "cache-size"))}
	}
	if _, err := parseFillMemory(flagString(cmd, "cache-fill-memory")); err != nil {
		return []string{err.Error()}
	}
	return nil
}

// open opens the cache for a mount of c; nil when --cache-dir is empty.
func (cf cacheFlags) open(ctx context.Context, c *client.Client, log *slog.Logger, reg prometheus.Registerer) (*cache.Cache, error) {
	if cf.dir == "" {
		return nil, nil
	}
	size, err := bench.ParseSize(cf.size)
	if err != nil {
		return nil, fmt.Errorf("--cache-size: %w", err)
	}
	fill, err := parseFillMemory(cf.fillMemory)
	if err != nil {
		return nil, err
	}
	id, err := c.ClusterIdentity(ctx)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return cache.Open(ctx, cache.Options{Dir: cf.dir, Size: size, FillMemory: fill, Cluster: id,
		Logger: log.With("proc", "cache"), Registry: reg})
}

// parseFillMemory parses --cache-fill-memory: 0 for auto (the cache's
// default).
func parseFillMemory(s string) (int64, error) {
	if s == "" || s == "auto" {
		return 0, nil
	}
	n, err := bench.ParseSize(s)
	if err != nil || n < 1<<20 {
		return 0, fmt.Errorf("cache-fill-memory: %q: want auto or a size of 1MiB or more, such as 2GiB", s)
	}
	return n, nil
}

func newCacheCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Inspect or empty a node-local read cache directory (--cache-dir of mount)",
	}
	var dir string
	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show what a cache directory holds (as of its mount's last metadata write, at most 5s old)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := cache.Inspect(dir)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(st)
			}
			fmt.Printf("cache %s: %d files (%d complete), %s cached, %s on disk, in use by a mount: %v\n",
				dir, st.Files, st.Complete, humanBytes(uint64(st.CachedBytes)), humanBytes(uint64(st.DiskBytes)), st.InUse)
			return nil
		},
	}
	drop := &cobra.Command{
		Use:   "drop",
		Short: "Empty a cache directory (not while a mount uses it: unmount first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := cache.Drop(dir)
			if errors.Is(err, errs.ErrExists) {
				return fmt.Errorf("%w; unmount the mount using it first", err)
			}
			if err != nil {
				return err
			}
			fmt.Printf("dropped %d cached files from %s\n", n, dir)
			return nil
		},
	}
	for _, c := range []*cobra.Command{status, drop} {
		c.Flags().StringVar(&dir, "cache-dir", "", "the cache directory (required)")
		c.MarkFlagRequired("cache-dir")
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(status, drop)
	return cmd
}
