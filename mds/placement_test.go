package mds

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

var rs42 = &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}

func cands(n int, free uint64) []candidate {
	var out []candidate
	for i := range n {
		out = append(out, candidate{id: uint32(i + 1), capacity: 2 * free, free: free})
	}
	return out
}

func distinct(ids []uint32) bool {
	s := slices.Clone(ids)
	slices.Sort(s)
	return len(slices.Compact(s)) == len(ids)
}

// req42 is a placement request for RS 4+2 chunks of 1 MiB with the
// default options.
func req42(rot uint64) placeRequest {
	return placeRequest{layout: rs42, chunk: 1 << 20, rot: rot, minChunks: 4, fullRatio: DefaultFullRatio}
}

func TestPlace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []candidate
		req   placeRequest
		want  []uint32
		err   error
		msg   string
	}{
		{name: "exactly k+m", cands: cands(6, 1<<30), req: req42(0), want: []uint32{1, 2, 3, 4, 5, 6}},
		{name: "rotated", cands: cands(6, 1<<30), req: req42(2), want: []uint32{3, 4, 5, 6, 1, 2}},
		// Extent 5 on 8 OSTs: the second cycle of 4 extents (starts 0, 6,
		// 4, 2), so the chunks turn by one within the tile at 6.
		{name: "8 osts rotated", cands: cands(8, 1<<30), req: req42(5), want: []uint32{8, 1, 2, 3, 4, 7}},
		// Fewer than k+m up: narrow, the last parity slots unplaced.
		{name: "one down", cands: cands(5, 1<<30), req: req42(1), want: []uint32{2, 3, 4, 5, 1, 0}},
		{name: "two down", cands: cands(4, 1<<30), req: req42(0), want: []uint32{1, 2, 3, 4, 0, 0}},
		{name: "fewer than k", cands: cands(3, 1<<30), req: req42(0), err: errs.ErrUnavailable,
			msg: "need 4 OSTs up for RS 4+2, have 3"},
		{name: "min parity 1", cands: cands(4, 1<<30), err: errs.ErrUnavailable, msg: "need 5 OSTs up for RS 4+2, have 4",
			req: placeRequest{layout: rs42, chunk: 1 << 20, minChunks: 5, fullRatio: DefaultFullRatio}},
		{name: "excluded in the message", cands: cands(3, 1<<30), err: errs.ErrUnavailable, msg: "have 3 (and 2 excluded by the client)",
			req: placeRequest{layout: rs42, chunk: 1 << 20, minChunks: 4, fullRatio: DefaultFullRatio, excluded: 2}},
		{name: "all full", cands: cands(6, 100), req: req42(0), err: errs.ErrNoSpace,
			msg: "need 4 OSTs with room for a chunk of 1048576 bytes for RS 4+2, have 0 of 6 up"},
		{
			// OST 8 is much fuller than the rest: left out of the pool.
			name:  "fuller ost avoided",
			cands: append(cands(7, 1<<30), candidate{id: 8, capacity: 1 << 30, free: 1 << 28}),
			req:   req42(6), want: []uint32{2, 3, 4, 5, 6, 7}, // 7 in the pool: start 6*6 mod 7
		},
		{
			// With only k+m usable OSTs, the fuller ones are used anyway.
			name:  "fuller ost used when needed",
			cands: append(cands(5, 1<<30), candidate{id: 6, capacity: 1 << 30, free: 1 << 26}),
			req:   req42(0), want: []uint32{1, 2, 3, 4, 5, 6},
		},
		{
			// An OST without room for the chunk is skipped: narrow.
			name:  "one full",
			cands: append(cands(5, 1<<30), candidate{id: 6, capacity: 1 << 40, free: 1 << 19}),
			req:   req42(0), want: []uint32{1, 2, 3, 4, 5, 0},
		},
		{
			// Room, but past the full ratio once the chunk is there.
			name:  "past the full ratio",
			cands: append(cands(5, 1<<30), candidate{id: 6, capacity: 100 << 20, free: 5<<20 + 1<<19}),
			req:   req42(0), want: []uint32{1, 2, 3, 4, 5, 0},
		},
		{
			name:  "three full",
			cands: append(cands(3, 1<<30), candidate{id: 4, capacity: 1 << 30, free: 0}, candidate{id: 5, capacity: 1 << 30}, candidate{id: 6, capacity: 1 << 30}),
			req:   req42(0), err: errs.ErrNoSpace, msg: "have 3 of 6 up",
		},
		{
			// Capacity 0 means "unknown": never treated as full.
			name:  "unknown capacity",
			cands: []candidate{{id: 1}, {id: 2}, {id: 3}, {id: 4}, {id: 5}, {id: 6}},
			req:   req42(1), want: []uint32{2, 3, 4, 5, 6, 1},
		},
	} {
		got, err := place(tc.cands, tc.req)
		if tc.err != nil {
			if !errors.Is(err, tc.err) || !strings.Contains(fmt.Sprint(err), tc.msg) {
				t.Errorf("%s: err %v, want %v with %q", tc.name, err, tc.err, tc.msg)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}

// Consecutive extents tile 12 OSTs, with RS 2+1 and 4+2: disjoint
// placements one after the other, a cycle of them covering each OST
// once, and over many extents every OST with as many data and as many
// parity chunks as any other, each chunk index as often.
func TestPlaceTiles(t *testing.T) {
	rs21 := &mdspb.Layout{K: 2, M: 1, Unit: 1 << 20}
	for _, tc := range []struct {
		layout *mdspb.Layout
		first  [][]uint32 // the first placements, as written down
	}{
		{rs21, [][]uint32{
			{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}, // cycle 0
			{2, 3, 1}, {5, 6, 4}, {8, 9, 7}, {11, 12, 10}, // cycle 1: chunks turned by one
			{3, 1, 2}, {6, 4, 5}, {9, 7, 8}, {12, 10, 11}, // cycle 2
			{2, 3, 4}, {5, 6, 7}, {8, 9, 10}, {11, 12, 1}, // a new block: tiles moved by one
		}},
		{rs42, [][]uint32{
			{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12},
			{2, 3, 4, 5, 6, 1}, {8, 9, 10, 11, 12, 7},
			{3, 4, 5, 6, 1, 2}, {9, 10, 11, 12, 7, 8},
		}},
	} {
		k, w := int(tc.layout.K), int(tc.layout.K+tc.layout.M)
		name := fmt.Sprintf("RS %d+%d", k, w-k)
		const osts = 12
		cycle := osts / w
		var prev []uint32
		inCycle := map[uint32]int{}
		roles := map[uint32][]int{} // OST -> extents holding each chunk index
		const extents = 12 * 6 * 10
		for rot := range uint64(extents) {
			got, err := place(cands(osts, 1<<30), placeRequest{layout: tc.layout, chunk: 1 << 20, rot: rot, minChunks: k, fullRatio: DefaultFullRatio})
			if err != nil || len(got) != w || !distinct(got) || slices.Contains(got, 0) {
				t.Fatalf("%s extent %d: %v %v", name, rot, got, err)
			}
			if rot < uint64(len(tc.first)) && !slices.Equal(got, tc.first[rot]) {
				t.Errorf("%s extent %d on %v, want %v", name, rot, got, tc.first[rot])
			}
			if slices.ContainsFunc(got, func(o uint32) bool { return slices.Contains(prev, o) }) {
				t.Fatalf("%s extents %d and %d share OSTs: %v, %v", name, rot-1, rot, prev, got)
			}
			prev = got
			for j, o := range got {
				inCycle[o]++
				if roles[o] == nil {
					roles[o] = make([]int, w)
				}
				roles[o][j]++
			}
			if (rot+1)%uint64(cycle) == 0 {
				if len(inCycle) != osts || slices.ContainsFunc(slices.Collect(maps.Values(inCycle)), func(n int) bool { return n != 1 }) {
					t.Fatalf("%s cycle ending at extent %d: chunks per OST %v", name, rot, inCycle)
				}
				clear(inCycle)
			}
		}
		for o, r := range roles {
			for j, n := range r {
				if n != extents/osts {
					t.Fatalf("%s: OST %d holds chunk %d of %d extents, want %d (chunk counts %v)", name, o, j, n, extents/osts, r)
				}
			}
		}
	}
}

// tile over many pool sizes and widths: w distinct members; consecutive
// extents disjoint when the pool has room for two; over each block of w
// cycles every member takes every chunk index equally often; and with
// p > 2w as many different tiles as members (the old rule's p windows),
// so a failed OST's extents have their other chunks on many OSTs.
func TestTile(t *testing.T) {
	for w := 1; w <= 9; w++ {
		for p := w; p <= 3*w+2; p++ {
			g := gcd(p, w)
			block := w * p / g
			var prev []int
			counts := make([][]int, p)
			for i := range counts {
				counts[i] = make([]int, w)
			}
			tiles := map[string]bool{}
			for rot := range uint64(block * (p + 1)) {
				got := tile(p, w, rot)
				s := slices.Clone(got)
				slices.Sort(s)
				if len(got) != w || len(slices.Compact(s)) != w || s[0] < 0 || s[len(s)-1] >= p {
					t.Fatalf("p %d w %d extent %d: %v", p, w, rot, got)
				}
				tiles[fmt.Sprint(s)] = true
				if p >= 2*w && slices.ContainsFunc(got, func(i int) bool { return slices.Contains(prev, i) }) {
					t.Fatalf("p %d w %d extents %d and %d overlap: %v, %v", p, w, rot-1, rot, prev, got)
				}
				prev = got
				for j, i := range got {
					counts[i][j]++
				}
				if (rot+1)%uint64(block) == 0 {
					for i, c := range counts {
						for j, n := range c {
							if n != w/g {
								t.Fatalf("p %d w %d block ending at extent %d: member %d has chunk %d %d times, want %d", p, w, rot, i, j, n, w/g)
							}
						}
						clear(c)
					}
				}
			}
			if p > 2*w && len(tiles) != p {
				t.Errorf("p %d w %d: %d different tiles, want %d", p, w, len(tiles), p)
			}
		}
	}
}

func TestFullness(t *testing.T) {
	o := PlacementOptions{}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		capacity, free uint64
		near, full     bool
	}{
		{0, 0, false, false}, // unknown
		{100 << 20, 50 << 20, false, false},
		{100 << 20, 10 << 20, true, false}, // 90%
		{100 << 20, 9 << 20, true, false},  // 91%, and a 4 MiB chunk still fits
		{100 << 20, 8 << 20, true, true},   // 92%: a 4 MiB chunk would pass 95%
		{100 << 20, 5 << 20, true, true},   // 95%
		{1 << 40, 1 << 19, true, true},     // no room for a chunk
	} {
		near, full := o.fullness(tc.capacity, tc.free, 1<<20)
		if near != tc.near || full != tc.full {
			t.Errorf("capacity %d free %d: nearfull %v full %v, want %v %v", tc.capacity, tc.free, near, full, tc.near, tc.full)
		}
	}
	for _, bad := range []PlacementOptions{{MinParity: -1}, {FullRatio: 1.5}, {NearFullRatio: 0.99}} {
		if err := bad.setDefaults(); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// Through the server: 8 OSTs, consecutive extents of one file get
// different placements and every OST gets chunks; excludes and down OSTs
// are honoured.
func TestAllocPlacement(t *testing.T) {
	e := newEnv(t)
	ids := e.registerOsts(8)
	if !slices.Equal(ids, []uint32{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("ids %v", ids)
	}
	f := e.create(rootIno, "f")
	ex := e.alloc(f.Ino, 16)
	used := make(map[uint32]int)
	firstChunk := make(map[uint32]bool)
	for i, x := range ex {
		if len(x.Osts) != 6 || !distinct(x.Osts) {
			t.Fatalf("extent %d placement %v", i, x.Osts)
		}
		if x.Length != 0 || x.Layout.K != 4 || x.Layout.M != 2 {
			t.Fatalf("extent %v", x)
		}
		if i > 0 && slices.Equal(x.Osts, ex[i-1].Osts) {
			t.Fatalf("extents %d and %d share placement %v", i-1, i, x.Osts)
		}
		for _, o := range x.Osts {
			used[o]++
		}
		firstChunk[x.Osts[0]] = true
		if i > 0 && x.Id <= ex[i-1].Id {
			t.Fatalf("ids not increasing: %d after %d", x.Id, ex[i-1].Id)
		}
	}
	if len(used) != 8 || len(firstChunk) != 8 {
		t.Fatalf("not spread: chunks per OST %v, first chunks on %v", used, firstChunk)
	}
	for id, n := range used {
		if n != 12 { // 16 extents * 6 chunks / 8 OSTs
			t.Fatalf("uneven spread: OST %d has %d chunks (%v)", id, n, used)
		}
	}

	r, err := e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 4, ExcludeOsts: []uint32{3, 7}})
	wantErr(t, "alloc with exclude", err, nil)
	for _, x := range r.Extents {
		if slices.Contains(x.Osts, 3) || slices.Contains(x.Osts, 7) || !distinct(x.Osts) {
			t.Fatalf("placement %v ignores exclude", x.Osts)
		}
	}
	// Three excluded of eight: five left, one parity slot unplaced.
	r, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 1, ExcludeOsts: []uint32{1, 2, 3}})
	wantErr(t, "alloc with three excluded", err, nil)
	if x := r.Extents[0].Osts; placed(x) != 5 || x[5] != 0 || slices.ContainsFunc(x[:5], func(o uint32) bool { return o <= 3 }) || r.MinChunks != 4 {
		t.Fatalf("narrow placement %v (min %d)", x, r.MinChunks)
	}
	_, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 1, ExcludeOsts: []uint32{1, 2, 3, 4, 5}})
	wantErr(t, "alloc with too many excluded", err, errs.ErrUnavailable)

	// Four OSTs stop heartbeating: narrow extents on the four left.
	e.clock.Advance(4 * time.Second)
	e.heartbeatAll(ids[:4])
	e.clock.Advance(2 * time.Second)
	r, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 2})
	wantErr(t, "alloc with 4 up", err, nil)
	for _, x := range r.Extents {
		if !slices.Equal(x.Osts[4:], []uint32{0, 0}) || !distinct(x.Osts[:4]) || slices.ContainsFunc(x.Osts[:4], func(o uint32) bool { return o > 4 }) {
			t.Fatalf("placement with 4 up: %v", x.Osts)
		}
	}
	// Five stop: three left, fewer than k.
	e.clock.Advance(4 * time.Second)
	e.heartbeatAll(ids[:3])
	e.clock.Advance(2 * time.Second)
	_, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 1})
	wantErr(t, "alloc with 3 up", err, errs.ErrUnavailable)
	if !strings.Contains(err.Error(), "need 4 OSTs up for RS 4+2, have 3") {
		t.Fatalf("message %q", err)
	}
	e.check()
}

func TestOstRegistry(t *testing.T) {
	e := newEnv(t)
	ids := e.registerOsts(3)
	// Same uuid, same id, new address.
	r, err := e.c.RegisterOst(ctx, &mdspb.RegisterOstRequest{Uuid: "ost-2", Addr: "10.0.0.2:7000", Capacity: 100, Free: 50})
	wantErr(t, "re-register", err, nil)
	if r.Id != ids[1] {
		t.Fatalf("re-register id %d, want %d", r.Id, ids[1])
	}
	_, err = e.c.RegisterOst(ctx, &mdspb.RegisterOstRequest{Addr: "x:1"})
	wantErr(t, "register without uuid", err, errs.ErrInvalid)
	_, err = e.c.RegisterOst(ctx, &mdspb.RegisterOstRequest{Uuid: "u"})
	wantErr(t, "register without addr", err, errs.ErrInvalid)
	_, err = e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: 42})
	wantErr(t, "heartbeat unknown", err, errs.ErrNotFound)

	_, err = e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: ids[0], Addr: "10.0.0.1:9", Capacity: 1000, Free: 400, Used: 600, Chunks: 12})
	wantErr(t, "heartbeat", err, nil)
	l, err := e.c.ListOsts(ctx, &mdspb.ListOstsRequest{})
	wantErr(t, "list", err, nil)
	if len(l.Osts) != 3 {
		t.Fatalf("list %v", l.Osts)
	}
	o := l.Osts[0]
	if o.Id != ids[0] || o.Uuid != "ost-1" || o.Addr != "10.0.0.1:9" || o.Capacity != 1000 || o.Free != 400 ||
		o.Used != 600 || o.Chunks != 12 || !o.Up || o.LastHeartbeatNs != e.clock.Now().UnixNano() {
		t.Fatalf("ost %v", o)
	}
	st, err := e.c.StatFs(ctx, &mdspb.StatFsRequest{})
	wantErr(t, "statfs", err, nil)
	// StatFs reports file bytes under the root's layout, RS 2+1 on a
	// new file system of 3 OSTs (layout_fit.go): 2/3 of raw. The free
	// space of OSTs without room for a cell (full) does not count.
	if st.OstsUp != 3 || st.OstsTotal != 3 || st.TotalBytes != (1000+100+1<<40)/3*2 || st.FreeBytes != (1<<40)/3*2 || st.Files != 1 {
		t.Fatalf("statfs %v", st)
	}
	// OSTs on one file system are counted once.
	e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: ids[0], Capacity: 1000, Free: 400, FsId: "disk-a"})
	e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: ids[1], Capacity: 1000, Free: 400, FsId: "disk-a"})
	st, _ = e.c.StatFs(ctx, &mdspb.StatFsRequest{})
	if st.TotalBytes != (1000+1<<40)/3*2 {
		t.Fatalf("statfs with a shared file system: %v", st)
	}

	// Past the heartbeat timeout only the OST that heartbeated is up.
	e.clock.Advance(3 * time.Second)
	e.heartbeatAll(ids[2:])
	e.clock.Advance(3 * time.Second)
	l, _ = e.c.ListOsts(ctx, &mdspb.ListOstsRequest{})
	for _, o := range l.Osts {
		if o.Up != (o.Id == ids[2]) {
			t.Fatalf("ost %d up=%v", o.Id, o.Up)
		}
	}
	st, _ = e.c.StatFs(ctx, &mdspb.StatFsRequest{})
	if st.OstsUp != 1 || st.OstsTotal != 3 {
		t.Fatalf("statfs %v", st)
	}

	// The registry and the address change survive a restart; ids keep
	// counting; every OST counts as up for one heartbeat timeout (the
	// restart grace), then down until it heartbeats.
	e = e.reopen()
	l, _ = e.c.ListOsts(ctx, &mdspb.ListOstsRequest{})
	if len(l.Osts) != 3 || l.Osts[0].Addr != "10.0.0.1:9" || l.Osts[1].Addr != "10.0.0.2:7000" || !l.Osts[0].Up || l.Osts[0].LastHeartbeatNs != 0 {
		t.Fatalf("after reopen %v", l.Osts)
	}
	e.clock.Advance(e.s.o.HeartbeatTimeout + time.Millisecond)
	l, _ = e.c.ListOsts(ctx, &mdspb.ListOstsRequest{})
	if l.Osts[0].Up {
		t.Fatalf("past the restart grace %v", l.Osts)
	}
	r, err = e.c.RegisterOst(ctx, &mdspb.RegisterOstRequest{Uuid: "ost-9", Addr: "x:1"})
	wantErr(t, "register new", err, nil)
	if r.Id != 4 {
		t.Fatalf("new id %d, want 4", r.Id)
	}
	r, _ = e.c.RegisterOst(ctx, &mdspb.RegisterOstRequest{Uuid: "ost-1", Addr: "x:2"})
	if r.Id != ids[0] {
		t.Fatalf("ost-1 id %d after reopen", r.Id)
	}
}

// A client may commit an extent with slots it could not write set to 0,
// keeping at least min_chunks; the extent is listed as narrow and the
// chunk it gave up on queued for deletion on its OST. Other changes of
// the placement, or fewer chunks, are refused.
func TestCommitNarrow(t *testing.T) {
	e := newEnv(t)
	e.registerOsts(6)
	f := e.create(rootIno, "f")
	r, err := e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 1, Length: 4 * mib})
	wantErr(t, "alloc", err, nil)
	ex := r.Extents[0]
	if r.MinChunks != 4 || placed(ex.Osts) != 6 {
		t.Fatalf("alloc %v min %d", ex.Osts, r.MinChunks)
	}
	tooFew := written(ex, 4*mib)
	tooFew.Osts[3], tooFew.Osts[4], tooFew.Osts[5] = 0, 0, 0
	moved := written(ex, 4*mib)
	moved.Osts[5] = 99
	for _, tc := range []struct {
		what string
		x    *mdspb.Extent
	}{{"three dropped", tooFew}, {"slot moved", moved}} {
		_, err := e.c.CommitExtents(ctx, &mdspb.CommitExtentsRequest{Ino: f.Ino, Extents: []*mdspb.ExtentRef{ref(0, mib, 0, tc.x)}})
		wantErr(t, tc.what, err, errs.ErrInvalid)
	}
	narrow := written(ex, 4*mib)
	gaveUp := narrow.Osts[4]
	narrow.Osts[4] = 0
	e.commit(f.Ino, ref(0, 4*mib, 0, narrow))
	g, err := e.c.GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: f.Ino})
	wantErr(t, "get", err, nil)
	if got := g.Extents[0].Extent.Osts; !slices.Equal(got, narrow.Osts) {
		t.Fatalf("committed placement %v, want %v", got, narrow.Osts)
	}
	if n := e.s.narrowCount(); n != 1 {
		t.Fatalf("%d narrow extents, want 1", n)
	}
	l, err := e.c.ListOsts(ctx, &mdspb.ListOstsRequest{})
	if err != nil || l.NarrowExtents != 1 {
		t.Fatalf("ListOsts narrow %d (%v)", l.GetNarrowExtents(), err)
	}
	var retired []string
	scan(e.s.db, []byte{prefixRetire}, func(k, v []byte) (bool, error) {
		_, ext, idx, _ := decodeRetireKey(k)
		retired = append(retired, fmt.Sprintf("%d.%d@%d", ext, idx, uint32(v[3])))
		return true, nil
	})
	if want := fmt.Sprintf("%d.4@%d", ex.Id, gaveUp); !slices.Equal(retired, []string{want}) {
		t.Fatalf("retired %v, want %s", retired, want)
	}
	// A later commit of the same extent (another range of it) with the
	// placement it was allocated with is fine: the stored one is kept.
	e.commit(f.Ino, ref(4*mib, mib, 0, written(ex, 4*mib)))
	e.check()
}

// An OST's free space, less what was placed there since it reported it,
// decides whether it can take chunks: one OST filling up is left out
// and extents go narrow on the others; with fewer than k with room, the
// write is refused with ErrNoSpace. ListOsts marks the OST full.
func TestAllocFullOst(t *testing.T) {
	var logs syncBuffer
	o := testOptions(t)
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	e := startEnv(t, o, newClock())
	ids := e.registerOsts(6)
	// OST 6 has 10 MiB left of 100 MiB: room for 4 MiB before 95%.
	_, err := e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: ids[5], Capacity: 100 * mib, Free: 10 * mib})
	wantErr(t, "heartbeat", err, nil)
	f := e.create(rootIno, "f")
	// Chunks of 1 MiB (extents of 4 MiB).
	r, err := e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 8, Length: 4 * mib})
	wantErr(t, "alloc", err, nil)
	on6 := 0
	for _, x := range r.Extents {
		if slices.Contains(x.Osts, ids[5]) {
			on6++
		} else if placed(x.Osts) != 5 {
			t.Fatalf("placement %v", x.Osts)
		}
	}
	if on6 != 5 {
		t.Fatalf("%d chunks on the nearly full OST, want 5 (up to 95%% of 100 MiB)", on6)
	}
	l, _ := e.c.ListOsts(ctx, &mdspb.ListOstsRequest{})
	if o := l.Osts[5]; !o.Nearfull || o.Full {
		t.Fatalf("ost 6 as reported: %v", o)
	}
	// It reports itself full: nearfull and full.
	e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: ids[5], Capacity: 100 * mib, Free: 4 * mib})
	l, _ = e.c.ListOsts(ctx, &mdspb.ListOstsRequest{})
	if o := l.Osts[5]; !o.Nearfull || !o.Full {
		t.Fatalf("ost 6 as reported: %v", o)
	}
	// Three OSTs full: ENOSPC.
	for _, id := range ids[:3] {
		e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: id, Capacity: 100 * mib, Free: 0})
	}
	_, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 1, Length: 4 * mib})
	wantErr(t, "alloc with 2 OSTs with room", err, errs.ErrNoSpace)
	if !strings.Contains(err.Error(), "need 4 OSTs with room for a chunk of 1048576 bytes for RS 4+2, have 2 of 6 up") {
		t.Fatalf("message %q", err)
	}
	// The MDS logs the refusal with the same words, once per ten
	// seconds however many there are.
	e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 1, Length: 4 * mib})
	if l := logs.String(); strings.Count(l, "cannot place extent; write refused") != 1 || !strings.Contains(l, "have 2 of 6 up") {
		t.Fatalf("log:\n%s", l)
	}
	if !strings.Contains(logs.String(), "writing narrow extents") {
		t.Fatalf("no log line about narrow extents:\n%s", logs.String())
	}
	st, err := e.c.StatFs(ctx, &mdspb.StatFsRequest{})
	wantErr(t, "statfs", err, nil)
	if st.FreeBytes != 2*(1<<40)/6*4 {
		t.Fatalf("statfs free %d, want the free space of the two OSTs with room", st.FreeBytes)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
