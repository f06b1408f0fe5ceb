package main

// `shoal admin status`: the whole cluster on one screen, with a verdict
// (docs/admin.md, "Status").

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Verdicts of `shoal admin status`, after Ceph's.
const (
	healthOK   = "HEALTH_OK"
	healthWarn = "HEALTH_WARN"
	healthErr  = "HEALTH_ERR"
)

// Exit statuses of `shoal admin status`: 0 HEALTH_OK, exitProblem (2)
// HEALTH_WARN, exitHealthErr HEALTH_ERR; 1 (exitFailed) when the command
// itself could not run (bad flags or credentials).
const exitHealthErr = 3

// healthError is the error `shoal admin status` returns for a verdict
// other than HEALTH_OK; main exits with its code.
type healthError struct {
	verdict string
	code    int
}

func (e *healthError) Error() string { return e.verdict }

// Thresholds of the verdict on used capacity (of the up OSTs).
const (
	warnUsedPct = 85
	errUsedPct  = 95
)

type statusMember struct {
	ID      uint64 `json:"id"`
	Addr    string `json:"address"`
	Role    string `json:"role"`
	Term    uint64 `json:"term"`
	Applied uint64 `json:"applied_index"`
	Leader  uint64 `json:"leader"`
	Error   string `json:"error,omitempty"`
}

type statusOST struct {
	ID            uint32 `json:"id"`
	Addr          string `json:"address"`
	State         string `json:"state"`
	Capacity      uint64 `json:"capacity_bytes"`
	Used          uint64 `json:"used_bytes"`
	Free          uint64 `json:"free_bytes"`
	Chunks        uint64 `json:"chunks"`
	FsID          string `json:"fs_id,omitempty"`          // OSTs on one file system count once in the totals
	Nearfull      bool   `json:"nearfull,omitempty"`       // at or past the MDS's near-full ratio
	Full          bool   `json:"full,omitempty"`           // placement puts no new chunk there
	LastHeartbeat string `json:"last_heartbeat,omitempty"` // "3.2s ago"
}

type statusJob struct {
	Kind        string `json:"kind"`
	State       string `json:"state"`
	DoneChunks  uint64 `json:"done_chunks"`
	PlannedLeft uint64 `json:"planned_chunks"`
	Failed      uint64 `json:"failed_chunks"`
	Lost        uint64 `json:"lost_extents,omitempty"` // at the job's last pass; the present is statusReport.LostExtents
	Corrupt     uint64 `json:"corrupt_found,omitempty"`
	Error       string `json:"error,omitempty"`
	Waiting     string `json:"waiting,omitempty"` // why a running job cannot progress until the cluster changes
}

// statusFile is a file holding damaged extents.
type statusFile struct {
	Ino     uint64 `json:"ino"`
	Path    string `json:"path"`
	Damage  string `json:"damage"`
	Extents uint64 `json:"extents"`
}

// statusData is the state of the data now (the MDS's Health): nil when
// the MDS could not tell (an older MDS, or an error), and then the jobs'
// last counts stand in.
type statusData struct {
	Extents         uint64       `json:"extents"`
	Degraded        uint64       `json:"degraded_extents"`
	Unreadable      uint64       `json:"unreadable_extents"`
	BadChunksQueued uint64       `json:"bad_chunks_queued"`
	Files           []statusFile `json:"damaged_files"`
	// Layouts are the directories whose layout is wider than the Osts
	// registered (admin_status_layout.go).
	Layouts []statusLayout `json:"wide_layouts,omitempty"`
	Osts    uint32         `json:"osts_registered"`
}

// statusFiles is how many damaged files status names.
const statusFiles = 10

// statusReport is what `shoal admin status` shows; --json prints it.
type statusReport struct {
	Health  string         `json:"health"`
	Reasons []string       `json:"reasons"`
	MDS     []statusMember `json:"mds"`
	OSTs    struct {
		Up       int         `json:"up"`
		Down     int         `json:"down"`
		Draining int         `json:"draining"`
		Removed  int         `json:"removed"`
		Capacity uint64      `json:"capacity_bytes"` // of the OSTs not removed, a file system shared by several once
		Used     uint64      `json:"used_bytes"`     // capacity - free, likewise
		List     []statusOST `json:"list"`
	} `json:"osts"`
	Jobs []statusJob `json:"jobs"`
	// ChunksOnDownOSTs counts the chunks the down OSTs held when they
	// last reported: each is a chunk of an extent that reads degraded
	// until repair rebuilds it.
	ChunksOnDownOSTs uint64 `json:"chunks_on_down_osts"`
	// LostExtents are extents with fewer than k readable chunks now (more
	// than m on down or removed OSTs); without Data, those the last repair
	// found.
	LostExtents uint64 `json:"lost_extents"`
	// Data is the state of the committed extents now.
	Data *statusData `json:"data,omitempty"`
	// NarrowExtents are extents written with fewer than k+m chunks
	// (OSTs down or full), waiting to be widened.
	NarrowExtents uint64 `json:"narrow_extents"`
	// Parity is m of the root directory's layout (the default), the
	// number of OSTs a stripe of it can lose; -1 if unknown.
	Parity int `json:"default_parity"`

	warn, err []string // reasons by severity, before the verdict
	noMDS     bool     // the MDS did not answer: nothing is known of the OSTs
}

func adminStatusCmd(af *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "The cluster at a glance: MDS members, OSTs by state and capacity, jobs, and a verdict (exit 0 ok, 2 warn, 3 error)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireMDS(af.mds); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rep, err := af.gatherStatus(ctx)
			if err != nil {
				return err
			}
			rep.judge()
			out := cmd.OutOrStdout()
			if af.json {
				err = printJSON(out, rep)
			} else {
				err = printStatus(out, rep)
			}
			if err != nil {
				return err
			}
			switch rep.Health {
			case healthWarn:
				return &healthError{verdict: rep.Health, code: exitProblem}
			case healthErr:
				return &healthError{verdict: rep.Health, code: exitHealthErr}
			}
			return nil
		},
	}
}

// gatherStatus asks the MDS group for everything the report shows. An MDS
// that does not answer is a finding (HEALTH_ERR), not a failure of the
// command; only missing credentials are.
func (af *adminFlags) gatherStatus(ctx context.Context) (*statusReport, error) {
	rep := &statusReport{Parity: -1}
	if _, err := af.creds(); err != nil {
		return nil, err
	}
	stub, done, err := af.stub()
	if err != nil {
		return nil, err
	}
	defer done()

	// The namespace service first: whether it answers decides how the
	// members' answers read.
	// A group's connection retries an unreachable leader for half a
	// minute; a verdict should come sooner.
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	osts, ostErr := stub.ListOsts(lctx, &mdspb.ListOstsRequest{})
	lcancel()
	members, err := af.memberStatus(ctx)
	if err != nil {
		return nil, err
	}
	if len(members) == 1 && members[0].GetRole() == "unreachable" && ostErr == nil {
		// A single MDS without Raft has no Peer status; it answered.
		members[0].Role, members[0].Error = "standalone", ""
	}
	for _, m := range members {
		rep.MDS = append(rep.MDS, statusMember{ID: m.GetId(), Addr: m.GetAddr(), Role: m.GetRole(),
			Term: m.GetTerm(), Applied: m.GetAppliedIndex(), Leader: m.GetLeader(), Error: m.GetError()})
	}
	rep.judgeMDS(ostErr)
	if ostErr != nil {
		return rep, nil
	}

	now := time.Now()
	for _, o := range osts.GetOsts() {
		row := statusOST{ID: o.GetId(), Addr: o.GetAddr(), State: o.GetState(), Capacity: o.GetCapacity(),
			Used: o.GetUsed(), Free: o.GetFree(), Chunks: o.GetChunks(), FsID: o.GetFsId(),
			Nearfull: o.GetNearfull(), Full: o.GetFull()}
		if o.GetLastHeartbeatNs() > 0 {
			row.LastHeartbeat = now.Sub(time.Unix(0, o.GetLastHeartbeatNs())).Round(100*time.Millisecond).String() + " ago"
		}
		rep.OSTs.List = append(rep.OSTs.List, row)
	}
	sort.Slice(rep.OSTs.List, func(i, j int) bool { return rep.OSTs.List[i].ID < rep.OSTs.List[j].ID })
	rep.NarrowExtents = osts.GetNarrowExtents()

	for _, kind := range []string{mds.JobRepair, mds.JobDrain, mds.JobRebalance, mds.JobScrub} {
		j, err := stub.GetJob(ctx, &mdspb.JobRequest{Kind: kind})
		if err != nil {
			rep.warn = append(rep.warn, fmt.Sprintf("%s job: %v", kind, err))
			continue
		}
		if j.GetState() == mds.JobIdle || j.GetState() == "" {
			continue
		}
		rep.Jobs = append(rep.Jobs, statusJob{Kind: kind, State: j.GetState(), DoneChunks: j.GetDoneChunks(),
			PlannedLeft: j.GetPlannedChunks(), Failed: j.GetFailedChunks(), Lost: j.GetLostExtents(),
			Corrupt: j.GetCorruptFound(), Error: j.GetError(), Waiting: j.GetWaiting()})
	}
	if h, err := stub.Health(ctx, &mdspb.HealthRequest{MaxFiles: statusFiles}); err == nil {
		d := &statusData{Extents: h.GetExtents(), Degraded: h.GetDegradedExtents(), Unreadable: h.GetUnreadableExtents(),
			BadChunksQueued: h.GetBadChunksQueued(), Layouts: statusLayouts(h), Osts: h.GetOsts()}
		for _, f := range h.GetFiles() {
			d.Files = append(d.Files, statusFile{Ino: f.GetIno(), Path: f.GetPath(), Damage: f.GetDamage(), Extents: f.GetExtents()})
		}
		rep.Data = d
	} else {
		rep.warn = append(rep.warn, fmt.Sprintf("the state of the data is unknown: %v", err))
	}
	if a, err := stub.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: client.RootIno}); err == nil && a.GetAttr().GetLayout() != nil {
		rep.Parity = int(a.GetAttr().GetLayout().GetM())
	}
	return rep, nil
}

// judgeMDS records the findings about the MDS group; ostErr is the
// answer of the namespace service (ListOsts).
func (rep *statusReport) judgeMDS(ostErr error) {
	if ostErr != nil {
		rep.noMDS = true
		rep.err = append(rep.err, fmt.Sprintf("the MDS does not answer: %v", ostErr))
	}
	leader := false
	for _, m := range rep.MDS {
		switch m.Role {
		case "leader", "standalone":
			leader = true
		case "unreachable":
			id := "?"
			if m.ID != 0 {
				id = fmt.Sprint(m.ID)
			}
			rep.warn = append(rep.warn, fmt.Sprintf("MDS member %s at %s is unreachable: %s", id, m.Addr, m.Error))
		}
	}
	if !leader && ostErr == nil && len(rep.MDS) > 0 {
		rep.warn = append(rep.warn, "no MDS member reports itself leader")
	} else if !leader {
		rep.err = append(rep.err, "the MDS group has no leader")
	}
}

// judge adds the findings about OSTs and jobs, and sets the verdict and
// its reasons (errors first).
func (rep *statusReport) judge() {
	var freeUp, capUp uint64
	// OSTs sharing a file system (one disk, several directories) each
	// report its capacity: count it once in the totals, and once in
	// those of the OSTs in service.
	seenAll, seenUp := map[string]bool{}, map[string]bool{}
	once := func(seen map[string]bool, o statusOST) bool {
		if o.FsID == "" {
			return true
		}
		first := !seen[o.FsID]
		seen[o.FsID] = true
		return first
	}
	for _, o := range rep.OSTs.List {
		inService := o.State == "up" || o.State == "draining"
		if inService && once(seenUp, o) {
			capUp += o.Capacity
			freeUp += o.Free
		}
		switch o.State {
		case "up":
			rep.OSTs.Up++
		case "down":
			rep.OSTs.Down++
			rep.ChunksOnDownOSTs += o.Chunks
			hb := "never heard from"
			if o.LastHeartbeat != "" {
				hb = "last heartbeat " + o.LastHeartbeat
			}
			rep.warn = append(rep.warn, fmt.Sprintf("OST %d (%s) is down (%s): its %d chunks read degraded until it returns or repair rebuilds them", o.ID, o.Addr, hb, o.Chunks))
		case "draining":
			rep.OSTs.Draining++
		case "removed":
			rep.OSTs.Removed++
			continue
		}
		if once(seenAll, o) {
			rep.OSTs.Capacity += o.Capacity
			rep.OSTs.Used += o.Capacity - min(o.Free, o.Capacity)
		}
	}
	switch {
	case rep.noMDS:
	case len(rep.OSTs.List) == 0:
		rep.warn = append(rep.warn, "no OST has registered: nothing can be written")
	case rep.OSTs.Up == 0:
		rep.err = append(rep.err, "no OST is up: nothing can be written or read")
	case rep.Parity >= 0 && rep.OSTs.Down > rep.Parity:
		rep.err = append(rep.err, fmt.Sprintf("%d OSTs are down, more than the parity (m=%d) of the default layout: data on them may be unreadable", rep.OSTs.Down, rep.Parity))
	}
	if capUp > 0 {
		pct := float64(capUp-min(freeUp, capUp)) / float64(capUp) * 100
		switch {
		case pct >= errUsedPct:
			rep.err = append(rep.err, fmt.Sprintf("the OSTs in service are %.0f%% full", pct))
		case pct >= warnUsedPct:
			rep.warn = append(rep.warn, fmt.Sprintf("the OSTs in service are %.0f%% full", pct))
		}
	}
	rep.judgeSpace() // admin_status_space.go
	rep.judgeData()
	rep.judgeLayouts() // admin_status_layout.go
	rep.judgeJobs()
	rep.Reasons = append(append([]string{}, rep.err...), rep.warn...)
	switch {
	case len(rep.err) > 0:
		rep.Health = healthErr
	case len(rep.warn) > 0:
		rep.Health = healthWarn
	default:
		rep.Health = healthOK
	}
}

// judgeData adds the findings about the committed extents now: any
// unreadable is an error; bad chunks waiting, and degraded extents that
// neither a down OST nor a narrow write explains already (a removed
// OST's), are warnings.
func (rep *statusReport) judgeData() {
	d := rep.Data
	if d == nil {
		return
	}
	rep.LostExtents = d.Unreadable
	if d.Unreadable > 0 {
		rep.err = append(rep.err, fmt.Sprintf("%d extents have more than m chunks on down or removed OSTs: unreadable until OSTs return", d.Unreadable))
	}
	if d.BadChunksQueued > 0 {
		rep.warn = append(rep.warn, fmt.Sprintf("%d bad chunks wait for their rebuild", d.BadChunksQueued))
	}
	// Narrow extents (written while OSTs were down or full) have their
	// own warning (judgeSpace); the MDS widens them.
	other := d.Degraded - min(d.Unreadable, d.Degraded)
	other -= min(other, rep.NarrowExtents)
	if other > 0 && rep.OSTs.Down == 0 && d.BadChunksQueued == 0 {
		rep.warn = append(rep.warn, fmt.Sprintf("%d extents read degraded (a chunk missing); shoal admin repair rebuilds them", other))
	}
}

// judgeJobs adds the findings about the jobs. With the data's state
// known, a job's finding counts only while it is still true: a repair
// that found extents lost, and failed, when three OSTs were down says
// nothing once they are back and no extent is degraded (before, status
// said HEALTH_ERR "540 extents lost" until repair ran again).
func (rep *statusReport) judgeJobs() {
	d := rep.Data
	draining := rep.OSTs.Draining > 0
	for _, j := range rep.Jobs {
		// stale: what the job found is no longer so.
		stale := false
		if d != nil {
			switch j.Kind {
			case mds.JobRepair:
				stale = d.Degraded == 0
			case mds.JobDrain:
				stale = !draining
			case mds.JobScrub:
				stale = d.BadChunksQueued == 0
			}
		}
		switch {
		case j.State == mds.JobRunning && j.Waiting != "":
			rep.warn = append(rep.warn, fmt.Sprintf("the %s job waits: %s", j.Kind, j.Waiting))
		case j.Lost > 0 && d == nil:
			rep.LostExtents += j.Lost
			rep.err = append(rep.err, fmt.Sprintf("%s found %d extents with fewer than k readable chunks (lost)", j.Kind, j.Lost))
		case stale:
		case j.State == mds.JobFailed:
			rep.warn = append(rep.warn, fmt.Sprintf("the %s job failed: %s", j.Kind, j.Error))
		case j.Kind == mds.JobScrub && j.State != mds.JobRunning && j.Corrupt > j.DoneChunks:
			rep.warn = append(rep.warn, fmt.Sprintf("scrub found %d corrupt chunks and rebuilt %d", j.Corrupt, j.DoneChunks))
		}
	}
}

func printStatus(w io.Writer, rep *statusReport) error {
	fmt.Fprintln(w, rep.Health)
	for _, r := range rep.Reasons {
		fmt.Fprintf(w, "  - %s\n", r)
	}
	fmt.Fprintf(w, "\nMDS: %d member(s)\n", len(rep.MDS))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tADDR\tROLE\tTERM\tAPPLIED")
	for _, m := range rep.MDS {
		if m.Error != "" || m.Role == "standalone" {
			fmt.Fprintf(tw, "  -\t%s\t%s\t-\t-\n", m.Addr, m.Role)
			continue
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d\n", m.ID, m.Addr, m.Role, m.Term, m.Applied)
	}
	tw.Flush()
	o := rep.OSTs
	pct := 0.0
	if o.Capacity > 0 {
		pct = float64(o.Used) / float64(o.Capacity) * 100
	}
	fmt.Fprintf(w, "\nOSTs: %d up, %d down, %d draining, %d removed; %s of %s used (%.0f%%)\n",
		o.Up, o.Down, o.Draining, o.Removed, humanBytes(o.Used), humanBytes(o.Capacity), pct)
	if rep.ChunksOnDownOSTs > 0 {
		fmt.Fprintf(w, "  %d chunks on down OSTs need repair (shoal admin repair)\n", rep.ChunksOnDownOSTs)
	}
	var notUp []statusOST
	for _, s := range o.List {
		if s.State != "up" && s.State != "removed" {
			notUp = append(notUp, s)
		}
	}
	if len(notUp) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  OST\tSTATE\tADDR\tCHUNKS\tLAST HEARTBEAT")
		for _, s := range notUp {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\n", s.ID, s.State, s.Addr, s.Chunks, s.LastHeartbeat)
		}
		tw.Flush()
	}
	if d := rep.Data; d != nil {
		fmt.Fprintf(w, "\nData: %d extents, %d degraded, %d unreadable; %d bad chunks waiting for their rebuild\n",
			d.Extents, d.Degraded, d.Unreadable, d.BadChunksQueued)
		if len(d.Files) > 0 {
			fmt.Fprintf(w, "  damaged files (the first %d):\n", statusFiles)
			for _, f := range d.Files {
				name := f.Path
				if name == "" {
					name = fmt.Sprintf("(inode %d, no name left)", f.Ino)
				}
				fmt.Fprintf(w, "    %s (%s, %d extents)\n", name, f.Damage, f.Extents)
			}
		}
		printLayouts(w, rep)
	}
	if len(rep.Jobs) == 0 {
		fmt.Fprintln(w, "\nJobs: none")
		return nil
	}
	fmt.Fprintln(w, "\nJobs:")
	for _, j := range rep.Jobs {
		var parts []string
		parts = append(parts, fmt.Sprintf("%d chunks done", j.DoneChunks))
		if j.State == mds.JobRunning {
			parts = append(parts, fmt.Sprintf("%d planned in this pass", j.PlannedLeft))
		}
		if j.Failed > 0 {
			parts = append(parts, fmt.Sprintf("%d failed", j.Failed))
		}
		if j.Kind == mds.JobScrub {
			parts = append(parts, fmt.Sprintf("%d corrupt found", j.Corrupt))
		}
		fmt.Fprintf(w, "  %s: %s (%s)\n", j.Kind, j.State, strings.Join(parts, ", "))
		if j.Waiting != "" && j.State == mds.JobRunning {
			fmt.Fprintf(w, "    waiting: %s\n", j.Waiting)
		}
	}
	return nil
}
