package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/shoalfs/shoal/client"
)

// file is an open file of any path: an *os.File or a client.File.
type file interface {
	WriteAt(p []byte, off int64) (int, error)
	ReadAt(p []byte, off int64) (int, error)
	Sync() error
	Close() error
}

// fsys is what a workload runs on. Paths are slash-separated and relative
// to the file system's root. The plain calls are what a program does with
// a file; the meta calls are single namespace operations (on the client
// API the inode-level calls the FUSE layer itself makes, one MDS request
// each).
type fsys interface {
	Mkdir(p string) error
	Create(p string) (file, error) // create or truncate, open for writing
	Open(p string) (file, error)
	Stat(p string) error
	Remove(p string) error
	RemoveAll(p string) error

	MetaCreate(p string) error // an empty file, created exclusively
	MetaStat(p string) error
	MetaRename(from, to string) error
	MetaUnlink(p string) error
	MetaReadDir(p string) (int, error) // the number of entries
}

// osFS is a directory tree of the local machine: the bare disk, the
// loopback mount or the Shoal mount. With direct set, files are opened
// with O_DIRECT.
type osFS struct {
	root   string
	direct bool
}

func (o osFS) abs(p string) string { return filepath.Join(o.root, filepath.FromSlash(p)) }

func (o osFS) flags() int {
	if o.direct {
		return syscall.O_DIRECT
	}
	return 0
}

func (o osFS) Mkdir(p string) error { return os.Mkdir(o.abs(p), 0o755) }
func (o osFS) Create(p string) (file, error) {
	return os.OpenFile(o.abs(p), os.O_RDWR|os.O_CREATE|os.O_TRUNC|o.flags(), 0o644)
}
func (o osFS) Open(p string) (file, error) { return os.OpenFile(o.abs(p), os.O_RDONLY|o.flags(), 0) }
func (o osFS) Stat(p string) error {
	_, err := os.Lstat(o.abs(p))
	return err
}
func (o osFS) Remove(p string) error    { return os.Remove(o.abs(p)) }
func (o osFS) RemoveAll(p string) error { return os.RemoveAll(o.abs(p)) }
func (o osFS) MetaCreate(p string) error {
	f, err := os.OpenFile(o.abs(p), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
func (o osFS) MetaStat(p string) error          { return o.Stat(p) }
func (o osFS) MetaRename(from, to string) error { return os.Rename(o.abs(from), o.abs(to)) }
func (o osFS) MetaUnlink(p string) error        { return os.Remove(o.abs(p)) }
func (o osFS) MetaReadDir(p string) (int, error) {
	d, err := os.Open(o.abs(p))
	if err != nil {
		return 0, err
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(4096)
		n += len(names)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// apiFS is the cluster through the client library. Files go through the
// path calls (client.Create, Open, Stat, Remove); the meta calls resolve
// their directory once (cached) and then make one inode-level call.
type apiFS struct {
	ctx  context.Context
	c    *client.Client
	root string // a directory of the cluster, absolute

	mu struct {
		sync.Mutex
		dirs map[string]uint64 // directory path -> inode
	}
}

func newAPIFS(ctx context.Context, c *client.Client, root string) *apiFS {
	a := &apiFS{ctx: ctx, c: c, root: root}
	a.mu.dirs = map[string]uint64{}
	return a
}

func (a *apiFS) abs(p string) string { return path.Join(a.root, p) }

func (a *apiFS) Mkdir(p string) error { return a.c.Mkdir(a.ctx, a.abs(p), 0o755) }
func (a *apiFS) Create(p string) (file, error) {
	f, err := a.c.Create(a.ctx, a.abs(p), 0o644)
	if err != nil {
		return nil, err
	}
	return apiFile{a.ctx, f}, nil
}
func (a *apiFS) Open(p string) (file, error) {
	f, err := a.c.Open(a.ctx, a.abs(p))
	if err != nil {
		return nil, err
	}
	return apiFile{a.ctx, f}, nil
}
func (a *apiFS) Stat(p string) error {
	_, err := a.c.Stat(a.ctx, a.abs(p))
	return err
}
func (a *apiFS) Remove(p string) error { return a.c.Remove(a.ctx, a.abs(p)) }

// RemoveAll removes the tree p, depth first.
func (a *apiFS) RemoveAll(p string) error {
	es, err := a.c.ReadDir(a.ctx, a.abs(p))
	if err != nil {
		return err
	}
	for _, e := range es {
		child := path.Join(p, string(e.Name))
		if e.Mode&client.ModeType == client.ModeDir {
			if err := a.RemoveAll(child); err != nil {
				return err
			}
		} else if err := a.Remove(child); err != nil {
			return err
		}
	}
	a.mu.Lock()
	delete(a.mu.dirs, p)
	a.mu.Unlock()
	return a.Remove(p)
}

// dir returns the inode of directory p, resolving it on first use.
func (a *apiFS) dir(p string) (uint64, error) {
	a.mu.Lock()
	ino, ok := a.mu.dirs[p]
	a.mu.Unlock()
	if ok {
		return ino, nil
	}
	attr, err := a.c.Stat(a.ctx, a.abs(p))
	if err != nil {
		return 0, err
	}
	if !client.IsDir(attr) {
		return 0, fmt.Errorf("%s is not a directory", p)
	}
	a.mu.Lock()
	a.mu.dirs[p] = attr.Ino
	a.mu.Unlock()
	return attr.Ino, nil
}

func (a *apiFS) split(p string) (uint64, string, error) {
	d, name := path.Split(p)
	ino, err := a.dir(path.Clean(d))
	return ino, name, err
}

func (a *apiFS) MetaCreate(p string) error {
	d, name, err := a.split(p)
	if err != nil {
		return err
	}
	_, err = a.c.CreateIn(a.ctx, d, name, client.CreateOptions{Mode: 0o644, Exclusive: true})
	return err
}
func (a *apiFS) MetaStat(p string) error {
	d, name, err := a.split(p)
	if err != nil {
		return err
	}
	_, err = a.c.Lookup(a.ctx, d, name)
	return err
}
func (a *apiFS) MetaRename(from, to string) error {
	fd, fn, err := a.split(from)
	if err != nil {
		return err
	}
	td, tn, err := a.split(to)
	if err != nil {
		return err
	}
	return a.c.RenameIn(a.ctx, fd, fn, td, tn, 0)
}
func (a *apiFS) MetaUnlink(p string) error {
	d, name, err := a.split(p)
	if err != nil {
		return err
	}
	return a.c.UnlinkIn(a.ctx, d, name)
}
func (a *apiFS) MetaReadDir(p string) (int, error) {
	ino, err := a.dir(p)
	if err != nil {
		return 0, err
	}
	es, err := a.c.ReadDirIno(a.ctx, ino)
	return len(es), err
}

type apiFile struct {
	ctx context.Context
	f   *client.File
}

func (f apiFile) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(f.ctx, p, off) }
func (f apiFile) ReadAt(p []byte, off int64) (int, error)  { return f.f.ReadAt(f.ctx, p, off) }
func (f apiFile) Sync() error                              { return f.f.Fsync(f.ctx) }
func (f apiFile) Close() error                             { return f.f.Close(f.ctx) }
