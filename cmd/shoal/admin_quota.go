package main

// shoal admin quota: directory quotas (docs/admin.md, "Quotas").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
)

// quotaJSON is a quota as --json prints it.
type quotaJSON struct {
	Path        string `json:"path"`
	LimitBytes  uint64 `json:"limit_bytes"`
	LimitInodes uint64 `json:"limit_inodes"`
	UsedBytes   uint64 `json:"used_bytes"`
	UsedInodes  uint64 `json:"used_inodes"`
}

func quotaOut(q client.Quota) quotaJSON {
	return quotaJSON{Path: q.Path, LimitBytes: q.LimitBytes, LimitInodes: q.LimitInodes, UsedBytes: q.UsedBytes, UsedInodes: q.UsedInodes}
}

// quotaCheckJSON is one line of `quota check --json`.
type quotaCheckJSON struct {
	quotaJSON
	RealBytes  uint64 `json:"real_bytes"`
	RealInodes uint64 `json:"real_inodes"`
	Misplaced  uint64 `json:"misplaced_inodes"`
	Consistent bool   `json:"consistent"`
	Repaired   bool   `json:"repaired"`
}

func adminQuotaCmd(af *adminFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Directory quotas: set, get, ls, rm, check",
		Long: "A directory quota limits the logical bytes (sizes of regular files) and the inodes under a directory; " +
			"the MDS refuses a create or a write past a limit (EDQUOT), and df inside the directory shows the quota. " +
			"PATH is a path through a Shoal mount, or from the file system's root. docs/admin.md, \"Quotas\".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(adminQuotaSetCmd(af), adminQuotaGetCmd(af), adminQuotaLsCmd(af), adminQuotaRmCmd(af), adminQuotaCheckCmd(af))
	return cmd
}

func adminQuotaSetCmd(af *adminFlags) *cobra.Command {
	var bytesFlag, inodesFlag string
	cmd := &cobra.Command{
		Use:   "set PATH",
		Short: "Give a directory a quota, or change its limits (0: unlimited)",
		Long: "Sets the limits of directory PATH's quota: --bytes SIZE (4096, 64MiB, 1.5TB; 0: unlimited) and --inodes N (0: unlimited). " +
			"A limit not given keeps its value (unlimited for a new quota). A new quota counts what the directory holds already.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPath(args[0]); err != nil {
				return err
			}
			if !cmd.Flags().Changed("bytes") && !cmd.Flags().Changed("inodes") {
				return errors.New("quota set needs --bytes or --inodes (or both)")
			}
			return af.withClient(func(ctx context.Context, c *client.Client) error {
				var lb, li uint64
				old, err := c.GetQuota(ctx, args[0])
				switch {
				case err == nil:
					lb, li = old.LimitBytes, old.LimitInodes
				case !errors.Is(err, errs.ErrNotFound):
					return err
				}
				if cmd.Flags().Changed("bytes") {
					if lb, err = parseBytes(bytesFlag); err != nil {
						return err
					}
				}
				if cmd.Flags().Changed("inodes") {
					if li, err = strconv.ParseUint(inodesFlag, 10, 64); err != nil {
						return fmt.Errorf("bad --inodes %q: a count", inodesFlag)
					}
				}
				if err := c.SetQuota(ctx, args[0], lb, li); err != nil {
					return err
				}
				q, err := c.GetQuota(ctx, args[0])
				if err != nil {
					return err
				}
				return printQuotas(cmd.OutOrStdout(), af, false, q)
			})
		},
	}
	cmd.Flags().StringVar(&bytesFlag, "bytes", "", "byte limit (SIZE: 4096, 64MiB, 1.5TB; 0: unlimited)")
	cmd.Flags().StringVar(&inodesFlag, "inodes", "", "inode limit (0: unlimited)")
	return cmd
}

func adminQuotaGetCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get PATH",
		Short: "Show a directory's quota",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPath(args[0]); err != nil {
				return err
			}
			return af.withClient(func(ctx context.Context, c *client.Client) error {
				q, err := c.GetQuota(ctx, args[0])
				if errors.Is(err, errs.ErrNotFound) {
					if _, serr := c.Stat(ctx, args[0]); serr == nil {
						return fmt.Errorf("%s has no quota", args[0])
					}
				}
				if err != nil {
					return err
				}
				return printQuotas(cmd.OutOrStdout(), af, false, q)
			})
		},
	}
}

func adminQuotaLsCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List every quota",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.withClient(func(ctx context.Context, c *client.Client) error {
				qs, err := c.ListQuotas(ctx)
				if err != nil {
					return err
				}
				return printQuotas(cmd.OutOrStdout(), af, true, qs...)
			})
		},
	}
}

func adminQuotaRmCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rm PATH",
		Short: "Remove a directory's quota (its files stay)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPath(args[0]); err != nil {
				return err
			}
			return af.withClient(func(ctx context.Context, c *client.Client) error {
				if err := c.RemoveQuota(ctx, args[0]); err != nil {
					return err
				}
				if af.json {
					return printJSON(cmd.OutOrStdout(), map[string]string{"removed": args[0]})
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "removed the quota of %s\n", args[0])
				return err
			})
		},
	}
}

func adminQuotaCheckCmd(af *adminFlags) *cobra.Command {
	var repair bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Recompute every quota's usage; report drift, and with --repair fix it",
		Long: "Walks each quota directory's tree and compares the usage found with the usage the MDS keeps. " +
			"Exits non-zero when they differ and --repair is not given.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.withClient(func(ctx context.Context, c *client.Client) error {
				cs, err := c.CheckQuotas(ctx, repair)
				if err != nil {
					return err
				}
				drift := 0
				out := make([]quotaCheckJSON, 0, len(cs))
				for _, k := range cs {
					if !k.Consistent {
						drift++
					}
					out = append(out, quotaCheckJSON{quotaJSON: quotaOut(k.Quota), RealBytes: k.RealBytes, RealInodes: k.RealInodes,
						Misplaced: k.Misplaced, Consistent: k.Consistent, Repaired: k.Repaired})
				}
				if af.json {
					if err := printJSON(cmd.OutOrStdout(), out); err != nil {
						return err
					}
				} else if err := printQuotaChecks(cmd.OutOrStdout(), out); err != nil {
					return err
				}
				if drift > 0 && !repair {
					return fmt.Errorf("%d of %d quotas drifted (shoal admin quota check --repair fixes them)", drift, len(cs))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "write the recomputed usage")
	return cmd
}

// printQuotas prints quotas, as JSON with --json (a list when list, else
// the one object), else one line each.
func printQuotas(w io.Writer, af *adminFlags, list bool, qs ...client.Quota) error {
	if af.json {
		if !list && len(qs) == 1 {
			return printJSON(w, quotaOut(qs[0]))
		}
		out := make([]quotaJSON, 0, len(qs))
		for _, q := range qs {
			out = append(out, quotaOut(q))
		}
		return printJSON(w, out)
	}
	if len(qs) == 0 {
		_, err := fmt.Fprintln(w, "no quotas")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tUSED\tLIMIT\tINODES\tINODE LIMIT")
	for _, q := range qs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", q.Path, humanBytes(q.UsedBytes), limitStr(q.LimitBytes, true), q.UsedInodes, limitStr(q.LimitInodes, false))
	}
	return tw.Flush()
}

func limitStr(n uint64, bytes bool) string {
	switch {
	case n == 0:
		return "unlimited"
	case bytes:
		return humanBytes(n)
	}
	return strconv.FormatUint(n, 10)
}

func printQuotaChecks(w io.Writer, cs []quotaCheckJSON) error {
	if len(cs) == 0 {
		_, err := fmt.Fprintln(w, "no quotas")
		return err
	}
	for _, k := range cs {
		state := "ok"
		switch {
		case k.Repaired:
			state = "repaired"
		case !k.Consistent:
			state = "DRIFT"
		}
		if _, err := fmt.Fprintf(w, "%-8s %s: kept %d bytes %d inodes, found %d bytes %d inodes, %d misplaced\n",
			state, k.Path, k.UsedBytes, k.UsedInodes, k.RealBytes, k.RealInodes, k.Misplaced); err != nil {
			return err
		}
	}
	return nil
}
