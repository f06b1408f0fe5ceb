package ost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Registration backoff and the warn interval of a failing MDS connection.
const (
	minBackoff       = 100 * time.Millisecond
	maxBackoff       = 5 * time.Second
	minCallTimeout   = 2 * time.Second
	failWarnInterval = time.Minute
)

// Start registers the OST with the MDS at Options.MDSAddr, retrying with
// backoff until it succeeds or ctx is done, persists the id the MDS assigns
// (dir/ost.id), and starts the heartbeat loop, which runs until Close. With
// no MDSAddr it does nothing.
//
// The MDS maps the OST's uuid to its id; an OST that already has an id and
// is given another one refuses it (errs.ErrStale): its chunks are placed
// under its old id.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.MDSAddr == "" {
		return nil
	}
	if s.opts.AdvertiseAddr == "" {
		return fmt.Errorf("ost: Options.AdvertiseAddr is empty: %w", errs.ErrInvalid)
	}
	conn, err := wire.DialGroup(s.opts.MDSAddr, wire.WithCreds(s.opts.Creds)) // one MDS or a group ("a,b,c"): follows the leader
	if err != nil {
		return fmt.Errorf("ost: dial MDS %s: %w", s.opts.MDSAddr, err)
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	s.mu.Lock()
	if s.mu.closed || s.mu.started {
		s.mu.Unlock()
		cancel()
		conn.Close()
		return fmt.Errorf("ost: Start on a closed or started server: %w", errs.ErrInvalid)
	}
	s.mu.started, s.mu.cancel, s.mu.done = true, cancel, done
	s.mu.Unlock()

	registered := make(chan error, 1)
	go func() {
		defer close(done)
		defer conn.Close()
		cli := mdspb.NewMdsClient(conn)
		scrubDone := s.startScrub(loopCtx, cli)
		s.run(loopCtx, cli, registered)
		<-loopCtx.Done()
		<-scrubDone
	}()

	select {
	case err = <-registered:
	case <-ctx.Done():
		err = fmt.Errorf("ost: registering with MDS %s: %w", s.opts.MDSAddr, context.Cause(ctx))
	}
	if err != nil {
		cancel()
		<-done
		s.mu.Lock()
		s.mu.started, s.mu.cancel, s.mu.done = false, nil, nil
		s.mu.Unlock()
		return err
	}
	return nil
}

// run registers (reporting the outcome on registered) and then heartbeats
// every interval until ctx is done.
func (s *Server) run(ctx context.Context, cli mdspb.MdsClient, registered chan<- error) {
	var fl failLog
	for backoff := minBackoff; ; backoff = min(2*backoff, maxBackoff) {
		err := s.register(ctx, cli)
		if err == nil {
			// Always said: on a first start this is where the OST
			// learns its id ("ost opened" could not name one).
			s.log.Info("registered with MDS", "ost", s.ID(), "mds", s.opts.MDSAddr)
			fl.failing = false
			registered <- nil
			break
		}
		if errors.Is(err, errs.ErrStale) {
			registered <- err
			return
		}
		fl.fail(s.log, "cannot register with MDS", err, "mds", s.opts.MDSAddr)
		// Jitter: 0.75 to 1.25 of backoff.
		d := backoff*3/4 + rand.N(backoff/2)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}

	t := time.NewTicker(s.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		err := s.heartbeat(ctx, cli)
		if errors.Is(err, errs.ErrNotFound) {
			s.log.Info("MDS does not know this OST; registering again", "ost", s.ID())
			err = s.register(ctx, cli)
		}
		switch {
		case err == nil:
			fl.ok(s.log, "MDS reachable again", "ost", s.ID())
		case ctx.Err() != nil:
			return
		default:
			fl.fail(s.log, "heartbeat to MDS failed", err, "ost", s.ID())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) callTimeout() time.Duration { return max(s.opts.HeartbeatInterval, minCallTimeout) }

// register calls RegisterOst once and adopts (and persists) the id.
func (s *Server) register(ctx context.Context, cli mdspb.MdsClient) error {
	capacity, free, err := s.space()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	defer cancel()
	rep, err := cli.RegisterOst(ctx, &mdspb.RegisterOstRequest{
		Uuid:     s.uuid,
		Addr:     s.opts.AdvertiseAddr,
		Capacity: capacity,
		Free:     free,
		FsId:     s.fsID(),
	})
	if err != nil {
		return fmt.Errorf("ost: RegisterOst: %w", err)
	}
	if err := s.setCapSecret(rep.GetCapSecret()); err != nil {
		return err
	}
	id := rep.GetId()
	switch old := s.ID(); {
	case id == 0:
		return fmt.Errorf("ost: RegisterOst returned id 0")
	case old == id:
		return nil
	case old != 0:
		return fmt.Errorf("ost: MDS assigned id %d to uuid %s, but this OST is id %d (%s): %w",
			id, s.uuid, old, idFile, errs.ErrStale)
	}
	if err := s.st.saveID(id); err != nil {
		return fmt.Errorf("ost: persist id %d: %w", id, err)
	}
	s.id.Store(id)
	return nil
}

// heartbeat sends one heartbeat.
func (s *Server) heartbeat(ctx context.Context, cli mdspb.MdsClient) error {
	inf, err := s.info()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	defer cancel()
	_, err = cli.Heartbeat(ctx, &mdspb.HeartbeatRequest{
		Id:       inf.Id,
		Addr:     s.opts.AdvertiseAddr,
		Capacity: inf.Capacity,
		Free:     inf.Free,
		Used:     inf.Used,
		Chunks:   inf.Chunks,
		FsId:     inf.FsId,
	})
	if err != nil {
		return fmt.Errorf("ost: Heartbeat: %w", err)
	}
	return nil
}

// failLog logs a run of failures without flooding: the first at warn, then
// at debug, with a reminder at warn every failWarnInterval; the recovery at
// info.
type failLog struct {
	failing  bool
	lastWarn time.Time
}

func (f *failLog) fail(log *slog.Logger, msg string, err error, attrs ...any) {
	attrs = append(attrs, "err", err)
	if now := time.Now(); !f.failing || now.Sub(f.lastWarn) >= failWarnInterval {
		log.Warn(msg, attrs...)
		f.lastWarn = now
	} else {
		log.Debug(msg, attrs...)
	}
	f.failing = true
}

func (f *failLog) ok(log *slog.Logger, msg string, attrs ...any) {
	if f.failing {
		log.Info(msg, attrs...)
	}
	f.failing = false
}
