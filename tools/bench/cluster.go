package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/wire"
)

// localCluster is `shoal local` run as a child process, mounted.
type localCluster struct {
	cmd     *exec.Cmd
	mnt     string
	logPath string
	mdsAddr string
	creds   *wire.Creds   // the administrator's, from DIR/env
	exited  chan struct{} // closed when the process has exited
	waitErr error         // valid after exited is closed
}

// startLocal runs `bin local --dir dir --mount mnt --osts 6 --k 4 --m 2`
// (then extra, e.g. a cache's flags) and waits until it has written dir/mds.addr and mounted mnt. The child
// runs in its own process group, so that a Ctrl-C on the terminal reaches
// only the benchmark, which unmounts its files first and then stops the
// child; it gets SIGINT if the benchmark dies.
func startLocal(ctx context.Context, bin, dir, mnt, logPath string, syncNamespace bool, extra ...string) (*localCluster, error) {
	if err := prepareMountPoint(mnt); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("remove the previous cluster: %w", err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	// The default settings: mutual TLS; the benchmark's API clients use
	// the administrator's certificate from DIR/env.
	args := []string{"local", "--dir", dir, "--mount", mnt, "--osts", "6", "--k", "4", "--m", "2", "--log-level", "warn", "--insecure=false"}
	if syncNamespace {
		args = append(args, "--sync-namespace")
	}
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGINT}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s local: %w", bin, err)
	}
	lc := &localCluster{cmd: cmd, mnt: mnt, logPath: logPath, exited: make(chan struct{})}
	go func() { lc.waitErr = cmd.Wait(); close(lc.exited) }()

	deadline := time.Now().Add(2 * time.Minute)
	addrFile := filepath.Join(dir, "mds.addr")
	for {
		if b, err := os.ReadFile(addrFile); err == nil && strings.TrimSpace(string(b)) != "" {
			if ok, _ := isMountPoint(mnt); ok {
				lc.mdsAddr = strings.TrimSpace(string(b))
				if lc.creds, err = envCreds(filepath.Join(dir, "env")); err != nil {
					lc.stop()
					return nil, err
				}
				return lc, nil
			}
		}
		select {
		case <-lc.exited:
			return nil, fmt.Errorf("shoal local exited before it was ready (%v): %s", lc.waitErr, tail(logPath))
		case <-ctx.Done():
			lc.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			lc.stop()
			return nil, fmt.Errorf("shoal local was not ready after 2 minutes: %s", tail(logPath))
		}
	}
}

// envCreds loads the credentials that a shoal local's env file names
// (SHOAL_CERT, SHOAL_KEY, SHOAL_CA).
func envCreds(path string) (*wire.Creds, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("shoal local's environment: %w", err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok {
			vars[k] = strings.Trim(v, "'\"")
		}
	}
	f := wire.TLSFiles{Cert: vars["SHOAL_CERT"], Key: vars["SHOAL_KEY"], CA: vars["SHOAL_CA"]}
	if f.Cert == "" {
		return nil, fmt.Errorf("%s names no certificate (a cluster run --insecure?)", path)
	}
	return wire.LoadCreds(f)
}

// stop sends SIGINT (again every 5 s, as `shoal local` asks when its mount
// is busy) and waits up to 30 s, then kills the child and detaches its
// mount.
func (lc *localCluster) stop() error {
	for range 6 {
		lc.cmd.Process.Signal(os.Interrupt)
		select {
		case <-lc.exited:
			if lc.waitErr != nil {
				return fmt.Errorf("shoal local: %v: %s", lc.waitErr, tail(lc.logPath))
			}
			return nil
		case <-time.After(5 * time.Second):
		}
	}
	lc.cmd.Process.Kill()
	<-lc.exited
	unix.Unmount(lc.mnt, unix.MNT_DETACH)
	return fmt.Errorf("shoal local did not stop within 30 s of SIGINT and was killed: %s", tail(lc.logPath))
}

// prepareMountPoint makes mnt an empty directory that nothing is mounted
// on, detaching a dead FUSE mount a killed run left behind.
func prepareMountPoint(mnt string) error {
	var st unix.Stat_t
	switch err := unix.Stat(mnt, &st); {
	case errors.Is(err, syscall.ENOTCONN):
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("detach the dead mount at %s: %w", mnt, err)
		}
		return nil
	case errors.Is(err, syscall.ENOENT):
		return os.MkdirAll(mnt, 0o755)
	case err != nil:
		return fmt.Errorf("mount point %s: %w", mnt, err)
	}
	if mounted, err := isMountPoint(mnt); err != nil {
		return err
	} else if mounted {
		return fmt.Errorf("%s is mounted (a previous run still going?): unmount it first", mnt)
	}
	return nil
}

// tail returns the last lines of the log at p, for error messages.
func tail(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "log " + p + ":\n" + strings.Join(lines, "\n")
}

// loopback is go-fuse's loopback file system of src mounted at mnt, in
// this process, with Shoal's mount options and the kernel's FUSE
// passthrough off, so that its daemon serves every byte as Shoal's does.
type loopback struct {
	server *gofuse.Server
	mnt    string
}

// mountLoopback mounts src at mnt. The options mirror fuse.Mount: 1 MiB
// MaxWrite, splice off, default_permissions, a direct mount(2), 1 s
// attribute and entry timeouts, passthrough disabled; readAheadKB, when
// positive, is written to the mount's bdi as fuse.Mount does.
func mountLoopback(src, mnt string, readAheadKB int) (*loopback, error) {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	if err := prepareMountPoint(mnt); err != nil {
		return nil, err
	}
	root, err := gofs.NewLoopbackRoot(src)
	if err != nil {
		return nil, err
	}
	timeout := time.Second
	opts := &gofs.Options{
		MountOptions: gofuse.MountOptions{
			FsName:               "shoal-bench-loopback",
			Name:                 "loopback",
			MaxWrite:             gofuse.MAX_KERNEL_WRITE,
			DirectMount:          true,
			Options:              []string{"default_permissions"},
			DisabledCapabilities: gofuse.CAP_PASSTHROUGH,
			DisableSplice:        true,
			AllowOther:           os.Geteuid() == 0,
		},
		AttrTimeout:  &timeout,
		EntryTimeout: &timeout,
	}
	server, err := gofs.Mount(mnt, root, opts)
	if err != nil {
		return nil, fmt.Errorf("mount the loopback baseline at %s: %w", mnt, err)
	}
	if readAheadKB > 0 {
		setReadAheadKB(mnt, readAheadKB) // as fuse.Mount: failure only costs read speed
	}
	return &loopback{server: server, mnt: mnt}, nil
}

// unmount unmounts, retrying while the kernel releases files closed just
// before.
func (l *loopback) unmount() error {
	var err error
	delay := 10 * time.Millisecond
	for range 8 {
		if err = l.server.Unmount(); err == nil {
			l.server.Wait()
			return nil
		}
		time.Sleep(delay)
		delay *= 2
	}
	unix.Unmount(l.mnt, unix.MNT_DETACH)
	return fmt.Errorf("unmount the loopback baseline at %s: %w", l.mnt, err)
}
