//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// The command line as a user types it: testscript runs the scripts in
// testdata/script/*.txtar, where `shoal` is this package's main (the test
// binary, installed under that name in $PATH). Two commands of our own:
//
//	cluster start [OSTS]   runs `shoal local --dir $WORK/cluster` (6 OSTs by
//	                       default) in the background until the script
//	                       ends, waits until every OST is up, and sets
//	                       $SHOAL_MDS and $SHOAL_INSECURE=1 for the
//	                       commands after it
//	exits CODE PROG ARGS   runs PROG like exec and checks its exit status
//	                       (stdout and stderr are kept for the next
//	                       stdout/stderr checks)
//	lose-chunk OSTDIR      deletes one chunk's data file from an OST's
//	                       directory, as a failing disk might
//	waitfile FILE          waits (up to 30s) until FILE exists: a
//	                       background command has come that far

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"shoal": main})
}

func TestScripts(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): the scripts start clusters")
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			// The scripts set what they need; nothing leaks in.
			for _, k := range []string{"SHOAL_MDS", "SHOAL_INSECURE", "SHOAL_CERT", "SHOAL_KEY", "SHOAL_CA"} {
				e.Setenv(k, "")
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"cluster":    scriptCluster,
			"exits":      scriptExits,
			"lose-chunk": scriptLoseChunk,
			"waitfile":   scriptWaitFile,
		},
	})
}

// scriptWaitFile is `waitfile FILE`.
func scriptWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitfile FILE")
	}
	path := ts.MkAbs(args[0])
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitfile: no %s after 30s", path)
		}
	}
}

// scriptExits is `exits CODE PROG ARGS...`.
func scriptExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: CODE %q is not a number", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("exits: %v", err)
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// scriptCluster is `cluster start [OSTS]`.
func scriptCluster(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || args[0] != "start" || len(args) > 2 {
		ts.Fatalf("usage: cluster start [OSTS]")
	}
	osts := 6
	if len(args) == 2 {
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 1 {
			ts.Fatalf("cluster start: OSTS %q", args[1])
		}
		osts = n
	}
	dir := ts.MkAbs("cluster")
	logPath := ts.MkAbs("cluster.log")
	logf, err := os.Create(logPath)
	ts.Check(err)
	bin, err := exec.LookPath("shoal") // testscript.Main put it in $PATH
	ts.Check(err)
	cmd := exec.Command(bin, "local", "--dir", dir, "--osts", strconv.Itoa(osts), "--log-level", "warn", "--insecure")
	cmd.Stdout, cmd.Stderr = logf, logf
	// The cluster dies with the test binary, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ts.Check(cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ts.Defer(func() {
		// Ctrl-C, as a user stops it; then a kill if it hangs.
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		logf.Close()
	})
	fail := func(format string, a ...any) {
		b, _ := os.ReadFile(logPath)
		ts.Fatalf("cluster start: %s\n%s", fmt.Sprintf(format, a...), b)
	}
	deadline := time.Now().Add(30 * time.Second)
	var addr string
	for addr == "" {
		select {
		case err := <-exited:
			exited <- err // for the deferred stop
			fail("shoal local exited: %v", err)
		default:
		}
		if b, err := os.ReadFile(filepath.Join(dir, "mds.addr")); err == nil && strings.HasSuffix(string(b), "\n") {
			addr = strings.TrimSpace(string(b))
			break
		}
		if time.Now().After(deadline) {
			fail("no %s after 30s", filepath.Join(dir, "mds.addr"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cc, err := wire.Dial(addr)
	ts.Check(err)
	defer cc.Close()
	stub := mdspb.NewMdsClient(cc)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := stub.ListOsts(ctx, &mdspb.ListOstsRequest{})
		cancel()
		up := 0
		if err == nil {
			for _, o := range r.GetOsts() {
				if o.GetUp() {
					up++
				}
			}
		}
		if up == osts {
			break
		}
		if time.Now().After(deadline) {
			fail("%d of %d OSTs up after 30s (%v)", up, osts, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ts.Setenv("SHOAL_MDS", addr)
	ts.Setenv("SHOAL_INSECURE", "1")
}

// scriptLoseChunk is `lose-chunk OSTDIR`: it deletes the data file of the
// first chunk (in name order) under OSTDIR/chunks, keeping its checksums.
func scriptLoseChunk(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: lose-chunk OSTDIR")
	}
	var victim string
	err := filepath.WalkDir(filepath.Join(ts.MkAbs(args[0]), "chunks"), func(p string, d os.DirEntry, err error) error {
		if err != nil || victim != "" {
			return err
		}
		if d.Type().IsRegular() && !strings.Contains(d.Name(), ".crc") {
			victim = p
		}
		return nil
	})
	ts.Check(err)
	if victim == "" {
		ts.Fatalf("lose-chunk: no chunk under %s", args[0])
	}
	ts.Check(os.Remove(victim))
	ts.Logf("removed %s", victim)
}
