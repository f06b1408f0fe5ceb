package main

// The jobs of `shoal admin` (repair, drain, rebalance, scrub): their
// status, stop and resume subcommands, and following a job as it runs.

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// jobSubcommands are `status`, `stop` and `resume` of a job kind.
func jobSubcommands(af *adminFlags, kind string) []*cobra.Command {
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the " + kind + " job (follow it while it runs, unless --detach)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.follow(func(ctx context.Context, stub mdspb.MdsClient) error {
				return followJob(ctx, cmd.OutOrStdout(), af, stub, kind)
			})
		},
	}
	stop := &cobra.Command{
		Use:   "stop",
		Short: "Stop the " + kind + " job after its current batch (resume continues it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return adminRPC(cmd, af, mdspb.MdsClient.StopJob, &mdspb.JobRequest{Kind: kind}, func(w io.Writer, j *mdspb.AdminJob) error {
				return printJob(w, af, j)
			})
		},
	}
	resume := &cobra.Command{
		Use:   "resume",
		Short: "Resume a stopped " + kind + " job",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return startAndFollow(cmd, af, &mdspb.StartJobRequest{Kind: kind})
		},
	}
	// --detach, as the job command's help promises: `status --detach`
	// shows the job once.
	status.Flags().BoolVar(&af.detach, "detach", false, "show the job once, without following it")
	resume.Flags().BoolVar(&af.detach, "detach", false, "return once resumed; 'shoal admin "+kind+" status' follows it")
	return []*cobra.Command{status, stop, resume}
}

func startAndFollow(cmd *cobra.Command, af *adminFlags, req *mdspb.StartJobRequest) error {
	return af.follow(func(ctx context.Context, stub mdspb.MdsClient) error {
		if _, err := stub.StartJob(ctx, req); err != nil {
			return err
		}
		return followJob(ctx, cmd.OutOrStdout(), af, stub, req.Kind)
	})
}

// followJob shows a job until it stops running: a progress bar on a
// terminal, a line now and then otherwise (every progressEvery at most,
// when it changed), or the job once with --detach. A job that waits,
// because its chunks have nowhere to go until the cluster changes, is
// shown with the reason and the command ends (exit 2): the job goes on in
// the MDS, by itself once an OST returns or is added. Interrupting this
// command does not stop the job either.
func followJob(ctx context.Context, w io.Writer, af *adminFlags, stub mdspb.MdsClient, kind string) error {
	get := func(files bool) (*mdspb.AdminJob, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return stub.GetJob(cctx, &mdspb.JobRequest{Kind: kind, Files: files})
	}
	j, err := get(false)
	if err != nil {
		return err
	}
	if af.detach || j.State != "running" || j.Waiting != "" {
		if j, err = get(true); err != nil {
			return err
		}
		return jobResult(w, af, j)
	}
	var bar *progressbar.ProgressBar
	if !af.json && isTerminal(os.Stderr) {
		bar = progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription(kind),
			progressbar.OptionShowBytes(kind != "scrub"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionFullWidth(),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var total int64
	var lastLine string
	var lastPrint time.Time
	for j.State == "running" && j.Waiting == "" {
		switch {
		case bar != nil:
			cur, max := int64(j.DoneBytes), int64(j.DoneBytes+j.PlannedBytes)
			if kind == "scrub" {
				cur, max = int64(j.ScrubbedChunks), -1
			}
			if max > total {
				total = max
				bar.ChangeMax64(total)
			}
			bar.Describe(progressLine(j))
			bar.Set64(cur)
		case !af.json:
			// Not a terminal (a log, a pipe): a plain line on stderr
			// when the job moved on, so that a long job is seen alive.
			if line := progressLine(j); line != lastLine && time.Since(lastPrint) >= progressEvery {
				fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), line)
				lastLine, lastPrint = line, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			if bar != nil {
				bar.Exit()
			}
			fmt.Fprintf(os.Stderr, "\nthe %s job goes on in the MDS; `shoal admin %s status` follows it, `shoal admin %s stop` stops it\n", kind, kind, kind)
			return nil
		case <-tick.C:
		}
		if j, err = get(false); err != nil {
			return err
		}
	}
	if bar != nil {
		bar.Finish()
	}
	if j, err = get(true); err != nil {
		return err
	}
	return jobResult(w, af, j)
}

// progressEvery is how often followJob prints a progress line when
// stderr is not a terminal.
const progressEvery = 5 * time.Second

// progressLine is one line of a running job's progress.
func progressLine(j *mdspb.AdminJob) string {
	if j.Kind == "scrub" {
		return fmt.Sprintf("scrub: %s checked, %d corrupt, %d rebuilt, %d OSTs scrubbing", humanBytes(j.ScrubbedBytes), j.CorruptFound, j.DoneChunks, j.OstsScrubbing)
	}
	s := fmt.Sprintf("%s: pass %d, %d chunks moved (%s), %d planned", j.Kind, j.Passes+1, j.DoneChunks, humanBytes(j.DoneBytes), j.PlannedChunks)
	if j.FailedChunks > 0 {
		s += fmt.Sprintf(", %d failed", j.FailedChunks)
	}
	if j.Error != "" {
		s += "; last error: " + j.Error
	}
	return s
}

// jobResult prints a job and turns what it reports into the exit status:
// 2 for a failed job, extents it could not rebuild, or a job that waits.
func jobResult(w io.Writer, af *adminFlags, j *mdspb.AdminJob) error {
	if err := printJob(w, af, j); err != nil {
		return err
	}
	switch {
	case j.State == "failed":
		return problemf("%s job failed: %s", j.Kind, j.Error)
	case j.LostExtents > 0:
		return problemf("%d extents cannot be rebuilt", j.LostExtents)
	case j.State == "running" && j.Waiting != "":
		return problemf("the %s job waits: %s\n  it goes on in the MDS, by itself when the cluster changes; `shoal admin %s status` shows it, `shoal admin %s stop` stops it",
			j.Kind, j.Waiting, j.Kind, j.Kind)
	}
	return nil
}

func printJob(w io.Writer, af *adminFlags, j *mdspb.AdminJob) error {
	if af.json {
		return printJSON(w, j)
	}
	fmt.Fprintf(w, "%s: %s", j.Kind, j.State)
	if j.State == "running" && j.Waiting != "" {
		fmt.Fprint(w, ", waiting")
	}
	if j.StartedNs > 0 {
		end := time.Now()
		if j.FinishedNs > 0 {
			end = time.Unix(0, j.FinishedNs)
		}
		el := end.Sub(time.Unix(0, j.StartedNs))
		fmt.Fprintf(w, " (%s", el.Round(time.Second))
		if j.DoneBytes > 0 && el > 0 {
			fmt.Fprintf(w, ", %s/s", humanBytes(uint64(float64(j.DoneBytes)/el.Seconds())))
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintln(w)
	if j.Kind == "scrub" {
		fmt.Fprintf(w, "  checked %d chunks (%s), found %d corrupt, rebuilt %d; %d OSTs still scrubbing\n",
			j.ScrubbedChunks, humanBytes(j.ScrubbedBytes), j.CorruptFound, j.DoneChunks, j.OstsScrubbing)
	} else {
		fmt.Fprintf(w, "  moved %d chunks (%s) in %d passes; this pass: %d chunks (%s) planned; %d failed\n",
			j.DoneChunks, humanBytes(j.DoneBytes), j.Passes, j.PlannedChunks, humanBytes(j.PlannedBytes), j.FailedChunks)
	}
	if j.LostExtents > 0 {
		fmt.Fprintf(w, "  %d extents have more than m chunks unreadable\n", j.LostExtents)
	}
	if j.Waiting != "" && j.State == "running" {
		since := ""
		if j.WaitingSinceNs > 0 {
			since = fmt.Sprintf(" (for %s)", time.Since(time.Unix(0, j.WaitingSinceNs)).Round(time.Second))
		}
		fmt.Fprintf(w, "  waiting%s: %s\n", since, j.Waiting)
	}
	if j.Error != "" {
		fmt.Fprintf(w, "  last error: %s\n", j.Error)
	}
	printFiles(w, "  ", j.Files)
	return nil
}

// printFiles lists damaged files: "/a/b (lost, 3 extents)".
func printFiles(w io.Writer, indent string, files []*mdspb.DamagedFile) {
	if len(files) == 0 {
		return
	}
	fmt.Fprintf(w, "%sfiles:\n", indent)
	for _, f := range files {
		name := f.Path
		if name == "" {
			name = fmt.Sprintf("(inode %d, no name left)", f.Ino)
		}
		fmt.Fprintf(w, "%s  %s (%s, %d extents)\n", indent, name, f.Damage, f.Extents)
	}
}
