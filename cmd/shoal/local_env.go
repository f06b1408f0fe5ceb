package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// localEnvFile is DIR/env, which sets everything other commands need to
// reach a `shoal local` cluster: SHOAL_MDS, and the administrator's
// certificate (SHOAL_CERT, SHOAL_KEY, SHOAL_CA) or SHOAL_INSECURE=1.
// `. DIR/env`. (DIR/tls/env, the certificate alone, stays.)
const localEnvFile = "env"

// writeLocalEnv writes DIR/env for the cluster at mdsAddr; lc nil is a
// plaintext cluster.
func writeLocalEnv(dir, mdsAddr string, lc *localCreds) error {
	var b strings.Builder
	b.WriteString("# shoal local: the cluster's address and the administrator's credentials, for other shoal commands: . DIR/env\n")
	vars := [][2]string{{"SHOAL_MDS", mdsAddr}}
	if lc != nil {
		vars = append(vars, lc.env()...)
		vars = append(vars, [2]string{"SHOAL_INSECURE", ""})
	} else {
		vars = append(vars, [2]string{"SHOAL_INSECURE", "1"}, [2]string{"SHOAL_CERT", ""}, [2]string{"SHOAL_KEY", ""}, [2]string{"SHOAL_CA", ""})
	}
	for _, kv := range vars {
		if kv[1] == "" {
			fmt.Fprintf(&b, "unset %s\n", kv[0])
			continue
		}
		fmt.Fprintf(&b, "export %s='%s'\n", kv[0], strings.ReplaceAll(kv[1], "'", `'\''`))
	}
	return os.WriteFile(filepath.Join(dir, localEnvFile), []byte(b.String()), 0o644)
}

// stableListen is the address a single MDS of `shoal local` listens on:
// listen, unless its port is 0 and DIR/mds.addr names the address of the
// last run with the same host, which is reused so that an exported
// SHOAL_MDS stays good across restarts (issue 18). The caller falls back
// to listen when that address is taken.
func stableListen(dir, listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port != "0" {
		return listen
	}
	b, err := os.ReadFile(filepath.Join(dir, "mds.addr"))
	if err != nil {
		return listen
	}
	last := strings.TrimSpace(string(b))
	h, p, err := net.SplitHostPort(last)
	if err != nil || strings.Contains(last, ",") || p == "0" || h != host {
		return listen
	}
	return last
}
