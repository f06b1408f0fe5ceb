package client

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Inode leases, the client's half (docs/fuse.md, "Inode leases").
//
// An open asked with OpenInoLeased asks the MDS for a lease on the file's
// attributes and contents along with the open. While the lease runs, they
// are those the open returned: the MDS recalls the lease on the Watch
// stream before any change of them commits. A later OpenInoLeased of the
// file is then answered here, from the kept attributes and extent map,
// with no MDS call at the open nor at the close (the File has no MDS
// handle until EnsureHandle gives it one); so are GetAttr, and Lookup of
// a name in a leased directory that stands for the inode.
//
// The leases live with the directory leases (dirLeases: one stream, one
// lock, dropped together when the stream breaks). All of them are renewed
// by one LeaseDir{renew_inodes} call every third of their length while
// the client holds any; a lease ends 9/10 of its length after the send
// of the request that granted or last renewed it, as a directory lease
// does. A renewal extends only the leases the MDS still held when the
// call arrived: since the MDS counts a lease from the arrival of its
// request and the client from the send, the MDS's count runs at least
// 1/10 of the length past the client's, so a lease the client still
// counts 1/10 of the length before the answer came was held.

// contentLeasesMax bounds the inode leases a client holds; past it the
// least recently used are released.
const contentLeasesMax = 32768

// contentBit marks a lease key of the Watch stream as a file's contents
// (mds.contentKey).
const contentBit = uint64(1) << 63

// fileLease is a content lease on one file.
type fileLease struct {
	gen     uint64
	until   time.Time
	length  time.Duration
	used    time.Time
	attr    *mdspb.Attr
	extents []*mdspb.ExtentRef
}

// fileLeases is the content lease part of dirLeases, guarded by its mu.
type fileLeases struct {
	files map[uint64]*fileLease
	// recalled notes recalls of gens not (yet) held: a grant whose recall
	// overtook its Open's answer is dropped on arrival.
	recalled map[uint64]time.Time
	release  []uint64 // gens dropped, to release (releaseLocked)
	// open are the Files open under a lease, without an MDS handle: a
	// recall gives them one before it releases (recallFileLocked).
	open  map[uint64][]*File
	drops uint64 // dropFile calls: grants asked before one are refused
}

// leasedOpen returns the attributes and extent map of ino under a running
// content lease, or ok false.
func (l *dirLeases) leasedOpen(ino uint64) (attr *Attr, extents []*mdspb.ExtentRef, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fl := l.liveLocked(ino, time.Now())
	if fl == nil {
		return nil, nil, false
	}
	return attrOf(fl.attr), fl.extents, true
}

// liveLocked returns the running lease on ino, noting its use, or nil; an
// expired one is dropped.
func (l *dirLeases) liveLocked(ino uint64, now time.Time) *fileLease {
	fl := l.fl.files[ino]
	if fl == nil || l.stream == 0 || ino == 0 {
		return nil
	}
	if !now.Before(fl.until) {
		l.dropFileLocked(ino, fl)
		l.releaseLocked()
		return nil
	}
	fl.used = now
	return fl
}

// readTimeSet takes a as ino's attributes: the answer of this client's
// relatime update of it, which left its lease be.
func (l *dirLeases) readTimeSet(ino uint64, a *mdspb.Attr) {
	if a == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if fl := l.fl.files[ino]; fl != nil {
		fl.attr = a
	}
}

// dropFileLocked forgets the lease on ino; releaseLocked releases it at
// the MDS. Files open under it get MDS handles first (in the background,
// the release after them): without the lease, no recall would tell this
// client of a change, such as the unlink of the file's last name, that
// needs the MDS to know they are open.
func (l *dirLeases) dropFileLocked(ino uint64, fl *fileLease) {
	delete(l.fl.files, ino)
	if l.send == nil {
		return
	}
	if open := l.fl.open[ino]; len(open) > 0 {
		l.releaseAfterLocked(slices.Clone(open), fl.gen)
		return
	}
	l.fl.release = append(l.fl.release, fl.gen)
}

// ensureHandles gives each of open an MDS handle (File.EnsureHandle).
func ensureHandles(open []*File) {
	for _, f := range open {
		ctx, cancel := context.WithTimeout(context.Background(), dirLeaseCallTimeout)
		if err := f.EnsureHandle(ctx); err != nil {
			f.c.log.Warn("open a leased file at the MDS before its lease goes", "ino", f.ino, "err", err)
		}
		cancel()
	}
}

// releaseLocked sends the releases of the leases dropped, in the
// background (a stream send may wait for flow control).
func (l *dirLeases) releaseLocked() {
	gens := l.fl.release
	l.fl.release = nil
	if len(gens) > 0 {
		l.releaseAfterLocked(nil, gens...)
	}
}

// releaseAfterLocked releases gens on the open stream, in the background,
// once open (Files open under those leases) have MDS handles.
func (l *dirLeases) releaseAfterLocked(open []*File, gens ...uint64) {
	send := l.send
	if send == nil {
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ensureHandles(open)
		send(gens)
	}()
}

// dropFile forgets the inode lease on ino, if any: this client is about
// to change the inode. A grant still in flight will be refused on arrival
// (keepFile): it may predate the change.
func (l *dirLeases) dropFile(ino uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fl.drops++
	if fl := l.fl.files[ino]; fl != nil {
		l.dropFileLocked(ino, fl)
		l.releaseLocked()
	}
}

// leaseAsk is what keepFile needs of the time an inode lease was asked.
type leaseAsk struct {
	sent         time.Time
	epoch, drops uint64
}

// asking notes the time of an ask for an inode lease.
func (l *dirLeases) asking() leaseAsk {
	l.mu.Lock()
	defer l.mu.Unlock()
	return leaseAsk{sent: time.Now(), epoch: l.epoch, drops: l.fl.drops}
}

// keepFile records the inode lease gen (of ms milliseconds) on ino, with
// its attributes and extent map, granted to the ask a. It is refused
// (and released) if the stream broke since, if its recall came first, or
// if this client dropped a lease since (the grant may predate its change).
func (l *dirLeases) keepFile(ino, gen uint64, ms uint32, attr *mdspb.Attr, extents []*mdspb.ExtentRef, a leaseAsk) {
	if gen == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.releaseLocked()
	_, recalled := l.fl.recalled[gen]
	switch {
	case l.epoch != a.epoch || l.stream == 0 || recalled:
		return // the MDS recalls it or lets it lapse
	case l.fl.drops != a.drops:
		l.fl.release = append(l.fl.release, gen)
		return
	}
	if l.fl.files == nil {
		l.fl.files = map[uint64]*fileLease{}
	}
	if old := l.fl.files[ino]; old != nil {
		l.dropFileLocked(ino, old)
	}
	if len(l.fl.files) >= contentLeasesMax {
		l.evictFilesLocked()
	}
	d := time.Duration(ms) * time.Millisecond
	l.fl.files[ino] = &fileLease{gen: gen, until: a.sent.Add(d * 9 / 10), length: d, used: time.Now(),
		attr: attr, extents: extents}
}

// evictFilesLocked releases the least recently used eighth of the leases.
func (l *dirLeases) evictFilesLocked() {
	used := make([]time.Time, 0, len(l.fl.files))
	for _, fl := range l.fl.files {
		used = append(used, fl.used)
	}
	slices.SortFunc(used, time.Time.Compare)
	cut := used[len(used)/8]
	for ino, fl := range l.fl.files {
		if !fl.used.After(cut) {
			l.dropFileLocked(ino, fl)
		}
	}
}

// openLeased notes f, open under a lease without an MDS handle.
func (l *dirLeases) openLeased(f *File) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fl.open == nil {
		l.fl.open = map[uint64][]*File{}
	}
	l.fl.open[f.ino] = append(l.fl.open[f.ino], f)
}

// closeLeased forgets f (closed, or given a handle).
func (l *dirLeases) closeLeased(f *File) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fs := slices.DeleteFunc(l.fl.open[f.ino], func(g *File) bool { return g == f })
	if len(fs) == 0 {
		delete(l.fl.open, f.ino)
	} else {
		l.fl.open[f.ino] = fs
	}
}

// recallFileLocked drops the inode lease gen (on key's inode), noting the
// gen when the lease is not (yet) held. It returns the Files open under
// the lease: the caller gives them MDS handles before it releases, so
// that the change recalled (an unlink of the last name, say) keeps the
// file for them as for any open file.
func (l *dirLeases) recallFileLocked(key, gen uint64) []*File {
	ino := key &^ contentBit
	if fl := l.fl.files[ino]; fl != nil && fl.gen == gen {
		delete(l.fl.files, ino)
		return slices.Clone(l.fl.open[ino])
	}
	if l.fl.recalled == nil {
		l.fl.recalled = map[uint64]time.Time{}
	}
	now := time.Now()
	if len(l.fl.recalled) >= 1024 {
		for g, t := range l.fl.recalled {
			if now.Sub(t) > time.Minute {
				delete(l.fl.recalled, g)
			}
		}
	}
	l.fl.recalled[gen] = now
	return nil
}

// renewFiles renews every content lease the client holds, every third of
// their length, while the stream of session sess is open (ctx).
func (c *Client) renewFiles(ctx context.Context, sess uint64) {
	l := &c.leases
	wait := time.Second / 3
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		l.mu.Lock()
		n, length := len(l.fl.files), time.Duration(0)
		for _, fl := range l.fl.files {
			length = fl.length
			break
		}
		l.mu.Unlock()
		if n == 0 {
			continue
		}
		wait = max(length/3, 10*time.Millisecond)
		if err := c.renewFilesOnce(ctx, sess); err != nil {
			c.log.Debug("renew content leases", "err", err)
		}
	}
}

func (c *Client) renewFilesOnce(ctx context.Context, sess uint64) error {
	l := &c.leases
	cctx, cancel := context.WithTimeout(ctx, dirLeaseCallTimeout)
	defer cancel()
	sent := time.Now()
	r, err := c.mds.LeaseDir(cctx, &mdspb.LeaseDirRequest{Session: sess, RenewInodes: true})
	answered := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.releaseLocked()
	if err == nil && r.GetGen() == 0 {
		err = fmt.Errorf("content leases not renewed: %w", errs.ErrStale)
	}
	if err != nil || l.stream != sess {
		return err
	}
	recalled := make(map[uint64]bool, len(r.GetRecalled()))
	for _, g := range r.GetRecalled() {
		recalled[g] = true
	}
	d := time.Duration(r.GetLeaseMs()) * time.Millisecond
	for ino, fl := range l.fl.files {
		switch {
		case recalled[fl.gen]:
			l.dropFileLocked(ino, fl)
		case fl.until.After(answered.Add(-d / 10)):
			fl.until = maxTime(fl.until, sent.Add(d*9/10))
			fl.length = d
		default:
			// It may have lapsed at the MDS before the call arrived.
			l.dropFileLocked(ino, fl)
		}
	}
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// OpenInoLeased opens regular file ino for reading as OpenIno does, but
// under a content lease: with one running, from what the client kept,
// without asking the MDS; without one, asking the MDS for one with the
// open. Leases are off with directory leases (Options.NoDirLeases).
func (c *Client) OpenInoLeased(ctx context.Context, ino uint64) (*File, error) {
	l := &c.leases
	if l.off {
		return c.OpenIno(ctx, ino)
	}
	if attr, refs, ok := l.leasedOpen(ino); ok {
		c.metrics.leasedOpens.Inc()
		f, err := c.newFile(ctx, ino, &handle{ino: ino}, attr, refs)
		if err != nil {
			return nil, fmt.Errorf("open inode %d: %w", ino, err)
		}
		l.openLeased(f)
		return f, nil
	}
	ask := l.asking()
	f, r, err := c.openAt(ctx, &mdspb.OpenRequest{Ino: ino, Extents: true, Lease: true})
	if err != nil {
		return nil, err
	}
	l.keepFile(ino, r.GetLeaseGen(), r.GetLeaseMs(), r.GetAttr(), r.GetExtents(), ask)
	return f, nil
}

// EnsureHandle announces f's open to the MDS if it was opened under a
// content lease without one: a file about to be written or locked needs
// the MDS to know it is open.
func (f *File) EnsureHandle(ctx context.Context) error {
	f.handleMu.Lock()
	defer f.handleMu.Unlock()
	if f.handle.id != 0 || f.handleClosed {
		return nil
	}
	f.c.leases.closeLeased(f)
	f.c.leases.dropFile(f.ino)
	h, _, err := f.c.openHandleWith(ctx, &mdspb.OpenRequest{Ino: f.ino})
	if err != nil {
		return fmt.Errorf("open inode %d: %w", f.ino, err)
	}
	f.handle = h
	return nil
}

// leasedAttr returns the attributes of ino under a running inode lease,
// or nil.
func (l *dirLeases) leasedAttr(ino uint64) *Attr {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leasedAttrLocked(ino, time.Now())
}

func (l *dirLeases) leasedAttrLocked(ino uint64, now time.Time) *Attr {
	if fl := l.liveLocked(ino, now); fl != nil {
		return attrOf(fl.attr)
	}
	return nil
}

// leasedEntry answers a lookup of name in dir from a running lease on
// dir's entries and one on the inode the name stands for, or returns nil.
// As absent, it renews the directory's lease in its second half.
func (l *dirLeases) leasedEntry(dir uint64, name string) *Attr {
	if l.off || !plainName(name) {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ls, now := l.usableLocked(dir)
	if ls == nil {
		return nil
	}
	a := l.leasedAttrLocked(ls.names[name], now)
	if a != nil {
		l.renewLocked(dir, ls, now)
	}
	return a
}

// leaseWorth says, after a lookup in dir answered by the MDS, whether a
// lease on dir's entries is worth asking for: after the fourth such
// lookup since dir last had one.
func (l *dirLeases) leaseWorth(dir uint64) bool {
	if l.off {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state(dir)
	if st.lease != nil && time.Now().Before(st.lease.until) {
		return false
	}
	st.found++
	if st.found < 4 {
		return false
	}
	st.found = 0
	return true
}

// sessionCtx marks ctx with the client's session (wire.SessionHeader)
// unless it is already.
func (c *Client) sessionCtx(ctx context.Context) context.Context {
	if md, ok := metadata.FromOutgoingContext(ctx); ok && len(md.Get(wire.SessionHeader)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, wire.SessionHeader, strconv.FormatUint(c.sessionID(), 10))
}

// dropNamed drops this client's inode lease on the inode name stands for
// in dir (when a lease on dir's entries says) and returns ctx marked to
// release it (wire.ReleaseHeader) with the call it is for: a change of
// this client that removes or moves that name, which the MDS would
// otherwise hold until the release came on the Watch stream, or recall.
// Files open under the lease get MDS handles before it returns, so that
// the removal keeps the file for them.
func (l *dirLeases) dropNamed(ctx context.Context, dir uint64, name string) context.Context {
	if l.off {
		return ctx
	}
	l.mu.Lock()
	st := l.dirs[dir]
	if st == nil || st.lease == nil {
		l.mu.Unlock()
		return ctx
	}
	ino := st.lease.names[name]
	fl := l.fl.files[ino]
	if fl == nil || ino == 0 {
		l.mu.Unlock()
		return ctx
	}
	delete(l.fl.files, ino)
	l.fl.drops++
	open := slices.Clone(l.fl.open[ino])
	l.mu.Unlock()
	ensureHandles(open)
	return metadata.AppendToOutgoingContext(ctx, wire.ReleaseHeader, strconv.FormatUint(fl.gen, 10))
}

// handleLeasedOpens gives MDS handles to the files open under leases
// that are gone with a broken Watch stream: no recall would reach them
// now, and the MDS must know they are open before a change of theirs
// goes through (the MDS holds such changes for the leases' length, L,
// and a restarted MDS for L too). It returns once each was tried (a
// failure is logged: the open file reads on, without the guarantee).
func (c *Client) handleLeasedOpens(ctx context.Context) {
	if ctx.Err() != nil {
		return // the client closes, its session with it
	}
	l := &c.leases
	l.mu.Lock()
	var open []*File
	for _, fs := range l.fl.open {
		open = append(open, fs...)
	}
	l.mu.Unlock()
	for _, f := range open {
		cctx, cancel := context.WithTimeout(ctx, dirLeaseCallTimeout)
		if err := f.EnsureHandle(cctx); err != nil {
			c.log.Warn("open a leased file at the MDS after the watch stream ended", "ino", f.ino, "err", err)
		}
		cancel()
	}
}
