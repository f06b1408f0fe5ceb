package gds

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/layout"
)

// TestRestoreCheckpointKeptHeader: a shard saved with the header another
// writer made (json.dumps spacing, tensors listed out of data order,
// 8-byte padding, so the data starts at no 4 KiB boundary) restores into
// device memory from that header, every tensor checked on the device,
// placed so that local cells can go by the direct path from an unaligned
// start.
func TestRestoreCheckpointKeptHeader(t *testing.T) {
	lo := layout.Layout{K: 4, M: 2, Unit: 64 << 10}
	c := startCluster(t, lo, 6, 4)
	ctx := context.Background()
	store, err := ckpt.New(c.cl, ckpt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sizes := []int64{150001, 3, 90000}
	var items []string
	var off int64
	for i, n := range sizes {
		items = append(items, fmt.Sprintf(`"t%d": {"data_offsets": [%d, %d], "shape": [%d], "dtype": "BF16"}`, i, off, off+2*n, n))
		off += 2 * n
	}
	items[0], items[2] = items[2], items[0]
	js := `{"__metadata__": {"format": "pt"}, ` + strings.Join(items, ", ") + "}"
	js += strings.Repeat(" ", (8-(8+len(js))%8)%8)
	hdr := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	hdr = append(hdr, js...)
	sh := ckpt.Shard{Name: "rank0.safetensors", Header: hdr}
	want := map[string][]byte{}
	for i, n := range sizes {
		name := fmt.Sprintf("t%d", i)
		want[name] = randBytes(uint64(40+i), int(2*n))
		sh.Tensors = append(sh.Tensors, ckpt.Tensor{Name: name, DType: safetensors.BF16, Shape: []int64{n}, Data: want[name]})
	}
	res, err := store.Save(ctx, "job", 3, []ckpt.Shard{sh})
	if err != nil {
		t.Fatal(err)
	}
	if ds := res.Manifest.Shards[0].DataStart; ds != int64(len(hdr)) || ds%Align == 0 {
		t.Fatalf("data start %d, the header has %d bytes", ds, len(hdr))
	}
	dev := OpenHost(HostOptions{})
	defer dev.Close()
	r := newTestReader(t, c, dev, Options{LocalOSTs: c.localOSTs(t, 3)})
	rc, err := r.RestoreCheckpoint(ctx, store, "job", 3, CheckpointOptions{VerifyDigests: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Free()
	s := rc.Shards["rank0.safetensors"]
	if s == nil || len(s.Tensors) != 3 || s.Metadata["format"] != "pt" || rc.Report.Local == 0 {
		t.Fatalf("restored %+v, report %+v", s, rc.Report)
	}
	// The data lies in the buffer at addresses that agree with its file
	// offsets modulo Align, so local cells can go by the direct path.
	for _, tn := range s.Tensors {
		mustEqual(t, tn.Name, readBack(t, s.Buf, tn.Offset, tn.Size), want[tn.Name])
		te, _ := res.Manifest.Shards[0].Tensor(tn.Name)
		if d := (int64(tn.Ptr) - te.Offset) % Align; d != 0 || tn.Ptr != s.Buf.Addr()+uintptr(tn.Offset) {
			t.Fatalf("tensor %s at address %#x (buffer offset %d), file offset %d: %d apart modulo %d", tn.Name, tn.Ptr, tn.Offset, te.Offset, d, Align)
		}
	}
}
