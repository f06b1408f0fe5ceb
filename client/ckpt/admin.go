package ckpt

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/errs"
)

// pinXattr marks a pinned step directory (any value); set it with the
// API, `shoal ckpt pin` or setfattr through the mount.
const pinXattr = "user.shoal.ckpt.pinned"

// Info is one committed checkpoint as List sees it.
type Info struct {
	Job         string
	Step        int64
	Name        string // its directory's name
	Ino         uint64 // its directory's inode
	Time        time.Time
	Pinned      bool
	HasManifest bool // false for a mount-protocol checkpoint not yet verified
}

// Jobs lists the jobs under the root, in name order.
func (s *Store) Jobs(ctx context.Context) ([]string, error) {
	es, err := s.c.ReadDir(ctx, s.o.Root)
	if errors.Is(err, errs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ckpt: list %s: %w", s.o.Root, err)
	}
	var out []string
	for _, e := range es {
		if n := e.Name; e.Mode&client.ModeType == client.ModeDir && !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	return out, nil
}

// List returns the committed checkpoints of job in step order: the
// step-<N> directories. Staging and trash directories are never listed.
// A job that does not exist has none.
func (s *Store) List(ctx context.Context, job string) ([]Info, error) {
	if err := checkName("job", job); err != nil {
		return nil, fmt.Errorf("ckpt: %w", err)
	}
	a, err := s.c.Stat(ctx, s.jobDir(job))
	if errors.Is(err, errs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ckpt: list %s: %w", job, err)
	}
	return s.listSteps(ctx, job, a.Ino, true)
}

// listSteps lists the committed checkpoints in directory jobIno, with
// their pins and manifests when details is set. A step under two names
// (step-1200 and step-0000001200) is listed once, under the canonical
// name.
func (s *Store) listSteps(ctx context.Context, job string, jobIno uint64, details bool) ([]Info, error) {
	es, err := s.readDirPlus(ctx, jobIno)
	if err != nil {
		return nil, fmt.Errorf("ckpt: list %s: %w", job, err)
	}
	byStep := map[int64]int{}
	var out []Info
	for _, e := range es {
		name := e.Name
		step, ok := ParseStepName(name)
		if !ok || e.Mode&client.ModeType != client.ModeDir {
			continue
		}
		in := Info{Job: job, Step: step, Name: name, Ino: e.Ino, Time: time.Unix(0, e.Attr.MtimeNs)}
		if i, dup := byStep[step]; dup {
			if name == StepName(step) {
				out[i] = in
			}
			continue
		}
		byStep[step] = len(out)
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Info) int {
		switch {
		case a.Step < b.Step:
			return -1
		case a.Step > b.Step:
			return 1
		}
		return 0
	})
	if !details {
		return out, nil
	}
	if err := s.stepDetails(ctx, out); err != nil {
		return nil, fmt.Errorf("ckpt: list %s: %w", job, err)
	}
	return out, nil
}

// stepDetails fills in Pinned and HasManifest: two small calls per step,
// a few steps at a time.
func (s *Store) stepDetails(ctx context.Context, out []Info) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range out {
		g.Go(func() error {
			in := &out[i]
			_, err := s.c.GetXattr(gctx, in.Ino, pinXattr)
			switch {
			case err == nil:
				in.Pinned = true
			case errors.Is(err, errs.ErrNoData), errors.Is(err, errs.ErrNotFound):
			default:
				return err
			}
			_, err = s.c.Lookup(gctx, in.Ino, ManifestName)
			switch {
			case err == nil:
				in.HasManifest = true
			case errors.Is(err, errs.ErrNotFound):
			default:
				return err
			}
			return nil
		})
	}
	return g.Wait()
}

// Latest returns the newest committed checkpoint of job; ErrNotFound if
// it has none.
func (s *Store) Latest(ctx context.Context, job string) (Info, error) {
	l, err := s.List(ctx, job)
	if err != nil {
		return Info{}, err
	}
	if len(l) == 0 {
		return Info{}, fmt.Errorf("ckpt: job %q has no checkpoint: %w", job, errs.ErrNotFound)
	}
	return l[len(l)-1], nil
}

// Stat returns one committed checkpoint (step may be Latest).
func (s *Store) Stat(ctx context.Context, job string, step int64) (Info, error) {
	if step == Latest {
		return s.Latest(ctx, job)
	}
	if err := checkStep(step); err != nil {
		return Info{}, fmt.Errorf("ckpt: %w", err)
	}
	if err := checkName("job", job); err != nil {
		return Info{}, fmt.Errorf("ckpt: %w", err)
	}
	// The canonical name first: a lookup, not a listing of the job.
	if a, err := s.c.Stat(ctx, path.Join(s.jobDir(job), StepName(step))); err == nil && client.IsDir(a) {
		in := []Info{{Job: job, Step: step, Name: StepName(step), Ino: a.Ino, Time: time.Unix(0, a.MtimeNs)}}
		if err := s.stepDetails(ctx, in); err != nil {
			return Info{}, fmt.Errorf("ckpt: %s step %d: %w", job, step, err)
		}
		return in[0], nil
	}
	l, err := s.List(ctx, job)
	if err != nil {
		return Info{}, err
	}
	for _, in := range l {
		if in.Step == step {
			return in, nil
		}
	}
	return Info{}, fmt.Errorf("ckpt: %s step %d: %w", job, step, errs.ErrNotFound)
}

// Manifest returns a committed checkpoint's manifest; ErrNotFound when it
// has none (a mount-protocol checkpoint that Verify has not filled in).
func (s *Store) Manifest(ctx context.Context, job string, step int64) (*Manifest, Info, error) {
	in, err := s.Stat(ctx, job, step)
	if err != nil {
		return nil, in, err
	}
	m, err := s.readManifest(ctx, in.Ino)
	if err != nil {
		return nil, in, fmt.Errorf("ckpt: %s step %d: %w", job, in.Step, err)
	}
	return m, in, nil
}

// readManifest reads and checks the manifest in step directory dir.
func (s *Store) readManifest(ctx context.Context, dir uint64) (*Manifest, error) {
	a, err := s.c.Lookup(ctx, dir, ManifestName)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	b, err := s.readSmallFile(ctx, a.Ino, maxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return DecodeManifest(b)
}

// Pin marks a checkpoint pinned: retention keeps it and Delete refuses it.
func (s *Store) Pin(ctx context.Context, job string, step int64) error {
	in, err := s.Stat(ctx, job, step)
	if err != nil {
		return err
	}
	_, err = s.c.SetXattr(ctx, in.Ino, pinXattr, []byte("1"), 0)
	return err
}

// Unpin undoes Pin (an unpinned checkpoint is not an error).
func (s *Store) Unpin(ctx context.Context, job string, step int64) error {
	in, err := s.Stat(ctx, job, step)
	if err != nil {
		return err
	}
	_, err = s.c.RemoveXattr(ctx, in.Ino, pinXattr)
	if errors.Is(err, errs.ErrNoData) {
		return nil
	}
	return err
}

// Delete removes a committed checkpoint: one rename takes it out of the
// listing at once, then its files are removed (what a crash leaves, GC
// removes) and the MDS frees the space of the extents no other step
// shares. A pinned checkpoint is refused (ErrNotPermitted): Unpin it
// first.
func (s *Store) Delete(ctx context.Context, job string, step int64) error {
	in, err := s.Stat(ctx, job, step)
	if err != nil {
		return err
	}
	if in.Pinned {
		return fmt.Errorf("ckpt: %s step %d is pinned; unpin it first: %w", job, in.Step, errs.ErrNotPermitted)
	}
	a, err := s.c.Stat(ctx, s.jobDir(job))
	if err != nil {
		return err
	}
	if err := s.trash(ctx, a.Ino, in.Name); err != nil {
		return fmt.Errorf("ckpt: delete %s step %d: %w", job, in.Step, err)
	}
	return nil
}

// GCReport says what GC removed.
type GCReport struct {
	Staging []string // stale staging directories (remains of dead saves)
	Trash   []string // directories whose removal an earlier call left unfinished
}

// GC removes job's remains: staging directories with no change for
// Options.StaleAfter (their saves died) and trash directories left by
// interrupted deletions. The MDS's GC then frees the space of their
// extents. A running save touches its staging directory, so it is never
// taken for a dead one.
func (s *Store) GC(ctx context.Context, job string) (GCReport, error) {
	var rep GCReport
	if err := checkName("job", job); err != nil {
		return rep, fmt.Errorf("ckpt: %w", err)
	}
	a, err := s.c.Stat(ctx, s.jobDir(job))
	if errors.Is(err, errs.ErrNotFound) {
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	es, err := s.readDirPlus(ctx, a.Ino)
	if err != nil {
		return rep, err
	}
	now := s.o.Now()
	var errsOut []error
	for _, e := range es {
		name := e.Name
		switch {
		case isTrash(name):
			if err := s.removeTree(ctx, a.Ino, name); err != nil {
				errsOut = append(errsOut, fmt.Errorf("remove %s: %w", name, err))
				continue
			}
			rep.Trash = append(rep.Trash, name)
		case isStaging(name) && e.Mode&client.ModeType == client.ModeDir:
			newest, err := s.newestChange(ctx, &e)
			if err != nil {
				if errors.Is(err, errs.ErrNotFound) {
					continue // committed or removed meanwhile
				}
				errsOut = append(errsOut, err)
				continue
			}
			if now.Sub(newest) < s.o.StaleAfter {
				continue
			}
			err = s.trash(ctx, a.Ino, name)
			if errors.Is(err, errs.ErrNotFound) {
				continue
			}
			if err != nil {
				errsOut = append(errsOut, fmt.Errorf("remove %s: %w", name, err))
				continue
			}
			rep.Staging = append(rep.Staging, name)
		}
	}
	return rep, errors.Join(errsOut...)
}

// newestChange returns the latest mtime or ctime of a staging directory
// and of the entries in it.
func (s *Store) newestChange(ctx context.Context, e *client.DirEntry) (time.Time, error) {
	newest := max(e.Attr.MtimeNs, e.Attr.CtimeNs)
	es, err := s.readDirPlus(ctx, e.Ino)
	if err != nil {
		return time.Time{}, err
	}
	for _, c := range es {
		newest = max(newest, c.Attr.MtimeNs, c.Attr.CtimeNs)
	}
	return time.Unix(0, newest), nil
}

// Prune applies a retention policy to job: it deletes the committed
// checkpoints the policy does not keep (never a pinned one), then runs GC.
// It returns the steps deleted.
func (s *Store) Prune(ctx context.Context, job string, p Policy) ([]int64, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	l, err := s.List(ctx, job)
	if err != nil {
		return nil, err
	}
	states := make([]StepState, len(l))
	for i, in := range l {
		states[i] = StepState{Step: in.Step, Pinned: in.Pinned}
	}
	_, drop := p.Plan(states)
	var deleted []int64
	var errsOut []error
	for _, step := range drop {
		if err := s.Delete(ctx, job, step); err != nil && !errors.Is(err, errs.ErrNotFound) {
			errsOut = append(errsOut, err)
			continue
		}
		deleted = append(deleted, step)
	}
	if _, err := s.GC(ctx, job); err != nil {
		errsOut = append(errsOut, err)
	}
	return deleted, errors.Join(errsOut...)
}
