package gds

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoalfs/shoal/internal/layout"
)

// TestReadLayouts reads files of several layouts and shapes (partial rows,
// file tails, several extents, holes) at many offsets into aligned and
// misaligned destinations, with all, some and no OSTs local, and checks
// every byte and the report's accounting.
func TestReadLayouts(t *testing.T) {
	cases := []struct {
		lo         layout.Layout
		osts, rows int
	}{
		{layout.Layout{K: 4, M: 2, Unit: 16 << 10}, 6, 2},
		{layout.Layout{K: 1, M: 2, Unit: 8 << 10}, 3, 3},
		{layout.Layout{K: 3, M: 0, Unit: 4 << 10}, 3, 4},
	}
	for _, tc := range cases {
		t.Run(tc.lo.String(), func(t *testing.T) {
			c := startCluster(t, tc.lo, tc.osts, tc.rows)
			ctx := context.Background()
			rd := tc.lo.RowData()
			sizes := []int64{100, rd + 1, 2*rd*int64(tc.rows) + rd/2 + 3, 5*rd*int64(tc.rows) + 4096}
			files := map[string][]byte{}
			for i, n := range sizes {
				p := "/f" + string(rune('a'+i))
				files[p] = randBytes(uint64(i+1), int(n))
				c.writeFile(t, p, files[p])
			}
			// A file with a hole: 5000 bytes, then data again past 3 rows.
			hole := make([]byte, 3*rd+777)
			copy(hole, randBytes(99, 5000))
			copy(hole[3*rd:], randBytes(98, 777))
			f, err := c.cl.Create(ctx, "/hole", 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(ctx, hole[:5000], 0)
			f.Fsync(ctx)
			f.WriteAt(ctx, hole[3*rd:], 3*rd)
			if err := f.Close(ctx); err != nil {
				t.Fatal(err)
			}
			files["/hole"] = hole

			for _, nlocal := range []int{tc.osts, 1, 0} {
				dev := OpenHost(HostOptions{})
				defer dev.Close()
				r := newTestReader(t, c, dev, Options{LocalOSTs: c.localOSTs(t, nlocal), SlotSize: 8 << 10, StagingSlots: 3})
				for p, want := range files {
					gf, err := r.Open(ctx, p)
					if err != nil {
						t.Fatal(err)
					}
					size := int64(len(want))
					buf, err := dev.Alloc(size+2*Align, true)
					if err != nil {
						t.Fatal(err)
					}
					ranges := [][2]int64{{0, size}, {1, size - 1}, {size / 3, size / 3}, {size - 1, 1}}
					if size > 3*Align {
						ranges = append(ranges, [2]int64{Align, size - Align}, [2]int64{Align + 7, Align})
					}
					for _, rg := range ranges {
						for _, dstOff := range []int64{0, Align, 100} {
							off, n := rg[0], rg[1]
							if n <= 0 {
								continue
							}
							rep, err := r.ReadAt(ctx, gf, buf, dstOff, off, n)
							if err != nil {
								t.Fatalf("%s [%d,+%d) -> %d: %v", p, off, n, dstOff, err)
							}
							mustEqual(t, p, readBack(t, buf, dstOff, n), want[off:off+n])
							if rep.Bytes != n || rep.Local+rep.Remote+rep.Zero != n || rep.Paths[PathHost]+rep.Zero != n {
								t.Fatalf("%s: report %+v for %d bytes", p, rep, n)
							}
							if nlocal == 0 && rep.Local != 0 {
								t.Fatalf("local bytes %d with no local OST", rep.Local)
							}
							if nlocal == tc.osts && p != "/hole" && rep.Remote != 0 {
								t.Fatalf("%s [%d,+%d): remote bytes %d with every OST local: %+v", p, off, n, rep.Remote, rep)
							}
						}
					}
					// Past the end: cut, io.EOF, the rest of the buffer untouched.
					buf.Zero(0, buf.Len())
					rep, err := r.ReadAt(ctx, gf, buf, 0, size-10, 100)
					if !errors.Is(err, io.EOF) || rep.Bytes != 10 {
						t.Fatalf("read past the end: %+v, %v", rep, err)
					}
					mustEqual(t, "tail", readBack(t, buf, 0, 10), want[size-10:])
					mustEqual(t, "untouched", readBack(t, buf, 10, 90), make([]byte, 90))
					if _, err := r.ReadAt(ctx, gf, buf, 0, size, 1); !errors.Is(err, io.EOF) {
						t.Fatalf("read at the end: %v", err)
					}
					if _, err := r.ReadAt(ctx, gf, buf, buf.Len()-1, 0, 2); err == nil {
						t.Fatal("read past the buffer's end succeeded")
					}
					buf.Free()
					gf.Close(ctx)
				}
			}
		})
	}
}

// Aligned whole-file reads with every OST local go direct, and their
// checksums are checked.
func TestReadAllLocalIsDirect(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 64 << 10}
	c := startCluster(t, lo, 6, 2)
	ctx := context.Background()
	data := randBytes(7, int(5*lo.RowData()+3*Align))
	c.writeFile(t, "/big", data)
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	reg := prometheus.NewRegistry()
	r := newTestReader(t, c, dev, Options{LocalOSTs: c.localOSTs(t, 6), Registry: reg})
	f, err := r.Open(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	buf, _ := dev.Alloc(int64(len(data)), true)
	rep, err := r.ReadAt(ctx, f, buf, 0, 0, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "big", buf.Host(), data)
	if rep.Local != int64(len(data)) || rep.Remote != 0 || rep.Path() != "host" || rep.Verify <= 0 {
		t.Fatalf("report %+v", rep)
	}
	if got := testutil.ToFloat64(r.m.bytes.WithLabelValues("host", "local")); got != float64(len(data)) {
		t.Fatalf("shoal_gds_read_bytes_total{host,local} = %v", got)
	}
}

// TestDegradedRead stops two OSTs of a 4+2 cluster: reads rebuild from
// parity through the client and are correct.
func TestDegradedRead(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 16 << 10}
	c := startCluster(t, lo, 6, 2)
	ctx := context.Background()
	data := randBytes(3, int(7*lo.RowData()+1234))
	c.writeFile(t, "/d", data)
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	// OST 5 (index 4) is local and stays up; 0 and 1 go down.
	local, err := DiscoverLocalOSTs(c.ostDirs(6)[4:5])
	if err != nil {
		t.Fatal(err)
	}
	r := newTestReader(t, c, dev, Options{LocalOSTs: local, SlotSize: 16 << 10})
	f, err := r.Open(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	c.KillOST(0)
	c.KillOST(1)
	buf, _ := dev.Alloc(int64(len(data)), true)
	rep, err := r.ReadAt(ctx, f, buf, 0, 0, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "degraded", buf.Host(), data)
	if rep.Remote == 0 {
		t.Fatalf("report %+v", rep)
	}
	// A third OST down: more than m lost, the read fails and says so.
	c.KillOST(2)
	if _, err := r.ReadAt(ctx, f, buf, 0, 0, int64(len(data))); err == nil {
		t.Fatal("read with 3 of 6 OSTs down succeeded")
	}
}

// TestLocalChecksumFailure flips a byte in a local chunk file and deletes
// another: the direct read detects both, the pieces are read through the
// client (which rebuilds them from parity: the OST finds the flipped byte
// too), and the bytes are right.
func TestLocalChecksumFailure(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 16 << 10}
	c := startCluster(t, lo, 6, 2)
	ctx := context.Background()
	data := randBytes(5, int(4*lo.RowData()))
	c.writeFile(t, "/c", data)
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	reg := prometheus.NewRegistry()
	r := newTestReader(t, c, dev, Options{LocalOSTs: c.localOSTs(t, 6), Registry: reg})
	f, err := r.Open(ctx, "/c")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	_, refs := f.snapshot()
	ext := refs[0].Extent
	local := c.localOSTs(t, 6)
	corrupt := chunkPath(local[ext.OSTs[0]], ext.ID, 0) // data chunk 0
	missing := chunkPath(local[ext.OSTs[1]], ext.ID, 1) // data chunk 1
	flipByte(t, corrupt, lo.Unit+100)                   // row 1
	if err := removeFile(missing); err != nil {
		t.Fatal(err)
	}
	buf, _ := dev.Alloc(int64(len(data)), true)
	rep, err := r.ReadAt(ctx, f, buf, 0, 0, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "after corruption", buf.Host(), data)
	if rep.Fallback == 0 || len(rep.LocalFailures) < 2 {
		t.Fatalf("report %+v", rep)
	}
	// Both rows' cells of chunk 0 share its first 64 KiB checksum block.
	if got := testutil.ToFloat64(r.m.localFailed.WithLabelValues("corrupt")); got != 2 {
		t.Fatalf("corrupt failures %v, want 2: %v", got, rep.LocalFailures)
	}
	if got := testutil.ToFloat64(r.m.localFailed.WithLabelValues("missing")); got < 1 {
		t.Fatalf("missing failures %v: %v", got, rep.LocalFailures)
	}
	// The unaligned (bounce) path checks local pieces too.
	// Extent byte RowData()+50 is in row 1, cell 0: the flipped chunk.
	rep, err = r.ReadAt(ctx, f, buf, 1, lo.RowData()+50, 200)
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "unaligned after corruption", readBack(t, buf, 1, 200), data[lo.RowData()+50:lo.RowData()+250])
	if rep.Fallback != 200 || !strings.Contains(strings.Join(rep.LocalFailures, "\n"), "crc32c") {
		t.Fatalf("report %+v", rep)
	}
}

// TestStagingBackPressure reads through two slots whose copies are slow:
// never more than two slots are busy, both are used at once (the pipeline
// overlaps fetch and copy), no slot is reused before its copy completes
// (the bytes would be wrong), and concurrent reads share the slots.
func TestStagingBackPressure(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 16 << 10}
	c := startCluster(t, lo, 6, 4)
	ctx := context.Background()
	data := randBytes(11, int(6*lo.RowData()+999))
	c.writeFile(t, "/p", data)
	dev := OpenHost(HostOptions{CopyDelay: 2 * time.Millisecond, Streams: 2})
	defer dev.Close()
	r := newTestReader(t, c, dev, Options{StagingSlots: 2, SlotSize: 8 << 10})
	var mu sync.Mutex
	maxBusy := 0
	r.onSlot = func(busy int) {
		mu.Lock()
		maxBusy = max(maxBusy, busy)
		mu.Unlock()
	}
	f, err := r.Open(ctx, "/p")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, err := dev.Alloc(int64(len(data)), true)
			if err != nil {
				t.Error(err)
				return
			}
			defer buf.Free()
			rep, err := r.ReadAt(ctx, f, buf, 0, 0, int64(len(data)))
			if err != nil {
				t.Error(err)
				return
			}
			if rep.Pieces < 10 {
				t.Errorf("only %d pieces", rep.Pieces)
			}
			mustEqual(t, "staged", buf.Host(), data)
		}()
	}
	wg.Wait()
	if maxBusy != 2 {
		t.Fatalf("at most %d slots busy, want exactly 2", maxBusy)
	}
	if len(r.slots) != 2 {
		t.Fatalf("%d slots free after the reads, want 2", len(r.slots))
	}
	// A cancelled read stops and gives every slot back.
	cctx, cancel := context.WithCancel(ctx)
	buf, _ := dev.Alloc(int64(len(data)), true)
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	if _, err := r.ReadAt(cctx, f, buf, 0, 0, int64(len(data))); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	if len(r.slots) != 2 {
		t.Fatalf("%d slots free after a cancelled read, want 2", len(r.slots))
	}
}
