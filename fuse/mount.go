// Package fuse mounts a Shoal file system with go-fuse v2. It is a thin
// layer over package client: every operation is one or a few client calls,
// and every error is turned into an errno by ToErrno.
//
// Nodes use go-fuse's fs API with StableAttr.Ino set to the Shoal inode
// number, so that hard links share one node. Open regular files share one
// *client.File per inode within the mount (reference counted by open
// handle), so that every handle sees every write of the mount, and
// Getattr of an open file reports its size with unflushed writes.
// close(2) (FUSE FLUSH) and fsync(2) make the data durable: close-to-open
// consistency between clients.
//
// Lock order: dirHandle.mu, then Mounted.mu. Mounted.mu guards only the open
// file table and is never held across an RPC.
package fuse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/cache"
	"github.com/shoalfs/shoal/internal/errs"
)

// Options configure a mount.
type Options struct {
	// Client is the cluster the mount serves; required. The mount does
	// not close it.
	Client *client.Client
	// Logger receives warnings (unmapped errors, failed closes); nil
	// discards.
	Logger *slog.Logger
	// Debug turns on go-fuse's request log, written to Logger at debug
	// level.
	Debug bool
	// AttrTimeout and EntryTimeout are how long the kernel caches
	// attributes and names. Default 1s each; a negative value means 0
	// (every stat goes to the MDS).
	AttrTimeout, EntryTimeout time.Duration
	// FsName is the first column of df and /proc/mounts. Default "shoal".
	FsName string
	// AllowOther lets users other than the one who mounted use the mount
	// (the allow_other mount option). Without it the kernel refuses every
	// other uid, so the caller uid/gid the mount honours is always the
	// mounter's. A non-root mount through fusermount3 needs
	// user_allow_other in /etc/fuse.conf.
	AllowOther bool
	// Registry receives the mount's metrics (metrics.go): requests,
	// latencies and errors by operation, bytes read and written. nil:
	// none are kept.
	Registry prometheus.Registerer
	// Cache, when set, is the node-local read cache (docs/fuse.md,
	// "Node-local cache"): files read through the mount are kept there,
	// and read-only opens of complete ones are served by the kernel
	// (FUSE passthrough) where it can. The mount does not close it.
	Cache *cache.Cache
	// CacheNoPassthrough serves cached files from the daemon only: the
	// kernel refuses an open for writing of a file it has open through
	// passthrough (EIO), which a node that writes files it also reads
	// may not want.
	CacheNoPassthrough bool
}

func (o *Options) setDefaults() error {
	if o.Client == nil {
		return fmt.Errorf("fuse: Options.Client is nil: %w", errs.ErrInvalid)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.AttrTimeout == 0:
		o.AttrTimeout = time.Second
	case o.AttrTimeout < 0:
		o.AttrTimeout = 0
	}
	switch {
	case o.EntryTimeout == 0:
		o.EntryTimeout = time.Second
	case o.EntryTimeout < 0:
		o.EntryTimeout = 0
	}
	if o.FsName == "" {
		o.FsName = "shoal"
	}
	return nil
}

// readAheadKB is the kernel read-ahead set on the mount's backing device.
// go-fuse can only lower the kernel's default of 128 KiB; a larger window
// keeps several stripe rows in flight for sequential readers.
const readAheadKB = 4096

// Mounted is a mounted Shoal file system, returned by Mount. (The type
// cannot share the name of the function.)
type Mounted struct {
	o          Options
	c          *client.Client
	log        *slog.Logger
	mountpoint string
	dev        uint64 // st_dev of the mounted root; 0 if unknown
	server     *gofuse.Server
	met        *metrics // nil without Options.Registry

	groups  groupsCache // supplementary groups of callers, by pid (caller.go)
	unknown sync.Map    // error kinds already logged at warn level, by "op/type"
	owners  sync.Map    // reqOwner of the FLUSH and RELEASE requests being served, by cancel channel (locks.go)
	// pageWrites holds the cancel channels of WRITE requests that write
	// back page-cache pages (locks.go's lockRaw.Write).
	pageWrites sync.Map
	// ptOpens holds, by cancel channel, the slot of an OPEN request being
	// served where the node's Open leaves a backing id (passthrough.go).
	ptOpens sync.Map
	// srv is the server, from its Init on: it registers backing files.
	srv atomic.Pointer[gofuse.Server]
	// noPassthrough is set when the kernel refused a backing file.
	noPassthrough atomic.Bool
	cleanOnce     sync.Once

	mu struct {
		sync.Mutex
		files map[uint64]*openFile // by inode: the open files of this mount
	}
}

// Mount mounts the cluster of o.Client on mountpoint and serves it until
// Unmount. ctx bounds the setup only (the check that the MDS answers and
// the mount itself), not the life of the mount.
func Mount(ctx context.Context, mountpoint string, o Options) (*Mounted, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("fuse: mount point %s: %w", mountpoint, err)
	}
	m := &Mounted{o: o, c: o.Client, log: o.Logger, mountpoint: abs}
	if o.Registry != nil {
		m.met = newMetrics(o.Registry)
	}
	m.mu.files = map[uint64]*openFile{}
	m.groups.procDir = "/proc"

	// Fail before mounting, rather than with EIO on the first stat, when
	// the MDS does not answer.
	if a, err := m.c.GetAttr(ctx, client.RootIno); err != nil {
		return nil, fmt.Errorf("fuse: root inode: %w", err)
	} else if !client.IsDir(a) {
		return nil, fmt.Errorf("fuse: root inode is not a directory: %w", errs.ErrCorrupt)
	}

	mopts := gofuse.MountOptions{
		FsName:        o.FsName,
		Name:          "shoal",
		MaxWrite:      gofuse.MAX_KERNEL_WRITE, // 1 MiB, the kernel's limit
		DirectMount:   true,                    // mount(2) as root, else fusermount3
		DisableXAttrs: false,
		EnableLocks:   true, // flock and fcntl locks go to the MDS (locks.go)
		Options:       []string{"default_permissions"},
		// go-fuse offers kernel passthrough by default; Shoal serves every
		// byte itself, but for files complete in its cache (below).
		DisabledCapabilities: gofuse.CAP_PASSTHROUGH,
		// Splice only helps data that sits in a file; read replies are in
		// memory here, and a 1 MiB reply plus its header does not fit the
		// default maximum pipe size, so every large read would try,
		// fail, log and fall back.
		DisableSplice: true,
		AllowOther:    o.AllowOther,
		Debug:         o.Debug,
		// go-fuse's own messages (its request log with Debug, its
		// warnings otherwise) go to Logger rather than to the standard
		// logger.
		Logger: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	if o.Cache != nil {
		mopts.DisabledCapabilities = 0
	}
	if o.Debug {
		mopts.Logger = slog.NewLogLogger(o.Logger.Handler(), slog.LevelDebug)
	}
	attrTimeout, entryTimeout := o.AttrTimeout, o.EntryTimeout
	fsopts := &gofs.Options{
		MountOptions:   mopts,
		AttrTimeout:    &attrTimeout,
		EntryTimeout:   &entryTimeout,
		RootStableAttr: &gofs.StableAttr{Ino: client.RootIno, Mode: syscall.S_IFDIR},
		// Mode 0 is a real mode (chmod 000), not "use a default".
		NullPermissions: true,
		Logger:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	type result struct {
		server *gofuse.Server
		err    error
	}
	done := make(chan result, 1)
	go func() {
		// serve blocks until the kernel has answered INIT.
		s, err := m.serve(abs, &node{m: m}, fsopts)
		done <- result{s, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		// Clean up behind the abandoned mount when it completes.
		go func() {
			if r := <-done; r.err == nil {
				r.server.Unmount()
			}
		}()
		return nil, fmt.Errorf("fuse: mount %s: %w", abs, ctx.Err())
	}
	if r.err != nil {
		return nil, fmt.Errorf("fuse: mount %s: %w", abs, r.err)
	}
	m.server = r.server
	var st unix.Stat_t
	if err := unix.Stat(abs, &st); err != nil {
		// The mount answered INIT, so this is unexpected; carry on.
		m.log.Warn("stat mount point after mounting", "path", abs, "err", err)
	} else {
		m.dev = st.Dev
		m.raiseReadAhead()
	}
	return m, nil
}

// raiseReadAhead sets the read-ahead of the mount's backing device (the
// bdi named after its device number). Failure, as for a non-root mount,
// only costs sequential read speed.
func (m *Mounted) raiseReadAhead() {
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(m.dev), unix.Minor(m.dev))
	if err := os.WriteFile(p, []byte(fmt.Sprintf("%d\n", readAheadKB)), 0); err != nil {
		m.log.Debug("read-ahead not raised", "path", p, "err", err)
		return
	}
	m.log.Debug("read-ahead raised", "path", p, "kb", readAheadKB)
}

// Mountpoint returns the absolute path the file system is mounted on.
func (m *Mounted) Mountpoint() string { return m.mountpoint }

// Unmount unmounts the file system and waits until the server has
// stopped, then closes (flushing) any file the kernel left open. When a
// process still uses the mount it returns an error wrapping syscall.EBUSY
// and the mount stays up.
func (m *Mounted) Unmount() error {
	// Try umount(2) ourselves first, as go-fuse would with DirectMount:
	// its fallback to fusermount3 would hide EBUSY behind "fusermount3
	// not found" on hosts without fuse3. A few retries cover the kernel's
	// asynchronous RELEASE of files closed just before.
	var err error
	delay := 5 * time.Millisecond
	for range 5 {
		if err = unix.Unmount(m.mountpoint, 0); !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(delay)
		delay *= 2
	}
	switch {
	case err == nil:
	case errors.Is(err, syscall.EBUSY):
		return fmt.Errorf("mount point busy: %s is in use: %w", m.mountpoint, syscall.EBUSY)
	case errors.Is(err, syscall.EINVAL) && !m.mounted():
		// Already unmounted (umount(8), a second Unmount): the server
		// stops by itself.
	default:
		// Not root (mounted through fusermount3): let go-fuse do it its
		// way.
		if err := m.server.Unmount(); err != nil {
			if errors.Is(err, syscall.EBUSY) {
				return fmt.Errorf("mount point busy: %s is in use: %w", m.mountpoint, syscall.EBUSY)
			}
			return fmt.Errorf("fuse: unmount %s: %w", m.mountpoint, err)
		}
	}
	m.Wait()
	return nil
}

// mounted reports whether the mount point still shows this mount.
func (m *Mounted) mounted() bool {
	var st unix.Stat_t
	if err := unix.Stat(m.mountpoint, &st); err != nil {
		// ENOTCONN: the server is gone but the kernel mount remains.
		return errors.Is(err, syscall.ENOTCONN)
	}
	return m.dev != 0 && st.Dev == m.dev
}

// Wait blocks until the file system is unmounted (by Unmount, umount(8) or
// fusermount3 -u) and the server has stopped.
func (m *Mounted) Wait() {
	m.server.Wait()
	m.cleanOnce.Do(m.closeAll)
}

// closeAll closes the files still open after the server stopped, so that
// their buffered writes reach the cluster.
func (m *Mounted) closeAll() {
	var open []*openFile
	m.mu.Lock()
	for _, of := range m.mu.files {
		if of.closing == nil { // else its Release is closing it
			of.closing = make(chan struct{})
			open = append(open, of)
		}
	}
	m.mu.files = map[uint64]*openFile{}
	m.mu.Unlock()
	for _, of := range open {
		<-of.ready
		if of.f != nil {
			// Unmount has no context; closing is bounded by the
			// client's own chunk timeouts.
			if err := of.f.Close(context.Background()); err != nil {
				m.log.Warn("close at unmount", "ino", of.ino, "err", err)
			}
		}
		m.closeCache(of)
		close(of.closing)
	}
}
