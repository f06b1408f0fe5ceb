package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// One file sets everything after `make local` (. data/env), and the MDS
// port survives a restart of the same directory (issue 18).
func TestLocalEnvAndPort(t *testing.T) {
	dir := t.TempDir()
	if got := stableListen(dir, "127.0.0.1:0"); got != "127.0.0.1:0" {
		t.Errorf("first start: %s", got)
	}
	os.WriteFile(filepath.Join(dir, "mds.addr"), []byte("127.0.0.1:41234\n"), 0o644)
	for listen, want := range map[string]string{
		"127.0.0.1:0":    "127.0.0.1:41234", // the last port
		"127.0.0.1:7700": "127.0.0.1:7700",  // a port asked for wins
		"0.0.0.0:0":      "0.0.0.0:0",       // another host
	} {
		if got := stableListen(dir, listen); got != want {
			t.Errorf("--listen %s: %s, want %s", listen, got, want)
		}
	}
	os.WriteFile(filepath.Join(dir, "mds.addr"), []byte("127.0.0.1:1,127.0.0.1:2\n"), 0o644)
	if got := stableListen(dir, "127.0.0.1:0"); got != "127.0.0.1:0" {
		t.Errorf("a group's addresses: %s", got)
	}

	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	lc, err := localTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		lc   *localCreds
		want string
	}{
		{lc, "mds=127.0.0.1:7777 insecure= cert=" + filepath.Join(dir, "tls/certs/admin.crt")},
		{nil, "mds=127.0.0.1:7777 insecure=1 cert="},
	} {
		if err := writeLocalEnv(dir, "127.0.0.1:7777", c.lc); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(sh, "-c", `. "$1"/env && echo "mds=$SHOAL_MDS insecure=$SHOAL_INSECURE cert=$SHOAL_CERT"`, "sh", dir)
		cmd.Env = append(os.Environ(), "SHOAL_INSECURE=1", "SHOAL_CERT=/stale")
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
			t.Errorf(". env: %q, %v; want %q", got, err, c.want)
		}
	}
}
