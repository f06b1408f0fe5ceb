package wire

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRefusalsLogged (issue 17, item 9): a TLS server with a logger logs
// the handshakes it rejects (plaintext, a certificate of another CA) and
// the calls its authorizer refuses, at warn level, with the peer; a
// client that keeps trying is logged a few times, then limited; a TCP
// connection closed before any byte is not a warning.
func TestRefusalsLogged(t *testing.T) {
	dir := t.TempDir()
	issue := func(ca *pki.CA, caDir string, role pki.Role, name string) *Creds {
		t.Helper()
		p, err := ca.IssueTo(filepath.Join(caDir, "certs-"+name), pki.Request{Role: role, Name: name, Hosts: []string{"127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := LoadCreds(TLSFiles{Cert: p.Cert, Key: p.Key, CA: p.CA})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, err := pki.InitCA(filepath.Join(dir, "ca"), "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.InitCA(filepath.Join(dir, "other"), "other", 0)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	onlyAdmins := func(ctx context.Context, method string) error {
		if id, ok := PeerIdentity(ctx); ok && id.Role != pki.RoleAdmin {
			return fmt.Errorf("%s: %s may not call it: %w", method, id, errs.ErrPermission)
		}
		return nil
	}
	srv, err := Listen("127.0.0.1:0", func(g *grpc.Server) { healthpb.RegisterHealthServer(g, health.NewServer()) },
		ServeCreds(issue(ca, dir, pki.RoleMDS, "mds")), ServeAuthorizer(onlyAdmins), ServeLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	call := func(cr *Creds) error {
		cc, err := Dial(srv.Addr(), WithCreds(cr))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	waitLog := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(logs.String(), what) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d lines %q logged, want %d:\n%s", strings.Count(logs.String(), what), what, n, logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	if err := call(nil); err == nil {
		t.Fatal("a plaintext call succeeded")
	}
	waitLog(`msg="TLS handshake refused"`, 1)
	if err := call(issue(other, dir, pki.RoleAdmin, "intruder")); err == nil {
		t.Fatal("a certificate of another CA was accepted")
	}
	waitLog(`msg="TLS handshake refused"`, 2)
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "peer=127.0.0.1:") {
		t.Errorf("handshake refusals logged without level or peer:\n%s", logs.String())
	}

	// A role the authorizer refuses: logged with its identity.
	if err := call(issue(ca, dir, pki.RoleClient, "node7")); err == nil {
		t.Fatal("a refused role's call succeeded")
	}
	waitLog(`msg="call refused"`, 1)
	if !strings.Contains(logs.String(), "identity=client/node7") || !strings.Contains(logs.String(), "method=/grpc.health.v1.Health/Check") {
		t.Errorf("refused call logged without identity or method:\n%s", logs.String())
	}
	if err := call(issue(ca, dir, pki.RoleAdmin, "alice")); err != nil {
		t.Fatalf("an allowed call: %v", err)
	}

	// A client that keeps failing its handshake: limited.
	for range 30 {
		call(nil)
	}
	time.Sleep(200 * time.Millisecond)
	if n := strings.Count(logs.String(), `msg="TLS handshake refused"`); n > 8 {
		t.Errorf("%d handshake refusals from one host logged in a burst, want a few", n)
	}

	// A TCP probe that closes at once: not a warning.
	before := strings.Count(logs.String(), "level=WARN")
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	time.Sleep(200 * time.Millisecond)
	if after := strings.Count(logs.String(), "level=WARN"); after != before {
		t.Errorf("a TCP probe was logged as a warning:\n%s", logs.String())
	}
}
