package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
)

// foreignHeader is the header of a file another writer made: Python's
// json.dumps spacing, the tensors listed out of data order, each tensor's
// keys in another order, the metadata last and its keys unsorted, a
// "\u00e9" escape, and pad trailing spaces (not to any alignment).
func foreignHeader(pad int) []byte {
	js := `{"ln": {"shape": [16], "data_offsets": [16384, 16448], "dtype": "F32"}, ` +
		`"embed": {"data_offsets": [0, 16384], "dtype": "F32", "shape": [256, 16]}, ` +
		`"head": {"dtype": "F32", "shape": [16, 256], "data_offsets": [16448, 32832]}, ` +
		`"__metadata__": {"z": "caf\u00e9", "format": "pt"}}` + strings.Repeat(" ", pad)
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(js))), js...)
}

// TestPlanShardKeepsHeader: a shard saved with its Header is laid out as
// that header says, the header written byte for byte; a Header that does
// not describe the shard's tensors, or holds more than the header, is
// refused.
func TestPlanShardKeepsHeader(t *testing.T) {
	for _, pad := range []int{0, 3, 4000} {
		hdr := foreignHeader(pad)
		sh := testShard()
		sh.Metadata = nil
		sh.Header = hdr
		p, err := planShard(&sh, nil, false)
		if err != nil {
			t.Fatalf("pad %d: %v", pad, err)
		}
		e := p.e
		if !bytes.Equal(p.header, hdr) || len(p.writes) != 4 || !bytes.Equal(p.writes[0].data, hdr) || p.writes[0].off != 0 {
			t.Fatalf("pad %d: the header is not written as given", pad)
		}
		ds := int64(len(hdr))
		if e.DataStart != ds || e.Size != ds+16384+64+16384 || e.HeaderDigest != sumBytes(hdr) {
			t.Fatalf("pad %d: entry %+v", pad, e)
		}
		if e.Tensors[0].Offset != ds || e.Tensors[1].Offset != ds+16384 || e.Tensors[2].Offset != ds+16384+64 || p.writes[3].off != ds+16384+64 {
			t.Fatalf("pad %d: offsets %+v", pad, e.Tensors)
		}
		if e.Metadata["z"] != "café" || e.Metadata["format"] != "pt" {
			t.Fatalf("pad %d: metadata %v", pad, e.Metadata)
		}
		// The same file again: the whole of it is the base's.
		again := testShard()
		again.Metadata, again.Header = map[string]string{"format": "pt", "z": "café"}, hdr
		p2, err := planShard(&again, &e, false)
		if err != nil || !p2.whole || p2.e.Digest != e.Digest {
			t.Fatalf("pad %d: same file again: %v %+v", pad, err, p2)
		}
		// The header written by Shoal instead: tensors shared, header
		// written.
		laid := testShard()
		p3, err := planShard(&laid, &e, false)
		if err != nil || p3.whole || p3.e.Shared != 16384+64+16384 || p3.e.DataStart != 4096 {
			t.Fatalf("pad %d: re-laid out against the kept header: %v %+v", pad, err, p3.e)
		}
	}

	hdr := foreignHeader(5)
	bad := func(name string, edit func(sh *Shard)) {
		t.Helper()
		sh := testShard()
		sh.Metadata, sh.Header = nil, hdr
		edit(&sh)
		if _, err := planShard(&sh, nil, false); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	bad("data after the header", func(sh *Shard) { sh.Header = append(bytes.Clone(hdr), 0, 0, 0, 0) })
	bad("short header", func(sh *Shard) { sh.Header = hdr[:len(hdr)-1] })
	bad("no length", func(sh *Shard) { sh.Header = hdr[:5] })
	bad("tensors in another order", func(sh *Shard) { sh.Tensors[0], sh.Tensors[1] = sh.Tensors[1], sh.Tensors[0] })
	bad("another dtype", func(sh *Shard) {
		sh.Tensors[1].DType, sh.Tensors[1].Shape = safetensors.I32, []int64{16}
	})
	bad("another shape", func(sh *Shard) { sh.Tensors[0].Shape = []int64{16, 256} })
	bad("a tensor missing", func(sh *Shard) { sh.Tensors = sh.Tensors[:2] })
	bad("other metadata", func(sh *Shard) { sh.Metadata = map[string]string{"format": "pt"} })
	bad("not JSON", func(sh *Shard) {
		h := bytes.Clone(hdr)
		h[8] = '['
		sh.Header = h
	})
}

// TestStageCopiesHeader: SaveAsync's staging copies a kept header too.
func TestStageCopiesHeader(t *testing.T) {
	sh := testShard()
	sh.Metadata, sh.Header = nil, foreignHeader(7)
	in := []Shard{sh}
	a := (&stagePool{}).get(shardSize(&in[0]) + int64(len(sh.Header)))
	out := stage(in, a.buf)
	if !bytes.Equal(out[0].Header, sh.Header) {
		t.Fatal("staged header differs")
	}
	clear(in[0].Header)
	if bytes.Equal(out[0].Header, in[0].Header) {
		t.Fatal("staged header aliases the caller's buffer")
	}
}
