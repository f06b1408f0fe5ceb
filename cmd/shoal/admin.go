package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// `shoal admin`: the operator's commands, each one call (or a few) to the
// MDS, which does the work. docs/admin.md documents them with examples.

type adminFlags struct {
	mds    string
	json   bool
	detach bool
	tls    tlsFlags
}

// creds loads the administrator's credentials (--cert/--key/--ca, or
// --insecure).
func (af *adminFlags) creds() (*wire.Creds, error) { return af.tls.load() }

func newAdminCmd(g *globals) *cobra.Command {
	af := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Administer a cluster: space, OSTs, layouts, repair, drain, rebalance, scrub, fsck, gc",
		// Without RunE, cobra prints the help of `shoal admin TYPO` and
		// exits 0; a typo is a usage error (exit 1), as it is one level
		// down.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.PersistentFlags().StringVar(&af.mds, "mds", os.Getenv("SHOAL_MDS"), "MDS address HOST[:PORT] (port 7700 if none), or the comma-separated addresses of an MDS group (default $SHOAL_MDS)")
	cmd.PersistentFlags().BoolVar(&af.json, "json", false, "print the result as JSON (no progress bar)")
	addPersistentTLSFlags(cmd, &af.tls)
	cmd.AddCommand(newCACmd(), newCertCmd())
	cmd.AddCommand(
		adminDfCmd(af), adminOstsCmd(af), adminSetstripeCmd(af), adminGetstripeCmd(af),
		adminRepairCmd(af), adminDrainCmd(af), adminUndrainCmd(af), adminRemoveCmd(af),
		adminRebalanceCmd(af), adminScrubCmd(af), adminFsckCmd(af), adminGCCmd(af),
		adminMdsCmd(af), adminMigrateCmd(af), adminStatusCmd(af), adminQuotaCmd(af),
	)
	return cmd
}

// stub dials the MDS.
func (af *adminFlags) stub() (mdspb.MdsClient, func(), error) {
	if err := requireMDS(af.mds); err != nil {
		return nil, nil, err
	}
	cr, err := af.creds()
	if err != nil {
		return nil, nil, err
	}
	cc, err := wire.DialGroup(af.mds, wire.WithCreds(cr)) // one MDS or a group: follows the leader
	if err != nil {
		return nil, nil, fmt.Errorf("dial MDS %s: %w", af.mds, err)
	}
	return mdspb.NewMdsClient(cc), func() { cc.Close() }, nil
}

// call dials the MDS and runs fn with the stub under a call context
// (cancelled by a signal, 10 minutes at most): the body of every admin
// command that calls the MDS.
func (af *adminFlags) call(fn func(ctx context.Context, stub mdspb.MdsClient) error) error {
	return af.withStub(callCtx, fn)
}

// follow is call for the commands that follow a job: only a signal
// cancels their context (a job runs as long as it takes).
func (af *adminFlags) follow(fn func(ctx context.Context, stub mdspb.MdsClient) error) error {
	return af.withStub(signalContext, fn)
}

func (af *adminFlags) withStub(newCtx func() (context.Context, context.CancelFunc), fn func(context.Context, mdspb.MdsClient) error) error {
	stub, done, err := af.stub()
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := newCtx()
	defer cancel()
	return fn(ctx, stub)
}

// adminRPC makes one MDS call, a method of mdspb.MdsClient such as
// mdspb.MdsClient.ListOsts, and prints its reply: as JSON with --json,
// else with text.
func adminRPC[Req, Rep any](cmd *cobra.Command, af *adminFlags, rpc func(mdspb.MdsClient, context.Context, Req, ...grpc.CallOption) (Rep, error), req Req, text func(io.Writer, Rep) error) error {
	return af.call(func(ctx context.Context, stub mdspb.MdsClient) error {
		r, err := rpc(stub, ctx, req)
		if err != nil {
			return err
		}
		if af.json {
			return printJSON(cmd.OutOrStdout(), r)
		}
		return text(cmd.OutOrStdout(), r)
	})
}

func callCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := signalContext()
	ctx2, cancel2 := context.WithTimeout(ctx, 10*time.Minute)
	return ctx2, func() { cancel2(); cancel() }
}

// df and osts.

type dfReport struct {
	Osts         []any   `json:"osts"`
	UsedBytes    uint64  `json:"used_bytes"`
	Capacity     uint64  `json:"capacity_bytes"`
	MeanUsed     uint64  `json:"mean_used_bytes"`
	ImbalancePct float64 `json:"imbalance_pct"`
	OstsUp       int     `json:"osts_up"`
	OstsTotal    int     `json:"osts_total"`
}

// imbalance is (max - min) / mean of the used bytes of the up, active OSTs.
func imbalance(osts []*mdspb.OstInfo) (mean uint64, pct float64) {
	var sum, lo, hi uint64
	n := 0
	for _, o := range osts {
		if o.GetState() != "up" {
			continue
		}
		if n == 0 || o.Used < lo {
			lo = o.Used
		}
		hi = max(hi, o.Used)
		sum += o.Used
		n++
	}
	if n == 0 || sum == 0 {
		return 0, 0
	}
	mean = sum / uint64(n)
	return mean, float64(hi-lo) / (float64(sum) / float64(n)) * 100
}

func adminDfCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "df",
		Short: "Capacity, used space, chunks and state of every OST, and the cluster's imbalance",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.call(func(ctx context.Context, stub mdspb.MdsClient) error {
				r, err := stub.ListOsts(ctx, &mdspb.ListOstsRequest{})
				if err != nil {
					return err
				}
				rep := dfReport{OstsTotal: len(r.Osts)}
				for _, o := range r.Osts {
					rep.UsedBytes += o.Used
					rep.Capacity += o.Capacity
					if o.Up {
						rep.OstsUp++
					}
					rep.Osts = append(rep.Osts, protoMap(o))
				}
				rep.MeanUsed, rep.ImbalancePct = imbalance(r.Osts)
				out := cmd.OutOrStdout()
				if af.json {
					return printJSON(out, rep)
				}
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "OST\tSTATE\tADDR\tSIZE\tUSED\tCHUNKS\tFREE\tUSE%")
				for _, o := range r.Osts {
					use := 0.0
					if o.Capacity > 0 {
						use = float64(o.Capacity-o.Free) / float64(o.Capacity) * 100
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%.0f%%\n", o.Id, o.State, o.Addr, humanBytes(o.Capacity), humanBytes(o.Used), o.Chunks, humanBytes(o.Free), use)
				}
				tw.Flush()
				fmt.Fprintf(out, "\n%d of %d OSTs up; %s in chunks; imbalance %.1f%% ((max-min)/mean of used bytes over up OSTs, mean %s)\n",
					rep.OstsUp, rep.OstsTotal, humanBytes(rep.UsedBytes), rep.ImbalancePct, humanBytes(rep.MeanUsed))
				return nil
			})
		},
	}
}

func adminOstsCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "osts",
		Short: "List the OSTs with their state (up, down, draining, removed) and last heartbeat",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return adminRPC(cmd, af, mdspb.MdsClient.ListOsts, &mdspb.ListOstsRequest{}, printOsts)
		},
	}
}

func printOsts(w io.Writer, r *mdspb.ListOstsReply) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OST\tSTATE\tADDR\tLAST HEARTBEAT\tUUID")
	for _, o := range r.Osts {
		hb := "never"
		if o.LastHeartbeatNs > 0 {
			hb = time.Since(time.Unix(0, o.LastHeartbeatNs)).Round(100*time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", o.Id, o.State, o.Addr, hb, o.Uuid)
	}
	return tw.Flush()
}

// Layouts.

// withClient runs fn with a client of the cluster (path resolution).
func (af *adminFlags) withClient(fn func(ctx context.Context, c *client.Client) error) error {
	if err := requireMDS(af.mds); err != nil {
		return err
	}
	ctx, cancel := callCtx()
	defer cancel()
	cr, err := af.creds()
	if err != nil {
		return err
	}
	c, err := client.New(ctx, client.Options{MDS: af.mds, Creds: cr})
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// layoutCmd completes cmd into a command on one PATH that takes the
// layout flags (setstripe, migrate; dflt ends their help): run gets a
// client of the cluster, the attributes of PATH and the layout the flags
// make of PATH's.
func (af *adminFlags) layoutCmd(cmd *cobra.Command, dflt string,
	run func(ctx context.Context, cmd *cobra.Command, path string, c *client.Client, a *client.Attr, l client.Layout) error) *cobra.Command {
	var lf layoutFlags
	var comp compressFlags
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
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
			l, err := lf.layout(cmd, a.Layout)
			if err != nil {
				return err
			}
			if l.Compression, err = comp.layout(cmd, a.Layout.Compression); err != nil {
				return err
			}
			return run(ctx, cmd, args[0], c, a, l)
		})
	}
	lf.register(cmd, dflt)
	comp.register(cmd)
	return cmd
}

type stripeReport struct {
	Path   string `json:"path"`
	Ino    uint64 `json:"ino"`
	Type   string `json:"type"`
	K      uint32 `json:"k"`
	M      uint32 `json:"m"`
	Unit   uint32 `json:"unit"`
	Layout string `json:"layout"`
	// Compress is the compression attribute as setstripe takes it
	// (none, s2, zstd:LEVEL); its options follow when it is not none.
	Compress          string `json:"compress"`
	CompressMinSaving uint32 `json:"compress_min_saving,omitempty"`
	CompressPlanes    uint32 `json:"compress_planes,omitempty"`
}

func stripeOf(path string, a *client.Attr) stripeReport {
	l := a.Layout
	typ := "file"
	if client.IsDir(a) {
		typ = "directory"
	}
	desc := fmt.Sprintf("RS %d+%d, unit %s", l.K, l.M, humanBytes(uint64(l.Unit)))
	switch {
	case l.K == 1:
		desc = fmt.Sprintf("%d-way replication, unit %s", l.M+1, humanBytes(uint64(l.Unit)))
	case l.M == 0:
		desc = fmt.Sprintf("striping over %d, no parity, unit %s", l.K, humanBytes(uint64(l.Unit)))
	}
	r := stripeReport{Path: path, Ino: a.Ino, Type: typ, K: l.K, M: l.M, Unit: l.Unit}
	desc += compressReport(l.Compression, &r)
	r.Layout = desc
	return r
}

func printStripe(w io.Writer, af *adminFlags, r stripeReport) error {
	if af.json {
		return printJSON(w, r)
	}
	_, err := fmt.Fprintf(w, "%s (%s, inode %d): k=%d m=%d unit=%d (%s)\n", r.Path, r.Type, r.Ino, r.K, r.M, r.Unit, r.Layout)
	return err
}

func adminSetstripeCmd(af *adminFlags) *cobra.Command {
	var force bool
	cmd := af.layoutCmd(&cobra.Command{
		Use:   "setstripe PATH",
		Short: "Set the layout of a directory (inherited by new files) or of an empty file",
		Long: "Set the layout {k, m, unit} of a directory, which files and directories created in it inherit, " +
			"or of an empty regular file. PATH is a path inside the file system (from its root; / is the root). " +
			"--replicas N is k=1, m=N-1. --compress none|s2|zstd[:LEVEL] sets the compression attribute (docs/compression.md), " +
			"which alone may also change on a file with data (its new extents follow it).",
	}, "", func(ctx context.Context, cmd *cobra.Command, path string, c *client.Client, a *client.Attr, l client.Layout) error {
		// A layout the OSTs cannot hold: refused unless --force
		// (OSTs may be added later); narrow, said (issue 18).
		refuse, narrow := fitErr(ctx, c, l)
		switch {
		case refuse != nil && !force:
			return fmt.Errorf("%w (--force sets it anyway)", refuse)
		case refuse != nil:
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v until there are enough (set with --force)\n", refuse)
		case narrow != nil:
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v\n", narrow)
		}
		na, err := c.SetLayout(ctx, a.Ino, l)
		if err != nil {
			return err
		}
		return printStripe(cmd.OutOrStdout(), af, stripeOf(path, na))
	})
	cmd.Flags().BoolVar(&force, "force", false, "set a layout wider than the OSTs registered can hold (writes there fail until OSTs are added)")
	return cmd
}

func adminGetstripeCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "getstripe PATH",
		Short: "Show the layout of a file or directory",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPath(args[0]); err != nil {
				return err
			}
			return af.withClient(func(ctx context.Context, c *client.Client) error {
				a, err := c.Stat(ctx, args[0])
				if err != nil {
					return err
				}
				return printStripe(cmd.OutOrStdout(), af, stripeOf(args[0], a))
			})
		},
	}
}

// OST states.

func parseOst(s string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "ost"), 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("bad OST id %q (a number from `shoal admin osts`)", s)
	}
	return uint32(n), nil
}

func adminDrainCmd(af *adminFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drain OST",
		Short: "Stop placing new extents on an OST and move every chunk off it",
		Long:  "Marks the OST draining (placement skips it) and runs the drain job, which moves each of its chunks to another OST (copy, verify, switch, delete). Then `shoal admin remove OST`.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseOst(args[0])
			if err != nil {
				return err
			}
			return af.follow(func(ctx context.Context, stub mdspb.MdsClient) error {
				if _, err := stub.SetOstState(ctx, &mdspb.SetOstStateRequest{Id: id, State: "draining"}); err != nil {
					return err
				}
				return followJob(ctx, cmd.OutOrStdout(), af, stub, "drain")
			})
		},
	}
	cmd.Flags().BoolVar(&af.detach, "detach", false, "return once started; 'shoal admin drain status' follows it")
	cmd.AddCommand(jobSubcommands(af, "drain")...)
	return cmd
}

func adminUndrainCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "undrain OST",
		Short: "Make a draining (or removed) OST active again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setState(cmd, af, args[0], "active", false)
		},
	}
}

func adminRemoveCmd(af *adminFlags) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "remove OST",
		Short: "Remove an OST for good; refused while it still holds chunks (drain it first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setState(cmd, af, args[0], "removed", force)
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove even though extents still have chunks there (they count as lost; run 'shoal admin repair')")
	return cmd
}

func setState(cmd *cobra.Command, af *adminFlags, ost, state string, force bool) error {
	id, err := parseOst(ost)
	if err != nil {
		return err
	}
	return adminRPC(cmd, af, mdspb.MdsClient.SetOstState, &mdspb.SetOstStateRequest{Id: id, State: state, Force: force},
		func(w io.Writer, o *mdspb.OstInfo) error {
			fmt.Fprintf(w, "OST %d: %s\n", o.Id, o.State)
			return nil
		})
}

// Jobs: repair, drain, rebalance, scrub.

func adminRepairCmd(af *adminFlags) *cobra.Command {
	var osts []string
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Rebuild the chunks of down or removed OSTs on other OSTs",
		Long: "Rebuilds every chunk held by a removed OST, or by the OSTs named with --ost, or (without --ost) by every OST down now, " +
			"from the surviving chunks of each extent, onto other OSTs, until every extent has k+m healthy chunks. " +
			"The MDS also starts a repair on its own when an OST stays down longer than its repair delay.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &mdspb.StartJobRequest{Kind: "repair"}
			for _, s := range osts {
				id, err := parseOst(s)
				if err != nil {
					return err
				}
				req.Osts = append(req.Osts, id)
			}
			return startAndFollow(cmd, af, req)
		},
	}
	cmd.Flags().StringSliceVar(&osts, "ost", nil, "OSTs to treat as lost (default: every OST down now)")
	cmd.Flags().BoolVar(&af.detach, "detach", false, "return once started; 'shoal admin repair status' follows it")
	cmd.AddCommand(jobSubcommands(af, "repair")...)
	return cmd
}

func adminRebalanceCmd(af *adminFlags) *cobra.Command {
	var dry bool
	var threshold float64
	var bw string
	cmd := &cobra.Command{
		Use:   "rebalance",
		Short: "Move chunks from the fullest to the emptiest OSTs until each is within --threshold of the mean",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &mdspb.StartJobRequest{Kind: "rebalance", ThresholdPct: threshold}
			if bw != "" {
				n, err := parseBytes(bw)
				if err != nil {
					return err
				}
				req.MaxBandwidth = n
			}
			if dry {
				return af.call(func(ctx context.Context, stub mdspb.MdsClient) error {
					p, err := stub.PlanRebalance(ctx, req)
					if err != nil {
						return err
					}
					if err := printPlan(cmd.OutOrStdout(), af, p); err != nil || af.json || p.Moves > 0 {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), noMovesReason(p, threshold))
					return nil
				})
			}
			return startAndFollow(cmd, af, req)
		},
	}
	cmd.Flags().BoolVar(&dry, "dry-run", false, "show the plan, move nothing")
	cmd.Flags().Float64Var(&threshold, "threshold", 5, "target: every OST within this percentage of the mean")
	cmd.Flags().StringVar(&bw, "max-bandwidth", "", "limit the chunk data written, e.g. 200MiB/s (default unlimited)")
	cmd.Flags().BoolVar(&af.detach, "detach", false, "return once started; 'shoal admin rebalance status' follows it")
	cmd.AddCommand(jobSubcommands(af, "rebalance")...)
	return cmd
}

// noMovesReason says why a plan has no moves (issue 18: "imbalance
// 14.0% -> 14.0%" and 0 moves, above the threshold, said nothing).
func noMovesReason(p *mdspb.RebalancePlan, threshold float64) string {
	if p.ImbalancePct <= threshold {
		return fmt.Sprintf("nothing to move: the imbalance %.1f%% is within --threshold %g%%", p.ImbalancePct, threshold)
	}
	return fmt.Sprintf("nothing to move, though the imbalance %.1f%% is above --threshold %g%%: no chunk move lowers it. "+
		"A chunk moves only to an OST in service that holds no other chunk of its extent (with as many OSTs as k+m, each already holds one chunk of every extent), "+
		"and only when the move brings the fullest and emptiest OSTs closer", p.ImbalancePct, threshold)
}

func printPlan(w io.Writer, af *adminFlags, p *mdspb.RebalancePlan) error {
	if af.json {
		return printJSON(w, p)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OST\tCHUNKS\tNOW\tAFTER")
	for _, o := range p.Osts {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", o.Id, o.Chunks, humanBytes(o.Bytes), humanBytes(o.After))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nplan: %d chunk moves, %s; imbalance %.1f%% -> %.1f%%\n", p.Moves, humanBytes(p.Bytes), p.ImbalancePct, p.ImbalanceAfterPct)
	for _, m := range p.Sample {
		fmt.Fprintf(w, "  extent %d chunk %d: OST %d -> OST %d (%s)\n", m.Extent, m.Index, m.From, m.To, humanBytes(m.Bytes))
	}
	if p.Moves > uint64(len(p.Sample)) {
		fmt.Fprintf(w, "  ... and %d more\n", p.Moves-uint64(len(p.Sample)))
	}
	return nil
}

func adminScrubCmd(af *adminFlags) *cobra.Command {
	var rate string
	cmd := &cobra.Command{
		Use:   "scrub",
		Short: "Read every chunk on every OST, verify its checksums, and rebuild the bad ones from parity",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &mdspb.StartJobRequest{Kind: "scrub"}
			if rate != "" {
				n, err := parseBytes(rate)
				if err != nil {
					return err
				}
				req.ScrubRate = n
			}
			return startAndFollow(cmd, af, req)
		},
	}
	cmd.Flags().StringVar(&rate, "rate", "", "read rate per OST for this pass, e.g. 500MiB/s (default: the OSTs')")
	cmd.Flags().BoolVar(&af.detach, "detach", false, "return once started; 'shoal admin scrub status' follows it")
	cmd.AddCommand(jobSubcommands(af, "scrub")...)
	return cmd
}

// fsck and gc.

func adminFsckCmd(af *adminFlags) *cobra.Command {
	var repair bool
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "fsck",
		Short: "Check that every extent has its chunks and every chunk belongs to an extent; --repair fixes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.call(func(ctx context.Context, stub mdspb.MdsClient) error {
				r, err := stub.Fsck(ctx, &mdspb.FsckRequest{Repair: repair, OrphanGraceNs: int64(grace)})
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if af.json {
					if err := printJSON(w, r); err != nil {
						return err
					}
				} else {
					printFsck(w, r, repair)
				}
				if !r.Clean && (!repair || r.Fixed < r.ProblemCount) {
					return problemf("fsck: %d problems", r.ProblemCount-r.Fixed)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "fix: rebuild missing chunks, delete orphans, repair chunks on removed OSTs")
	cmd.Flags().DurationVar(&grace, "orphan-grace", 0, "unreferenced chunks younger than this are not orphans (default: the MDS's GC grace)")
	return cmd
}

// printFsck prints an fsck report as text.
func printFsck(w io.Writer, r *mdspb.FsckReply, repair bool) {
	fmt.Fprintf(w, "%d extents, %d chunks checked, %d chunks on OSTs: %d problems", r.Extents, r.ChunksChecked, r.OstChunks, r.ProblemCount)
	if repair {
		fmt.Fprintf(w, ", %d fixed or queued for rebuild", r.Fixed)
	}
	fmt.Fprintln(w)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  %s: extent %d chunk %d on OST %d", p.Kind, p.Extent, p.Index, p.Ost)
		if p.Detail != "" {
			fmt.Fprintf(w, ": %s", p.Detail)
		}
		if p.Fixed {
			fmt.Fprint(w, " [fixed]")
		}
		fmt.Fprintln(w)
	}
}

func adminGCCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Collect now the orphans and replaced extents past their grace period",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return adminRPC(cmd, af, mdspb.MdsClient.RunGC, &mdspb.GCRequest{}, func(w io.Writer, r *mdspb.GCReply) error {
				fmt.Fprintf(w, "collected %d extents and %d old chunk copies; waiting: %d extents in the GC queue, %d uncommitted allocations, %d old chunk copies\n",
					r.CollectedExtents, r.RetiredChunks, r.QueuedExtents, r.PendingExtents, r.RetiringChunks)
				return nil
			})
		},
	}
}
