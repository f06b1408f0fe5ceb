package test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/test/cluster"
)

// fcntlLock runs fcntl(fd, cmd) with a lock of typ on [start, start+n)
// (n 0: to the end of the file) and returns the lock as fcntl left it.
func fcntlLock(f *os.File, cmd int, typ int16, start, n int64) (unix.Flock_t, error) {
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: start, Len: n}
	err := unix.FcntlFlock(f.Fd(), cmd, &lk)
	return lk, err
}

func openRW(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// eventually polls cond every 50 ms until it holds or d passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// blocked runs fn (a blocking lock call) in the background and returns a
// channel that receives its result.
func blocked(fn func() error) chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

func wantBlocked(t *testing.T, ch chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v) while the lock is held elsewhere", what, err)
	case <-time.After(300 * time.Millisecond):
	}
}

func wantGranted(t *testing.T, ch chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still waits after the lock was released", what)
	}
}

// TestFcntlLocksTwoMounts: POSIX byte-range locks taken on one mount
// conflict with the other mount's (two clients, two sessions): F_SETLK
// fails with EAGAIN, F_GETLK names the lock in the way, unlocking a
// sub-range splits a lock, F_SETLKW waits until the range is free, and
// closing any descriptor of the file releases the process's locks.
func TestFcntlLocksTwoMounts(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	a, b := cl.Mount(), cl.Mount()
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("locked"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, fb := openRW(t, filepath.Join(a, "f")), openRW(t, filepath.Join(b, "f"))

	if _, err := fcntlLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 100); err != nil {
		t.Fatalf("A: lock [0,100): %v", err)
	}
	if _, err := fcntlLock(fb, unix.F_SETLK, unix.F_RDLCK, 50, 10); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("B: read lock inside A's write lock: %v, want EAGAIN", err)
	}
	lk, err := fcntlLock(fb, unix.F_GETLK, unix.F_RDLCK, 99, 0)
	if err != nil || lk.Type != unix.F_WRLCK || lk.Start != 0 || lk.Len != 100 || lk.Pid != int32(os.Getpid()) {
		t.Fatalf("B: F_GETLK = %+v, %v; want A's write lock [0,100) of pid %d", lk, err, os.Getpid())
	}
	if _, err := fcntlLock(fb, unix.F_SETLK, unix.F_WRLCK, 100, 100); err != nil {
		t.Fatalf("B: lock [100,200) next to A's: %v", err)
	}
	if lk, err := fcntlLock(fa, unix.F_GETLK, unix.F_WRLCK, 150, 1); err != nil || lk.Type != unix.F_WRLCK || lk.Start != 100 || lk.Len != 100 {
		t.Fatalf("A: F_GETLK = %+v, %v; want B's [100,200)", lk, err)
	}
	if lk, err := fcntlLock(fa, unix.F_GETLK, unix.F_WRLCK, 0, 100); err != nil || lk.Type != unix.F_UNLCK {
		t.Fatalf("A: F_GETLK over its own lock = %+v, %v; want F_UNLCK", lk, err)
	}

	// A unlocks [40,60): B may lock there, not beside it.
	if _, err := fcntlLock(fa, unix.F_SETLK, unix.F_UNLCK, 40, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := fcntlLock(fb, unix.F_SETLK, unix.F_WRLCK, 40, 20); err != nil {
		t.Fatalf("B: lock in the hole A left: %v", err)
	}
	if _, err := fcntlLock(fb, unix.F_SETLK, unix.F_WRLCK, 30, 10); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("B: lock of A's remaining range: %v, want EAGAIN", err)
	}

	// F_SETLKW waits for A.
	ch := blocked(func() error {
		_, err := fcntlLock(fb, unix.F_SETLKW, unix.F_WRLCK, 0, 1)
		return err
	})
	wantBlocked(t, ch, "B: F_SETLKW on byte 0")
	if _, err := fcntlLock(fa, unix.F_SETLK, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}
	wantGranted(t, ch, "B: F_SETLKW on byte 0")

	// Closing another descriptor of the file on B releases all of this
	// process's locks there.
	if _, err := fcntlLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 1); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("A: lock of B's byte 0: %v, want EAGAIN", err)
	}
	other, err := os.Open(filepath.Join(b, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fcntlLock(fa, unix.F_SETLK, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("A: lock the whole file after B's close: %v", err)
	}
}

// TestFlockTwoMounts: flock(2) locks conflict between mounts, are
// independent of POSIX locks, wait when blocking, go with the last close
// of the open file, and a waiting flock is interrupted by a signal (the
// alarm of flock -w, and Ctrl-C).
func TestFlockTwoMounts(t *testing.T) {
	cluster.RequireFUSE(t)
	cl := cluster.Start(t, cluster.Options{})
	a, b := cl.Mount(), cl.Mount()
	pa, pb := filepath.Join(a, "f"), filepath.Join(b, "f")
	if err := os.WriteFile(pa, []byte("locked"), 0o644); err != nil {
		t.Fatal(err)
	}
	fa, fb := openRW(t, pa), openRW(t, pb)
	flock := func(f *os.File, how int) error { return unix.Flock(int(f.Fd()), how) }

	if err := flock(fa, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := flock(fb, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("B: LOCK_EX beside A's: %v, want EWOULDBLOCK", err)
	}
	if err := flock(fb, unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("B: LOCK_SH beside A's LOCK_EX: %v, want EWOULDBLOCK", err)
	}
	// POSIX locks do not see flock locks.
	if _, err := fcntlLock(fb, unix.F_SETLK, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("B: fcntl lock beside A's flock: %v", err)
	}
	if _, err := fcntlLock(fb, unix.F_SETLK, unix.F_UNLCK, 0, 0); err != nil {
		t.Fatal(err)
	}

	// Interrupted waits: flock -w gives up on its alarm (EINTR), and
	// Ctrl-C ends a waiting flock.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err := exec.CommandContext(ctx, "flock", "-w", "0.5", pb, "true").Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("flock -w 0.5 on a locked file: %v after %v, want exit status 1 soon", err, time.Since(start))
	}
	waiter := exec.CommandContext(ctx, "flock", pb, "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	waiter.Process.Signal(os.Interrupt)
	start = time.Now()
	err = waiter.Wait()
	if !errors.As(err, &exit) || exit.Success() || time.Since(start) > 10*time.Second {
		t.Fatalf("flock waiting, then SIGINT: %v after %v, want killed by the signal", err, time.Since(start))
	}

	// A blocking LOCK_SH waits for A's LOCK_UN.
	ch := blocked(func() error { return flock(fb, unix.LOCK_SH) })
	wantBlocked(t, ch, "B: LOCK_SH")
	if err := flock(fa, unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	wantGranted(t, ch, "B: LOCK_SH")
	if err := flock(fa, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatalf("A: LOCK_SH beside B's: %v", err)
	}
	if err := flock(fa, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("A: upgrade to LOCK_EX beside B's LOCK_SH: %v, want EWOULDBLOCK", err)
	}
	// The last close of B's open file releases its lock.
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "A: LOCK_EX after B closed", func() bool {
		return flock(fa, unix.LOCK_EX|unix.LOCK_NB) == nil
	})
}

// TestLocksOfDeadClient: a client that dies without closing its session
// (no keepalives, no release) loses its locks when its lease runs out, and
// the other mount gets them.
func TestLocksOfDeadClient(t *testing.T) {
	cluster.RequireFUSE(t)
	const lease = 2 * time.Second
	cl := cluster.Start(t, cluster.Options{SessionLease: lease})
	b := cl.Mount()
	pb := filepath.Join(b, "f")
	if err := os.WriteFile(pb, []byte("locked"), 0o644); err != nil {
		t.Fatal(err)
	}
	fb := openRW(t, pb)

	dying := cl.Client()
	ctx := t.Context()
	a, err := dying.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dying.OpenIno(ctx, a.Ino); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []client.LockKind{client.LockPOSIX, client.LockFlock} {
		ok, _, err := dying.SetLock(ctx, a.Ino, 1, &client.FileLock{Kind: kind, Type: client.LockWrite, Start: 0, End: 1<<63 - 1, Pid: uint32(os.Getpid())})
		if err != nil || !ok {
			t.Fatalf("dying client: lock %v: %v %v", kind, ok, err)
		}
	}
	// (The kernel reports the pid only when it names a process it knows.)
	if lk, err := fcntlLock(fb, unix.F_GETLK, unix.F_RDLCK, 0, 0); err != nil || lk.Type != unix.F_WRLCK || lk.Pid != int32(os.Getpid()) {
		t.Fatalf("B: F_GETLK = %+v, %v; want the dying client's write lock", lk, err)
	}
	if err := unix.Flock(int(fb.Fd()), unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("B: flock beside the dying client's: %v", err)
	}

	dying.Abandon()
	died := time.Now()
	// A blocking F_SETLKW gets the lock once the lease ran out.
	if _, err := fcntlLock(fb, unix.F_SETLKW, unix.F_WRLCK, 0, 0); err != nil {
		t.Fatalf("B: F_SETLKW: %v", err)
	}
	waited := time.Since(died)
	if waited < lease/3 || waited > 4*lease {
		t.Errorf("B got the dead client's lock after %v; the lease is %v", waited, lease)
	}
	if err := unix.Flock(int(fb.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("B: flock after the lease: %v", err)
	}
}
