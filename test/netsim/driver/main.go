// Command driver is the client workload of the network simulation
// (test/netsim): a small program on the client library that the harness
// starts inside a client host's network namespace with the host's client
// certificate, as an application on a compute node would run. Each
// subcommand prints one JSON object on stdout.
//
//	driver [common flags] setup  --dir D --k K --m M --unit U
//	driver [common flags] write  --dir D --prefix P --files N --size S --threads T [--until FILE] [--acked FILE]
//	driver [common flags] read   --dir D --prefix P --files N --size S --threads T [--loops L | --until FILE]
//	driver [common flags] verify --acked FILE
//	driver [common flags] meta   --dir D --n N
//	driver [common flags] lock   --file PATH        (holds a write lock until killed)
//	driver [common flags] trylock --file PATH --timeout DUR
//
// File contents are a function of the file's name and offset, so a reader
// checks every byte without a copy of what was written.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/wire"
)

const block = 1 << 20

// pattern is the 1 MiB block every file repeats; content stamps each MiB
// with the name's hash and the block index.
var pattern = func() []byte {
	b := make([]byte, block)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}()

// content fills b (at most one block, aligned) with the bytes of name at
// block index bi.
func content(b []byte, name string, bi int64) {
	copy(b, pattern)
	h := fnv.New64a()
	h.Write([]byte(name))
	binary.LittleEndian.PutUint64(b, h.Sum64())
	binary.LittleEndian.PutUint64(b[8:], uint64(bi))
}

type common struct {
	mds, cert, key, ca, name string
}

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: driver SUBCOMMAND [flags]"))
	}
	sub := os.Args[1]
	fs := flag.NewFlagSet(sub, flag.ExitOnError)
	var c common
	fs.StringVar(&c.mds, "mds", "", "MDS addresses, comma separated")
	fs.StringVar(&c.cert, "cert", "", "client certificate")
	fs.StringVar(&c.key, "key", "", "client key")
	fs.StringVar(&c.ca, "ca", "", "cluster CA")
	fs.StringVar(&c.name, "name", "netsim", "client name")
	dir := fs.String("dir", "/netsim", "directory of the files")
	prefix := fs.String("prefix", "f", "file name prefix")
	files := fs.Int("files", 4, "files")
	size := fs.Int64("size", 8<<20, "bytes per file (whole MiB)")
	threads := fs.Int("threads", 4, "threads")
	loops := fs.Int("loops", 1, "read passes")
	until := fs.String("until", "", "write: keep writing new files, read: keep reading the files again, until this file exists")
	acked := fs.String("acked", "", "write: append each acknowledged file here; verify: the list to check")
	k := fs.Uint("k", 2, "setup: data chunks")
	m := fs.Uint("m", 1, "setup: parity chunks")
	unit := fs.Uint("unit", 256<<10, "setup: stripe unit")
	n := fs.Int("n", 200, "meta: operations of each kind")
	file := fs.String("file", "/netsim/lockfile", "lock: the file")
	timeout := fs.Duration("timeout", 60*time.Second, "trylock: give up after")
	metrics := fs.String("metrics", "", "meta: the MDS's /metrics URL, to count its RPCs of each phase")
	if err := fs.Parse(os.Args[2:]); err != nil {
		fail(err)
	}
	ctx := context.Background()
	cl, err := dial(ctx, c)
	if err != nil {
		fail(err)
	}
	defer cl.Close()
	var out any
	switch sub {
	case "setup":
		out, err = setup(ctx, cl, *dir, client.Layout{K: uint32(*k), M: uint32(*m), Unit: uint32(*unit)})
	case "write":
		out, err = write(ctx, cl, *dir, *prefix, *files, *size, *threads, *until, *acked)
	case "read":
		out, err = read(ctx, cl, *dir, *prefix, *files, *size, *threads, *loops, *until)
	case "verify":
		out, err = verify(ctx, cl, *acked)
	case "meta":
		out, err = meta(ctx, cl, *dir, *n, *metrics)
	case "lock":
		err = lock(ctx, cl, *file)
	case "trylock":
		out, err = trylock(ctx, cl, *file, *timeout)
	default:
		err = fmt.Errorf("unknown subcommand %q", sub)
	}
	if err != nil {
		fail(err)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "driver:", err)
	os.Exit(1)
}

func dial(ctx context.Context, c common) (*client.Client, error) {
	o := client.Options{MDS: c.mds, Name: c.name}
	if c.cert != "" {
		creds, err := wire.LoadCreds(wire.TLSFiles{Cert: c.cert, Key: c.key, CA: c.ca})
		if err != nil {
			return nil, err
		}
		o.Creds = creds
	}
	return client.New(ctx, o)
}

func setup(ctx context.Context, cl *client.Client, dir string, lo client.Layout) (any, error) {
	if err := cl.MkdirAll(ctx, dir, 0o777); err != nil {
		return nil, err
	}
	a, err := cl.Stat(ctx, dir)
	if err != nil {
		return nil, err
	}
	if _, err := cl.SetLayout(ctx, a.Ino, lo); err != nil {
		return nil, err
	}
	return map[string]any{"dir": dir, "layout": lo}, nil
}

// writeFile writes name whole and closes it: the write is acknowledged
// when Close returns nil.
func writeFile(ctx context.Context, cl *client.Client, name string, size int64) error {
	f, err := cl.Create(ctx, name, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, block)
	for off := int64(0); off < size; off += block {
		n := min(block, size-off)
		content(buf, name, off/block)
		if _, err := f.WriteAt(ctx, buf[:n], off); err != nil {
			f.Close(ctx)
			return err
		}
	}
	if err := f.Fsync(ctx); err != nil {
		f.Close(ctx)
		return err
	}
	return f.Close(ctx)
}

func readFile(ctx context.Context, cl *client.Client, name string, size int64) error {
	f, err := cl.Open(ctx, name)
	if err != nil {
		return err
	}
	defer f.Close(ctx)
	if f.Size() != size {
		return fmt.Errorf("%s: size %d, want %d", name, f.Size(), size)
	}
	buf, want := make([]byte, block), make([]byte, block)
	for off := int64(0); off < size; off += block {
		n := min(block, size-off)
		if _, err := f.ReadAt(ctx, buf[:n], off); err != nil && !(errors.Is(err, io.EOF) && off+n == size) {
			return fmt.Errorf("%s at %d: %w", name, off, err)
		}
		content(want, name, off/block)
		if string(buf[:n]) != string(want[:n]) {
			return fmt.Errorf("%s: bytes differ in the MiB at %d", name, off)
		}
	}
	return nil
}

// result is what write and read print.
type result struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	MiBps   float64 `json:"MiBps"`
	Files   int     `json:"files"`
	Errors  int     `json:"errors"`
	// MaxFileSeconds is the slowest file's time: the stall a failure
	// caused.
	MaxFileSeconds float64  `json:"max_file_seconds"`
	FirstErrors    []string `json:"first_errors,omitempty"`
}

type tally struct {
	mu     sync.Mutex
	r      result
	acked  *os.File
	failed bool
}

func (t *tally) add(name string, size int64, d time.Duration, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.r.MaxFileSeconds = max(t.r.MaxFileSeconds, d.Seconds())
	if err != nil {
		t.r.Errors++
		if len(t.r.FirstErrors) < 5 {
			t.r.FirstErrors = append(t.r.FirstErrors, err.Error())
		}
		return
	}
	t.r.Files++
	t.r.Bytes += size
	if t.acked != nil {
		fmt.Fprintf(t.acked, "%s %d %d\n", name, size, time.Now().UnixNano())
	}
}

func (t *tally) finish(start time.Time) result {
	t.r.Seconds = time.Since(start).Seconds()
	t.r.MiBps = float64(t.r.Bytes) / (1 << 20) / t.r.Seconds
	return t.r
}

func write(ctx context.Context, cl *client.Client, dir, prefix string, files int, size int64, threads int, until, acked string) (any, error) {
	t := &tally{}
	if acked != "" {
		f, err := os.OpenFile(acked, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		t.acked = f
	}
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if until == "" && i >= files {
					return
				}
				if until != "" {
					if _, err := os.Stat(until); err == nil {
						return
					}
				}
				name := path.Join(dir, fmt.Sprintf("%s-%d", prefix, i))
				t0 := time.Now()
				err := writeFile(ctx, cl, name, size)
				t.add(name, size, time.Since(t0), err)
			}
		})
	}
	wg.Wait()
	return t.finish(start), nil
}

func read(ctx context.Context, cl *client.Client, dir, prefix string, files int, size int64, threads, loops int, until string) (any, error) {
	t := &tally{}
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if until == "" && i >= files*loops {
					return
				}
				if until != "" {
					if _, err := os.Stat(until); err == nil {
						return
					}
				}
				name := path.Join(dir, fmt.Sprintf("%s-%d", prefix, i%files))
				t0 := time.Now()
				err := readFile(ctx, cl, name, size)
				t.add(name, size, time.Since(t0), err)
			}
		})
	}
	wg.Wait()
	return t.finish(start), nil
}

// verify reads every file an acked list names and checks its bytes.
func verify(ctx context.Context, cl *client.Client, acked string) (any, error) {
	b, err := os.ReadFile(acked)
	if err != nil {
		return nil, err
	}
	t := &tally{}
	start := time.Now()
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var name string
		var size int64
		if _, err := fmt.Sscan(line, &name, &size); err != nil {
			continue
		}
		t0 := time.Now()
		t.add(name, size, time.Since(t0), readFile(ctx, cl, name, size))
	}
	return t.finish(start), nil
}

// meta times, on one thread, n creates, then n stats and n opens (with
// close) of the files made, each in a fresh client so that no cache
// from the previous phase answers (the stats of a fresh client still use
// its own directory leases as they go).
func meta(ctx context.Context, cl *client.Client, dir string, n int, metrics string) (any, error) {
	if err := cl.MkdirAll(ctx, dir, 0o777); err != nil {
		return nil, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = path.Join(dir, fmt.Sprintf("m-%d", i))
	}
	res := map[string]any{}
	phase := func(kind string, op func(string) error) error {
		lat := make([]float64, 0, n)
		ops0 := mdsOps(metrics)
		start := time.Now()
		for _, nm := range names {
			t0 := time.Now()
			if err := op(nm); err != nil {
				return fmt.Errorf("%s %s: %w", kind, nm, err)
			}
			lat = append(lat, time.Since(t0).Seconds()*1e3)
		}
		sort.Float64s(lat)
		res[kind+"_per_s"] = float64(n) / time.Since(start).Seconds()
		res[kind+"_p50_ms"] = lat[len(lat)/2]
		if metrics != "" {
			rpcs := map[string]float64{}
			for op, v := range mdsOps(metrics) {
				if d := (v - ops0[op]) / float64(n); d >= 0.05 {
					rpcs[op] = d
				}
			}
			res[kind+"_mds_rpcs"] = rpcs
		}
		return nil
	}
	err := phase("create", func(nm string) error {
		f, err := cl.Create(ctx, nm, 0o644)
		if err != nil {
			return err
		}
		return f.Close(ctx)
	})
	if err != nil {
		return nil, err
	}
	err = phase("stat", func(nm string) error { _, err := cl.Stat(ctx, nm); return err })
	if err != nil {
		return nil, err
	}
	err = phase("open", func(nm string) error {
		f, err := cl.Open(ctx, nm)
		if err != nil {
			return err
		}
		return f.Close(ctx)
	})
	return res, err
}

// mdsOps reads shoal_mds_ops_total of each op from the MDS's /metrics.
func mdsOps(url string) map[string]float64 {
	m := map[string]float64{}
	if url == "" {
		return m
	}
	r, err := http.Get(url)
	if err != nil {
		return m
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "shoal_mds_ops_total{")
		if !ok {
			continue
		}
		i := strings.Index(rest, `op="`)
		j := strings.LastIndexByte(rest, ' ')
		if i < 0 || j < 0 {
			continue
		}
		op := rest[i+4:]
		op = op[:strings.IndexByte(op, '"')]
		v, _ := strconv.ParseFloat(rest[j+1:], 64)
		m[op] += v
	}
	return m
}

func lockArgs() *client.FileLock {
	return &client.FileLock{Kind: client.LockPOSIX, Type: client.LockWrite, Start: 0, End: ^uint64(0), Pid: uint32(os.Getpid())}
}

// lock takes a write lock on file and holds it (the file stays open)
// until the process is killed.
func lock(ctx context.Context, cl *client.Client, file string) error {
	f, err := cl.Create(ctx, file, 0o644)
	if err != nil {
		return err
	}
	ok, _, err := cl.SetLock(ctx, f.Ino(), 1, lockArgs())
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("lock held by another owner")
	}
	fmt.Println(`{"locked":true}`)
	select {}
}

// trylock asks for the write lock every 100 ms until it is granted and
// prints how long that took.
func trylock(ctx context.Context, cl *client.Client, file string, timeout time.Duration) (any, error) {
	f, err := cl.Create(ctx, file, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close(ctx)
	start := time.Now()
	for tries := 1; ; tries++ {
		ok, _, err := cl.SetLock(ctx, f.Ino(), 2, lockArgs())
		if err != nil {
			return nil, err
		}
		if ok {
			return map[string]any{"granted_after_s": time.Since(start).Seconds(), "tries": tries}, nil
		}
		if time.Since(start) > timeout {
			return nil, fmt.Errorf("lock not granted after %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
