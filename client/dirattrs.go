package client

import (
	"context"
	"sync"
	"time"

	"github.com/shoalfs/shoal/mds/mdspb"
)

// dirAttrs keeps the attributes of directories as this client's own
// namespace changes left them: the MDS answers a create, mkdir, symlink,
// link or unlink with the directory's attributes right after the call
// (AttrReply.parent). GetAttrFresh answers from them. The kernel drops a
// directory's attributes after every change in it and asks for them
// again before the next (its permission check), so a mount creating
// files in a directory would otherwise pay one more MDS round trip per
// create (docs/fuse.md, "Directory attributes").
//
// Changes whose answer carries no attributes of the directory (rmdir,
// rename, setattr, xattrs) leave a tombstone. Every change takes a
// sequence number before it is sent; an answer is kept only if no
// tombstone of a later change is there, and then only if it is newer
// (its ctime) than what is there, so that answers arriving out of order
// never put back older attributes.
type dirAttrs struct {
	mu  sync.Mutex
	seq uint64
	m   map[uint64]dirAttr
}

type dirAttr struct {
	a   *Attr // nil: a tombstone
	seq uint64
	at  time.Time
}

// dirAttrsMax bounds the table; when full it starts over.
const dirAttrsMax = 4096

// begin returns the sequence number of a change about to be sent.
func (d *dirAttrs) begin() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	return d.seq
}

// put keeps pa, the attributes of a directory as the answer of change
// seq gave them.
func (d *dirAttrs) put(seq uint64, pa *mdspb.Attr) {
	if pa == nil || pa.GetIno() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old, ok := d.m[pa.GetIno()]
	switch {
	case !ok:
	case old.a == nil && old.seq > seq:
		return // a later change left no attributes
	case old.a != nil && old.a.CtimeNs > pa.GetCtimeNs():
		return // a newer answer is there
	}
	d.set(pa.GetIno(), dirAttr{a: attrOf(pa), seq: max(seq, old.seq), at: time.Now()})
}

// answered records what the answer to change seq in directory dir said
// of it: its attributes (pa), or, when the answer has none (a retried
// call's answer), a tombstone. A change that failed changed nothing.
func (d *dirAttrs) answered(seq, dir uint64, pa *mdspb.Attr, err error) {
	switch {
	case err != nil:
	case pa == nil:
		d.drop(seq, dir)
	default:
		d.put(seq, pa)
	}
}

// drop leaves a tombstone for each of inos after change seq.
func (d *dirAttrs) drop(seq uint64, inos ...uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ino := range inos {
		d.set(ino, dirAttr{seq: max(seq, d.m[ino].seq), at: time.Now()})
	}
}

// set stores e; d.mu is held.
func (d *dirAttrs) set(ino uint64, e dirAttr) {
	if d.m == nil || len(d.m) >= dirAttrsMax {
		d.m = make(map[uint64]dirAttr)
	}
	d.m[ino] = e
}

// get returns a copy of the attributes of ino kept less than maxAge ago.
func (d *dirAttrs) get(ino uint64, maxAge time.Duration) (*Attr, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.m[ino]
	if !ok || e.a == nil || time.Since(e.at) >= maxAge {
		return nil, false
	}
	a := *e.a
	return &a, true
}

// GetAttrFresh is GetAttr answered from the attributes this client's own
// namespace changes in directory ino were answered with, when they are
// younger than maxAge; otherwise from the MDS. A mount passes its
// attribute timeout: what another client changes in the meantime it
// sees as late as the kernel would with the attributes in its own cache.
func (c *Client) GetAttrFresh(ctx context.Context, ino uint64, maxAge time.Duration) (*Attr, error) {
	if a, ok := c.dirs.get(ino, maxAge); ok {
		c.metrics.dirAttrHits.Inc()
		return a, nil
	}
	return c.GetAttr(ctx, ino)
}
