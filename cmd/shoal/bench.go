package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/tools/bench"
)

func newBenchCmd(g *globals) *cobra.Command {
	o := bench.Options{}
	var size string
	var asJSON, markdown bool
	cmd := &cobra.Command{
		Use:   "bench --dir D [--mds ADDR] [--mount MNT]",
		Short: "Measure a cluster (or a local one it starts) next to the bare disk and a loopback FUSE mount",
		Long: `shoal bench runs big-file, small-file, metadata and checkpoint-shaped
workloads through a Shoal FUSE mount and through the client library, and
the same workloads on two baselines in the same run: plain files on the
disk under --dir, and go-fuse's loopback file system over that disk,
mounted with Shoal's mount options and FUSE passthrough off. It prints
each figure, its baseline, the ratio and the target issue 4 sets.

With neither --mds nor --mount it starts its own cluster:
  shoal local --dir D/cluster --mount D/mnt --osts 6 --k 4 --m 2
and stops it at the end. --mds aims the API figures at an existing
cluster, --mount the mount figures. (Unlike other client commands, --mds
does not default to $SHOAL_MDS, so that a plain run always measures a
fresh local cluster.) Cold reads need root to drop the kernel caches.
See docs/performance.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := bench.ParseSize(size)
			if err != nil {
				return err
			}
			o.Size = n
			if o.Binary, err = os.Executable(); err != nil {
				return err
			}
			o.Progress = os.Stderr
			ctx, stop := signalContext()
			defer stop()
			rep, err := bench.Run(ctx, o)
			if rep == nil {
				return err
			}
			// With bench.ErrStepsFailed the figures measured are printed
			// (the failures are in the notes), then the error.
			var werr error
			switch {
			case asJSON:
				rep.WriteNotes(os.Stderr)
				werr = rep.WriteJSON(os.Stdout)
			case markdown:
				werr = rep.WriteMarkdown(os.Stdout)
			default:
				fmt.Println()
				werr = rep.WriteTable(os.Stdout)
			}
			if err != nil {
				return err
			}
			return werr
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "dir", "", "scratch directory for the baselines and the local cluster, on the disk to compare with (required)")
	f.StringVar(&o.MDS, "mds", "", "MDS address of an existing cluster: the API figures")
	f.StringVar(&o.Mount, "mount", "", "mount point of an existing cluster: the mount figures")
	f.StringVar(&size, "size", "256MiB", "size of each big file and checkpoint shard (whole MiB)")
	f.IntVar(&o.Threads, "threads", 4, "big files, checkpoint shards and threads of the data workloads")
	f.IntVar(&o.MetaThreads, "meta-threads", 16, "threads of the metadata workloads")
	f.IntVar(&o.Files, "files", 1000, "small files, and files per metadata run")
	f.StringVar(&o.Only, "only", "", "comma list of workload groups (big, small, meta, ckpt; ckpt-api only when named) and paths (mount, api) to run; empty: all")
	f.BoolVar(&o.Keep, "keep", false, "keep the baseline files and the local cluster under --dir")
	f.BoolVar(&o.SyncNamespace, "sync-namespace", false, "start the local cluster's mount with --sync-namespace (every namespace change durable before its reply)")
	f.BoolVar(&asJSON, "json", false, "print the figures as a JSON array")
	f.BoolVar(&markdown, "markdown", false, "print the table as Markdown")
	cmd.MarkFlagRequired("dir")
	return cmd
}
