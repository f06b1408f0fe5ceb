package mds

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// Passes of the repair, drain and rebalance jobs (admin_worker.go): plan
// from the committed extents, move in batches, end or say why they wait.

// runPass plans and runs one pass of a repair, drain or rebalance job.
func (w *adminWorker) runPass(ctx context.Context, job *mdspb.AdminJob) error {
	kind := job.Kind
	if job.Passes == 0 {
		w.stalled[kind] = 0
	}
	ov := w.osts.ostView()
	exts, view, err := committedExtents(w.extents)
	if err != nil {
		return err
	}
	pv := planView{extents: view, load: loadOf(view), dest: ov.dest}
	var moves []chunkMove
	var lost []uint64 // extents with more than m chunks unreadable
	stuck := 0        // chunks with no OST to go to
	pending := 0      // allocations not yet committed on draining OSTs
	waiting := ""     // why the job cannot progress until the cluster changes
	unreadable := unreadableOsts(ov)
	switch kind {
	case JobRepair:
		lostSet := w.lostSet(ov, job)
		for id := range lostSet {
			delete(pv.dest, id)
		}
		ev := planEvacuate(pv, lostSet, unreadable)
		moves, lost, stuck = ev.moves, ev.lost, ev.stuck
		if len(moves) == 0 && stuck > 0 {
			waiting = nowhereToGo(stuck, len(pv.dest), sortedIDs(lostSet), "bring back")
		}
	case JobDrain:
		drain := map[uint32]bool{}
		for id, st := range ov.state {
			if st == ostDraining {
				drain[id] = true
			}
		}
		ev := planEvacuate(pv, drain, unreadable)
		moves, lost, stuck = ev.moves, ev.lost, ev.stuck
		if len(moves) == 0 && stuck > 0 {
			waiting = nowhereToGo(stuck, len(pv.dest), sortedIDs(drain), "undrain")
		}
		if len(moves) == 0 && stuck == 0 && len(ev.lost) == 0 {
			// Done only when no pending allocation still targets a
			// draining OST (it may yet be committed).
			for id := range drain {
				if n, err := w.extents.pendingOn(id); err != nil {
					return err
				} else if n > 0 {
					pending += n
				}
			}
		}
	case JobRebalance:
		var down []uint32
		for id, st := range ov.state {
			if st == ostActive && !ov.up[id] {
				down = append(down, id)
			}
		}
		if len(down) > 0 {
			// A plan without them would be wrong once they are back:
			// wait (repair or remove a dead OST first).
			slices.Sort(down)
			waiting = fmt.Sprintf("OSTs %v are down: a plan without them would be wrong once they are back (repair or remove them)", down)
			_, err := w.jobs.updateJob(kind, func(j *mdspb.AdminJob) { w.setWaiting(j, waiting) })
			return err
		}
		thr := job.GetParams().GetThresholdPct()
		if thr <= 0 {
			thr = 5
		}
		moves = planRebalance(pv, thr).moves
	}
	var bytesPlanned uint64
	for _, m := range moves {
		bytesPlanned += m.bytes
	}
	job, err = w.jobs.updateJob(kind, func(j *mdspb.AdminJob) {
		j.PlannedChunks, j.PlannedBytes, j.LostExtents = uint64(len(moves)), bytesPlanned, uint64(len(lost))
		j.DamagedExtents = firstIDs(lost, maxDamagedExtents)
		w.setWaiting(j, waiting)
		if strings.HasPrefix(j.Error, "waiting") {
			j.Error = "" // written by an MDS before job.waiting
		}
		if len(moves) == 0 && pending > 0 {
			j.Error = fmt.Sprintf("%d allocations on draining OSTs not yet committed: waiting for their writers", pending)
		}
		if len(moves) == 0 && stuck == 0 && pending == 0 && j.State == JobRunning {
			j.State, j.FinishedNs = JobDone, w.now()
			if len(lost) > 0 {
				j.State = JobFailed
				j.Error = fmt.Sprintf("%d extents have more than m chunks unreadable and cannot be rebuilt", len(lost))
			}
		}
	})
	if err != nil || job.State != JobRunning {
		if err == nil {
			w.log.Info("admin job finished", "job", kind, "state", job.State, "chunks", job.DoneChunks, "bytes", job.DoneBytes, "err", job.Error)
		}
		return err
	}
	if len(moves) == 0 {
		// Waiting (pending allocations, or no destination yet).
		return nil
	}
	w.log.Info("admin pass", "job", kind, "moves", len(moves), "bytes", bytesPlanned)
	keys, err := w.extents.mapKeysOf(extentIDs(moves))
	if err != nil {
		return err
	}
	groups := groupMoves(moves)
	bw := job.GetParams().GetMaxBandwidth()
	if bw == 0 && kind == JobRebalance {
		bw = w.o.RebalanceBandwidth
	}
	p := newRate(bw)
	progress := false
	for i := 0; i < len(groups); i += w.o.BatchExtents {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if cur, err := w.jobs.loadJob(kind); err != nil {
			return err
		} else if cur.State != JobRunning {
			return nil // stopped
		}
		batch := groups[i:min(i+w.o.BatchExtents, len(groups))]
		// Copy the batch's extents, Concurrency at a time; results
		// keep the batch's order.
		results := make([]movedExtent, len(batch))
		copyErrs := make([]error, len(batch))
		inParallel(len(batch), w.o.Concurrency, func(gi int) {
			g := batch[gi]
			me, err := w.copyChunks(ctx, kind, exts[g[0].extent], g, unreadable)
			results[gi], copyErrs[gi] = me, err
			if err == nil {
				p.wait(ctx, me.bytes)
			}
		})
		var ready []movedExtent
		var failed uint64
		var lastErr error
		for gi, g := range batch {
			if err := copyErrs[gi]; err != nil {
				failed += uint64(len(g))
				lastErr = err
				w.log.Warn("admin: move failed", "job", kind, "extent", g[0].extent, "err", err)
				continue
			}
			ready = append(ready, results[gi])
		}
		w.met.moveFailed(kind, failed)
		n, b, err := w.switchMoved(ready, keys)
		if err != nil {
			return err
		}
		w.met.moved(kind, n, b)
		if n > 0 {
			progress = true
		}
		_, err = w.jobs.updateJob(kind, func(j *mdspb.AdminJob) {
			j.DoneChunks += n
			j.DoneBytes += b
			j.FailedChunks += failed
			if lastErr != nil {
				j.Error = lastErr.Error()
			}
		})
		if err != nil {
			return err
		}
	}
	if progress {
		w.stalled[kind] = 0
	} else {
		w.stalled[kind]++
	}
	_, err = w.jobs.updateJob(kind, func(j *mdspb.AdminJob) {
		j.Passes++
		if w.stalled[kind] >= w.o.MaxPasses && j.State == JobRunning {
			j.State, j.FinishedNs = JobFailed, w.now()
			if j.Error == "" {
				j.Error = "no progress"
			}
		}
	})
	return err
}

// maxDamagedExtents bounds the extents a job records as damaged
// (AdminJob.damaged_extents); all are counted.
const maxDamagedExtents = 100

// firstIDs returns the n smallest of ids (sorted), or nil.
func firstIDs(ids []uint64, n int) []uint64 {
	if len(ids) == 0 {
		return nil
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	return out[:min(n, len(out))]
}

// nowhereToGo says why chunks of evacuated OSTs wait: every OST that may
// take chunks already holds a chunk of their extents (six OSTs and RS
// 4+2 with one lost, say). undo is what else ends the wait ("bring back"
// lost OSTs, "undrain" draining ones).
func nowhereToGo(chunks, dests int, from []uint32, undo string) string {
	return fmt.Sprintf("%d chunks of OSTs %v have nowhere to go: each of the %d OSTs that may take chunks holds a chunk of their extent already; add an OST, or %s OSTs %v (until then those extents read degraded)",
		chunks, from, dests, undo, from)
}

// setWaiting records in j why it waits (empty: it does not), and when it
// began to, and logs the start of a wait.
func (w *adminWorker) setWaiting(j *mdspb.AdminJob, why string) {
	switch {
	case why == "":
		j.Waiting, j.WaitingSinceNs = "", 0
	case j.Waiting == "":
		j.WaitingSinceNs = w.now()
		w.log.Warn("admin job waits", "job", j.Kind, "why", why)
		fallthrough
	default:
		j.Waiting = why
	}
}

// lostSet is the OSTs a repair job treats as gone: those it names, the
// removed ones and those down longer than RepairAfter.
func (w *adminWorker) lostSet(ov ostView, job *mdspb.AdminJob) map[uint32]bool {
	lost := map[uint32]bool{}
	for _, id := range job.GetParams().GetOsts() {
		if !ov.up[id] || ov.state[id] == ostRemoved {
			lost[id] = true
		}
	}
	for id, st := range ov.state {
		if st == ostRemoved {
			lost[id] = true
		}
	}
	if after := w.o.RepairAfter; after > 0 {
		now := w.clock()
		for id, since := range w.downSince {
			if now.Sub(since) >= after {
				lost[id] = true
			}
		}
	}
	return lost
}

// unreadableOsts is the OSTs that cannot serve chunks: down or removed, and
// 0, the slot of a chunk left unplaced (an extent written narrow).
func unreadableOsts(ov ostView) map[uint32]bool {
	out := map[uint32]bool{0: true}
	for id := range ov.infos {
		if !ov.up[id] {
			out[id] = true
		}
	}
	return out
}

// autoRepair tracks how long each OST has been down and starts a repair
// job for those down longer than RepairAfter that still hold chunks.
func (w *adminWorker) autoRepair() error {
	ov := w.osts.ostView()
	now := w.clock()
	for id := range ov.infos {
		if ov.up[id] || ov.state[id] == ostRemoved {
			delete(w.downSince, id)
			continue
		}
		if _, ok := w.downSince[id]; !ok {
			since := now
			if hb := ov.infos[id].LastHeartbeatNs; hb > 0 {
				since = time.Unix(0, hb)
			}
			w.downSince[id] = since
		}
	}
	after := w.o.RepairAfter
	if after < 0 {
		return nil
	}
	var due []uint32
	for id, since := range w.downSince {
		if now.Sub(since) >= after {
			due = append(due, id)
		}
	}
	if len(due) == 0 {
		return nil
	}
	job, err := w.jobs.loadJob(JobRepair)
	if err != nil || job.State == JobRunning || job.State == JobStopped {
		return err
	}
	// Only when some extent still has a chunk there.
	var need []uint32
	for _, id := range due {
		n, err := w.extents.extentsOn(id)
		if err != nil {
			return err
		}
		if n > 0 {
			need = append(need, id)
		}
	}
	if len(need) == 0 {
		return nil
	}
	if job.State == JobFailed && sameOsts(job.GetParams().GetOsts(), need) {
		// It failed for these OSTs (extents lost): starting it again
		// every round would fail again, and flood the log. A change in
		// the OSTs down, or an operator's repair, starts it.
		return nil
	}
	w.log.Warn("OSTs down longer than the repair delay; rebuilding their chunks", "osts", need, "after", after)
	_, err = w.startJob(&mdspb.StartJobRequest{Kind: JobRepair, Osts: need})
	return err
}

// sameOsts reports whether a and b hold the same OST ids.
func sameOsts(a, b []uint32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
