package ckpt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/test/cluster"
)

// memFile is an io.WriterAt in memory.
type memFile struct {
	mu sync.Mutex
	b  []byte
}

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := off + int64(len(p)); n > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, n-int64(len(m.b)))...)
	}
	copy(m.b[off:], p)
	return len(p), nil
}

// TestCopyFile: CopyFile streams a shard of several pieces (tensors
// across piece boundaries, an empty one, random and compressible data)
// and a blob to a writer, byte for byte what ReadFile returns, checked.
func TestCopyFile(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	cl := cluster.Start(t, cluster.Options{Dir: cluster.TmpfsDir(t)})
	ctx := context.Background()
	st, err := ckpt.New(cl.Client(), ckpt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := rand.New(rand.NewPCG(1, 1))
	data := func(n int, random bool) []byte {
		b := make([]byte, n)
		for i := range b {
			if random {
				b[i] = byte(r.Uint32())
			} else {
				b[i] = byte(i % 7)
			}
		}
		return b
	}
	sh := ckpt.Shard{Name: "model.safetensors"}
	for i, n := range []int{9<<20 + 6, 0, 20 << 20, 3<<20 + 2, 17} {
		sh.Tensors = append(sh.Tensors, ckpt.Tensor{Name: fmt.Sprintf("t%d", i), DType: safetensors.U8, Shape: []int64{int64(n)}, Data: data(n, i%2 == 0)})
	}
	shards := []ckpt.Shard{sh, {Name: "rng.bin", Blob: data(5<<20+3, true)}}
	if _, err := st.Save(ctx, "j", 1, shards); err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		want, _, err := st.ReadFile(ctx, "j", 1, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		var got memFile
		e, verified, err := st.CopyFile(ctx, "j", ckpt.Latest, s.Name, &got)
		if err != nil || !verified || e.Size != int64(len(want)) {
			t.Fatalf("%s: CopyFile: %v, verified %v", s.Name, err, verified)
		}
		if !bytes.Equal(got.b, want) {
			t.Errorf("%s: CopyFile's bytes differ from ReadFile's", s.Name)
		}
	}
	if _, _, err := st.CopyFile(ctx, "j", 1, "nope", &memFile{}); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("a shard that is not there: %v", err)
	}
}
