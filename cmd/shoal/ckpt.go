package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"golang.org/x/term"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt"
)

// ckptFlags are the flags every `shoal ckpt` command takes.
type ckptFlags struct {
	mds, root string
	tls       tlsFlags
	json      bool
	parallel  int
}

func newCkptCmd(g *globals) *cobra.Command {
	f := &ckptFlags{}
	cmd := &cobra.Command{
		Use:   "ckpt",
		Short: "Save, restore, list and check checkpoints",
		Long: `shoal ckpt works on the checkpoints under --root (default /ckpt) of a
cluster: ROOT/JOB/step-N directories of safetensors shards and other
files with a manifest.json of checksums, written by the Go API
(client/ckpt), by 'shoal ckpt save', or through the mount by the
staging-directory protocol (write ROOT/JOB/.step-N.tmp/, then rename it to
ROOT/JOB/step-N). STEP is a number or "latest". See docs/checkpoints.md.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.mds, "mds", os.Getenv("SHOAL_MDS"), "MDS address HOST[:PORT] (port 7700 if none; default $SHOAL_MDS)")
	addPersistentTLSFlags(cmd, &f.tls)
	pf.StringVar(&f.root, "root", ckpt.DefaultRoot, "directory holding the jobs")
	pf.BoolVar(&f.json, "json", false, "print JSON instead of text")
	pf.IntVar(&f.parallel, "parallel", 8, "shards written, read or checked at once")
	cmd.AddCommand(ckptLs(g, f), ckptShow(g, f), ckptVerify(g, f), ckptRm(g, f), ckptPin(g, f),
		ckptSave(g, f), ckptRestore(g, f), ckptGC(g, f), ckptPrune(g, f))
	return cmd
}

// ckptSess is a client and a store for one command, with a progress
// bar on stderr when it is a terminal.
type ckptSess struct {
	c   *client.Client
	s   *ckpt.Store
	bar *ckptBar
}

// run opens a checkpoint session with o under a context that a signal
// cancels, runs fn in it and closes both: the body of every ckpt command.
func (f *ckptFlags) run(g *globals, o ckpt.Options, fn func(ctx context.Context, sess *ckptSess) error) error {
	ctx, stop := signalContext()
	defer stop()
	sess, err := f.open(ctx, g, o)
	if err != nil {
		return err
	}
	defer sess.close()
	return fn(ctx, sess)
}

// runStep is run for the commands on JOB [STEP]: fn gets args[1] as a
// step (the latest when absent), checked before the session opens.
func (f *ckptFlags) runStep(g *globals, o ckpt.Options, args []string, fn func(ctx context.Context, sess *ckptSess, step int64) error) error {
	step, err := ckptStepArg(args, 1)
	if err != nil {
		return err
	}
	return f.run(g, o, func(ctx context.Context, sess *ckptSess) error { return fn(ctx, sess, step) })
}

func (f *ckptFlags) open(ctx context.Context, g *globals, o ckpt.Options) (*ckptSess, error) {
	if err := requireMDS(f.mds); err != nil {
		return nil, err
	}
	creds, err := f.tls.load()
	if err != nil {
		return nil, err
	}
	c, err := client.New(ctx, client.Options{MDS: f.mds, Logger: g.logger().With("proc", "ckpt"), Name: "shoal ckpt", Creds: creds})
	if err != nil {
		return nil, err
	}
	sess := &ckptSess{c: c, bar: newCkptBar(!f.json)}
	o.Root, o.Parallelism = f.root, f.parallel
	if o.Progress == nil {
		o.Progress = sess.bar.update
	}
	if sess.s, err = ckpt.New(c, o); err != nil {
		c.Close()
		return nil, err
	}
	return sess, nil
}

func (s *ckptSess) close() {
	s.bar.finish()
	s.s.Close()
	s.c.Close()
}

// ckptBar shows ckpt.Progress on stderr when it is a terminal.
type ckptBar struct {
	show bool
	mu   sync.Mutex
	bar  *progressbar.ProgressBar
	op   string
	done int64
}

func newCkptBar(show bool) *ckptBar {
	return &ckptBar{show: show && term.IsTerminal(int(os.Stderr.Fd()))}
}

func (p *ckptBar) update(pr ckpt.Progress) {
	if !p.show {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil || p.op != pr.Op {
		if p.bar != nil {
			p.bar.Finish()
		}
		p.op, p.done = pr.Op, 0
		p.bar = progressbar.NewOptions64(pr.Total,
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription(fmt.Sprintf("%s %s step %d", pr.Op, pr.Job, pr.Step)),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowTotalBytes(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	if pr.Done > p.done { // calls race; the bar only moves forward
		p.done = pr.Done
		p.bar.Set64(pr.Done)
	}
}

func (p *ckptBar) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
}

// parseStep reads a STEP argument: a number or "latest".
func ckptParseStep(s string) (int64, error) {
	if strings.EqualFold(s, "latest") {
		return ckpt.Latest, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("step %q: want a number >= 0 or \"latest\"", s)
	}
	return n, nil
}

// stepArg is args[i] as a step, or latest when absent.
func ckptStepArg(args []string, i int) (int64, error) {
	if len(args) <= i {
		return ckpt.Latest, nil
	}
	return ckptParseStep(args[i])
}

func ckptJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(b))
	return err
}

func ckptTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// ckptRows prints rows as JSON with --json, else as a table on stdout:
// header, then a line of each row.
func ckptRows[R any](asJSON bool, rows []R, header string, line func(w io.Writer, r R)) error {
	if asJSON {
		return ckptJSON(rows)
	}
	w := ckptTable(os.Stdout)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		line(w, r)
	}
	return w.Flush()
}

// mib prints a byte count.
func ckptBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func ckptLs(g *globals, f *ckptFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "ls [JOB]",
		Short: "List the jobs, or the checkpoints of JOB (staging directories of saves in progress are never listed)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(g, ckpt.Options{}, func(ctx context.Context, sess *ckptSess) error {
				if len(args) == 0 {
					return ckptLsJobs(ctx, sess.s, f.json)
				}
				return ckptLsSteps(ctx, sess.s, args[0], f.json)
			})
		},
	}
}

func ckptLsJobs(ctx context.Context, s *ckpt.Store, asJSON bool) error {
	jobs, err := s.Jobs(ctx)
	if err != nil {
		return err
	}
	type row struct {
		Job    string `json:"job"`
		Steps  int    `json:"steps"`
		Latest *int64 `json:"latest"`
	}
	rows := []row{}
	for _, j := range jobs {
		l, err := s.List(ctx, j)
		if err != nil {
			return err
		}
		r := row{Job: j, Steps: len(l)}
		if len(l) > 0 {
			r.Latest = &l[len(l)-1].Step
		}
		rows = append(rows, r)
	}
	return ckptRows(asJSON, rows, "JOB\tSTEPS\tLATEST", func(w io.Writer, r row) {
		latest := "-"
		if r.Latest != nil {
			latest = strconv.FormatInt(*r.Latest, 10)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\n", r.Job, r.Steps, latest)
	})
}

func ckptLsSteps(ctx context.Context, s *ckpt.Store, job string, asJSON bool) error {
	l, err := s.List(ctx, job)
	if err != nil {
		return err
	}
	type row struct {
		Step     int64     `json:"step"`
		Dir      string    `json:"dir"`
		Time     time.Time `json:"time"`
		Pinned   bool      `json:"pinned"`
		Manifest bool      `json:"manifest"`
		Bytes    int64     `json:"bytes"`
		Shared   int64     `json:"shared_bytes"`
		Shards   int       `json:"shards"`
	}
	rows := []row{}
	for _, in := range l {
		r := row{Step: in.Step, Dir: in.Name, Time: in.Time.UTC(), Pinned: in.Pinned, Manifest: in.HasManifest}
		if in.HasManifest {
			if m, _, err := s.Manifest(ctx, job, in.Step); err == nil {
				r.Bytes, r.Shared, r.Shards = m.Bytes, m.Shared, len(m.Shards)
			}
		}
		rows = append(rows, r)
	}
	return ckptRows(asJSON, rows, "STEP\tTIME\tSHARDS\tSIZE\tSHARED\tPINNED\tMANIFEST", func(w io.Writer, r row) {
		man := "yes"
		if !r.Manifest {
			man = "no (run verify)"
		}
		pin := ""
		if r.Pinned {
			pin = "pinned"
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Step, r.Time.Local().Format("2006-01-02 15:04:05"), r.Shards, ckptBytes(r.Bytes), ckptBytes(r.Shared), pin, man)
	})
}

func ckptShow(g *globals, f *ckptFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show JOB [STEP]",
		Short: "Show a checkpoint's manifest: shards, tensors, dtypes, shapes, sizes, checksums, what was shared with the step before",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.runStep(g, ckpt.Options{}, args, func(ctx context.Context, sess *ckptSess, step int64) error {
				// A job or step that is not there says so, without the hint
				// about manifests (issue 18).
				if _, err := sess.s.Stat(ctx, args[0], step); err != nil {
					if jobs, jerr := sess.s.Jobs(ctx); jerr == nil && !slices.Contains(jobs, args[0]) {
						return fmt.Errorf("ckpt: there is no job %q (shoal ckpt ls lists the jobs)", args[0])
					}
					return err
				}
				m, in, err := sess.s.Manifest(ctx, args[0], step)
				if err != nil {
					return fmt.Errorf("%w (a checkpoint written through the mount gets its manifest from 'shoal ckpt verify')", err)
				}
				if f.json {
					return ckptJSON(m)
				}
				st, err := sess.s.Storage(ctx, args[0], in.Step) // compression per tensor
				if err != nil {
					st = nil // shown without the STORED column
				}
				return ckptPrintManifest(os.Stdout, m, in, st)
			})
		},
	}
}

func ckptPrintManifest(out io.Writer, m *ckpt.Manifest, in ckpt.Info, st []ckpt.ShardStorage) error {
	stored := map[string]ckpt.ShardStorage{}
	for _, s := range st {
		stored[s.Name] = s
	}
	base := "none"
	if m.Base != nil {
		base = fmt.Sprintf("step %d", *m.Base)
	}
	fmt.Fprintf(out, "job %s step %d (%s), created %s by %s, pinned %v\n", m.Job, m.Step, in.Name, m.Created.Local().Format(time.RFC3339), m.Writer, in.Pinned)
	fmt.Fprintf(out, "%d shards, %s: %s written, %s shared with %s (checksums %s)\n\n",
		len(m.Shards), ckptBytes(m.Bytes), ckptBytes(m.Written), ckptBytes(m.Shared), base, m.Checksum)
	w := ckptTable(out)
	fmt.Fprintln(w, "SHARD\tKIND\tSIZE\tSHARED\tSTORED\tDIGEST")
	for _, s := range m.Shards {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Kind, ckptBytes(s.Size), ckptBytes(s.Shared), ckptStored(stored[s.Name].Logical, stored[s.Name].Stored), s.Digest)
	}
	w.Flush()
	for _, s := range m.Shards {
		if s.Kind != ckpt.KindSafetensors {
			continue
		}
		fmt.Fprintf(out, "\n%s (data at %d", s.Name, s.DataStart)
		if len(s.Metadata) > 0 {
			keys := make([]string, 0, len(s.Metadata))
			for k := range s.Metadata {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(out, ", %s=%s", k, s.Metadata[k])
			}
		}
		fmt.Fprintln(out, ")")
		w := ckptTable(out)
		fmt.Fprintln(w, "  TENSOR\tDTYPE\tSHAPE\tSIZE\tSTORED\tOFFSET\tDIGEST\tSHARED")
		ts := stored[s.Name].Tensors
		for i, t := range s.Tensors {
			shared := ""
			if t.Shared {
				shared = "shared"
			}
			sto := "-"
			if i < len(ts) && ts[i].Name == t.Name {
				sto = ckptStored(ts[i].Logical, ts[i].Stored)
			}
			fmt.Fprintf(w, "  %s\t%s\t%v\t%s\t%s\t%d\t%s\t%s\n", t.Name, t.DType, t.Shape, ckptBytes(t.Length), sto, t.Offset, t.Digest, shared)
		}
		w.Flush()
	}
	return nil
}

func ckptVerify(g *globals, f *ckptFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "verify JOB [STEP]",
		Short: "Read every byte of a checkpoint and check it against the manifest (writes the manifest of a checkpoint saved through the mount)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.runStep(g, ckpt.Options{}, args, func(ctx context.Context, sess *ckptSess, step int64) error {
				t0 := time.Now()
				rep, err := sess.s.Verify(ctx, args[0], step)
				sess.bar.finish()
				if rep == nil {
					return err
				}
				if f.json {
					type problem struct {
						Shard  string `json:"shard"`
						Tensor string `json:"tensor,omitempty"`
						Error  string `json:"error"`
					}
					out := struct {
						Job      string    `json:"job"`
						Step     int64     `json:"step"`
						OK       bool      `json:"ok"`
						Shards   int       `json:"shards"`
						Bytes    int64     `json:"bytes"`
						Filled   bool      `json:"manifest_written"`
						Problems []problem `json:"problems"`
						Unlisted []string  `json:"unlisted,omitempty"`
					}{Job: args[0], Step: rep.Info.Step, OK: err == nil, Shards: rep.Shards, Bytes: rep.Bytes, Filled: rep.Filled, Problems: []problem{}, Unlisted: rep.Unlisted}
					for _, p := range rep.Problems {
						out.Problems = append(out.Problems, problem{p.Shard, p.Tensor, p.Err.Error()})
					}
					if perr := ckptJSON(out); perr != nil {
						return perr
					}
					return err
				}
				for _, p := range rep.Problems {
					fmt.Printf("BAD  %s %s: %v\n", p.Shard, p.Tensor, p.Err)
				}
				for _, u := range rep.Unlisted {
					fmt.Printf("note: %s is not in the manifest\n", u)
				}
				if err != nil {
					return err
				}
				el := time.Since(t0)
				fmt.Printf("ok: %s step %d: %d shards, %s checked in %v (%.0f MiB/s)\n", args[0], rep.Info.Step, rep.Shards, ckptBytes(rep.Bytes),
					el.Round(time.Millisecond), float64(rep.Bytes)/(1<<20)/el.Seconds())
				if rep.Filled {
					fmt.Printf("wrote %s/%s/%s/%s\n", f.root, args[0], rep.Info.Name, ckpt.ManifestName)
				}
				return nil
			})
		},
	}
}

func ckptRm(g *globals, f *ckptFlags) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm JOB STEP...",
		Short: "Delete checkpoints (pinned ones only with --force); GC frees the space no other step shares",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(g, ckpt.Options{}, func(ctx context.Context, sess *ckptSess) error {
				for _, a := range args[1:] {
					step, err := ckptParseStep(a)
					if err != nil {
						return err
					}
					if force {
						if err := sess.s.Unpin(ctx, args[0], step); err != nil {
							return err
						}
					}
					if err := sess.s.Delete(ctx, args[0], step); err != nil {
						return err
					}
					if !f.json {
						fmt.Printf("deleted %s step %s\n", args[0], a)
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "unpin pinned checkpoints first")
	return cmd
}

func ckptPin(g *globals, f *ckptFlags) *cobra.Command {
	var unpin bool
	cmd := &cobra.Command{
		Use:   "pin JOB STEP",
		Short: "Pin a checkpoint: retention keeps it and rm refuses it (--unpin undoes)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.runStep(g, ckpt.Options{}, args, func(ctx context.Context, sess *ckptSess, step int64) error {
				what, op := "pinned", sess.s.Pin
				if unpin {
					what, op = "unpinned", sess.s.Unpin
				}
				if err := op(ctx, args[0], step); err != nil {
					return err
				}
				fmt.Printf("%s %s step %d\n", what, args[0], step)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&unpin, "unpin", false, "remove the pin")
	return cmd
}

func ckptSave(g *globals, f *ckptFlags) *cobra.Command {
	var from string
	var noReuse, pin bool
	var base int64
	var keep ckpt.Policy
	cmd := &cobra.Command{
		Use:   "save --from DIR JOB STEP",
		Short: "Save the files of DIR as a checkpoint, byte for byte: *.safetensors files tensor by tensor (sharing unchanged tensors with the step before), other files whole",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			step, err := ckptParseStep(args[1])
			if err != nil || step == ckpt.Latest {
				return fmt.Errorf("save: STEP must be a number: %q", args[1])
			}
			dir, err := ckptReadDir(from) // ckpt_files.go: mapped, not read
			if err != nil {
				return err
			}
			defer dir.Close()
			return f.run(g, ckpt.Options{Retention: keep}, func(ctx context.Context, sess *ckptSess) error {
				var opts []ckpt.SaveOption
				if noReuse {
					opts = append(opts, ckpt.NoReuse())
				}
				if pin {
					opts = append(opts, ckpt.Pin())
				}
				if cmd.Flags().Changed("base") {
					opts = append(opts, ckpt.Base(base))
				}
				t0 := time.Now()
				res, err := sess.s.Save(ctx, args[0], step, dir.shards, opts...)
				sess.bar.finish()
				if err != nil {
					return err
				}
				if err := dir.Changed(); err != nil {
					return fmt.Errorf("save: %s step %d: %w: the step may not match its manifest (shoal ckpt verify %[1]s %[2]d; shoal ckpt rm %[1]s %[2]d)", args[0], step, err)
				}
				if f.json {
					return ckptJSON(res.Manifest)
				}
				m := res.Manifest
				el := time.Since(t0)
				fmt.Printf("saved %s step %d: %d shards, %s (%s written, %s shared) in %v (%.0f MiB/s)\n", m.Job, m.Step, len(m.Shards),
					ckptBytes(m.Bytes), ckptBytes(m.Written), ckptBytes(m.Shared), el.Round(time.Millisecond), float64(m.Bytes)/(1<<20)/el.Seconds())
				if len(res.Pruned) > 0 {
					fmt.Printf("retention deleted steps %v\n", res.Pruned)
				}
				return res.PruneErr
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&from, "from", "", "directory of the files to save (required; subdirectories are not saved)")
	fl.BoolVar(&noReuse, "no-reuse", false, "write every byte, sharing nothing with the step before")
	fl.BoolVar(&pin, "pin", false, "pin the new checkpoint")
	fl.Int64Var(&base, "base", 0, "the step to share unchanged data with (default: the newest before STEP)")
	fl.IntVar(&keep.KeepLast, "keep-last", 0, "then delete all but the newest N steps (and those --keep-every and pins keep)")
	fl.Int64Var(&keep.KeepEvery, "keep-every", 0, "with --keep-last: also keep steps that are multiples of K")
	cmd.MarkFlagRequired("from")
	return cmd
}

func ckptRestore(g *globals, f *ckptFlags) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "restore --to DIR JOB [STEP]",
		Short: "Copy a checkpoint's files into DIR (the latest by default), every byte checked against the manifest",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			// One bar for the whole restore, not the store's per file.
			return f.runStep(g, ckpt.Options{Progress: func(ckpt.Progress) {}}, args, func(ctx context.Context, sess *ckptSess, step int64) error {
				s := sess.s
				in, err := s.Stat(ctx, args[0], step)
				if err != nil {
					return err
				}
				names, verified, total, err := ckptShardNames(ctx, s, args[0], in)
				if err != nil {
					return err
				}
				if err := os.MkdirAll(to, 0o755); err != nil {
					return err
				}
				bar := newCkptBar(!f.json)
				var mu sync.Mutex
				var done int64
				t0 := time.Now()
				g2, gctx := errgroup.WithContext(ctx)
				g2.SetLimit(f.parallel)
				for _, n := range names {
					g2.Go(func() error {
						size, err := ckptCopyOut(gctx, s, args[0], in.Step, n, filepath.Join(to, filepath.FromSlash(n)))
						if err != nil {
							return err
						}
						mu.Lock()
						done += size
						bar.update(ckpt.Progress{Op: "restore", Job: args[0], Step: in.Step, Done: done, Total: total})
						mu.Unlock()
						return nil
					})
				}
				err = g2.Wait()
				bar.finish()
				if err != nil {
					return err
				}
				el := time.Since(t0)
				if f.json {
					return ckptJSON(struct {
						Job      string   `json:"job"`
						Step     int64    `json:"step"`
						Files    []string `json:"files"`
						Bytes    int64    `json:"bytes"`
						Verified bool     `json:"verified"`
					}{args[0], in.Step, names, total, verified})
				}
				note := "every byte checked against the manifest"
				if !verified {
					note = "NOT checked: no manifest (run shoal ckpt verify)"
				}
				fmt.Printf("restored %s step %d to %s: %d files, %s in %v (%.0f MiB/s); %s\n", args[0], in.Step, to, len(names), ckptBytes(total),
					el.Round(time.Millisecond), float64(total)/(1<<20)/el.Seconds(), note)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "directory to write the files into (required)")
	cmd.MarkFlagRequired("to")
	return cmd
}

// shardNames lists a checkpoint's files from its manifest.
func ckptShardNames(ctx context.Context, s *ckpt.Store, job string, in ckpt.Info) (names []string, verified bool, total int64, err error) {
	m, _, err := s.Manifest(ctx, job, in.Step)
	if err != nil {
		return nil, false, 0, fmt.Errorf("%w (a checkpoint written through the mount gets its manifest from 'shoal ckpt verify')", err)
	}
	for _, sh := range m.Shards {
		names = append(names, sh.Name)
		total += sh.Size
	}
	return names, true, total, nil
}

func ckptGC(g *globals, f *ckptFlags) *cobra.Command {
	var stale time.Duration
	cmd := &cobra.Command{
		Use:   "gc [JOB...]",
		Short: "Remove what dead saves and interrupted deletes left (all jobs by default)",
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case stale < 0:
				return fmt.Errorf("--stale-after %v: want 0 or more", stale)
			case stale == 0:
				// Honoured: every staging directory counts as stale
				// (the library's 0 is its default).
				stale = time.Nanosecond
			}
			return f.run(g, ckpt.Options{StaleAfter: stale}, func(ctx context.Context, sess *ckptSess) error {
				jobs := args
				if len(jobs) == 0 {
					var err error
					if jobs, err = sess.s.Jobs(ctx); err != nil {
						return err
					}
				}
				var errsOut []error
				for _, j := range jobs {
					rep, err := sess.s.GC(ctx, j)
					if err != nil {
						errsOut = append(errsOut, fmt.Errorf("%s: %w", j, err))
					}
					for _, n := range rep.Staging {
						fmt.Printf("%s: removed stale staging directory %s\n", j, n)
					}
					for _, n := range rep.Trash {
						fmt.Printf("%s: removed %s\n", j, n)
					}
					if err == nil && len(rep.Staging)+len(rep.Trash) == 0 {
						fmt.Printf("%s: nothing to collect\n", j)
					}
				}
				if len(jobs) == 0 {
					fmt.Println("no jobs: nothing to collect")
				}
				return errors.Join(errsOut...)
			})
		},
	}
	cmd.Flags().DurationVar(&stale, "stale-after", 15*time.Minute, "a staging directory unchanged this long belongs to a dead save (0: every one; only when no save runs)")
	return cmd
}

func ckptPrune(g *globals, f *ckptFlags) *cobra.Command {
	var keep ckpt.Policy
	cmd := &cobra.Command{
		Use:   "prune JOB --keep-last N [--keep-every K]",
		Short: "Delete the checkpoints a retention policy does not keep (pinned ones are always kept)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keep.IsZero() {
				return errors.New("prune: give --keep-last and/or --keep-every")
			}
			return f.run(g, ckpt.Options{}, func(ctx context.Context, sess *ckptSess) error {
				deleted, err := sess.s.Prune(ctx, args[0], keep)
				if f.json {
					if deleted == nil {
						deleted = []int64{}
					}
					ckptJSON(deleted)
				} else if len(deleted) > 0 {
					fmt.Printf("deleted steps %v\n", deleted)
				} else if err == nil {
					fmt.Printf("%s: nothing to delete (the policy or pins keep every step)\n", args[0])
				}
				return err
			})
		},
	}
	cmd.Flags().IntVar(&keep.KeepLast, "keep-last", 0, "keep the newest N steps")
	cmd.Flags().Int64Var(&keep.KeepEvery, "keep-every", 0, "keep steps that are multiples of K")
	return cmd
}

// ckptStored shows stored bytes with their ratio to the logical ones
// (docs/compression.md): "21.3 MiB (0.67)".
func ckptStored(logical, stored int64) string {
	if logical == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%.2f)", ckptBytes(stored), float64(stored)/float64(logical))
}
