package fuse

import (
	"context"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"

	"github.com/shoalfs/shoal/client"
)

// dirPage is how many entries one ReadDir RPC asks for. The kernel reads a
// directory in 4 KiB to 128 KiB batches (~40 to 1000 names); a page of this
// size serves several batches per RPC without holding a big directory in
// memory.
const dirPage = 1024

// dirHandle streams a directory listing page by page from the MDS. It
// resumes each page after the last name returned, so a listing is never
// held whole and entries added or removed meanwhile are seen or not, but
// never twice. Offsets are positions in the stream: "." is 1, ".." is 2,
// the i-th name i+2.
type dirHandle struct {
	n *node

	mu    sync.Mutex
	pos   uint64            // entries returned so far (the offset of the last one)
	page  []client.DirEntry // fetched, not yet returned
	after string            // the last name fetched from the MDS
	eof   bool              // the MDS has no names after `after`
	// last is the entry returned last, with its attributes, so that
	// READDIRPLUS's lookup of it costs no RPC.
	last *client.DirEntry
}

var (
	_ gofs.FileReaddirenter = (*dirHandle)(nil)
	_ gofs.FileSeekdirer    = (*dirHandle)(nil)
	_ gofs.FileFsyncdirer   = (*dirHandle)(nil)
	_ gofs.FileReleasedirer = (*dirHandle)(nil)
	_ gofs.FileLookuper     = (*dirHandle)(nil)
)

// OpendirHandle opens directory n for reading. Nothing is fetched until
// the first READDIR.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	n.opens.Add(1) // dropped by Releasedir
	return &dirHandle{n: n}, 0, 0
}

// Readdirent returns the next entry, or nil at the end.
func (d *dirHandle) Readdirent(ctx context.Context) (*gofuse.DirEntry, syscall.Errno) {
	ctx = d.n.m.detach(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nextLocked(ctx)
}

func (d *dirHandle) nextLocked(ctx context.Context) (*gofuse.DirEntry, syscall.Errno) {
	switch d.pos {
	case 0:
		d.pos++
		return &gofuse.DirEntry{Name: ".", Ino: d.n.ino(), Mode: syscall.S_IFDIR, Off: d.pos}, 0
	case 1:
		ino := d.n.ino()
		if _, p := d.n.Parent(); p != nil {
			ino = p.StableAttr().Ino
		}
		d.pos++
		return &gofuse.DirEntry{Name: "..", Ino: ino, Mode: syscall.S_IFDIR, Off: d.pos}, 0
	}
	for len(d.page) == 0 {
		if d.eof {
			return nil, 0
		}
		// The kernel lists with READDIRPLUS, which looks up every entry:
		// fetching the attributes with the names saves one RPC per entry.
		es, eof, err := d.n.m.c.ReadDirPlusPage(ctx, d.n.ino(), d.after, dirPage)
		if err != nil {
			return nil, d.n.m.errno("readdir", d.n.ino(), err)
		}
		d.page, d.eof = es, eof || len(es) == 0
		if len(es) > 0 {
			d.after = es[len(es)-1].Name
		}
	}
	e := d.page[0]
	d.page[0] = client.DirEntry{}
	d.page = d.page[1:]
	d.pos++
	d.last = &e
	return &gofuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: typeBits(e.Mode), Off: d.pos}, 0
}

// Lookup serves READDIRPLUS's lookup of the entry just returned from the
// attributes that came with the listing; any other name is looked up at
// the MDS. (fill gives a file open in this mount its unflushed size.)
func (d *dirHandle) Lookup(ctx context.Context, name string, out *gofuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	d.mu.Lock()
	e := d.last
	d.mu.Unlock()
	if e == nil || e.Attr == nil || e.Name != name {
		return d.n.Lookup(ctx, name, out)
	}
	return d.n.newChild(d.n.m.detach(ctx), e.Attr, out), 0
}

// Seekdir moves to offset off. go-fuse replays the last batch itself after
// an interrupted READDIR; any other seek (rewinddir, seekdir to a telldir
// cookie) restarts the listing and skips off entries.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	ctx = d.n.m.detach(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == d.pos {
		return 0
	}
	d.pos, d.page, d.after, d.eof = 0, nil, "", false
	for d.pos < off {
		e, errno := d.nextLocked(ctx)
		if errno != 0 {
			return errno
		}
		if e == nil {
			break // past the end: the next read returns nothing
		}
	}
	return 0
}

// Fsyncdir has nothing to do: namespace changes are durable when they
// return.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno { return 0 }

// Releasedir drops the buffered page.
func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {
	d.n.opens.Add(-1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.page = nil
}
