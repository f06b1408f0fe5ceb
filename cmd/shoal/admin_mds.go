package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/mds/peerpb"
)

// `shoal admin mds`: the replicated MDS group (docs/mds-raft.md).

func adminMdsCmd(af *adminFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mds",
		Short: "The MDS group: status, add, remove, transfer-leader",
	}
	cmd.AddCommand(adminMdsStatusCmd(af), adminMdsAddCmd(af), adminMdsRemoveCmd(af), adminMdsTransferCmd(af))
	return cmd
}

// memberStatus asks every address of --mds (and every member they name)
// for its own status.
func (af *adminFlags) memberStatus(ctx context.Context) ([]*peerpb.Member, error) {
	if err := requireMDS(af.mds); err != nil {
		return nil, err
	}
	cr, err := af.creds()
	if err != nil {
		return nil, err
	}
	g, err := wire.DialGroup(af.mds, wire.WithCreds(cr))
	if err != nil {
		return nil, err
	}
	defer g.Close()
	seen := map[string]bool{}
	var out []*peerpb.Member
	queue := g.Addrs()
	for len(queue) > 0 {
		addr := queue[0]
		queue = queue[1:]
		if seen[addr] {
			continue
		}
		seen[addr] = true
		cc, err := g.Conn(addr)
		if err != nil {
			out = append(out, &peerpb.Member{Addr: addr, Role: "unreachable", Error: err.Error()})
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := peerpb.NewPeerClient(cc).Status(cctx, &peerpb.StatusRequest{})
		cancel()
		if status.Code(err) == codes.Unimplemented {
			// No Raft group there: a single MDS, when it serves the
			// namespace (issue 18: this printed "unreachable ...
			// Unimplemented").
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, lerr := mdspb.NewMdsClient(cc).ListOsts(cctx, &mdspb.ListOstsRequest{})
			cancel()
			if lerr == nil {
				out = append(out, &peerpb.Member{Addr: addr, Role: "standalone"})
				continue
			}
		}
		if err != nil {
			out = append(out, &peerpb.Member{Addr: addr, Role: "unreachable", Error: wire.FromStatus(err).Error()})
			continue
		}
		self := st.GetSelf()
		if self.GetAddr() == "" {
			self.Addr = addr
		}
		out = append(out, self)
		for _, m := range st.GetMembers() {
			if m.GetAddr() != "" && !seen[m.GetAddr()] {
				queue = append(queue, m.GetAddr())
			}
		}
	}
	return out, nil
}

// leaderClient returns a Peer client at the member that leads.
func (af *adminFlags) leaderClient(ctx context.Context) (peerpb.PeerClient, func(), error) {
	ms, err := af.memberStatus(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range ms {
		if m.GetRole() == "leader" {
			cr, err := af.creds()
			if err != nil {
				return nil, nil, err
			}
			cc, err := wire.Dial(m.GetAddr(), wire.WithCreds(cr))
			if err != nil {
				return nil, nil, err
			}
			return peerpb.NewPeerClient(cc), func() { cc.Close() }, nil
		}
	}
	return nil, nil, fmt.Errorf("no MDS member reports itself leader")
}

func adminMdsStatusCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Each member's id, address, role, term and applied index",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := callCtx()
			defer cancel()
			ms, err := af.memberStatus(ctx)
			if err != nil {
				return err
			}
			if af.json {
				return printJSON(os.Stdout, membersJSON(ms))
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tADDR\tROLE\tTERM\tAPPLIED\tCOMMIT\tLEADER")
			if len(ms) == 1 && ms[0].GetRole() == "standalone" {
				fmt.Printf("a single MDS at %s, not a replicated group (docs/mds-raft.md)\n", ms[0].GetAddr())
				return nil
			}
			for _, m := range ms {
				if m.GetError() != "" {
					fmt.Fprintf(tw, "-\t%s\tunreachable\t-\t-\t-\t-\t(%s)\n", m.GetAddr(), m.GetError())
					continue
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\n", m.GetId(), m.GetAddr(), m.GetRole(), m.GetTerm(), m.GetAppliedIndex(), m.GetCommitIndex(), m.GetLeader())
			}
			return tw.Flush()
		},
	}
}

func adminMdsAddCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "add ID ADDR",
		Short: "Add a member (then start it with `shoal mds --id ID --join`); it catches up from a snapshot",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.changeMember(args[0], func(id uint64) *peerpb.ChangeMemberRequest {
				return &peerpb.ChangeMemberRequest{Op: peerpb.ChangeMemberRequest_ADD, Id: id, Addr: args[1]}
			})
		},
	}
}

func adminMdsRemoveCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member from the group",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.changeMember(args[0], func(id uint64) *peerpb.ChangeMemberRequest {
				return &peerpb.ChangeMemberRequest{Op: peerpb.ChangeMemberRequest_REMOVE, Id: id}
			})
		},
	}
}

// changeMember asks the leader for the change req makes of member id arg.
func (af *adminFlags) changeMember(arg string, req func(id uint64) *peerpb.ChangeMemberRequest) error {
	return af.atLeader(arg, func(ctx context.Context, cli peerpb.PeerClient, id uint64) (*peerpb.StatusReply, error) {
		return cli.ChangeMember(ctx, req(id))
	})
}

// atLeader parses the member id arg, makes call at the member that leads
// and prints the members it answers: the body of the admin mds commands
// that change the group.
func (af *adminFlags) atLeader(arg string, call func(ctx context.Context, cli peerpb.PeerClient, id uint64) (*peerpb.StatusReply, error)) error {
	id, err := strconv.ParseUint(arg, 10, 64)
	if err != nil || id == 0 {
		return fmt.Errorf("bad member id %q", arg)
	}
	ctx, cancel := callCtx()
	defer cancel()
	cli, done, err := af.leaderClient(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := call(ctx, cli, id)
	if err != nil {
		return wire.FromStatus(err)
	}
	return printMembers(af, st)
}

func adminMdsTransferCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "transfer-leader ID",
		Short: "Hand leadership to member ID",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return af.atLeader(args[0], func(ctx context.Context, cli peerpb.PeerClient, id uint64) (*peerpb.StatusReply, error) {
				return cli.TransferLeader(ctx, &peerpb.TransferLeaderRequest{To: id})
			})
		},
	}
}

// memberJSON is one MDS member in the --json output of the admin mds
// commands, with the field names of admin status's members.
type memberJSON struct {
	ID      uint64 `json:"id"`
	Addr    string `json:"address"`
	Role    string `json:"role"`
	Applied uint64 `json:"applied_index"`
	Commit  uint64 `json:"commit_index"`
	Term    uint64 `json:"term"`
	Leader  uint64 `json:"leader"`
	Error   string `json:"error,omitempty"`
}

// membersJSON is {"members": [...]}, what every admin mds command prints
// with --json (through printJSON, as the other admin commands).
func membersJSON(ms []*peerpb.Member) map[string]any {
	rows := []memberJSON{}
	for _, m := range ms {
		rows = append(rows, memberJSON{m.GetId(), m.GetAddr(), m.GetRole(), m.GetAppliedIndex(), m.GetCommitIndex(), m.GetTerm(), m.GetLeader(), m.GetError()})
	}
	return map[string]any{"members": rows}
}

func printMembers(af *adminFlags, st *peerpb.StatusReply) error {
	if af.json {
		return printJSON(os.Stdout, membersJSON(st.GetMembers()))
	}
	var parts []string
	for _, m := range st.GetMembers() {
		p := fmt.Sprintf("%d=%s", m.GetId(), m.GetAddr())
		if m.GetRole() == "leader" {
			p += " (leader)"
		}
		parts = append(parts, p)
	}
	fmt.Println("members:", strings.Join(parts, ", "))
	return nil
}
