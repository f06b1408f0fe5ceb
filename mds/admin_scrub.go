package mds

import (
	"context"
	"fmt"

	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// scrubRound drives a scrub job: the first round asks every up OST for a
// pass; later rounds collect their status. The job is done when every OST
// finished its pass and every bad chunk found was rebuilt.
func (w *adminWorker) scrubRound(ctx context.Context) error {
	job, err := w.jobs.loadJob(JobScrub)
	if err != nil || job.State != JobRunning {
		return err
	}
	ov := w.osts.ostView()
	start := job.Passes == 0
	var osts []uint32
	if start {
		for _, id := range sortedIDs(ov.up) {
			osts = append(osts, id)
		}
	} else {
		osts = job.GetParams().GetOsts()
	}
	var checked, nbytes, corrupt uint64
	running := uint32(0)
	var lastErr error
	for _, id := range osts {
		if !ov.up[id] {
			lastErr = fmt.Errorf("OST %d is down", id)
			continue
		}
		st, asked, err := w.chunks.scrub(ctx, id, &ostpb.ScrubRequest{Start: start, Rate: job.GetParams().GetScrubRate()})
		if err != nil {
			lastErr = err
			if start || !asked {
				continue
			}
			running++ // unknown: count as not finished
			continue
		}
		if st.Running {
			running++
		}
		checked += st.ChunksChecked
		nbytes += st.BytesChecked
		corrupt += st.Corrupt
	}
	left, retrying := 0, 0
	err = w.scanKind(prefixBad, func(k, _ []byte) (bool, error) {
		left++
		if _, ok := w.badRetry[string(k)]; ok {
			retrying++
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	_, err = w.jobs.updateJob(JobScrub, func(j *mdspb.AdminJob) {
		if j.State != JobRunning {
			return
		}
		if start {
			if j.Params == nil {
				j.Params = &mdspb.StartJobRequest{Kind: JobScrub}
			}
			j.Params.Osts = osts
			j.Passes = 1
		}
		j.ScrubbedChunks, j.ScrubbedBytes, j.CorruptFound, j.OstsScrubbing = checked, nbytes, corrupt, running
		j.PlannedChunks, j.DoneChunks = corrupt, corrupt-min(corrupt, uint64(left))
		if lastErr != nil {
			j.Error = lastErr.Error()
		}
		switch {
		case start || running > 0:
		case left == 0:
			j.State, j.FinishedNs = JobDone, w.now()
		case left == retrying:
			j.State, j.FinishedNs = JobFailed, w.now()
			j.Error = fmt.Sprintf("%d bad chunks could not be rebuilt", left)
		}
	})
	return err
}
