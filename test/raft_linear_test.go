package test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/test/cluster"
)

// The linearizability check of the replicated MDS: several clients
// create, rename, unlink and stat a few names in one directory while the
// leader is killed or cut off, and the history they saw is checked
// against a sequential model of the directory with porcupine. An
// operation that failed for any reason but its own outcome (EEXIST,
// ENOENT) has an unknown outcome: it may have taken effect at any time
// after its call, or never (porcupine: a return time at infinity).

const linNames = 4

type linKind uint8

const (
	linCreate linKind = iota
	linRename
	linUnlink
	linStat
)

type linInput struct {
	kind     linKind
	name, to int // indexes into linNames
}

// linOutput is an operation's outcome. ok: it succeeded (create,
// rename, unlink), or stat found the name; ino: the inode created or
// found. unknown: failed without an answer.
type linOutput struct {
	ok      bool
	ino     uint64
	unknown bool
}

// linState is the directory: the inode at each name, 0 for none,
// linAnyIno for a file made by a create whose reply was lost.
type linState [linNames]uint64

const linAnyIno = math.MaxUint64

func linStep(state, input, output any) (bool, any) {
	s, in, out := state.(linState), input.(linInput), output.(linOutput)
	switch in.kind {
	case linCreate:
		if s[in.name] != 0 {
			return out.unknown || !out.ok, s
		}
		if out.unknown {
			s[in.name] = linAnyIno
			return true, s
		}
		if !out.ok {
			return false, s
		}
		s[in.name] = out.ino
		return true, s
	case linRename:
		if s[in.name] == 0 {
			return out.unknown || !out.ok, s
		}
		if !out.unknown && !out.ok {
			return false, s
		}
		s[in.to], s[in.name] = s[in.name], 0
		return true, s
	case linUnlink:
		if s[in.name] == 0 {
			return out.unknown || !out.ok, s
		}
		if !out.unknown && !out.ok {
			return false, s
		}
		s[in.name] = 0
		return true, s
	default: // stat
		if out.unknown {
			return true, s
		}
		if s[in.name] == 0 {
			return !out.ok, s
		}
		return out.ok && (s[in.name] == linAnyIno || s[in.name] == out.ino), s
	}
}

func linDescribe(input, output any) string {
	in, out := input.(linInput), output.(linOutput)
	var op string
	switch in.kind {
	case linCreate:
		op = fmt.Sprintf("create(n%d)", in.name)
	case linRename:
		op = fmt.Sprintf("rename(n%d, n%d)", in.name, in.to)
	case linUnlink:
		op = fmt.Sprintf("unlink(n%d)", in.name)
	default:
		op = fmt.Sprintf("stat(n%d)", in.name)
	}
	switch {
	case out.unknown:
		return op + " -> ?"
	case out.ok && out.ino != 0:
		return fmt.Sprintf("%s -> ino %d", op, out.ino)
	case out.ok:
		return op + " -> ok"
	}
	return op + " -> no"
}

var linModel = porcupine.Model{
	Init:              func() any { return linState{} },
	Step:              linStep,
	DescribeOperation: linDescribe,
	DescribeState: func(state any) string {
		var b strings.Builder
		for i, ino := range state.(linState) {
			if ino != 0 {
				fmt.Fprintf(&b, "n%d=%d ", i, ino)
			}
		}
		return b.String()
	},
}

// linHistory collects the operations of every client.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	nextC int
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *linHistory) clientID() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextC++
	return h.nextC - 1
}

func (h *linHistory) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// linClient runs random operations on dir through c until stop.
func linClient(ctx context.Context, h *linHistory, c *client.Client, dir uint64, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 0x11a))
	id := h.clientID()
	for {
		select {
		case <-stop:
			return
		default:
		}
		in := linInput{kind: linKind(rng.IntN(4)), name: rng.IntN(linNames)}
		if in.kind == linRename {
			in.to = (in.name + 1 + rng.IntN(linNames-1)) % linNames
		}
		name := func(i int) string { return fmt.Sprintf("n%d", i) }
		// One operation in four gives up after 150 ms, so that some are
		// abandoned while a failover is under way (unknown outcomes).
		timeout := 2 * time.Second
		if rng.IntN(4) == 0 {
			timeout = 150 * time.Millisecond
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		call := h.now()
		var out linOutput
		var err error
		switch in.kind {
		case linCreate:
			var a *client.Attr
			a, err = c.CreateIn(cctx, dir, name(in.name), client.CreateOptions{Mode: 0o644, Exclusive: true})
			if err == nil {
				out.ok, out.ino = true, a.Ino
			} else if errors.Is(err, errs.ErrExists) {
				err = nil
			}
		case linRename:
			err = c.RenameIn(cctx, dir, name(in.name), dir, name(in.to), 0)
			if err == nil {
				out.ok = true
			} else if errors.Is(err, errs.ErrNotFound) {
				err = nil
			}
		case linUnlink:
			err = c.UnlinkIn(cctx, dir, name(in.name))
			if err == nil {
				out.ok = true
			} else if errors.Is(err, errs.ErrNotFound) {
				err = nil
			}
		default:
			var a *client.Attr
			a, err = c.Lookup(cctx, dir, name(in.name))
			if err == nil {
				out.ok, out.ino = true, a.Ino
			} else if errors.Is(err, errs.ErrNotFound) {
				err = nil
			}
		}
		cancel()
		ret := h.now()
		if err != nil {
			out = linOutput{unknown: true}
			ret = math.MaxInt64
		}
		h.add(porcupine.Operation{ClientId: id, Input: in, Call: call, Output: out, Return: ret})
		if err != nil {
			// The operation may still be running: the next one is another
			// client's as far as the history goes.
			id = h.clientID()
		}
		time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
	}
}

// TestRaftLinearizable records a history of creates, renames, unlinks
// and stats of 4 names in one directory from 4 clients while the leader
// is killed (and restarted) or cut off from the others (and the
// partition healed), twice per seed, and checks it against a sequential
// model of the directory (porcupine). Seeds: 2 in CI, SHOAL_RAFT_SEEDS
// in make soak.
func TestRaftLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	for _, seed := range raftSeedsN(t, 2) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { raftLinearizable(t, seed) })
	}
}

func raftLinearizable(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x1a7))
	cl := cluster.Start(t, cluster.Options{MDSReplicas: 3, Dir: cluster.TmpfsDir(t), MDSPeerProxy: true, OSTs: 3})
	setup := cl.Client()
	if err := setup.Mkdir(ctx, "/lin", 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := setup.Stat(ctx, "/lin")
	if err != nil {
		t.Fatal(err)
	}
	h := &linHistory{start: time.Now()}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		c := cl.Client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			linClient(ctx, h, c, a.Ino, seed*10+uint64(i), stop)
		}()
	}
	var faults []string
	for round := 0; round < 2; round++ {
		time.Sleep(time.Duration(400+rng.IntN(600)) * time.Millisecond)
		lead, err := cl.MDSLeader()
		if err != nil {
			t.Fatal(err)
		}
		if rng.IntN(2) == 0 {
			cl.KillMDS(lead)
			time.Sleep(time.Duration(600+rng.IntN(600)) * time.Millisecond)
			if err := cl.StartMDS(lead); err != nil {
				t.Fatal(err)
			}
			faults = append(faults, fmt.Sprintf("killed %d at %v", lead, time.Duration(h.now()).Round(time.Millisecond)))
		} else {
			if err := cl.Partition(lead); err != nil {
				t.Fatal(err)
			}
			at := time.Duration(h.now()).Round(time.Millisecond)
			time.Sleep(time.Duration(900+rng.IntN(600)) * time.Millisecond)
			cl.Heal()
			faults = append(faults, fmt.Sprintf("cut off %d at %v", lead, at))
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	unknown := 0
	for _, op := range h.ops {
		if op.Output.(linOutput).unknown {
			unknown++
		}
	}
	// The longest time no operation was called or returned (a stall).
	var marks []int64
	for _, op := range h.ops {
		marks = append(marks, op.Call)
		if op.Return != math.MaxInt64 {
			marks = append(marks, op.Return)
		}
	}
	slices.Sort(marks)
	var stall, stallAt int64
	for i := 1; i < len(marks); i++ {
		if d := marks[i] - marks[i-1]; d > stall {
			stall, stallAt = d, marks[i-1]
		}
	}
	t.Logf("longest stall: %v at %v", time.Duration(stall).Round(time.Millisecond), time.Duration(stallAt).Round(time.Millisecond))
	t0 := time.Now()
	res, info := porcupine.CheckOperationsVerbose(linModel, h.ops, time.Minute)
	t.Logf("seed %d: %s; %d operations (%d with unknown outcome) from 4 clients over %v: %s in %v",
		seed, strings.Join(faults, ", "), len(h.ops), unknown, time.Duration(h.now()).Round(time.Millisecond), res, time.Since(t0).Round(time.Millisecond))
	switch res {
	case porcupine.Illegal:
		if f, err := os.CreateTemp("", "shoal-raft-history-*.html"); err == nil {
			f.Close()
			if err := porcupine.VisualizePath(linModel, info, f.Name()); err == nil {
				t.Logf("visualization: %s", f.Name())
			}
		}
		linExplain(t, h.ops, info)
		t.Errorf("the history is not linearizable")
	case porcupine.Unknown:
		t.Errorf("porcupine could not decide within a minute")
	}
	if err := cl.WaitMDSConverged(20 * time.Second); err != nil {
		t.Error(err)
	}
}

// linExplain logs the longest linearizable prefix porcupine found and the
// operations it could not place after it.
func linExplain(t *testing.T, ops []porcupine.Operation, info porcupine.LinearizationInfo) {
	var best []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, lin := range part {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	in := map[porcupine.Operation]bool{}
	for _, op := range best {
		in[op] = true
	}
	state := linModel.Init()
	for i, op := range best {
		_, state = linModel.Step(state, op.Input, op.Output)
		if i >= len(best)-12 {
			t.Logf("  linearized: c%d %s [%v, %v] -> %s", op.ClientId, linDescribe(op.Input, op.Output), time.Duration(op.Call), time.Duration(op.Return), linModel.DescribeState(state))
		}
	}
	var last int64
	if len(best) > 0 {
		last = best[len(best)-1].Call
	}
	n := 0
	for _, op := range ops {
		if !in[op] && op.Call <= last+int64(50*time.Millisecond) && n < 12 {
			n++
			t.Logf("  not placed: c%d %s [%v, %v]", op.ClientId, linDescribe(op.Input, op.Output), time.Duration(op.Call), time.Duration(op.Return))
		}
	}
}
