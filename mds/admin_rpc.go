package mds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// RPCs of the administration worker (admin_worker.go): jobs, rebalance
// plans and bad-chunk reports.

func validJobKind(kind string) error {
	switch kind {
	case JobRepair, JobDrain, JobRebalance, JobScrub:
		return nil
	}
	return fmt.Errorf("job kind %q (repair, drain, rebalance, scrub): %w", kind, errs.ErrInvalid)
}

// StartJob starts a job, or resumes a stopped one (keeping its progress;
// non-zero parameters of the request replace the stored ones). A running
// job is returned as it is.
func (s *Server) handleStartJob(ctx context.Context, req *mdspb.StartJobRequest) (_ *mdspb.AdminJob, err error) {
	return s.admin.startJob(req)
}

// StopJob stops a running job after its current batch; StartJob resumes it.
func (s *Server) handleStopJob(ctx context.Context, req *mdspb.JobRequest) (_ *mdspb.AdminJob, err error) {
	if err := validJobKind(req.GetKind()); err != nil {
		return nil, err
	}
	return s.updateJob(req.GetKind(), func(j *mdspb.AdminJob) {
		if j.State == JobRunning {
			j.State = JobStopped
		}
	})
}

// GetJob returns the state of a job kind ("idle" if it never ran), with
// the files of its damaged extents named when req.files is set.
func (s *Server) handleGetJob(ctx context.Context, req *mdspb.JobRequest) (_ *mdspb.AdminJob, err error) {
	if err := validJobKind(req.GetKind()); err != nil {
		return nil, err
	}
	j, err := s.loadJob(req.GetKind())
	if err != nil || !req.GetFiles() {
		return j, err
	}
	return j, s.jobFiles(ctx, j)
}

// PlanRebalance returns the plan a rebalance would run now, without
// running it.
func (s *Server) handlePlanRebalance(ctx context.Context, req *mdspb.StartJobRequest) (_ *mdspb.RebalancePlan, err error) {
	thr := req.GetThresholdPct()
	if thr < 0 || thr > 100 {
		return nil, fmt.Errorf("threshold %v%% (0..100): %w", thr, errs.ErrInvalid)
	}
	if thr == 0 {
		thr = 5
	}
	ov := s.ostView()
	_, view, err := committedExtents(s)
	if err != nil {
		return nil, err
	}
	pv := planView{extents: view, load: loadOf(view), dest: ov.dest}
	plan := planRebalance(pv, thr)
	out := &mdspb.RebalancePlan{Moves: uint64(len(plan.moves))}
	ids := sortedIDs(ov.dest)
	chunksOn := map[uint32]uint64{}
	for _, e := range view {
		for _, o := range e.osts {
			chunksOn[o]++
		}
	}
	for _, id := range ids {
		out.Osts = append(out.Osts, &mdspb.OstLoad{Id: id, Bytes: plan.before[id], After: plan.after[id], Chunks: chunksOn[id]})
	}
	sort.Slice(out.Osts, func(a, b int) bool { return out.Osts[a].Id < out.Osts[b].Id })
	for i, m := range plan.moves {
		out.Bytes += m.bytes
		if i < 20 {
			out.Sample = append(out.Sample, &mdspb.ChunkMove{Extent: m.extent, Index: m.index, From: m.from, To: m.to, Bytes: m.bytes})
		}
	}
	out.ImbalancePct = spread(plan.before, ids)
	out.ImbalanceAfterPct = spread(plan.after, ids)
	return out, nil
}

// ReportCorrupt queues chunks found bad (by an OST's scrubber, fsck, or a
// client's read path) for the worker, which rebuilds them from the other
// chunks of their extent. A client's reports (from_client, and every
// report made with a client certificate) are checked by reading the chunk
// again before anything is rebuilt. A chunk queued already is not queued
// again, except that a scrub's or fsck's report replaces a client's (it
// needs no check).
func (s *Server) handleReportCorrupt(ctx context.Context, req *mdspb.ReportCorruptRequest) (_ *mdspb.Empty, err error) {
	if len(req.GetChunks()) > 10000 {
		return nil, fmt.Errorf("report of %d chunks (at most 10000): %w", len(req.GetChunks()), errs.ErrInvalid)
	}
	byClient := false
	if id, ok := wire.PeerIdentity(ctx); ok && id.Role == pki.RoleClient {
		byClient = true
	}
	var queued map[string]float64
	err = s.update(func(t *txn) error {
		queued = map[string]float64{} // by source; the function may run again
		var scrubbed []uint64         // extents an OST's scrubber found bad
		for _, b := range req.GetChunks() {
			if b.GetExtent() == 0 {
				return fmt.Errorf("bad chunk of extent 0: %w", errs.ErrInvalid)
			}
			rec := proto.Clone(b).(*mdspb.BadChunk)
			if rec.Ost == 0 {
				rec.Ost = req.GetOst()
			}
			if byClient {
				rec.FromClient = true
			}
			if rec.ReportedNs == 0 {
				rec.ReportedNs = t.now
			}
			if len(rec.Reason) > 512 {
				rec.Reason = rec.Reason[:512]
			}
			if v, err := getValue(t.b, badKey(rec.Extent, rec.Index)); err == nil {
				// Queued already; but a client's report waits for a
				// check that a scrub's or fsck's report does not need:
				// that one replaces it, and the rebuild goes ahead.
				old := &mdspb.BadChunk{}
				if err := proto.Unmarshal(v, old); err == nil && (!old.FromClient || rec.FromClient) {
					continue
				}
			} else if !errors.Is(err, errs.ErrNotFound) {
				return err
			}
			switch {
			case req.GetOst() != 0:
				queued[badFromOST]++
				scrubbed = append(scrubbed, rec.Extent)
			case rec.FromClient:
				queued[badFromClient]++
			default:
				queued[badFromFsck]++
			}
			v, err := proto.Marshal(rec)
			if err != nil {
				return err
			}
			if err := t.b.Set(badKey(rec.Extent, rec.Index), v, nil); err != nil {
				return err
			}
		}
		return t.noteScrubbed(scrubbed)
	})
	if err != nil {
		return nil, err
	}
	for src, n := range queued {
		s.admin.met.badReported.WithLabelValues(src).Add(n)
	}
	s.log.WarnContext(ctx, "corrupt chunks reported", "ost", req.GetOst(), "count", len(req.GetChunks()))
	s.admin.kickRound()
	return &mdspb.Empty{}, nil
}

// noteScrubbed adds extents found bad by a scrubber to the scrub job's
// damaged_extents while the job runs (the first maxDamagedExtents), so
// that its result names their files after they are rebuilt.
func (t *txn) noteScrubbed(ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	j := &mdspb.AdminJob{}
	if err := getProto(t.b, jobKey(JobScrub), j); errors.Is(err, errs.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if j.State != JobRunning || len(j.DamagedExtents) >= maxDamagedExtents {
		return nil
	}
	for _, id := range ids {
		if !slices.Contains(j.DamagedExtents, id) && len(j.DamagedExtents) < maxDamagedExtents {
			j.DamagedExtents = append(j.DamagedExtents, id)
		}
	}
	return t.saveJob(j)
}
