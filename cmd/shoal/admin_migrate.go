package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
)

func adminMigrateCmd(af *adminFlags) *cobra.Command {
	// layoutCmd adds the layout flags, --compress included: rewrite the
	// file compressed (docs/compression.md).
	return af.layoutCmd(&cobra.Command{
		Use:   "migrate FILE",
		Short: "Rewrite a file into another layout, online",
		Long: "Rewrite regular file FILE (a path inside the file system) into the layout given by --k, --m, --unit " +
			"(each defaulting to the file's current value) or --replicas N (k=1, m=N-1). The data is copied into a hidden " +
			"file of the same directory and swapped in by one MDS transaction, only if FILE did not change meanwhile " +
			"(else the copy starts over, up to three times). Readers keep reading throughout; FILE keeps its inode, " +
			"names, owner, mode, times and xattrs. The layout is checked before anything is copied. See docs/admin.md.",
	}, " (default: the file's)", func(ctx context.Context, cmd *cobra.Command, path string, c *client.Client, a *client.Attr, to client.Layout) error {
		if err := widthErr(ctx, c, to); err != nil {
			return err
		}
		prog := newMigrateProgress(os.Stderr, a.Size, !af.json && isTerminal(os.Stderr), af.json)
		t0 := time.Now()
		res, err := c.Migrate(ctx, path, to, prog.set)
		prog.done(err == nil && !res.Unchanged)
		if err != nil {
			return err
		}
		if af.json {
			return printJSON(cmd.OutOrStdout(), struct {
				Path string `json:"path"`
				*client.MigrateResult
				Seconds float64 `json:"seconds"`
			}{path, res, time.Since(t0).Seconds()})
		}
		if res.Unchanged {
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: already k=%d m=%d unit=%d; nothing to do\n", path, to.K, to.M, to.Unit)
			return err
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s (inode %d): k=%d m=%d unit=%d -> k=%d m=%d unit=%d, %d bytes copied in %.1fs (%d attempt(s))\n",
			path, res.Ino, res.From.K, res.From.M, res.From.Unit, to.K, to.M, to.Unit,
			res.Bytes, time.Since(t0).Seconds(), res.Attempts)
		return err
	})
}

// migrateProgress shows a migration's progress on stderr: a bar on a
// terminal, else a plain line every few seconds (a log or a pipe gets no
// carriage returns), nothing with --json. Nothing is drawn before the
// first byte is copied, so a migration with nothing to do shows no bar
// and no rate.
type migrateProgress struct {
	w     io.Writer
	size  int64
	tty   bool
	quiet bool
	bar   *progressbar.ProgressBar
	t0    time.Time
	last  time.Time // of the last plain line
	n     int64
}

// migrateLineEvery is how often a plain progress line is written.
const migrateLineEvery = 5 * time.Second

func newMigrateProgress(w io.Writer, size uint64, tty, quiet bool) *migrateProgress {
	now := time.Now()
	return &migrateProgress{w: w, size: int64(size), tty: tty, quiet: quiet, t0: now, last: now}
}

func (p *migrateProgress) set(n int64) {
	p.n = n
	if p.quiet || n <= 0 {
		return
	}
	if p.tty {
		if p.bar == nil {
			p.bar = progressbar.NewOptions64(p.size,
				progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetDescription("migrate"),
				progressbar.OptionShowBytes(true),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionFullWidth(),
				progressbar.OptionThrottle(200*time.Millisecond))
		}
		p.bar.Set64(n)
		return
	}
	if now := time.Now(); now.Sub(p.last) >= migrateLineEvery {
		p.last = now
		p.line(now)
	}
}

func (p *migrateProgress) line(now time.Time) {
	pct := 100.0
	if p.size > 0 {
		pct = float64(p.n) / float64(p.size) * 100
	}
	fmt.Fprintf(p.w, "migrate: %s of %s copied (%.0f%%), %s/s\n", humanBytes(uint64(p.n)), humanBytes(uint64(p.size)), pct,
		humanBytes(uint64(float64(p.n)/max(now.Sub(p.t0).Seconds(), 0.001))))
}

// done ends the display; copied says the migration copied data.
func (p *migrateProgress) done(copied bool) {
	switch {
	case p.bar != nil:
		p.bar.Finish()
		fmt.Fprintln(p.w)
	case copied && !p.quiet && !p.tty && p.last != p.t0:
		p.line(time.Now()) // the last line says 100%
	}
}
