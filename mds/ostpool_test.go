package mds

import (
	"errors"
	"testing"

	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
)

// The pool dials an OST once, again when its address changed, and
// refuses once closed, with every connection closed.
func TestOstPool(t *testing.T) {
	var dialed []*grpc.ClientConn
	p := newOstPool(func(addr string) (*grpc.ClientConn, error) {
		cc, err := wire.Dial(addr)
		if err == nil {
			dialed = append(dialed, cc)
		}
		return cc, err
	})
	for range 3 {
		if _, err := p.client(1, "127.0.0.1:1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.client(2, "127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}
	if len(dialed) != 2 {
		t.Fatalf("%d dials for two OSTs, want 2", len(dialed))
	}
	if _, err := p.client(1, "127.0.0.1:3"); err != nil {
		t.Fatal(err)
	}
	if len(dialed) != 3 {
		t.Fatalf("%d dials after an address change, want 3", len(dialed))
	}
	p.close()
	if _, err := p.client(1, "127.0.0.1:3"); !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("client after close: %v, want ErrUnavailable", err)
	}
	for i, cc := range dialed {
		if err := cc.Close(); err == nil {
			t.Errorf("connection %d still open after the pool closed (or replaced) it", i)
		}
	}
}
