package test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestWrongServer: a client given an OST's address as the MDS's, or
// speaking plaintext to a TLS MDS, fails at once with an error that says
// so (wire.ErrWrongPeer), not gRPC's "unknown service" or "error reading
// server preface" (issue 18).
func TestWrongServer(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: smallLayout()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for _, tc := range []struct {
		name  string
		o     client.Options
		wants string
	}{
		{"an OST as the MDS", client.Options{MDS: cl.OST(0).Addr, Creds: cl.Creds(pki.RoleAdmin)}, cl.OST(0).Addr + " is an OST, not an MDS"},
		{"plaintext to TLS", client.Options{MDS: cl.MDSAddr()}, cl.MDSAddr() + " wants TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			c, err := client.New(ctx, tc.o)
			if err == nil {
				c.Close()
				t.Fatal("client.New succeeded")
			}
			if !errors.Is(err, wire.ErrWrongPeer) || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("client.New: %v; want ErrWrongPeer saying %q", err, tc.wants)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v: the mistake was retried as an outage", d)
			}
		})
	}
}
