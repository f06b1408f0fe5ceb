// Package ckpt is Shoal's checkpoint API: training jobs save and restore
// checkpoints, sets of safetensors shards and opaque blobs, through the
// client library. A save writes every shard in parallel into a staging
// directory and commits with one rename, a single MDS transaction, so a
// checkpoint is visible whole or not at all; a crash leaves only a staging
// directory, which GC removes. A manifest records a checksum of every
// shard and every tensor; restores and Verify check them and name what
// fails. Tensors and shards that did not change since the previous step
// are not written again: the MDS clones the previous step's extents into
// the new files (CloneExtents), reference-counted for GC.
//
// The layout in the namespace is a documented protocol (names.go,
// docs/checkpoints.md): a training job that only has the FUSE mount gets
// the same atomicity by writing <root>/<job>/.step-<N>.tmp/ and renaming
// it to step-<N>; List sees the result and Verify fills in its manifest.
//
// A Store is safe for concurrent use. It owns the goroutines of its
// asynchronous saves: Close waits for them.
//
// Lock order: Store.mu, then Store.pool.mu (never both held across I/O).
package ckpt

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"sync"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/errs"
)

// Options configure a Store. Zero values take the documented defaults.
type Options struct {
	// Root is the directory holding every job (default /ckpt).
	Root string
	// Parallelism is the number of shards written, read or verified at
	// once (default 8). Each shard streams through its own client.File,
	// which pipelines its chunk uploads.
	Parallelism int
	// StaleAfter is how long a staging directory may go without any
	// change (its own mtime and its files') before GC takes it for the
	// remains of a dead save and removes it (default 15 minutes). A
	// running Save touches its staging directory every StaleAfter/8.
	StaleAfter time.Duration
	// Retention, when set, is applied to the job after every committed
	// Save (Prune). The zero Policy keeps everything.
	Retention Policy
	// NoReuse turns off zero-copy reuse: every save writes every byte.
	NoReuse bool
	// NoCompression turns off the checkpoint codec (compress.go): shards
	// are then stored as their directory's layout says.
	NoCompression bool
	// CompressMinSaving is the saving (percent of an extent) under which
	// a shard's extent is stored raw (default 10).
	CompressMinSaving int
	// AsyncInFlight bounds SaveAsync flushes in flight per job (default
	// 1): a further SaveAsync waits for one to finish (back-pressure).
	AsyncInFlight int
	// Logger receives debug messages; nil discards.
	Logger *slog.Logger
	// Progress, when set, is told how many bytes a long operation has
	// done. It is called from many goroutines and must be quick.
	Progress func(Progress)
	// Hook, when set, is called at every named point of a save (fault
	// injection for tests). When it returns an error the save stops
	// there as if its process had died: nothing is cleaned up, files may
	// be left open, and Save returns the error.
	Hook func(Point) error
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Progress reports how far an operation is.
type Progress struct {
	Op    string // "save", "restore", "verify"
	Job   string
	Step  int64
	Done  int64 // bytes done (written, shared, read or checked)
	Total int64 // bytes in all
}

// Point is a place in a save, for Options.Hook.
type Point struct {
	Phase string // see the Phase constants
	Shard string // the shard, for shard phases
	Piece int    // the piece written, for PhaseWrite (0-based)
}

// Phases of a save, in order.
const (
	PhaseStaging  = "staging"  // the staging directory exists
	PhaseCreate   = "create"   // a shard file was created
	PhaseClone    = "clone"    // a shard's reused ranges were cloned
	PhaseWrite    = "write"    // a piece of a shard was handed to the client
	PhaseClose    = "close"    // a shard file was flushed and closed
	PhaseManifest = "manifest" // the manifest was written
	PhaseMarker   = "marker"   // a rank saw every rank's part, before it takes the commit
	PhaseCommit   = "commit"   // just before the commit's rename
	PhaseDone     = "done"     // just after it, before retention
)

func (o *Options) setDefaults() error {
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	o.Root = path.Clean("/" + o.Root)
	if o.Parallelism <= 0 {
		o.Parallelism = 8
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 15 * time.Minute
	}
	if o.AsyncInFlight <= 0 {
		o.AsyncInFlight = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Root == "/" {
		return fmt.Errorf("ckpt: Options.Root must not be the root directory: %w", errs.ErrInvalid)
	}
	return o.Retention.Validate()
}

// Store saves and restores the checkpoints under one root directory.
type Store struct {
	c   *client.Client
	o   Options
	log *slog.Logger

	// bg is the context of asynchronous flushes, cancelled by Close only
	// after they finished (Close waits; it does not abort them).
	bg       context.Context
	bgCancel context.CancelFunc
	wg       sync.WaitGroup // asynchronous flushes

	mu struct {
		sync.Mutex
		closed bool
		async  map[string]chan struct{} // per job: a slot per flush in flight
	}
	pool stagePool       // staging buffers of SaveAsync (async.go)
	bufs datanet.BufPool // piece buffers of CopyFile (copyfile.go)
}

// New returns a Store on client c. The Store does not own c: close c
// after the Store.
func New(c *client.Client, o Options) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("ckpt: nil client: %w", errs.ErrInvalid)
	}
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	s := &Store{c: c, o: o, log: o.Logger}
	s.bg, s.bgCancel = context.WithCancel(context.Background())
	s.mu.async = map[string]chan struct{}{}
	return s, nil
}

// Options returns the store's options, defaults filled in.
func (s *Store) Options() Options { return s.o }

// Close waits for every asynchronous save to finish. Later calls to
// SaveAsync fail.
func (s *Store) Close() error {
	s.mu.Lock()
	s.mu.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	s.bgCancel()
	return nil
}

// jobDir is the path of a job's directory.
func (s *Store) jobDir(job string) string { return path.Join(s.o.Root, job) }

// progress reports to Options.Progress, if set.
func (s *Store) progress(op, job string, step, done, total int64) {
	if s.o.Progress != nil {
		s.o.Progress(Progress{Op: op, Job: job, Step: step, Done: done, Total: total})
	}
}

// hook calls Options.Hook, if set.
func (s *Store) hook(p Point) error {
	if s.o.Hook == nil {
		return nil
	}
	if err := s.o.Hook(p); err != nil {
		return &crashError{p: p, err: err}
	}
	return nil
}

// crashError is a save stopped by Options.Hook: no cleanup follows.
type crashError struct {
	p   Point
	err error
}

func (e *crashError) Error() string {
	return fmt.Sprintf("ckpt: save stopped by hook at %s %s: %v", e.p.Phase, e.p.Shard, e.err)
}

func (e *crashError) Unwrap() error { return e.err }
