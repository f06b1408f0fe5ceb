package compress

import (
	"bytes"
	"fmt"
	"testing"
)

// TestJoin: join (SSE2 on amd64) interleaves exactly as joinGeneric and
// undoes split, for every width and for lengths around the 16-element
// groups of the assembly, without writing past w*m.
func TestJoin(t *testing.T) {
	for _, w := range []int{2, 4, 8} {
		for _, m := range []int{0, 1, 15, 16, 17, 31, 32, 33, 100, 255, 4096 + 7, pieceElems} {
			body := randomBytes(w*m, uint64(w*1000+m))
			planes := make([]byte, w*m)
			split(planes, body, w)
			ps := make([][]byte, w)
			for j := range ps {
				ps[j] = planes[j*m : (j+1)*m]
			}
			got := bytes.Repeat([]byte{0xee}, w*m+64)
			join(got, ps, m)
			if !bytes.Equal(got[:w*m], body) {
				t.Fatalf("w=%d m=%d: join does not undo split", w, m)
			}
			if !bytes.Equal(got[w*m:], bytes.Repeat([]byte{0xee}, 64)) {
				t.Fatalf("w=%d m=%d: join wrote past its output", w, m)
			}
			gen := make([]byte, w*m)
			joinGeneric(gen, ps, m)
			if !bytes.Equal(gen, body) {
				t.Fatalf("w=%d m=%d: joinGeneric does not undo split", w, m)
			}
		}
	}
}

// BenchmarkJoin: the plane interleave of decoding, per width, on one
// piece (pieceElems elements), with join and joinGeneric.
func BenchmarkJoin(b *testing.B) {
	for _, w := range []int{2, 4, 8} {
		m := pieceElems
		planes := randomBytes(w*m, 1)
		ps := make([][]byte, w)
		for j := range ps {
			ps[j] = planes[j*m : (j+1)*m]
		}
		out := make([]byte, w*m)
		for _, f := range []struct {
			name string
			fn   func([]byte, [][]byte, int)
		}{{"join", join}, {"generic", joinGeneric}} {
			b.Run(fmt.Sprintf("w%d/%s", w, f.name), func(b *testing.B) {
				b.SetBytes(int64(w * m))
				for b.Loop() {
					f.fn(out, ps, m)
				}
			})
		}
	}
}
