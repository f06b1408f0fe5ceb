package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/mds/mdspb"
)

func adminMigrateCmd(af *adminFlags) *cobra.Command {
	var k, m, replicas uint32
	var unit string
	var comp compressFlags
	cmd := &cobra.Command{
		Use:   "migrate FILE",
		Short: "Rewrite a file into another layout, online",
		Long: "Rewrite regular file FILE (a path inside the file system) into the layout given by --k, --m, --unit " +
			"(each defaulting to the file's current value) or --replicas N (k=1, m=N-1). The data is copied into a hidden " +
			"file of the same directory and swapped in by one MDS transaction, only if FILE did not change meanwhile " +
			"(else the copy starts over, up to three times). Readers keep reading throughout; FILE keeps its inode, " +
			"names, owner, mode, times and xattrs. See docs/admin.md.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := parseBytes(unit)
			if err != nil {
				return err
			}
			if replicas > 0 {
				if cmd.Flags().Changed("k") || cmd.Flags().Changed("m") {
					return fmt.Errorf("--replicas excludes --k and --m")
				}
				k, m = 1, replicas-1
			}
			return af.withClient(func(ctx context.Context, c *client.Client) error {
				a, err := c.Stat(ctx, args[0])
				if err != nil {
					return err
				}
				to := &mdspb.Layout{K: k, M: m, Unit: uint32(u)}
				if !cmd.Flags().Changed("k") && replicas == 0 {
					to.K = a.GetLayout().GetK()
				}
				if !cmd.Flags().Changed("m") && replicas == 0 {
					to.M = a.GetLayout().GetM()
				}
				if !cmd.Flags().Changed("unit") {
					to.Unit = a.GetLayout().GetUnit()
				}
				if to.Compression, err = comp.layout(cmd, a.GetLayout().GetCompression()); err != nil {
					return err
				}
				var bar *progressbar.ProgressBar
				if !af.json {
					bar = progressbar.NewOptions64(int64(a.GetSize()),
						progressbar.OptionSetWriter(os.Stderr),
						progressbar.OptionSetDescription("migrate"),
						progressbar.OptionShowBytes(true),
						progressbar.OptionSetPredictTime(true),
						progressbar.OptionFullWidth(),
						progressbar.OptionThrottle(200*time.Millisecond))
				}
				t0 := time.Now()
				res, err := c.Migrate(ctx, args[0], to, func(n int64) {
					if bar != nil {
						bar.Set64(n)
					}
				})
				if bar != nil {
					bar.Finish()
					fmt.Fprintln(os.Stderr)
				}
				if err != nil {
					return err
				}
				if af.json {
					return printJSON(cmd.OutOrStdout(), struct {
						Path string `json:"path"`
						*client.MigrateResult
						Seconds float64 `json:"seconds"`
					}{args[0], res, time.Since(t0).Seconds()})
				}
				if res.Unchanged {
					_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: already k=%d m=%d unit=%d; nothing to do\n", args[0], to.K, to.M, to.Unit)
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s (inode %d): k=%d m=%d unit=%d -> k=%d m=%d unit=%d, %d bytes copied in %.1fs (%d attempt(s))\n",
					args[0], res.Ino, res.From.GetK(), res.From.GetM(), res.From.GetUnit(), to.K, to.M, to.Unit,
					res.Bytes, time.Since(t0).Seconds(), res.Attempts)
				return err
			})
		},
	}
	cmd.Flags().Uint32Var(&k, "k", 4, "data cells per row (default: the file's)")
	cmd.Flags().Uint32Var(&m, "m", 2, "parity cells per row (default: the file's)")
	cmd.Flags().StringVar(&unit, "unit", "1MiB", "cell size, a multiple of 4 KiB (default: the file's)")
	cmd.Flags().Uint32Var(&replicas, "replicas", 0, "N-way replication (k=1, m=N-1) instead of --k/--m")
	comp.register(cmd) // --compress: rewrite the file compressed (docs/compression.md)
	return cmd
}
