package ckpt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
)

// A sharded save by several processes (ranks), each with its own client
// and Store, none talking to the others: every rank writes its shards
// into one staging directory that all ranks of the save name alike,
// .step-<N>.ranks-<attempt>.tmp, then a part file
// .rank-<R>-of-<W>.json (its shards' manifest entries). A rank that,
// after writing its part, finds the parts of all W ranks takes the commit
// by creating .commit exclusively (the MDS decides between two ranks that
// finish together), merges the parts into the manifest, renames the
// directory to step-<N> and removes the part files: the whole checkpoint
// becomes visible at once, when the last rank has written. A rank that
// dies leaves the step uncommitted; GC removes its staging directory as
// for any dead save.
//
// The attempt names the save: the ranks of one save must pass the same
// one, and a save of a step retried after some ranks of an earlier try of
// it died should pass a new one (a restart count), so that a part left by
// the dead try is never merged into the new one. A rank removes what it
// left itself under the same attempt before it writes.

const (
	rankPartPrefix = ".rank-"
	rankPartSuffix = ".json"
	rankCommitName = ".commit"
	maxRankPart    = 64 << 20
)

// RankResult is the outcome of one rank's SaveRank.
type RankResult struct {
	// Part lists this rank's shards as the manifest will.
	Part []ShardEntry
	// Committed is set on the rank that committed the checkpoint (the
	// last to write its part); Result is then that commit's outcome.
	Committed bool
	Result    *SaveResult
	Elapsed   time.Duration
}

// rankPart is the content of a part file.
type rankPart struct {
	Rank   int          `json:"rank"`
	World  int          `json:"world"`
	Base   *int64       `json:"base,omitempty"` // the step this rank shared with
	Shards []ShardEntry `json:"shards"`
}

// rankStagingName is the staging directory of a save by ranks.
func rankStagingName(step int64, attempt string) string {
	return "." + StepName(step) + ".ranks-" + attempt + stagingSuffix
}

func rankPartName(rank, world int) string {
	return fmt.Sprintf("%s%05d-of-%05d%s", rankPartPrefix, rank, world, rankPartSuffix)
}

// checkAttempt checks an attempt name: letters, digits, '-' and '_'.
func checkAttempt(a string) error {
	if a == "" || len(a) > 64 || strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		return fmt.Errorf("attempt %q: 1 to 64 letters, digits, '-' or '_': %w", a, errs.ErrInvalid)
	}
	return nil
}

// SaveRank saves rank's shards of a checkpoint of job at step that world
// ranks save together (see the comment above): the checkpoint is
// committed, atomically, by the last rank to finish. Shard names must
// differ across ranks. attempt "" is "w<world>". With world 1 it is Save.
func (s *Store) SaveRank(ctx context.Context, job string, step int64, rank, world int, attempt string, shards []Shard, opts ...SaveOption) (*RankResult, error) {
	if world < 1 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("ckpt: rank %d of world %d: %w", rank, world, errs.ErrInvalid)
	}
	if attempt != "" {
		if err := checkAttempt(attempt); err != nil {
			return nil, fmt.Errorf("ckpt: %w", err)
		}
	}
	if world == 1 {
		res, err := s.Save(ctx, job, step, shards, opts...)
		if err != nil {
			return nil, err
		}
		return &RankResult{Part: res.Manifest.Shards, Committed: true, Result: res, Elapsed: res.Elapsed}, nil
	}
	if attempt == "" {
		attempt = fmt.Sprintf("w%d", world)
	}
	var so saveOpts
	for _, o := range opts {
		o(&so)
	}
	if err := checkSave(job, step, shards); err != nil {
		return nil, err
	}
	for i := range shards {
		if n := shards[i].Name; strings.HasPrefix(n, rankPartPrefix) || n == rankCommitName {
			return nil, fmt.Errorf("ckpt: shard name %q is reserved for saves by ranks: %w", n, errs.ErrInvalid)
		}
	}
	start := s.o.Now()
	jobIno, base, err := s.beginSave(ctx, job, step, so)
	if err != nil {
		return nil, err
	}
	staging := rankStagingName(step, attempt)
	st, err := s.c.MkdirIn(ctx, jobIno, staging, client.CreateOptions{Mode: dirMode})
	if errors.Is(err, errs.ErrExists) {
		st, err = s.c.Lookup(ctx, jobIno, staging)
	}
	if err != nil {
		return nil, fmt.Errorf("ckpt: staging directory %s: %w", staging, err)
	}
	stopBeat := s.heartbeat(ctx, st.Ino)
	defer stopBeat()
	// What this rank left under the same attempt (a retry): gone first,
	// with the commit marker of a commit that died half way (while the
	// ranks of one try run, it exists only once every part is written, so
	// a rank that starts and finds it is a retry).
	part := rankPartName(rank, world)
	for _, n := range append([]string{part, part + stagingSuffix, rankCommitName}, shardNames(shards)...) {
		if err := ignoreNotFound(s.c.UnlinkIn(ctx, st.Ino, n)); err != nil {
			return nil, fmt.Errorf("ckpt: remove %s of an earlier try: %w", n, err)
		}
	}
	if err := s.hook(Point{Phase: PhaseStaging}); err != nil {
		return nil, err
	}
	var total int64
	for i := range shards {
		total += shardSize(&shards[i])
	}
	var done atomic.Int64
	prog := func(n int64) { s.progress("save", job, step, done.Add(n), total) }
	entries := make([]ShardEntry, len(shards))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.o.Parallelism)
	for i := range shards {
		g.Go(func() error {
			e, err := s.saveShard(gctx, st.Ino, &shards[i], base, so.noReuse || s.o.NoReuse, prog)
			if err != nil {
				if errors.Is(err, errs.ErrExists) {
					err = fmt.Errorf("%w (another rank of this save wrote a shard of the same name?)", err)
				}
				return err
			}
			entries[i] = *e
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	rp := rankPart{Rank: rank, World: world, Shards: entries}
	for _, e := range entries {
		if e.Shared > 0 {
			rp.Base = &base.step
		}
	}
	pb, err := json.Marshal(rp)
	if err != nil {
		return nil, err
	}
	// Written under another name and renamed: a rank that lists the
	// directory sees the part whole or not at all.
	if err := s.writeNewFile(ctx, st.Ino, part+stagingSuffix, pb); err != nil {
		return nil, fmt.Errorf("ckpt: write part of rank %d: %w", rank, err)
	}
	if err := s.c.RenameIn(ctx, st.Ino, part+stagingSuffix, st.Ino, part, client.RenameNoReplace); err != nil {
		return nil, fmt.Errorf("ckpt: write part of rank %d: %w", rank, err)
	}
	if err := s.hook(Point{Phase: PhaseManifest, Shard: part}); err != nil {
		return nil, err
	}
	out := &RankResult{Part: entries}
	ents, err := s.readDirPlus(ctx, st.Ino)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, e := range ents {
		for r := range world {
			if e.Name == rankPartName(r, world) {
				n++
			}
		}
	}
	if n < world {
		out.Elapsed = s.o.Now().Sub(start)
		return out, nil // a rank still writing commits
	}
	if err := s.hook(Point{Phase: PhaseMarker}); err != nil {
		return nil, err
	}
	if _, err := s.c.CreateIn(ctx, st.Ino, rankCommitName, client.CreateOptions{Mode: fileMode, Exclusive: true}); err != nil {
		if errors.Is(err, errs.ErrExists) {
			out.Elapsed = s.o.Now().Sub(start)
			return out, nil // the other rank that saw every part commits
		}
		return nil, fmt.Errorf("ckpt: take the commit: %w", err)
	}
	// The rank that commits removes the marker once the step is renamed
	// into place, so a rank that listed every part before that and takes
	// the marker after it holds a marker in the committed step: the
	// staging name no longer names this directory.
	if cur, err := s.c.Lookup(ctx, jobIno, staging); err != nil || cur.Ino != st.Ino {
		if err != nil && !errors.Is(err, errs.ErrNotFound) {
			return nil, fmt.Errorf("ckpt: look up the staging directory: %w", err)
		}
		if err := ignoreNotFound(s.c.UnlinkIn(ctx, st.Ino, rankCommitName)); err != nil {
			return nil, fmt.Errorf("ckpt: remove a commit marker taken after the commit: %w", err)
		}
		out.Elapsed = s.o.Now().Sub(start)
		return out, nil // another rank committed this step already
	}
	res, err := s.commitRanks(ctx, job, step, world, jobIno, staging, st.Ino, start, so)
	if err != nil {
		return nil, err
	}
	stopBeat()
	out.Committed, out.Result = true, res
	out.Elapsed = s.o.Now().Sub(start)
	return out, nil
}

func shardNames(shards []Shard) []string {
	out := make([]string, len(shards))
	for i := range shards {
		out[i] = shards[i].Name
	}
	return out
}

// commitRanks merges the parts of every rank into the manifest and
// commits the staging directory (ino dir, called staging) as step.
func (s *Store) commitRanks(ctx context.Context, job string, step int64, world int, jobIno uint64, staging string, dir uint64, start time.Time, so saveOpts) (*SaveResult, error) {
	m := &Manifest{
		Format: FormatV1, Job: job, Step: step, Created: start.UTC(), Writer: writerSave,
		Checksum: ChecksumXXH64,
	}
	for r := range world {
		name := rankPartName(r, world)
		a, err := s.c.Lookup(ctx, dir, name)
		if err != nil {
			return nil, fmt.Errorf("ckpt: part of rank %d: %w", r, err)
		}
		b, err := s.readSmallFile(ctx, a.Ino, maxRankPart)
		if err != nil {
			return nil, fmt.Errorf("ckpt: part of rank %d: %w", r, err)
		}
		var p rankPart
		if err := json.Unmarshal(b, &p); err != nil || p.Rank != r || p.World != world {
			return nil, fmt.Errorf("ckpt: part of rank %d does not decode (%v): %w", r, err, errs.ErrCorrupt)
		}
		if p.Base != nil && (m.Base == nil || *p.Base > *m.Base) {
			m.Base = p.Base // ranks that raced a commit of another step may differ: the newest
		}
		m.Shards = append(m.Shards, p.Shards...)
	}
	for _, e := range m.Shards {
		m.Bytes += e.Size
		m.Shared += e.Shared
	}
	m.Written = m.Bytes - m.Shared
	if m.Shared == 0 {
		m.Base = nil
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("ckpt: manifest of %s step %d: %v: %w", job, step, err, errs.ErrInvalid)
	}
	mb, err := m.Encode()
	if err != nil {
		return nil, err
	}
	// A commit that died after writing the manifest left one.
	if err := ignoreNotFound(s.c.UnlinkIn(ctx, dir, ManifestName)); err != nil {
		return nil, fmt.Errorf("ckpt: remove the manifest of a dead commit: %w", err)
	}
	if err := s.writeNewFile(ctx, dir, ManifestName, mb); err != nil {
		return nil, fmt.Errorf("ckpt: write manifest: %w", err)
	}
	if so.pin {
		if _, err := s.c.SetXattr(ctx, dir, pinXattr, []byte("1"), 0); err != nil {
			return nil, fmt.Errorf("ckpt: pin: %w", err)
		}
	}
	if err := s.hook(Point{Phase: PhaseCommit}); err != nil {
		return nil, err
	}
	if err := s.c.RenameIn(ctx, jobIno, staging, jobIno, StepName(step), client.RenameNoReplace); err != nil {
		return nil, fmt.Errorf("ckpt: commit %s step %d: %w", job, step, err)
	}
	if err := s.c.SyncNamespace(ctx); err != nil {
		return nil, fmt.Errorf("ckpt: commit %s step %d: sync: %w", job, step, err)
	}
	// The parts and the marker stay until the commit: a commit that dies
	// before it can be taken again by a rank restarted under the same
	// attempt. Now they go (what a crash here leaves are hidden files
	// that Verify reports as unlisted).
	for r := range world {
		if err := ignoreNotFound(s.c.UnlinkIn(ctx, dir, rankPartName(r, world))); err != nil {
			s.log.Debug("ckpt: remove a rank's part after the commit", "rank", r, "err", err)
		}
	}
	if err := ignoreNotFound(s.c.UnlinkIn(ctx, dir, rankCommitName)); err != nil {
		s.log.Debug("ckpt: remove the commit marker after the commit", "err", err)
	}
	res := &SaveResult{Manifest: m}
	if err := s.hook(Point{Phase: PhaseDone}); err != nil {
		return res, err
	}
	if !s.o.Retention.IsZero() {
		res.Pruned, res.PruneErr = s.Prune(ctx, job, s.o.Retention)
	}
	res.Elapsed = s.o.Now().Sub(start)
	return res, nil
}
