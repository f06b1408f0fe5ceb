package mds

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Directory leases (docs/fuse.md, "Directory leases"). A client session
// with a lease on directory D holds D's full list of names and answers
// lookups of absent names itself. Before a change to D's entries by any
// other session commits, the MDS recalls every such lease on the
// holder's Watch stream and waits for its release, or for its expiry.
//
// The lease table lives in memory only, on the single MDS or the serving
// leader. Its times are the MDS's monotonic clock (time.Now), not
// Options.Now, which stamps inodes: a lease expires L after its
// LeaseDir request reached the MDS, never before the holder's own count
// (from when it sent the request) runs out.
//
// A grant races changes without a lock held over the read: under the
// table lock LeaseDir takes the directory's version and refuses when a
// change is in flight; it reads the listing in one snapshot; under the
// lock again it grants only if the version is the same and no change is
// in flight. A change bumps the version and counts itself in flight
// before it commits, and stops counting only once its commit is visible,
// so a grant either reads the change or is refused.
//
// Leases of an earlier process or leader may still be trusted by their
// holders for up to L: a durable marker (leaseMarkerKey) is committed
// before the first grant ever, and an MDS that finds it when it starts
// to serve refuses grants and holds changes of entries for L.

// maxLeaseEntries is the most entries a lease lists: a bigger directory
// is refused.
const maxLeaseEntries = 4096

// defaultDirLeaseTime is Options.DirLeaseTime's default: short, because a new
// leader or a restarted MDS holds changes of entries for it (the first
// write after a failover waited 2.6 s instead of 0.7 s with 2 s), and a
// frozen holder holds a change up for it.
const defaultDirLeaseTime = time.Second

// leaseTable is the directory lease table of a Server (Server.leases).
// Its lock is a leaf: nothing else is locked under it.
type leaseTable struct {
	lease time.Duration // L; 0: leases off
	log   *slog.Logger

	granted, refused, recalls prometheus.Counter
	held                      prometheus.GaugeFunc

	// recvs counts the goroutines receiving Watch streams; close waits
	// for them (they end once their stream does).
	recvs sync.WaitGroup
	// markerMu serializes the commit of the marker (ensureLeaseMarker).
	markerMu sync.Mutex

	mu         sync.Mutex
	closed     bool      // the server closed: no streams, no grants
	draining   bool      // stopping: no streams, holds kept (drain)
	closeErr   error     // the error of a change after close
	notBefore  time.Time // grants refused and changes held until then
	markerDone bool      // the marker is durable in this term's state
	epoch      uint64    // bumped by reset: grants begun before fail
	end        *leaseEnd // ended by reset and close
	nextGen    uint64
	dirs       map[uint64]*leasedDir
	sessions   map[uint64]*leaseSession
	byGen      map[uint64]uint64 // gen of a hold -> its directory
}

// leaseEnd ends the waits of one term of the table (reset, close).
type leaseEnd struct {
	ch  chan struct{}
	err error
}

type leasedDir struct {
	ver      uint64 // bumped when a change of the entries begins
	changing int    // changes in flight
	// by counts, per session, the changes in flight (changing) and begun
	// (vers) by that session: a grant is refused only for other
	// sessions' changes; the client replays its own (client/dirlease.go).
	by       map[uint64]*sessionChanges
	granting int // grants between their two looks (keeps ver)
	holders  map[uint64]*dirHold
}

type sessionChanges struct{ changing, vers uint64 }

// others returns the changes in flight and the changes begun by sessions
// other than sid.
func (d *leasedDir) others(sid uint64) (changing int, ver uint64) {
	changing, ver = d.changing, d.ver
	if c := d.by[sid]; c != nil && sid != 0 {
		changing -= int(c.changing)
		ver -= c.vers
	}
	return changing, ver
}

// dirHold is one session's lease on one directory.
type dirHold struct {
	gen      uint64
	expiry   time.Time
	recalled bool          // a recall was queued to the session's stream
	released chan struct{} // closed when released, dropped or replaced
}

type leaseSession struct {
	w    *watcher            // the open Watch stream, or nil
	dirs map[uint64]struct{} // directories it holds leases on
	// contentUntil extends each of its inode leases that is not
	// recalled and still ran at chainStart, the first of the renewals
	// since which none came late (LeaseDir{renew_inodes}:
	// contentlease.go, expiryOf).
	contentUntil, chainStart time.Time
	// recalledContent are the keys of its inode leases recalled and not
	// yet released (renewContent lists them).
	recalledContent map[uint64]struct{}
}

// watcher is one open Watch stream: recalls are queued here (under the
// table lock) and sent by its handler.
type watcher struct {
	session uint64
	queue   []*mdspb.WatchDown
	wake    chan struct{} // capacity 1: queue is not empty
	done    chan struct{} // closed when the table ends the stream
	err     error         // why it ended
}

func newLeaseTable(lease time.Duration, log *slog.Logger) *leaseTable {
	t := &leaseTable{lease: max(lease, 0), log: log, end: &leaseEnd{ch: make(chan struct{})},
		dirs: map[uint64]*leasedDir{}, sessions: map[uint64]*leaseSession{}, byGen: map[uint64]uint64{}}
	t.granted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_mds_dir_leases_granted_total", Help: "Directory leases granted (LeaseDir).",
	})
	t.refused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_mds_dir_leases_refused_total", Help: "LeaseDir calls refused: leases off, no Watch stream, a change in flight, too many entries, a restart's wait.",
	})
	t.recalls = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_mds_dir_lease_recalls_total", Help: "Directory leases recalled for another session's change.",
	})
	t.held = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shoal_mds_dir_leases", Help: "Directory leases held (including expired ones not yet collected).",
	}, func() float64 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return float64(len(t.byGen))
	})
	return t
}

func (t *leaseTable) collectors() []prometheus.Collector {
	return []prometheus.Collector{t.granted, t.refused, t.recalls, t.held}
}

// start begins a term: the single MDS's Open, or a member that starts
// to serve as leader. The table starts empty; with the marker in the
// state (marker), grants and changes wait for one lease time.
func (t *leaseTable) start(marker bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetLocked(&errs.NotLeaderError{Msg: "mds: a new term of directory leases began"})
	t.markerDone = marker
	if marker && t.lease > 0 {
		t.notBefore = time.Now().Add(t.lease)
		t.log.Info("directory leases of an earlier MDS may be held: changes of entries wait", "for", t.lease)
	}
}

// reset ends every stream and wait with err and empties the table (a
// member that stops leading).
func (t *leaseTable) reset(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetLocked(err)
}

func (t *leaseTable) resetLocked(err error) {
	for _, ls := range t.sessions {
		if ls.w != nil {
			ls.w.endLocked(err)
		}
	}
	t.end.err = err
	close(t.end.ch)
	t.end = &leaseEnd{ch: make(chan struct{})}
	t.epoch++
	t.markerDone = false
	t.dirs = map[uint64]*leasedDir{}
	t.sessions = map[uint64]*leaseSession{}
	t.byGen = map[uint64]uint64{}
}

// drain ends every Watch stream and refuses new ones, keeping the
// holds: a change committed meanwhile still waits out each lease its
// holder may not have dropped yet. A server stopping gracefully does this
// first, or it would wait for the streams.
func (t *leaseTable) drain() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.draining = true
	for _, ls := range t.sessions {
		if ls.w != nil {
			ls.w.endLocked(fmt.Errorf("mds: stopping: %w", errs.ErrUnavailable))
		}
	}
}

// close ends every stream and wait with err, refuses new ones, and waits
// for the streams' receivers (Server.Close).
func (t *leaseTable) close(err error) {
	t.mu.Lock()
	t.closed, t.closeErr = true, err
	t.resetLocked(err)
	t.mu.Unlock()
	t.recvs.Wait()
}

func (w *watcher) endLocked(err error) {
	select {
	case <-w.done:
	default:
		w.err = err
		close(w.done)
	}
}

func (t *leaseTable) session(id uint64) *leaseSession {
	ls := t.sessions[id]
	if ls == nil {
		ls = &leaseSession{dirs: map[uint64]struct{}{}}
		t.sessions[id] = ls
	}
	return ls
}

func (t *leaseTable) dir(ino uint64) *leasedDir {
	d := t.dirs[ino]
	if d == nil {
		d = &leasedDir{holders: map[uint64]*dirHold{}}
		t.dirs[ino] = d
	}
	return d
}

// tidyLocked forgets directory ino once nothing refers to it.
func (t *leaseTable) tidyLocked(ino uint64) {
	if d := t.dirs[ino]; d != nil && d.changing == 0 && d.granting == 0 && len(d.holders) == 0 {
		delete(t.dirs, ino)
	}
}

// dropHoldLocked removes session sid's hold h on directory ino.
func (t *leaseTable) dropHoldLocked(ino uint64, d *leasedDir, sid uint64, h *dirHold) {
	delete(d.holders, sid)
	delete(t.byGen, h.gen)
	if ls := t.sessions[sid]; ls != nil {
		delete(ls.dirs, ino)
		delete(ls.recalledContent, ino)
	}
	close(h.released)
	t.tidyLocked(ino)
}

// sendLocked queues recall m to session sid's stream, if it has one.
func (t *leaseTable) sendLocked(sid uint64, m *mdspb.WatchDown) {
	ls := t.sessions[sid]
	if ls == nil || ls.w == nil {
		return
	}
	ls.w.queue = append(ls.w.queue, m)
	select {
	case ls.w.wake <- struct{}{}:
	default:
	}
}

// watch registers the Watch stream of session id, ending the one it
// replaces; recalls the session has not answered yet are queued to it
// again. It counts the stream's receiver in recvs: the caller starts it.
func (t *leaseTable) watch(id uint64) (*watcher, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, t.closeErr
	}
	if t.draining {
		return nil, fmt.Errorf("mds: stopping: %w", errs.ErrUnavailable)
	}
	ls := t.session(id)
	if ls.w != nil {
		ls.w.endLocked(fmt.Errorf("mds: watch stream of session %x replaced by a newer one: %w", id, errs.ErrUnavailable))
	}
	w := &watcher{session: id, wake: make(chan struct{}, 1), done: make(chan struct{})}
	ls.w = w
	for ino := range ls.dirs {
		if h := t.dirs[ino].holders[id]; h != nil && h.recalled {
			t.sendLocked(id, &mdspb.WatchDown{Dir: ino, Gen: h.gen})
		}
	}
	t.recvs.Add(1)
	return w, nil
}

// unwatch unregisters w when it is still its session's stream.
func (t *leaseTable) unwatch(w *watcher) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ls := t.sessions[w.session]; ls != nil && ls.w == w {
		ls.w = nil
		if len(ls.dirs) == 0 {
			delete(t.sessions, w.session)
		}
	}
}

// take returns and clears w's queued recalls.
func (t *leaseTable) take(w *watcher) []*mdspb.WatchDown {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q
}

func (t *leaseTable) endErr(w *watcher) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return w.err
}

// release ends session sid's leases of the given gens; a gen it does not
// hold (released before, replaced, expired) is ignored.
func (t *leaseTable) release(sid uint64, gens []uint64) {
	if len(gens) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range gens {
		ino, ok := t.byGen[g]
		if !ok {
			continue
		}
		d := t.dirs[ino]
		if h := d.holders[sid]; h != nil && h.gen == g {
			t.dropHoldLocked(ino, d, sid, h)
		}
	}
}

// dropSession forgets session sid (closed or expired): its stream ends
// with ErrStale and its holds go.
func (t *leaseTable) dropSession(sid uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := t.sessions[sid]
	if ls == nil {
		return
	}
	if ls.w != nil {
		ls.w.endLocked(fmt.Errorf("session %x closed or expired: %w", sid, errs.ErrStale))
	}
	for ino := range ls.dirs {
		d := t.dirs[ino]
		t.dropHoldLocked(ino, d, sid, d.holders[sid])
	}
	delete(t.sessions, sid)
}

// sweep drops the holds that expired and the sessions left with nothing
// (the session loop).
func (t *leaseTable) sweep() {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for ino, d := range t.dirs {
		for sid, h := range d.holders {
			if !now.Before(t.expiryOf(sid, ino, h)) {
				t.dropHoldLocked(ino, d, sid, h)
			}
		}
	}
	for sid, ls := range t.sessions {
		if ls.w == nil && len(ls.dirs) == 0 {
			delete(t.sessions, sid)
		}
	}
}

// grantable says why session sid may not be granted a lease now ("":
// it may): the table is closed, the session has no stream, or an
// earlier term's leases are waited out.
func (t *leaseTable) grantable(sid uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.grantableLocked(sid)
}

func (t *leaseTable) grantableLocked(sid uint64) string {
	switch ls := t.sessions[sid]; {
	case t.closed:
		return "closed"
	case ls == nil || ls.w == nil || t.draining:
		return "no watch stream"
	case time.Now().Before(t.notBefore):
		return "restart wait"
	}
	return ""
}

// grantTicket is a grant between its two looks at the table.
type grantTicket struct{ dir, ver, epoch uint64 }

// grantBegin is a grant's first look: refused (why; "" when not) when
// grantable refuses or dir has a change in flight. A ticket that was not
// refused must be ended by grantEnd.
func (t *leaseTable) grantBegin(sid, dir uint64) (grantTicket, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if why := t.grantableLocked(sid); why != "" {
		return grantTicket{}, why
	}
	d := t.dir(dir)
	if changing, _ := d.others(changerOf(sid, dir)); changing > 0 {
		t.tidyLocked(dir)
		return grantTicket{}, "change in flight"
	}
	d.granting++
	_, ver := d.others(changerOf(sid, dir))
	return grantTicket{dir: dir, ver: ver, epoch: t.epoch}, ""
}

// changerOf is the session whose changes of key a grant to session sid
// may ignore: its own for a directory (the client replays them on the
// listing), none for a file's contents (0), whose lease must not predate
// any change.
func changerOf(sid, key uint64) uint64 {
	if key&contentBit != 0 {
		return 0
	}
	return sid
}

// changed says whether another session than sid has a change of d in
// flight, or began one since ver (grantBegin's look).
func changed(d *leasedDir, sid, ver uint64) bool {
	changing, now := d.others(sid)
	return changing > 0 || now != ver
}

// grantEnd is the second look: with ok, it grants session sid a lease
// expiring at expiry unless a change began since the first look or the
// stream ended, and returns its gen (0: refused, and why).
func (t *leaseTable) grantEnd(g grantTicket, sid uint64, expiry time.Time, ok bool) (uint64, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.epoch != g.epoch {
		return 0, "new term"
	}
	d := t.dirs[g.dir]
	defer func() {
		d.granting-- // after the old hold's drop: d stays in t.dirs
		t.tidyLocked(g.dir)
	}()
	ls := t.sessions[sid]
	switch {
	case !ok:
		return 0, ""
	case changed(d, changerOf(sid, g.dir), g.ver):
		return 0, "change in flight"
	case ls == nil || ls.w == nil:
		return 0, "no watch stream"
	case !time.Now().Before(expiry):
		return 0, "expired"
	}
	if old := d.holders[sid]; old != nil {
		t.dropHoldLocked(g.dir, d, sid, old)
	}
	t.nextGen++
	h := &dirHold{gen: t.nextGen, expiry: expiry, released: make(chan struct{})}
	d.holders[sid] = h
	t.byGen[h.gen] = g.dir
	ls.dirs[g.dir] = struct{}{}
	return h.gen, ""
}

// renew extends session sid's lease gen on dir to expiry, if the session
// holds it still (not recalled, replaced or expired) and has a stream.
func (t *leaseTable) renew(sid, dir, gen uint64, expiry time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	ls, d := t.sessions[sid], t.dirs[dir]
	if ls == nil || ls.w == nil || d == nil {
		return false
	}
	h := d.holders[sid]
	if h == nil || h.gen != gen || h.recalled || !time.Now().Before(h.expiry) {
		return false
	}
	h.expiry = expiry
	return true
}

// change readies a change of the entries of dirs by session sid (0:
// none known): it waits out an earlier term's leases, counts the change
// in flight in each directory, recalls every lease on them held by
// another session, and waits until each is released or expires. done,
// called once the change committed or failed, ends it. With ctx done
// first, or the table reset, it ends the change and fails.
func (t *leaseTable) change(ctx context.Context, sid uint64, dirs ...uint64) (done func(), err error) {
	return t.changeAs(ctx, sid, true, dirs...)
}

// changeAs is change; keepOwn as beginLocked's (false: keys a mutation
// found as it ran, touch).
func (t *leaseTable) changeAs(ctx context.Context, sid uint64, keepOwn bool, dirs ...uint64) (done func(), err error) {
	if t.lease <= 0 {
		return func() {}, nil
	}
	t.mu.Lock()
	for {
		end := t.end
		if t.closed {
			err := t.closeErr
			t.mu.Unlock()
			return nil, err
		}
		wait := time.Until(t.notBefore)
		if wait <= 0 {
			break
		}
		t.mu.Unlock()
		if err := sleepCtx(ctx, end, wait); err != nil {
			return nil, err
		}
		t.mu.Lock()
	}
	end := t.end
	done, waits := t.beginLocked(sid, keepOwn, dirs)
	t.mu.Unlock()
	for _, h := range waits {
		if err := h.wait(ctx, end); err != nil {
			done()
			return nil, err
		}
	}
	return done, nil
}

// touch is change for a mutation that finds the keys it changes as it
// runs (the inode an unlink or rename removes or moves: contentlease.go),
// called from its transaction: it does not wait. ok is false when the
// change must wait (a restart's wait, or leases to recall: their recalls
// are sent); the mutation then fails, and is run again after a change of
// the same keys (leaseWaitError). Otherwise done ends the change once
// the mutation is visible or failed.
func (t *leaseTable) touch(sid uint64, keys ...uint64) (done func(), ok bool) {
	if t.lease <= 0 {
		return func() {}, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || time.Now().Before(t.notBefore) {
		return nil, false
	}
	done, waits := t.beginLocked(sid, false, keys)
	if len(waits) > 0 {
		t.mu.Unlock()
		done()
		t.mu.Lock()
		return nil, false
	}
	return done, true
}

// beginLocked counts a change of dirs by session sid in flight, recalls
// the leases on them it must wait for, and returns those and the change's
// end. A session's own directory leases are neither recalled nor waited
// for (the client edits its listing from the change's answer); nor, with
// keepOwn, are its own inode leases: the keys a request names (the
// client drops its lease before it sends a change naming the inode, or,
// for a relatime update, takes the new attributes from the answer), but
// not those a mutation finds as it runs (touch), which the client may not
// know it changes.
func (t *leaseTable) beginLocked(sid uint64, keepOwn bool, dirs []uint64) (done func(), waits []*dirHold) {
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	epoch, now := t.epoch, time.Now()
	for _, ino := range dirs {
		d := t.dir(ino)
		d.ver++
		d.changing++
		if sid != 0 {
			if d.by == nil {
				d.by = map[uint64]*sessionChanges{}
			}
			c := d.by[sid]
			if c == nil {
				c = &sessionChanges{}
				d.by[sid] = c
			}
			c.changing++
			c.vers++
		}
		for hs, h := range d.holders {
			switch {
			case !now.Before(t.expiryOf(hs, ino, h)):
				t.dropHoldLocked(ino, d, hs, h)
				continue
			case sid != 0 && hs == sid && (ino&contentBit == 0 || keepOwn):
				continue
			}
			waits = append(waits, h)
			if !h.recalled {
				// A recalled lease is renewed no more: its end is fixed.
				h.expiry = t.expiryOf(hs, ino, h)
				h.recalled = true
				if ls := t.sessions[hs]; ls != nil && ino&contentBit != 0 {
					if ls.recalledContent == nil {
						ls.recalledContent = map[uint64]struct{}{}
					}
					ls.recalledContent[ino] = struct{}{}
				}
				t.recalls.Inc()
				t.sendLocked(hs, &mdspb.WatchDown{Dir: ino, Gen: h.gen})
			}
		}
	}
	var once sync.Once
	done = func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.epoch != epoch {
				return
			}
			for _, ino := range dirs {
				d := t.dirs[ino]
				d.changing--
				if c := d.by[sid]; c != nil && sid != 0 {
					c.changing--
					if c.changing == 0 && d.granting == 0 {
						delete(d.by, sid) // no grant is between its looks
					}
				}
				t.tidyLocked(ino)
			}
		})
	}
	return done, waits
}

// wait returns once h is released or expired; the error of ctx or of
// the table's term when either ends first.
func (h *dirHold) wait(ctx context.Context, end *leaseEnd) error {
	select {
	case <-h.released:
		return nil
	default:
	}
	return sleepCtx(ctx, end, time.Until(h.expiry), h.released)
}

// sleepCtx waits for d, or any of chans to close; the error of ctx or
// end when either ends first.
func sleepCtx(ctx context.Context, end *leaseEnd, d time.Duration, chans ...chan struct{}) error {
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	var c chan struct{}
	if len(chans) > 0 {
		c = chans[0]
	}
	select {
	case <-tm.C:
		return nil
	case <-c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mds: waiting for directory leases: %w", ctx.Err())
	case <-end.ch:
		return end.err
	}
}
