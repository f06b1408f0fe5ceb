package ost

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// The scrubber reads every chunk, verifying every checksum block, and
// reports the chunks that fail to the MDS (ReportCorrupt), whose repair
// worker rebuilds them from the other chunks of their extent. It runs on
// one goroutine started by Start (it needs the MDS) and stopped by Close:
//
//   - continuously, at a low rate (ScrubOptions.Rate, default 4 MiB/s),
//     one chunks/<xx> directory after another, starting over at the end;
//   - on demand, a full pass at ScrubOptions.AdminRate (or the rate the
//     request names) when the Scrub RPC asks for one (`shoal admin scrub`);
//     the background scan waits while it runs.
//
// A chunk found bad stays on disk, and is reported again by later passes
// until the MDS has rebuilt it (the MDS ignores duplicates). docs/admin.md.

// Scrub defaults.
const (
	DefaultScrubRate      = 4 << 20   // bytes/s, background
	DefaultAdminScrubRate = 256 << 20 // bytes/s, an admin pass
	// DefaultScrubPassInterval is the pause between two background
	// passes when ScrubOptions.PassInterval is 0.
	DefaultScrubPassInterval = time.Minute
	// scrubShardPause is the least time the background scan spends on
	// one of the 256 shard directories, listing included, so that a pass
	// over a nearly empty store is not a busy loop of directory listings
	// (it took both cores of a 2-core machine with 6 OSTs).
	scrubShardPause    = 20 * time.Millisecond
	scrubPiece         = 1 << 20 // bytes read (and verified) at a time
	scrubReportTimeout = 10 * time.Second
)

// ScrubOptions configure the scrubber (Options.Scrub).
type ScrubOptions struct {
	// Rate is the background scrub's speed in bytes/s: 0 means
	// DefaultScrubRate, a negative value turns the background scrub off
	// (admin passes still run).
	Rate int64
	// AdminRate is the speed of a pass started by the Scrub RPC without a
	// rate of its own: 0 means DefaultAdminScrubRate.
	AdminRate int64
	// PassInterval is the pause between two background passes: 0 means
	// DefaultScrubPassInterval, a negative value none.
	PassInterval time.Duration
}

// scrubber is the scrub state of a Server.
type scrubber struct {
	kick chan uint64 // an admin pass at this rate (0: default) is wanted

	mu struct {
		sync.Mutex
		started bool // the scrub goroutine runs
		running bool // an admin pass runs or is requested
		st      ostpb.ScrubStatus
		pending []*mdspb.BadChunk // found, not yet reported
		bgNext  int               // next shard of the background scan
	}
}

// scrubControl implements the Scrub RPC: start an admin pass (unless one
// runs) and return the status.
func (s *Server) scrubControl(start bool, rate uint64) (*ostpb.ScrubStatus, error) {
	sc := &s.scrub
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if start {
		if !sc.mu.started {
			return nil, fmt.Errorf("ost: scrubber not running (the OST is not started with an MDS): %w", errs.ErrUnavailable)
		}
		if !sc.mu.running {
			sc.mu.running = true
			select {
			case sc.kick <- rate:
			default:
			}
		}
	}
	st := &ostpb.ScrubStatus{
		Running: sc.mu.running, Pass: sc.mu.st.Pass, ChunksChecked: sc.mu.st.ChunksChecked,
		BytesChecked: sc.mu.st.BytesChecked, Corrupt: sc.mu.st.Corrupt, TotalChunks: sc.mu.st.TotalChunks,
		BackgroundChunks: sc.mu.st.BackgroundChunks, BackgroundCorrupt: sc.mu.st.BackgroundCorrupt,
	}
	return st, nil
}

// startScrub starts the scrub goroutine; the returned channel is closed
// when it has stopped (after ctx is done).
func (s *Server) startScrub(ctx context.Context, cli mdspb.MdsClient) <-chan struct{} {
	done := make(chan struct{})
	sc := &s.scrub
	sc.mu.Lock()
	if sc.kick == nil {
		sc.kick = make(chan uint64, 1)
	}
	sc.mu.started = true
	sc.mu.Unlock()
	go func() {
		defer close(done)
		defer func() {
			sc.mu.Lock()
			sc.mu.started, sc.mu.running = false, false
			sc.mu.Unlock()
		}()
		s.scrubLoop(ctx, cli)
	}()
	return done
}

func (s *Server) scrubLoop(ctx context.Context, cli mdspb.MdsClient) {
	o := s.opts.Scrub
	bgRate := o.Rate
	if bgRate == 0 {
		bgRate = DefaultScrubRate
	}
	passInterval := o.PassInterval
	if passInterval == 0 {
		passInterval = DefaultScrubPassInterval
	}
	sc := &s.scrub
	for {
		select {
		case <-ctx.Done():
			return
		case rate := <-sc.kick:
			s.adminScrub(ctx, cli, rate)
			continue
		default:
		}
		if bgRate < 0 {
			select {
			case <-ctx.Done():
				return
			case rate := <-sc.kick:
				s.adminScrub(ctx, cli, rate)
			}
			continue
		}
		// One shard of the background scan.
		sc.mu.Lock()
		shard := sc.mu.bgNext
		sc.mu.bgNext = (shard + 1) % fanout
		sc.mu.Unlock()
		p := newPacer(bgRate)
		shardDone := time.After(scrubShardPause)
		ents, err := s.st.listShard(shard)
		if err != nil {
			s.log.Warn("scrub: list shard", "shard", shard, "err", err)
		}
		for _, e := range ents {
			if len(sc.kick) > 0 || ctx.Err() != nil {
				break // an admin pass (or Close) first; this shard is rescanned later
			}
			n, bad := s.scrubChunk(e.id)
			s.m.scrubbed("background", n, bad)
			sc.mu.Lock()
			sc.mu.st.BackgroundChunks++
			if bad {
				sc.mu.st.BackgroundCorrupt++
			}
			sc.mu.Unlock()
			if !p.wait(ctx, n, sc.kick) {
				break
			}
		}
		s.reportCorrupt(ctx, cli)
		pause := shardDone
		if shard == fanout-1 && passInterval > 0 {
			pause = time.After(passInterval)
		}
		select {
		case <-ctx.Done():
			return
		case rate := <-sc.kick:
			s.adminScrub(ctx, cli, rate)
		case <-pause:
		}
	}
}

// adminScrub runs one full pass at rate (0: AdminRate).
func (s *Server) adminScrub(ctx context.Context, cli mdspb.MdsClient, rate uint64) {
	sc := &s.scrub
	r := int64(rate)
	if r <= 0 {
		r = s.opts.Scrub.AdminRate
	}
	if r <= 0 {
		r = DefaultAdminScrubRate
	}
	sc.mu.Lock()
	sc.mu.running = true
	sc.mu.st.ChunksChecked, sc.mu.st.BytesChecked, sc.mu.st.Corrupt = 0, 0, 0
	sc.mu.st.TotalChunks = uint64(max(s.st.chunks.Load(), 0))
	sc.mu.Unlock()
	s.log.Info("scrub pass started", "ost", s.ID(), "rate", r)
	p := newPacer(r)
	for shard := 0; shard < fanout && ctx.Err() == nil; shard++ {
		ents, err := s.st.listShard(shard)
		if err != nil {
			s.log.Warn("scrub: list shard", "shard", shard, "err", err)
			continue
		}
		for _, e := range ents {
			n, bad := s.scrubChunk(e.id)
			s.m.scrubbed("admin", n, bad)
			sc.mu.Lock()
			sc.mu.st.ChunksChecked++
			sc.mu.st.BytesChecked += uint64(n)
			if bad {
				sc.mu.st.Corrupt++
			}
			sc.mu.Unlock()
			if !p.wait(ctx, n, nil) {
				break
			}
		}
		s.reportCorrupt(ctx, cli)
	}
	// The pass ends only once its findings reached the MDS (or Close).
	for ctx.Err() == nil && !s.reportCorrupt(ctx, cli) {
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	sc.mu.Lock()
	sc.mu.running = false
	sc.mu.st.Pass++
	st := sc.mu.st.ChunksChecked
	bad := sc.mu.st.Corrupt
	sc.mu.Unlock()
	s.log.Info("scrub pass finished", "ost", s.ID(), "chunks", st, "corrupt", bad)
}

// scrubChunk reads and verifies chunk c and queues it for the MDS when it
// is bad. It returns the bytes read and whether the chunk is bad.
func (s *Server) scrubChunk(c chunkID) (int64, bool) {
	size, err := s.st.stat(c)
	if err != nil {
		return 0, false // deleted since the listing
	}
	var read int64
	for off := uint64(0); off < size; off += scrubPiece {
		n := min(scrubPiece, size-off)
		_, err := s.st.read(c, off, n)
		read += int64(n)
		switch {
		case err == nil:
			continue
		case errors.Is(err, errs.ErrNotFound):
			return read, false
		case errors.Is(err, errs.ErrCorrupt):
			s.log.Warn("scrub: corrupt chunk", "ost", s.ID(), "chunk", c.String(), "err", err)
			s.queueBad(c, err.Error())
			return read, true
		default:
			s.log.Warn("scrub: read chunk", "chunk", c.String(), "err", err)
			return read, false
		}
	}
	if size == 0 {
		return 0, false
	}
	return read, false
}

func (s *Server) queueBad(c chunkID, reason string) {
	sc := &s.scrub
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, b := range sc.mu.pending {
		if b.Extent == c.extent && b.Index == c.index {
			return
		}
	}
	if len(reason) > 512 {
		reason = reason[:512]
	}
	sc.mu.pending = append(sc.mu.pending, &mdspb.BadChunk{Extent: c.extent, Index: c.index, ReportedNs: time.Now().UnixNano(), Reason: reason})
}

// reportCorrupt sends the queued bad chunks to the MDS; it reports
// whether nothing is left to send.
func (s *Server) reportCorrupt(ctx context.Context, cli mdspb.MdsClient) bool {
	sc := &s.scrub
	sc.mu.Lock()
	batch := sc.mu.pending
	sc.mu.Unlock()
	id := s.ID()
	if len(batch) == 0 {
		return true
	}
	if id == 0 {
		return false
	}
	for _, b := range batch {
		b.Ost = id
	}
	cctx, cancel := context.WithTimeout(ctx, scrubReportTimeout)
	_, err := cli.ReportCorrupt(cctx, &mdspb.ReportCorruptRequest{Ost: id, Chunks: batch})
	cancel()
	if err != nil {
		s.log.Warn("scrub: report corrupt chunks to MDS", "count", len(batch), "err", err)
		return false
	}
	sc.mu.Lock()
	sc.mu.pending = sc.mu.pending[len(batch):]
	left := len(sc.mu.pending)
	sc.mu.Unlock()
	return left == 0
}

// pacer spreads reads to rate bytes/s.
type pacer struct {
	rate  int64
	start time.Time
	bytes int64
}

func newPacer(rate int64) *pacer { return &pacer{rate: rate, start: time.Now()} }

// wait accounts n bytes and sleeps until they are due; it returns false
// when ctx is done or kick has a value waiting (without taking it).
func (p *pacer) wait(ctx context.Context, n int64, kick chan uint64) bool {
	p.bytes += n
	due := p.start.Add(time.Duration(float64(p.bytes) / float64(p.rate) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-tick.C:
			if kick != nil && len(kick) > 0 {
				return false
			}
		}
	}
}

// ScrubStatus returns the scrubber's status, as the Scrub RPC does.
func (s *Server) ScrubStatus() (*ostpb.ScrubStatus, error) { return s.scrubControl(false, 0) }
