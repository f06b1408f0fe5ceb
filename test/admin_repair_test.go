package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/test/cluster"
)

// shoalBin builds the shoal binary for tests that run it as an operator
// types it.
func shoalBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shoal")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/shoalfs/shoal/cmd/shoal").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// waitOSTsDown waits until the MDS reports n OSTs down.
func waitOSTsDown(t *testing.T, stub mdspb.MdsClient, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := stub.ListOsts(context.Background(), &mdspb.ListOstsRequest{})
		down := 0
		for _, o := range r.GetOsts() {
			if !o.GetUp() {
				down++
			}
		}
		if err == nil && down == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d OSTs down after 20s, want %d (%v)", down, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// repairStatus is the part of `shoal admin status --json` these tests read.
type repairStatus struct {
	Health      string   `json:"health"`
	Reasons     []string `json:"reasons"`
	LostExtents uint64   `json:"lost_extents"`
	Data        *struct {
		Extents    uint64 `json:"extents"`
		Degraded   uint64 `json:"degraded_extents"`
		Unreadable uint64 `json:"unreadable_extents"`
		Files      []struct {
			Path   string `json:"path"`
			Damage string `json:"damage"`
		} `json:"damaged_files"`
	} `json:"data"`
}

// TestAdminRepairNowhereToGo (issue 17, item 6): with six OSTs and RS
// 4+2, a repair of one lost OST has nowhere to put its chunks. The job
// says why it waits (job.waiting), `shoal admin repair` run without a
// terminal prints it and exits 2 instead of running for ever in silence,
// `repair status --detach` shows it, and status warns with it. When the
// OST returns, the repair ends by itself and status is HEALTH_OK. Then
// three OSTs lost: the repair fails naming the files it cannot rebuild,
// status is HEALTH_ERR with the extents unreadable now; once the OSTs are
// back status is HEALTH_OK again without another repair: it reflects the
// present, not the job's last pass.
func TestAdminRepairNowhereToGo(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): builds shoal and starts a cluster")
	}
	bin := shoalBin(t)
	cl := cluster.Start(t, cluster.Options{
		OSTs: 6, Layout: adminLayout,
		Admin: mds.AdminOptions{Interval: 100 * time.Millisecond, RepairAfter: -1},
	})
	c := cl.Client()
	for i, n := range []string{"/a", "/b", "/c"} {
		writeFile(t, c, n, randBytes(uint64(40+i), 600<<10))
	}
	stub := adminStub(t, cl)
	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"admin"}, args...)...)
		cmd.Env = append(append(os.Environ(), "SHOAL_MDS="+cl.MDSAddr()), cl.TLSEnv()...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb // not a terminal
		err := cmd.Run()
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("shoal admin %v: %v", args, err)
		}
		return out.String(), errb.String(), code
	}
	status := func() (repairStatus, int) {
		t.Helper()
		out, _, code := run("status", "--json")
		var s repairStatus
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		return s, code
	}
	reasons := func(s repairStatus) string { return strings.Join(s.Reasons, " | ") }

	// One OST lost: nowhere to go.
	cl.KillOST(5)
	waitOSTsDown(t, stub, 1)
	done := make(chan struct{})
	var out, errOut string
	var code int
	go func() {
		defer close(done)
		out, errOut, code = run("repair")
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("shoal admin repair with nowhere to go still runs after 60s")
	}
	if code != 2 || !strings.Contains(out, "repair: running, waiting") || !strings.Contains(out, "have nowhere to go") ||
		!strings.Contains(errOut, "the repair job waits: ") || !strings.Contains(errOut, "shoal admin repair stop") {
		t.Fatalf("repair with nowhere to go: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	j, err := stub.GetJob(context.Background(), &mdspb.JobRequest{Kind: mds.JobRepair})
	if err != nil || j.State != mds.JobRunning || j.Waiting == "" || j.WaitingSinceNs == 0 {
		t.Fatalf("repair job: %v %v", j, err)
	}
	out, _, code = run("repair", "status", "--detach")
	if code != 2 || !strings.Contains(out, "waiting") || !strings.Contains(out, "add an OST, or bring back OSTs") {
		t.Errorf("repair status --detach: exit %d\n%s", code, out)
	}
	s, code := status()
	if code != 2 || s.Health != "HEALTH_WARN" || !strings.Contains(reasons(s), "the repair job waits: ") ||
		s.Data == nil || s.Data.Degraded == 0 || s.Data.Degraded != s.Data.Extents || s.Data.Unreadable != 0 {
		t.Errorf("status with one OST lost and a waiting repair: exit %d, %+v %+v", code, s, s.Data)
	}

	// It comes back: the repair ends by itself, and status is OK.
	if err := cl.StartOST(5); err != nil {
		t.Fatal(err)
	}
	if j := waitJob(t, stub, mds.JobRepair, 30*time.Second); j.State != mds.JobDone || j.Waiting != "" {
		t.Fatalf("repair after the OST returned: %v", j)
	}
	if s, code := status(); code != 0 || s.Health != "HEALTH_OK" {
		t.Errorf("status with every OST back: exit %d, %s %q", code, s.Health, s.Reasons)
	}

	// Three lost: more than m. The repair fails and names the files.
	for _, i := range []int{3, 4, 5} {
		cl.KillOST(i)
	}
	waitOSTsDown(t, stub, 3)
	out, errOut, code = run("repair")
	if code != 2 || !strings.Contains(out, "repair: failed") || !strings.Contains(out, "files:") ||
		!strings.Contains(out, "/a (lost, ") || !strings.Contains(errOut, "repair job failed") {
		t.Fatalf("repair with three OSTs lost: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	s, code = status()
	if code != 3 || s.Health != "HEALTH_ERR" || s.Data == nil || s.Data.Unreadable == 0 || s.LostExtents != s.Data.Unreadable ||
		len(s.Data.Files) != 3 || s.Data.Files[0].Damage != "unreadable" {
		t.Errorf("status with three OSTs lost: exit %d, %+v %+v", code, s, s.Data)
	}
	sout, _, _ := run("status")
	for _, want := range []string{"extents have more than m chunks on down or removed OSTs", "damaged files", "/b (unreadable, "} {
		if !strings.Contains(sout, want) {
			t.Errorf("status says no %q:\n%s", want, sout)
		}
	}

	// Back: the present is healthy, whatever the failed repair found.
	for _, i := range []int{3, 4, 5} {
		if err := cl.StartOST(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.WaitOSTsUp(6); err != nil {
		t.Fatal(err)
	}
	if s, code := status(); code != 0 || s.Health != "HEALTH_OK" || s.LostExtents != 0 {
		t.Errorf("status with every OST back after a failed repair: exit %d, %+v", code, s)
	}
	for _, n := range []string{"/a", "/b", "/c"} {
		if _, err := readFile(cl.Client(), n); err != nil {
			t.Errorf("read %s: %v", n, err)
		}
	}
}
