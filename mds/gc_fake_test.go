package mds

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// The GC needs no server: a round over a scripted queue and OST table.
// An OST that fails keeps its entries queued (due again after
// gcRetryDelay) and is the only one asked again; the OSTs that confirmed
// are not.
func TestGCRoundWithoutServer(t *testing.T) {
	st := &fakeGCStore{due: []gcEntry{
		{key: []byte("g1"), ext: &mdspb.Extent{Id: 1, Osts: []uint32{1, 2}}},
		{key: []byte("g2"), ext: &mdspb.Extent{Id: 2, Osts: []uint32{1, 3}}},
	}}
	del := &fakeDeleter{fail: map[uint32]bool{2: true}}
	clock := time.Unix(1000, 0)
	g := newGC(gcConfig{
		Interval: time.Hour, Grace: time.Minute, Now: func() time.Time { return clock }, Log: slog.New(slog.DiscardHandler),
		ChunksDeleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "d"}), ExtentsDone: prometheus.NewCounter(prometheus.CounterOpts{Name: "e"}),
		Store: st, Osts: fakeOsts{1: true, 2: true, 3: true}, Chunks: del,
	})
	if err := g.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true}; !slices.Equal(st.finished, want) {
		t.Fatalf("first round finished %v, want %v", st.finished, want)
	}
	if want := clock.UnixNano() + int64(gcRetryDelay); st.retryAt != want {
		t.Fatalf("retry at %d, want %d", st.retryAt, want)
	}
	st.due = st.due[:1]
	del.fail, del.asked = nil, nil
	if err := g.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.finished, []bool{true}) || !slices.Equal(del.asked, []uint32{2}) {
		t.Fatalf("second round: finished %v, OSTs asked %v; want [true], [2]", st.finished, del.asked)
	}
	if len(g.confirmed) != 0 {
		t.Fatalf("confirmed OSTs left after the entries finished: %v", g.confirmed)
	}
}

type fakeGCStore struct {
	due      []gcEntry
	finished []bool
	retryAt  int64
}

func (f *fakeGCStore) expirePending(int64, time.Duration) error { return nil }
func (f *fakeGCStore) expireRequests(int64) error               { return nil }
func (f *fakeGCStore) dueGC(int64) ([]gcEntry, error)           { return f.due, nil }
func (f *fakeGCStore) requeueGC(due []gcEntry, finished []bool, at int64) error {
	f.finished, f.retryAt = slices.Clone(finished), at
	return nil
}

// fakeOsts is an OST table of up, active OSTs.
type fakeOsts map[uint32]bool

func (f fakeOsts) ostView() ostView {
	v := ostView{infos: map[uint32]*mdspb.OstInfo{}, up: map[uint32]bool{}, dest: map[uint32]bool{}, state: map[uint32]uint32{}}
	for id, up := range f {
		st := StateDown
		if up {
			st = StateUp
		}
		v.infos[id] = &mdspb.OstInfo{Id: id, Up: up, State: st}
		v.up[id], v.dest[id] = up, up
	}
	return v
}

type fakeDeleter struct {
	fail  map[uint32]bool
	asked []uint32
}

func (f *fakeDeleter) deleteChunks(_ context.Context, info *mdspb.OstInfo, _ []*ostpb.ChunkId) error {
	f.asked = append(f.asked, info.Id)
	if f.fail[info.Id] {
		return errors.New("disk on fire")
	}
	return nil
}
