package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
)

func adminMigrateCmd(af *adminFlags) *cobra.Command {
	var lf layoutFlags
	var comp compressFlags
	cmd := &cobra.Command{
		Use:   "migrate FILE",
		Short: "Rewrite a file into another layout, online",
		Long: "Rewrite regular file FILE (a path inside the file system) into the layout given by --k, --m, --unit " +
			"(each defaulting to the file's current value) or --replicas N (k=1, m=N-1). The data is copied into a hidden " +
			"file of the same directory and swapped in by one MDS transaction, only if FILE did not change meanwhile " +
			"(else the copy starts over, up to three times). Readers keep reading throughout; FILE keeps its inode, " +
			"names, owner, mode, times and xattrs. The layout is checked before anything is copied. See docs/admin.md.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPath(args[0]); err != nil {
				return err
			}
			if err := lf.check(cmd); err != nil {
				return err
			}
			return af.withClient(func(ctx context.Context, c *client.Client) error {
				a, err := c.Stat(ctx, args[0])
				if err != nil {
					return err
				}
				to, err := lf.layout(cmd, a.GetLayout())
				if err != nil {
					return err
				}
				if to.Compression, err = comp.layout(cmd, a.GetLayout().GetCompression()); err != nil {
					return err
				}
				if err := widthErr(ctx, c.MDS(), to); err != nil {
					return err
				}
				var bar *progressbar.ProgressBar
				if !af.json && isTerminal(os.Stderr) {
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
	lf.register(cmd, " (default: the file's)")
	comp.register(cmd) // --compress: rewrite the file compressed (docs/compression.md)
	return cmd
}
