package ost

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// testOST is an OST served over gRPC on loopback.
type testOST struct {
	srv *Server
	cli ostpb.OstClient
	reg *prometheus.Registry
	g   *grpc.Server
}

// startOST opens an OST in dir and serves it on 127.0.0.1. o.Dir is set to
// dir; the OST and its server stop at the end of the test, unless the test
// stops them first with stop.
func startOST(t *testing.T, dir string, o Options) *testOST {
	t.Helper()
	o.Dir = dir
	reg := prometheus.NewRegistry()
	o.Registry = reg
	srv, err := Open(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(wire.ServerOptions()...)
	srv.Register(g)
	go g.Serve(lis)
	conn, err := wire.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	to := &testOST{srv: srv, cli: ostpb.NewOstClient(conn), reg: reg, g: g}
	t.Cleanup(func() {
		conn.Close()
		to.stop(t)
	})
	return to
}

func (to *testOST) stop(t *testing.T) {
	t.Helper()
	to.g.Stop()
	if err := to.srv.Close(); err != nil {
		t.Error(err)
	}
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func cid(extent uint64, index uint32) *ostpb.ChunkId {
	return &ostpb.ChunkId{Extent: extent, Index: index}
}

func (to *testOST) write(t *testing.T, extent uint64, index uint32, data []byte) {
	t.Helper()
	if _, err := to.cli.WriteChunk(t.Context(), &ostpb.WriteChunkRequest{Id: cid(extent, index), Data: data}); err != nil {
		t.Fatalf("WriteChunk(%d.%d): %v", extent, index, err)
	}
}

func (to *testOST) read(extent uint64, index uint32, off, n uint64) ([]byte, error) {
	rep, err := to.cli.ReadChunk(context.Background(), &ostpb.ReadChunkRequest{Id: cid(extent, index), Offset: off, Length: n})
	return rep.GetData(), err
}

func (to *testOST) info(t *testing.T) *ostpb.InfoReply {
	t.Helper()
	inf, err := to.cli.Info(t.Context(), &ostpb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// metric returns the value of a counter or gauge in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

const testBlock = 4096

func TestRoundTrip(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock})
	sizes := []int{1, 100, testBlock - 1, testBlock, testBlock + 1, 3*testBlock + 17, 1 << 20, 1<<20 + 12345}
	for i, size := range sizes {
		extent := uint64(1000 + i)
		data := randBytes(size, extent)
		to.write(t, extent, 2, data)

		st, err := to.cli.StatChunk(t.Context(), &ostpb.StatChunkRequest{Id: cid(extent, 2)})
		if err != nil || st.GetLength() != uint64(size) {
			t.Fatalf("size %d: StatChunk = %v, %v", size, st.GetLength(), err)
		}
		if fi, err := os.Stat(to.srv.ChunkPath(extent, 2)); err != nil || fi.Size() != int64(size) {
			t.Fatalf("size %d: data file: %v %v", size, fi, err)
		}
		ranges := [][2]int{
			{0, size}, {0, 0}, {size, 0}, {0, 1}, {size - 1, 1},
			{size / 3, size / 3}, {size / 2, size - size/2},
			{testBlock - 1, 2}, {testBlock, testBlock}, {testBlock / 2, 2 * testBlock},
		}
		for _, r := range ranges {
			off, n := r[0], r[1]
			if off+n > size {
				continue
			}
			got, err := to.read(extent, 2, uint64(off), uint64(n))
			if err != nil {
				t.Fatalf("size %d: read [%d,+%d): %v", size, off, n, err)
			}
			if !bytes.Equal(got, data[off:off+n]) {
				t.Fatalf("size %d: read [%d,+%d): wrong bytes", size, off, n)
			}
		}
	}
	inf := to.info(t)
	var total uint64
	for _, s := range sizes {
		total += uint64(s)
	}
	if inf.GetChunks() != uint64(len(sizes)) || inf.GetUsed() != total {
		t.Fatalf("Info: %d chunks, %d used; want %d, %d", inf.GetChunks(), inf.GetUsed(), len(sizes), total)
	}
	if inf.GetCapacity() == 0 || inf.GetFree() > inf.GetCapacity() || inf.GetUuid() == "" {
		t.Fatalf("Info: %+v", inf)
	}
	if got := metric(t, to.reg, "shoal_ost_write_bytes_total"); got != float64(total) {
		t.Errorf("write bytes metric %v, want %v", got, total)
	}
	if got := metric(t, to.reg, "shoal_ost_chunks"); got != float64(len(sizes)) {
		t.Errorf("chunks metric %v, want %v", got, len(sizes))
	}
}

func TestRewrite(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock})
	data := randBytes(10000, 1)
	to.write(t, 7, 0, data)
	to.write(t, 7, 0, bytes.Clone(data)) // an idempotent retry

	for name, other := range map[string][]byte{
		"one byte differs": func() []byte { b := bytes.Clone(data); b[9999] ^= 1; return b }(),
		"shorter":          data[:9999],
		"longer":           append(bytes.Clone(data), 0),
	} {
		_, err := to.cli.WriteChunk(t.Context(), &ostpb.WriteChunkRequest{Id: cid(7, 0), Data: other})
		if !errors.Is(err, errs.ErrExists) {
			t.Errorf("%s: WriteChunk = %v, want ErrExists", name, err)
		}
	}
	got, err := to.read(7, 0, 0, uint64(len(data)))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("chunk changed after rejected rewrites: %v", err)
	}
	if inf := to.info(t); inf.GetChunks() != 1 || inf.GetUsed() != uint64(len(data)) {
		t.Fatalf("Info after rewrites: %+v", inf)
	}
}

func TestConcurrentWritesOfOneChunk(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock})
	data := randBytes(100000, 2)
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			_, err := to.cli.WriteChunk(context.Background(), &ostpb.WriteChunkRequest{Id: cid(9, 1), Data: data})
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	if inf := to.info(t); inf.GetChunks() != 1 || inf.GetUsed() != uint64(len(data)) {
		t.Fatalf("Info: %+v", inf)
	}
}

func TestInvalidRequests(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock})
	to.write(t, 5, 0, make([]byte, 8192))
	ctx := t.Context()
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"write nil id", func() error {
			_, err := to.cli.WriteChunk(ctx, &ostpb.WriteChunkRequest{Data: []byte{1}})
			return err
		}, errs.ErrInvalid},
		{"write extent 0", func() error {
			_, err := to.cli.WriteChunk(ctx, &ostpb.WriteChunkRequest{Id: cid(0, 1), Data: []byte{1}})
			return err
		}, errs.ErrInvalid},
		{"write no data", func() error {
			_, err := to.cli.WriteChunk(ctx, &ostpb.WriteChunkRequest{Id: cid(1, 1)})
			return err
		}, errs.ErrInvalid},
		{"write too large", func() error {
			_, err := to.cli.WriteChunk(ctx, &ostpb.WriteChunkRequest{Id: cid(1, 1), Data: make([]byte, MaxChunkSize+1)})
			return err
		}, errs.ErrTooLarge},
		{"read nil id", func() error {
			_, err := to.cli.ReadChunk(ctx, &ostpb.ReadChunkRequest{Length: 1})
			return err
		}, errs.ErrInvalid},
		{"read missing", func() error { _, err := to.read(6, 0, 0, 1); return err }, errs.ErrNotFound},
		{"read past end", func() error { _, err := to.read(5, 0, 8000, 193); return err }, errs.ErrInvalid},
		{"read offset past end", func() error { _, err := to.read(5, 0, 8193, 0); return err }, errs.ErrInvalid},
		{"read length overflows", func() error { _, err := to.read(5, 0, 1, math.MaxUint64); return err }, errs.ErrInvalid},
		{"read offset huge", func() error { _, err := to.read(5, 0, math.MaxUint64, 1); return err }, errs.ErrInvalid},
		{"stat nil id", func() error {
			_, err := to.cli.StatChunk(ctx, &ostpb.StatChunkRequest{})
			return err
		}, errs.ErrInvalid},
		{"stat missing", func() error {
			_, err := to.cli.StatChunk(ctx, &ostpb.StatChunkRequest{Id: cid(6, 0)})
			return err
		}, errs.ErrNotFound},
		{"delete nil id", func() error {
			_, err := to.cli.DeleteChunks(ctx, &ostpb.DeleteChunksRequest{Ids: []*ostpb.ChunkId{cid(5, 0), nil}})
			return err
		}, errs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	// The invalid delete deleted nothing.
	if _, err := to.read(5, 0, 0, 8192); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptDataBlock(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock})
	data := randBytes(4*testBlock+100, 3)
	to.write(t, 11, 3, data)
	flipByte(t, to.srv.ChunkPath(11, 3), 2*testBlock+5) // block 2

	for _, r := range [][2]uint64{{0, uint64(len(data))}, {2 * testBlock, 1}, {testBlock + 1, testBlock}, {2*testBlock + 5, 3000}} {
		_, err := to.read(11, 3, r[0], r[1])
		if !errors.Is(err, errs.ErrCorrupt) {
			t.Fatalf("read [%d,+%d) over the flipped byte: %v, want ErrCorrupt", r[0], r[1], err)
		}
	}
	// Blocks other than 2 still read.
	for _, r := range [][2]uint64{{0, 2 * testBlock}, {3 * testBlock, testBlock + 100}, {testBlock + 1, testBlock - 1}} {
		got, err := to.read(11, 3, r[0], r[1])
		if err != nil || !bytes.Equal(got, data[r[0]:r[0]+r[1]]) {
			t.Fatalf("read [%d,+%d) away from the flipped byte: %v", r[0], r[1], err)
		}
	}
	if got := metric(t, to.reg, "shoal_ost_corrupt_blocks_total"); got != 4 {
		t.Errorf("corrupt blocks metric %v, want 4", got)
	}

	// In process, the error names the chunk and block.
	_, err := to.srv.st.read(chunkID{11, 3}, 0, uint64(len(data)))
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Extent != 11 || ce.Index != 3 || ce.Block != 2 {
		t.Fatalf("store read: %v, want a CorruptError for block 2", err)
	}
}

func TestCorruptSidecar(t *testing.T) {
	dir := t.TempDir()
	to := startOST(t, dir, Options{BlockSize: testBlock})
	data := randBytes(3*testBlock, 4)
	setup := func(extent uint64, damage func(data, crc string)) {
		to.write(t, extent, 0, data)
		damage(to.srv.ChunkPath(extent, 0), to.srv.ChunkPath(extent, 0)+".crc")
	}
	tests := []struct {
		name   string
		damage func(data, crc string)
	}{
		{"header byte flipped", func(_, crc string) { flipByte(t, crc, 9) }},
		{"table byte flipped", func(_, crc string) { flipByte(t, crc, 21) }},
		{"trailer byte flipped", func(_, crc string) {
			fi, _ := os.Stat(crc)
			flipByte(t, crc, fi.Size()-1)
		}},
		{"sidecar removed", func(_, crc string) { os.Remove(crc) }},
		{"sidecar truncated", func(_, crc string) { os.Truncate(crc, 10) }},
		{"sidecar huge", func(_, crc string) { os.Truncate(crc, 1<<30) }},
		{"data truncated", func(data, _ string) { os.Truncate(data, testBlock) }},
		{"data extended", func(data, _ string) { os.Truncate(data, 4*testBlock) }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extent := uint64(100 + i)
			setup(extent, tt.damage)
			if _, err := to.read(extent, 0, 0, 10); !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("read: %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	to := startOST(t, t.TempDir(), Options{BlockSize: testBlock})
	to.write(t, 1, 0, make([]byte, 100))
	to.write(t, 1, 1, make([]byte, 200))
	to.write(t, 2, 0, make([]byte, 300))

	del := func(ids ...*ostpb.ChunkId) uint32 {
		t.Helper()
		rep, err := to.cli.DeleteChunks(t.Context(), &ostpb.DeleteChunksRequest{Ids: ids})
		if err != nil {
			t.Fatal(err)
		}
		return rep.GetDeleted()
	}
	if n := del(cid(1, 0), cid(1, 1), cid(3, 0)); n != 2 {
		t.Fatalf("deleted %d, want 2", n)
	}
	if n := del(cid(1, 0), cid(1, 1)); n != 0 {
		t.Fatalf("second delete: %d, want 0", n)
	}
	if n := del(); n != 0 {
		t.Fatalf("empty delete: %d", n)
	}
	for _, p := range []string{to.srv.ChunkPath(1, 0), to.srv.ChunkPath(1, 0) + ".crc"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still there: %v", p, err)
		}
	}
	if _, err := to.read(1, 0, 0, 1); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("read deleted: %v", err)
	}
	if inf := to.info(t); inf.GetChunks() != 1 || inf.GetUsed() != 300 {
		t.Fatalf("Info: %+v", inf)
	}
	// A deleted chunk can be written again, with other bytes.
	to.write(t, 1, 0, []byte("again"))
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	to := startOST(t, dir, Options{BlockSize: testBlock})
	chunks := map[uint64][]byte{}
	for e := uint64(1); e <= 20; e++ {
		chunks[e<<8|e] = randBytes(int(e*1000), e)
		to.write(t, e<<8|e, 0, chunks[e<<8|e])
	}
	before := to.info(t)
	// Directory in use.
	if _, err := Open(t.Context(), Options{Dir: dir}); !errors.Is(err, errs.ErrExists) {
		t.Fatalf("second Open of a directory in use: %v, want ErrExists", err)
	}
	to.stop(t)

	// Leftovers of a crash: a temp file, and a sidecar whose data never
	// got renamed into place. A stray file is left alone.
	os.WriteFile(filepath.Join(dir, tmpDir, "w-123"), []byte("x"), 0o644)
	orphan := filepath.Join(dir, relDataPath(chunkID{0xabc, 1})) + crcSuffix
	os.WriteFile(orphan, []byte("partial"), 0o644)
	stray := filepath.Join(dir, chunksDir, "01", "notes.txt")
	os.WriteFile(stray, []byte("x"), 0o644)

	// A different block size for new chunks: old ones keep theirs.
	to2 := startOST(t, dir, Options{BlockSize: 8192})
	after := to2.info(t)
	if after.GetUuid() != before.GetUuid() || after.GetChunks() != before.GetChunks() || after.GetUsed() != before.GetUsed() {
		t.Fatalf("Info after reopen %+v, before %+v", after, before)
	}
	for e, data := range chunks {
		got, err := to2.read(e, 0, 0, uint64(len(data)))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("chunk %x after reopen: %v", e, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, tmpDir)); len(ents) != 0 {
		t.Fatalf("tmp not emptied: %v", ents)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan sidecar not removed: %v", err)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Fatalf("stray file removed: %v", err)
	}
	if got := metric(t, to2.reg, "shoal_ost_used_bytes"); got != float64(before.GetUsed()) {
		t.Fatalf("used metric %v after reopen", got)
	}
}

func TestOpenOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{Dir: t.TempDir(), BlockSize: 100},
		{Dir: t.TempDir(), HeartbeatInterval: -time.Second},
	} {
		if _, err := Open(t.Context(), o); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("Open(%+v) = %v, want ErrInvalid", o, err)
		}
	}
	// A store alone: no registry, no MDS; Start is a no-op.
	s, err := Open(t.Context(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil || s.ID() != 0 {
		t.Fatalf("Start without MDS: %v, id %d", err, s.ID())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestChunkNames(t *testing.T) {
	tests := []struct {
		name    string
		ok      bool
		c       chunkID
		sidecar bool
	}{
		{"00000000000000ab.3", true, chunkID{0xab, 3}, false},
		{"00000000000000ab.3.crc", true, chunkID{0xab, 3}, true},
		{"ffffffffffffffff.4294967295", true, chunkID{math.MaxUint64, math.MaxUint32}, false},
		{"00000000000000AB.3", false, chunkID{}, false},
		{"00000000000000ab.03", false, chunkID{}, false},
		{"00000000000000ab.+3", false, chunkID{}, false},
		{"00000000000000ab", false, chunkID{}, false},
		{"0000000000000ab.3", false, chunkID{}, false},
		{"00000000000000ab.4294967296", false, chunkID{}, false},
		{"00000000000000ab.3.tmp", false, chunkID{}, false},
		{"..", false, chunkID{}, false},
	}
	for _, tt := range tests {
		c, sidecar, ok := parseChunkName(tt.name)
		if ok != tt.ok || c != tt.c || sidecar != tt.sidecar {
			t.Errorf("parseChunkName(%q) = %v, %v, %v", tt.name, c, sidecar, ok)
		}
	}
	if got, want := relDataPath(chunkID{0x1234, 5}), filepath.Join("chunks", "34", "0000000000001234.5"); got != want {
		t.Errorf("relDataPath = %s, want %s", got, want)
	}
}

func BenchmarkRead(b *testing.B) {
	s, err := Open(b.Context(), Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := randBytes(16<<20, 5)
	if _, err := s.st.write(chunkID{1, 0}, data); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		off, n uint64
	}{
		{"whole-16MiB", 0, 16 << 20},
		{"aligned-1MiB", 4 << 20, 1 << 20},
		{"unaligned-1MiB", 4<<20 + 100, 1 << 20},
		{"small-4KiB", 100, 4096},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(bc.n))
			for b.Loop() {
				if _, err := s.st.read(chunkID{1, 0}, bc.off, bc.n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
