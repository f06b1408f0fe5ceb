package test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/ost"
	"github.com/shoalfs/shoal/test/cluster"
)

// lockedBuffer is a log sink safe for concurrent readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDegradedReadLogs (issue 17, item 9): with an OST down, many
// degraded reads log a few WARN lines, not one per chunk read (845 for
// one pass before), the last saying how many were left out; with more
// than m OSTs down, the read that fails with EIO is logged at error
// level, naming the extent and the OSTs (it was logged nowhere).
func TestDegradedReadLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster")
	}
	cl := cluster.Start(t, cluster.Options{OSTs: 6, Layout: adminLayout, Scrub: ost.ScrubOptions{Rate: -1}})
	writeFile(t, cl.Client(), "/f", randBytes(9, 6<<20))
	var logs lockedBuffer
	reg := prometheus.NewRegistry()
	c, err := client.New(context.Background(), client.Options{MDS: cl.MDSAddr(), Creds: cl.Creds(pki.RoleAdmin), Registry: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	cl.KillOST(0)
	for range 4 {
		if _, err := readFile(c, "/f"); err != nil {
			t.Fatal(err)
		}
	}
	degraded := metricValue(t, reg, "shoal_client_degraded_reads_total")
	lines := strings.Count(logs.String(), `msg="chunk reads failed; reconstructing from parity"`)
	if degraded < 20 || lines == 0 || lines > 6 {
		t.Fatalf("%v degraded reads logged %d lines, want a few:\n%s", degraded, lines, logs.String())
	}

	// More than m down: the read fails, and says why in the log.
	cl.KillOST(1)
	cl.KillOST(2)
	if _, err := readFile(c, "/f"); err == nil {
		t.Fatal("a read with three of six OSTs down (RS 4+2) succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), `msg="read failed: too few chunks readable to rebuild the extent"`) {
		if time.Now().After(deadline) {
			t.Fatalf("an unreadable extent was not logged:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "readable=") {
		t.Errorf("the failed read's line: %s", logs.String())
	}
}
