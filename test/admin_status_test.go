package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoalfs/shoal/test/cluster"
)

// statusJSON is the part of `shoal admin status --json` the test reads.
type statusJSON struct {
	Health  string   `json:"health"`
	Reasons []string `json:"reasons"`
	MDS     []struct {
		Role  string `json:"role"`
		Error string `json:"error"`
	} `json:"mds"`
	OSTs struct {
		Up, Down int
		Capacity uint64 `json:"capacity_bytes"`
		List     []struct {
			ID    uint32 `json:"id"`
			State string `json:"state"`
		} `json:"list"`
	} `json:"osts"`
	DefaultParity int `json:"default_parity"`
}

// TestAdminStatus runs `shoal admin status` as an operator types it on a
// real cluster (6 OSTs, RS 4+2): healthy, it says HEALTH_OK and exits 0;
// with one OST killed, HEALTH_WARN naming that OST, exit 2; with three
// killed, more than the parity, HEALTH_ERR, exit 3.
func TestAdminStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): builds shoal and starts a cluster")
	}
	bin := filepath.Join(t.TempDir(), "shoal")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/shoalfs/shoal/cmd/shoal").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cl := cluster.Start(t, cluster.Options{})
	writeFile(t, cl.Client(), "/data", randBytes(7, 5<<20))

	status := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"admin", "status"}, args...)...)
		cmd.Env = append(append(os.Environ(), "SHOAL_MDS="+cl.MDSAddr()), cl.TLSEnv()...)
		out, err := cmd.Output()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("shoal admin status: %v", err)
		}
		return string(out), code
	}
	statusJSONOf := func() (statusJSON, int) {
		t.Helper()
		out, code := status("--json")
		var s statusJSON
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		return s, code
	}

	s, code := statusJSONOf()
	if code != 0 || s.Health != "HEALTH_OK" || len(s.Reasons) != 0 {
		t.Fatalf("healthy cluster: exit %d, %s %q", code, s.Health, s.Reasons)
	}
	if s.OSTs.Up != 6 || s.OSTs.Down != 0 || s.OSTs.Capacity == 0 || len(s.OSTs.List) != 6 || s.DefaultParity != 2 {
		t.Errorf("healthy cluster: %+v, parity %d", s.OSTs, s.DefaultParity)
	}
	if len(s.MDS) != 1 || s.MDS[0].Role != "standalone" || s.MDS[0].Error != "" {
		t.Errorf("MDS members: %+v", s.MDS)
	}
	if out, code := status(); code != 0 || !strings.HasPrefix(out, "HEALTH_OK\n") || !strings.Contains(out, "OSTs: 6 up, 0 down") {
		t.Errorf("healthy cluster, text: exit %d\n%s", code, out)
	}

	// One OST down: a warning that names it.
	victim := cl.OST(1).Server.ID()
	cl.KillOST(1)
	if err := cl.WaitOSTsUp(5); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("OST %d (", victim)
	s, code = statusJSONOf()
	if code != 2 || s.Health != "HEALTH_WARN" || s.OSTs.Down != 1 || s.OSTs.Up != 5 {
		t.Fatalf("one OST down: exit %d, %s, %d up %d down, reasons %q", code, s.Health, s.OSTs.Up, s.OSTs.Down, s.Reasons)
	}
	if len(s.Reasons) != 1 || !strings.Contains(s.Reasons[0], name) || !strings.Contains(s.Reasons[0], "down") {
		t.Errorf("one OST down: reasons %q, want one naming %q", s.Reasons, name)
	}
	if out, code := status(); code != 2 || !strings.HasPrefix(out, "HEALTH_WARN\n") || !strings.Contains(out, name) {
		t.Errorf("one OST down, text: exit %d\n%s", code, out)
	}

	// Three down, more than m = 2: an error.
	cl.KillOST(2)
	cl.KillOST(3)
	if err := cl.WaitOSTsUp(3); err != nil {
		t.Fatal(err)
	}
	s, code = statusJSONOf()
	if code != 3 || s.Health != "HEALTH_ERR" || s.OSTs.Down != 3 {
		t.Fatalf("three OSTs down: exit %d, %s, %d down, reasons %q", code, s.Health, s.OSTs.Down, s.Reasons)
	}
	if !strings.Contains(s.Reasons[0], "more than the parity (m=2)") {
		t.Errorf("three OSTs down: first reason %q, want the parity", s.Reasons[0])
	}
	down := 0
	for _, r := range s.Reasons {
		if strings.Contains(r, ") is down") {
			down++
		}
	}
	if down != 3 {
		t.Errorf("three OSTs down: %d reasons name a down OST: %q", down, s.Reasons)
	}
}
