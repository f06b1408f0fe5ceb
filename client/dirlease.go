package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Directory leases, the client's half (docs/fuse.md, "Directory leases").
//
// After the MDS answers a lookup in directory D with ENOENT, the client
// asks, in the background, for a lease on D: D's full list of names,
// which the MDS recalls on the client's Watch stream before it commits a
// change to D's entries by any other client. While the lease runs, a
// lookup of a name not in the list is answered here (ENOENT) without a
// round trip: the kernel's LOOKUP before every create and rename target.
// A name in the list is answered here too when the client holds an inode
// lease on the inode it stands for (contentlease.go); otherwise it is
// looked up at the MDS. The client's own changes keep the list (names
// and, where known, their inodes) up to date from their answers.
//
// What keeps the list exact:
//   - The MDS refuses a grant while a change to D is in flight, and one
//     whose listing a change overtook.
//   - The edits of this client's changes to D answered while a grant was
//     in flight are replayed on its listing (the listing may predate
//     them); a grant is dropped on arrival if one of them failed or two
//     overlapped, if the recall of its gen arrived first, or if the Watch
//     stream broke meanwhile.
//   - Local answers are given only while no change of this client to D is
//     in flight; two of them in flight at once (answers may arrive out of
//     the MDS's order), an unexpected answer (EEXIST for a name the list
//     did not have), or any failed change drops the lease.
//   - The lease ends at the time the request was sent plus 9/10 of its
//     length, by this client's clock; a broken Watch stream drops all.

// dirLeaseRetry is how long after a refusal the client does not ask for
// a lease on the same directory again.
const dirLeaseRetry = time.Second

// dirLeaseCallTimeout bounds a LeaseDir call.
const dirLeaseCallTimeout = 5 * time.Second

// dirLeaseStatesMax bounds the per-directory table; when full, directories
// without a lease, change or request in flight are forgotten.
const dirLeaseStatesMax = 4096

type dirLeases struct {
	off bool
	mu  sync.Mutex
	// stream is the session of the Watch stream now open (0: none);
	// epoch counts stream openings and breaks.
	stream uint64
	epoch  uint64
	send   func(gens []uint64) // releases on the open stream
	// renew is Client.renew; nil once the session loops stopped: no
	// more calls are started (wg.Add only under mu with renew set).
	renew func(dir, gen, sess uint64)
	dirs  map[uint64]*dirState
	fl    fileLeases     // content leases (contentlease.go)
	wg    sync.WaitGroup // LeaseDir calls and releases in flight
}

// dirState is what the client knows of one directory.
type dirState struct {
	lease      *dirLease
	inflight   int  // changes of this client to the directory in flight
	overlapped bool // two were in flight at once since inflight was 0
	asking     bool // a LeaseDir in flight
	// While asking: the edits of this client's changes answered since
	// the request was sent, replayed on the grant (its listing may
	// predate them); spoiled when one failed or two overlapped.
	log      []func(uint64, map[string]uint64) bool
	spoiled  bool
	refused  time.Time // not before then again
	recalled uint64    // the highest gen recalled
	found    int       // lookups the MDS answered since the last lease (leaseWorth)
}

type dirLease struct {
	gen      uint64
	length   time.Duration // L, as the MDS said
	until    time.Time
	renewing bool // a renewal in flight
	names    map[string]uint64
}

func (l *dirLeases) state(dir uint64) *dirState {
	st := l.dirs[dir]
	if st == nil {
		if len(l.dirs) >= dirLeaseStatesMax {
			l.prune()
		}
		st = &dirState{}
		l.dirs[dir] = st
	}
	return st
}

// prune forgets directories with nothing in flight and no lease.
func (l *dirLeases) prune() {
	now := time.Now()
	for d, st := range l.dirs {
		if st.inflight == 0 && !st.asking && (st.lease == nil || now.After(st.lease.until)) {
			delete(l.dirs, d)
		}
	}
}

// absent reports whether name is known not to be in dir: a live lease
// lists no such name and no change of this client to dir is in flight.
// A lease in its second half is renewed in the background, without a
// listing, so that a directory in use keeps its lease however big it
// grows.
func (c *Client) absent(dir uint64, name string) bool {
	l := &c.leases
	if l.off || !plainName(name) {
		return false // the MDS says what is wrong with the name
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ls, now := l.usableLocked(dir)
	if ls == nil {
		return false
	}
	l.renewLocked(dir, ls, now)
	_, ok := ls.names[name]
	return !ok
}

// usableLocked returns the lease on dir when it may answer lookups (it
// runs, and no change of this client to dir is in flight), and the time.
func (l *dirLeases) usableLocked(dir uint64) (*dirLease, time.Time) {
	st := l.dirs[dir]
	if st == nil || st.lease == nil || st.inflight > 0 {
		return nil, time.Time{}
	}
	ls, now := st.lease, time.Now()
	if now.After(ls.until) {
		st.lease = nil
		return nil, now
	}
	return ls, now
}

// renewLocked starts the renewal of ls, the lease on dir, in its second
// half.
func (l *dirLeases) renewLocked(dir uint64, ls *dirLease, now time.Time) {
	if ls.renewing || ls.until.Sub(now) >= ls.length/2 || l.renew == nil || l.stream == 0 {
		return
	}
	ls.renewing = true
	l.wg.Add(1)
	go l.renew(dir, ls.gen, l.stream)
}

// plainName reports whether the MDS would look name up (mds.validName):
// not empty, at most MaxNameLen bytes, not "." or "..", no '/' or NUL.
func plainName(name string) bool {
	return name != "" && len(name) <= MaxNameLen && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// renew extends lease gen on dir, or drops it when the MDS no longer
// counts it held.
func (c *Client) renew(dir, gen, sess uint64) {
	l := &c.leases
	defer l.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), dirLeaseCallTimeout)
	defer cancel()
	sent := time.Now()
	r, err := c.mds.LeaseDir(ctx, &mdspb.LeaseDirRequest{Session: sess, Dir: dir, Renew: gen})
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.dirs[dir]
	if st == nil || st.lease == nil || st.lease.gen != gen {
		return
	}
	st.lease.renewing = false
	if err != nil || r.GetGen() != gen {
		st.lease = nil
		return
	}
	st.lease.until, _ = leaseEnd(sent, r)
}

// leaseEnd is when a lease the MDS answered r for, to a request sent at
// sent, ends for the client (9/10 of its length: the margin is for
// clock rates), and its length.
func leaseEnd(sent time.Time, r *mdspb.LeaseDirReply) (time.Time, time.Duration) {
	d := time.Duration(r.GetLeaseMs()) * time.Millisecond
	return sent.Add(d * 9 / 10), d
}

// begin notes a change of this client to dirs about to be sent.
func (l *dirLeases) begin(dirs ...uint64) {
	if l.off {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, d := range dirs {
		if i > 0 && d == dirs[0] {
			continue // a rename within one directory
		}
		st := l.state(d)
		st.inflight++
		if st.inflight > 1 {
			st.overlapped = true
			st.spoiled = true
		}
	}
}

// end notes the answer of a change begun with begin: on success edit
// runs on the leases of the directories held (nil for a directory
// without one); on failure the leases are dropped.
func (l *dirLeases) end(err error, edit func(dir uint64, names map[string]uint64) bool, dirs ...uint64) {
	if l.off {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, d := range dirs {
		if i > 0 && d == dirs[0] {
			continue // a rename within one directory
		}
		st := l.state(d)
		if st.lease != nil && (err != nil || !edit(d, st.lease.names)) {
			st.lease = nil
		}
		if st.lease != nil {
			l.renewLocked(d, st.lease, time.Now())
		}
		if st.asking {
			if err != nil {
				st.spoiled = true
			} else {
				st.log = append(st.log, edit)
			}
		}
		st.inflight--
		if st.inflight == 0 && st.overlapped {
			st.overlapped = false
			st.lease = nil
		}
	}
}

// added and removed are end's edits of one name; added's ino is the new
// entry's inode (0: unknown).
func added(name string, ino uint64) func(uint64, map[string]uint64) bool {
	return func(_ uint64, names map[string]uint64) bool {
		names[name] = ino
		return true
	}
}

func removed(name string) func(uint64, map[string]uint64) bool {
	return func(_ uint64, names map[string]uint64) bool {
		_, ok := names[name]
		delete(names, name)
		return ok
	}
}

// renamed is end's edit of a rename: the old name leaves, the new one
// comes (an exchange leaves both). The inode a name now stands for is
// kept only for a rename within one directory, not an exchange (edits
// must be idempotent: they are replayed on a listing that may already
// have them); otherwise it becomes unknown (0).
func renamed(oldDir uint64, oldName string, newDir uint64, newName string, flags RenameFlags) func(uint64, map[string]uint64) bool {
	return func(dir uint64, names map[string]uint64) bool {
		if flags&RenameExchange != 0 {
			for _, n := range []string{oldName, newName} {
				if _, ok := names[n]; ok && (dir == oldDir && n == oldName || dir == newDir && n == newName) {
					names[n] = 0
				}
			}
			return true
		}
		ok := true
		var ino uint64
		if dir == oldDir {
			ino, ok = names[oldName]
			delete(names, oldName)
		}
		if dir == newDir {
			if oldDir != newDir {
				ino = 0
			}
			names[newName] = ino
		}
		return ok
	}
}

// missed asks, in the background, for a lease on dir after a lookup in
// it found nothing at the MDS.
func (c *Client) missed(ctx context.Context, dir uint64) {
	l := &c.leases
	if l.off || c.closed.Load() {
		return
	}
	l.mu.Lock()
	st := l.state(dir)
	now := time.Now()
	if l.renew == nil || l.stream == 0 || st.asking || st.inflight > 0 || (st.lease != nil && now.Before(st.lease.until)) || now.Before(st.refused) {
		l.mu.Unlock()
		return
	}
	st.asking, st.log, st.spoiled = true, nil, false
	sess, epoch := l.stream, l.epoch
	l.wg.Add(1)
	l.mu.Unlock()
	// The caller's identity travels in ctx's metadata: the MDS grants
	// only what the caller may list.
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer l.wg.Done()
		cctx, cancel := context.WithTimeout(ctx, dirLeaseCallTimeout)
		defer cancel()
		sent := time.Now()
		r, err := c.mds.LeaseDir(cctx, &mdspb.LeaseDirRequest{Session: sess, Dir: dir})
		l.mu.Lock()
		defer l.mu.Unlock()
		st := l.state(dir)
		replay, spoiled := st.log, st.spoiled
		st.asking, st.log, st.spoiled = false, nil, false
		if err != nil || r.GetGen() == 0 {
			st.refused = time.Now().Add(dirLeaseRetry)
			if err != nil {
				c.log.Debug("directory lease", "dir", dir, "err", err)
			}
			return
		}
		if l.epoch != epoch || spoiled || r.GetGen() <= st.recalled {
			return // overtaken; the MDS recalls it or lets it lapse
		}
		names := make(map[string]uint64, len(r.GetEntries()))
		for _, e := range r.GetEntries() {
			names[e.GetName()] = e.GetIno()
		}
		// A change answered meanwhile may have reached the MDS after the
		// listing was read (the MDS refused a grant with one in flight):
		// its edit again; edits are idempotent.
		for _, edit := range replay {
			edit(dir, names)
		}
		until, d := leaseEnd(sent, r)
		st.lease = &dirLease{gen: r.GetGen(), length: d, until: until, names: names}
	}()
}

// recall drops the lease gen on dir and says so to the MDS.
func (l *dirLeases) recall(dir, gen uint64) {
	l.mu.Lock()
	if dir&contentBit != 0 {
		if open := l.recallFileLocked(dir, gen); len(open) > 0 && l.send != nil {
			// Open files get handles first; the release follows.
			l.releaseAfterLocked(open, gen)
			l.mu.Unlock()
			return
		}
	} else {
		st := l.state(dir)
		if st.lease != nil && st.lease.gen == gen {
			st.lease = nil
		}
		st.recalled = max(st.recalled, gen)
	}
	send := l.send
	l.mu.Unlock()
	if send != nil {
		send([]uint64{gen})
	}
}

// dropAll ends every lease: the Watch stream broke or closed.
func (l *dirLeases) dropAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropAllLocked()
}

func (l *dirLeases) dropAllLocked() {
	l.stream, l.send = 0, nil
	l.epoch++
	for _, st := range l.dirs {
		st.lease = nil
	}
	l.fl.files, l.fl.release = nil, nil
}

// watch keeps a Watch stream open for the client's session until ctx
// ends, and answers recalls on it.
func (c *Client) watch(ctx context.Context) {
	l := &c.leases
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		t0 := time.Now()
		err := c.watchOnce(ctx)
		l.dropAll()
		c.handleLeasedOpens(ctx) // contentlease.go
		if ctx.Err() != nil {
			return
		}
		if time.Since(t0) > 10*time.Second {
			backoff = 50 * time.Millisecond
		}
		c.log.Debug("MDS watch stream ended", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// watchOnce runs one Watch stream to its end.
func (c *Client) watchOnce(ctx context.Context) error {
	l := &c.leases
	sess := c.sessionID()
	sctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, wire.SessionHeader, strconv.FormatUint(sess, 10)))
	defer cancel()
	st, err := c.mds.Watch(sctx)
	if err != nil {
		return err
	}
	if err := st.Send(&mdspb.WatchUp{Session: sess}); err != nil {
		return err
	}
	var sendMu sync.Mutex
	l.mu.Lock()
	l.stream = sess
	l.epoch++
	l.send = func(gens []uint64) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if err := st.Send(&mdspb.WatchUp{Released: gens}); err != nil {
			cancel() // the receive below fails and the stream is opened again
		}
	}
	l.mu.Unlock()
	var renewer sync.WaitGroup
	renewer.Go(func() { c.renewFiles(sctx, sess) })
	defer renewer.Wait()
	defer cancel()
	for {
		m, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("MDS ended the watch stream: %w", errs.ErrUnavailable)
			}
			return err
		}
		l.recall(m.GetDir(), m.GetGen())
		if c.sessionID() != sess {
			return fmt.Errorf("session replaced: %w", errs.ErrStale)
		}
	}
}

// nsCtx marks ctx for an early reply to a namespace change when the
// client asks for them (Options.EarlyNamespaceReplies).
func (c *Client) nsCtx(ctx context.Context) context.Context {
	if !c.opts.EarlyNamespaceReplies {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, mdspb.CommitHeader, mdspb.CommitEarly)
}

// changeCtx is nsCtx for a change of a directory's entries, marked with
// the client's session too, so that the MDS leaves this client's own
// directory leases alone.
func (c *Client) changeCtx(ctx context.Context) context.Context {
	kv := make([]string, 0, 4)
	if !c.leases.off {
		kv = append(kv, wire.SessionHeader, strconv.FormatUint(c.sessionID(), 10))
	}
	if c.opts.EarlyNamespaceReplies {
		kv = append(kv, mdspb.CommitHeader, mdspb.CommitEarly)
	}
	if len(kv) == 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}
