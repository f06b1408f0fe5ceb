package test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/test/cluster"
)

// Server restarts under load (docs/reliability.md, "Server restarts under
// load"): an OST stopped (or killed) and started again on its address, and
// the single MDS stopped and started again, while a writer creates,
// writes and closes files and a reader reads them back. Neither may see
// an error; they wait at most the restart and a bounded delay. The
// timing (which OST, when, for how long) is random from the seed.

// restartSeeds returns the seeds of the restart tests: 1 in CI, or
// SHOAL_RESTART_SEEDS of them (make soak) from SHOAL_RESTART_SEED
// (default 1).
func restartSeeds(t *testing.T) []uint64 {
	n, first := 1, uint64(1)
	if v := os.Getenv("SHOAL_RESTART_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("SHOAL_RESTART_SEEDS=%q: want a count", v)
		}
	}
	if v := os.Getenv("SHOAL_RESTART_SEED"); v != "" {
		var err error
		if first, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("SHOAL_RESTART_SEED=%q: want a number", v)
		}
	}
	var out []uint64
	for i := range n {
		out = append(out, first+uint64(i))
	}
	return out
}

// TestOSTRestartUnderLoad stops one of 7 OSTs cleanly, then kills one,
// each for 0.1-3 s (shorter and longer than the MDS's heartbeat timeout of
// 2 s), and starts it again on the same address, under a writer and a
// reader; then restarts one while they pause (issue 17's case: the
// client's idle connections to it are dead). No operation fails, no
// extent write fails over for want of the OST once it is back, and every
// file reads back.
func TestOSTRestartUnderLoad(t *testing.T) {
	for _, seed := range restartSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0x057))
			// Odd seeds: the OST comes back with its data path on the
			// same port (a fixed --data-listen), where the client's idle
			// connections from before are dead; even seeds: on a new one,
			// which the client asks the OST for.
			cl := cluster.Start(t, cluster.Options{OSTs: 7, Dir: cluster.TmpfsDir(t), SameDataPort: seed%2 == 1})
			logs := &logLines{}
			c := loggedClient(t, cl, logs)
			l := startRestartLoad(t, c, seed, 1, 1, 6<<20)
			time.Sleep(randDur(r, 200*time.Millisecond, 800*time.Millisecond))
			for round, kill := range []bool{false, true, r.IntN(2) == 0} {
				// The last round restarts the OST while the client is
				// idle, within the heartbeat timeout: the client's idle
				// connections to it are all dead when the load resumes.
				idle := round == 2
				i, down := r.IntN(7), randDur(r, 100*time.Millisecond, 3*time.Second)
				if idle {
					down = randDur(r, 100*time.Millisecond, 1500*time.Millisecond)
					l.burst(16) // many idle connections to every OST
					l.gate.Lock()
				}
				id := cl.OST(i).Server.ID()
				how := "stopped"
				if kill {
					how = "killed"
					cl.KillOST(i)
				} else {
					cl.StopOST(i)
				}
				time.Sleep(down)
				if err := cl.StartOST(i); err != nil {
					t.Fatalf("start OST %d again: %v", i, err)
				}
				back := time.Now()
				if idle {
					how += " with the client idle"
					l.gate.Unlock()
				}
				t.Logf("OST %d (harness index %d) %s for %v", id, i, how, down)
				time.Sleep(randDur(r, 700*time.Millisecond, 1500*time.Millisecond))
				// The restart itself is invisible: once the OST is back
				// no extent write fails over for want of it, as those on
				// the connections of before the restart would.
				if bad := logs.failoversFrom(id, back, time.Now()); bad != "" {
					t.Errorf("extent writes failed on OST %d after it was back:\n%s", id, bad)
				}
			}
			l.stopAndCheck(t, cl)
			t.Logf("client log:\n%s", logs.matching("unreachable", "reachable again", "waits", "extent write failed"))
		})
	}
}

// TestMDSRestartUnderLoad stops the single MDS for 0.2-4 s and starts it
// again on its address, under two writers and a reader: calls wait for
// it (the client logs when the wait starts and ends), no operation fails,
// none waits much longer than the MDS was down, and every file reads back.
// The restarted MDS counts the OSTs it knew up until they heartbeat
// (mds/osts.go), so that closes do not fail for want of placements.
func TestMDSRestartUnderLoad(t *testing.T) {
	for _, seed := range restartSeeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0x3d5))
			cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
			logs := &logLines{}
			c := loggedClient(t, cl, logs)
			l := startRestartLoad(t, c, seed, 2, 1, 2<<20)
			time.Sleep(randDur(r, 200*time.Millisecond, 700*time.Millisecond))
			down := randDur(r, 200*time.Millisecond, 4*time.Second)
			cl.StopMDS()
			time.Sleep(down)
			if err := cl.StartSingleMDS(); err != nil {
				t.Fatal(err)
			}
			t.Logf("MDS down for %v", down)
			time.Sleep(randDur(r, 500*time.Millisecond, 1500*time.Millisecond))
			longest := l.stopAndCheck(t, cl)
			// The longest operation waited out the outage, plus the time
			// to reconnect and open a new session; far less than MDSRetry.
			if bound := down + 8*time.Second; longest > bound {
				t.Errorf("an operation took %v with the MDS down %v (bound %v)", longest, down, bound)
			}
			t.Logf("client log:\n%s", logs.matching("unreachable", "reachable again", "session"))
			if !logs.has("MDS unreachable: calls wait for it") || !logs.has("server reachable again") {
				t.Errorf("the client did not log the start and the end of the MDS outage:\n%s", logs.String())
			}
		})
	}
}

func randDur(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// loggedClient returns a client of cl that logs to logs.
func loggedClient(t *testing.T, cl *cluster.Cluster, logs *logLines) *client.Client {
	t.Helper()
	c, err := client.New(t.Context(), client.Options{MDS: cl.MDSAddr(), Creds: cl.Creds(pki.RoleAdmin),
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// logLines collects log lines.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logLines) has(s string) bool { return strings.Contains(l.String(), s) }

// failoversFrom returns the lines logged in [back, to] about an extent
// write that failed on OST id and went to another placement, but for
// refused connections in the first 200 ms (chunk writes that gave up as
// the OST came back). Chunk reads that fail are rebuilt from parity, and
// the load checks every read.
func (l *logLines) failoversFrom(id uint32, back, to time.Time) string {
	var out []string
	for line := range strings.Lines(l.String()) {
		ts, _, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if !ok || err != nil || at.Before(back) || at.After(to) ||
			strings.Contains(line, "connection refused") && at.Before(back.Add(200*time.Millisecond)) {
			continue
		}
		if _, rest, ok := strings.Cut(line, "failed_osts=["); ok {
			ids, _, _ := strings.Cut(rest, "]")
			if slices.Contains(strings.Fields(ids), strconv.Itoa(int(id))) {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "")
}

// matching returns the lines that contain any of subs.
func (l *logLines) matching(subs ...string) string {
	var out []string
	for line := range strings.Lines(l.String()) {
		for _, s := range subs {
			if strings.Contains(line, s) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "")
}

// restartLoad is writers that create, write and close files of up to maxSize
// random bytes, one after another, and readers that read back files
// already closed, until stopped. Every operation must succeed.
type restartLoad struct {
	t    *testing.T
	c    *client.Client
	stop chan struct{}
	wg   sync.WaitGroup
	// gate is read-locked by each operation: a test that locks it
	// pauses the load once the operations in flight end.
	gate sync.RWMutex

	mu struct {
		sync.Mutex
		files   []loadFile // closed: readable
		longest time.Duration
		what    string // the longest operation
		reads   int
	}
}

// loadFile is a file written: its bytes are randBytes(seed, size).
type loadFile struct {
	path string
	seed uint64
	size int
	took time.Duration // create, write and close
}

func startRestartLoad(t *testing.T, c *client.Client, seed uint64, writers, readers, maxSize int) *restartLoad {
	l := &restartLoad{t: t, c: c, stop: make(chan struct{})}
	for w := range writers {
		r := rand.New(rand.NewPCG(seed, uint64(w)))
		l.wg.Go(func() { l.write(w, r, seed, maxSize) })
	}
	for i := range readers {
		r := rand.New(rand.NewPCG(seed, uint64(100+i)))
		l.wg.Go(func() { l.read(r) })
	}
	return l
}

func (l *restartLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *restartLoad) note(what string, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if took > l.mu.longest {
		l.mu.longest, l.mu.what = took, what
	}
}

func (l *restartLoad) write(w int, r *rand.Rand, seed uint64, maxSize int) {
	ctx := context.Background()
	for i := 0; !l.stopped(); i++ {
		f := loadFile{path: fmt.Sprintf("/w%d-%04d", w, i), seed: seed<<20 | uint64(w)<<16 | uint64(i), size: r.IntN(maxSize + 1)}
		data := randBytes(f.seed, f.size)
		l.gate.RLock()
		t0 := time.Now()
		err := func() error {
			h, err := l.c.Create(ctx, f.path, 0o644)
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			if _, err := h.WriteAt(ctx, data, 0); err != nil {
				h.Close(ctx)
				return fmt.Errorf("write: %w", err)
			}
			if err := h.Close(ctx); err != nil {
				return fmt.Errorf("close: %w", err)
			}
			return nil
		}()
		f.took = time.Since(t0)
		l.gate.RUnlock()
		if err != nil {
			l.t.Errorf("%s (%d bytes) at %s, after %v: %v", f.path, f.size, t0.Format("15:04:05.000"), f.took, err)
			return
		}
		l.note("write "+f.path, f.took)
		l.mu.Lock()
		l.mu.files = append(l.mu.files, f)
		l.mu.Unlock()
	}
}

func (l *restartLoad) read(r *rand.Rand) {
	for !l.stopped() {
		l.mu.Lock()
		n := len(l.mu.files)
		var f loadFile
		if n > 0 {
			f = l.mu.files[r.IntN(n)]
		}
		l.mu.Unlock()
		if n == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.gate.RLock()
		t0 := time.Now()
		got, err := readFile(l.c, f.path)
		took := time.Since(t0)
		l.gate.RUnlock()
		if err != nil {
			l.t.Errorf("read %s at %s, after %v: %v", f.path, t0.Format("15:04:05.000"), took, err)
			return
		}
		if !bytes.Equal(got, randBytes(f.seed, f.size)) {
			l.t.Errorf("read %s: wrong bytes", f.path)
			return
		}
		l.note("read "+f.path, took)
		l.mu.Lock()
		l.mu.reads++
		l.mu.Unlock()
	}
}

// burst reads n files at once, each in a goroutine of its own.
func (l *restartLoad) burst(n int) {
	l.mu.Lock()
	files := slices.Clone(l.mu.files)
	l.mu.Unlock()
	if len(files) == 0 {
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		f := files[i%len(files)]
		wg.Go(func() {
			l.gate.RLock()
			defer l.gate.RUnlock()
			if _, err := readFile(l.c, f.path); err != nil {
				l.t.Errorf("read %s: %v", f.path, err)
			}
		})
	}
	wg.Wait()
}

// stopAndCheck stops the load, checks that every file written reads back
// through a new client, and returns the longest operation's time.
func (l *restartLoad) stopAndCheck(t *testing.T, cl *cluster.Cluster) time.Duration {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var bytes int
	for _, f := range l.mu.files {
		bytes += f.size
	}
	t.Logf("%d files written (%.1f MiB), %d read back during the load; the longest operation: %s, %v",
		len(l.mu.files), float64(bytes)/(1<<20), l.mu.reads, l.mu.what, l.mu.longest.Round(time.Millisecond))
	if len(l.mu.files) == 0 {
		t.Error("no file written")
	}
	c := cl.Client()
	for _, f := range l.mu.files {
		got, err := readFile(c, f.path)
		if err != nil {
			t.Errorf("read %s after the load: %v", f.path, err)
			continue
		}
		mustEqual(t, f.path, got, randBytes(f.seed, f.size))
	}
	return l.mu.longest
}
