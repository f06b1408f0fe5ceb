package mds

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/mds/mdspb"
)

var rs42 = &mdspb.Layout{K: 4, M: 2, Unit: 1 << 20}

func cands(n int, free uint64) []candidate {
	var out []candidate
	for i := range n {
		out = append(out, candidate{id: uint32(i + 1), capacity: 1 << 40, free: free})
	}
	return out
}

func distinct(ids []uint32) bool {
	s := slices.Clone(ids)
	slices.Sort(s)
	return len(slices.Compact(s)) == len(ids)
}

func TestPlace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []candidate
		rot   uint64
		want  []uint32
		err   error
	}{
		{"exactly k+m", cands(6, 1<<30), 0, []uint32{1, 2, 3, 4, 5, 6}, nil},
		{"rotated", cands(6, 1<<30), 2, []uint32{3, 4, 5, 6, 1, 2}, nil},
		{"8 osts rotated", cands(8, 1<<30), 5, []uint32{6, 7, 8, 1, 2, 3}, nil},
		{"too few", cands(4, 1<<30), 0, nil, errs.ErrUnavailable},
		{"all full", cands(6, 100), 0, nil, errs.ErrNoSpace},
		{
			// OST 8 is much fuller than the rest: left out of the pool.
			"fuller ost avoided",
			append(cands(7, 1<<30), candidate{id: 8, capacity: 1 << 40, free: 1 << 28}),
			6, []uint32{7, 1, 2, 3, 4, 5}, nil,
		},
		{
			// With only k+m usable OSTs, the fuller ones are used anyway.
			"fuller ost used when needed",
			append(cands(5, 1<<30), candidate{id: 6, capacity: 1 << 40, free: 1 << 21}),
			0, []uint32{1, 2, 3, 4, 5, 6}, nil,
		},
		{
			// Capacity 0 means "unknown": never treated as full.
			"unknown capacity",
			[]candidate{{id: 1}, {id: 2}, {id: 3}, {id: 4}, {id: 5}, {id: 6}},
			1, []uint32{2, 3, 4, 5, 6, 1}, nil,
		},
	} {
		got, err := place(tc.cands, rs42, tc.rot)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
	_, err := place(cands(4, 1<<30), rs42, 0)
	if !strings.Contains(err.Error(), "need 6 OSTs up, have 4") {
		t.Errorf("message %q", err)
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
	_, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 1, ExcludeOsts: []uint32{1, 2, 3}})
	wantErr(t, "alloc with too many excluded", err, errs.ErrUnavailable)

	// Four OSTs stop heartbeating.
	e.clock.Advance(4 * time.Second)
	e.heartbeatAll(ids[:4])
	e.clock.Advance(2 * time.Second)
	_, err = e.c.AllocExtents(ctx, &mdspb.AllocExtentsRequest{Ino: f.Ino, Count: 1})
	wantErr(t, "alloc with 4 up", err, errs.ErrUnavailable)
	if !strings.Contains(err.Error(), "need 6 OSTs up, have 4") {
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
	// StatFs reports file bytes under the root's RS 4+2 layout: 4/6 of raw.
	if st.OstsUp != 3 || st.OstsTotal != 3 || st.TotalBytes != (1000+100+1<<40)/6*4 || st.FreeBytes != (400+50+1<<40)/6*4 || st.Files != 1 {
		t.Fatalf("statfs %v", st)
	}
	// OSTs on one file system are counted once.
	e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: ids[0], Capacity: 1000, Free: 400, FsId: "disk-a"})
	e.c.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: ids[1], Capacity: 1000, Free: 400, FsId: "disk-a"})
	st, _ = e.c.StatFs(ctx, &mdspb.StatFsRequest{})
	if st.TotalBytes != (1000+1<<40)/6*4 {
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
	// counting; every OST is down until it heartbeats.
	e = e.reopen()
	l, _ = e.c.ListOsts(ctx, &mdspb.ListOstsRequest{})
	if len(l.Osts) != 3 || l.Osts[0].Addr != "10.0.0.1:9" || l.Osts[1].Addr != "10.0.0.2:7000" || l.Osts[0].Up {
		t.Fatalf("after reopen %v", l.Osts)
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
