package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/shoalfs/shoal/internal/wire"
)

// runShoal runs the shoal command line args and returns its output and
// error.
func runShoal(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "shoal.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigPrint(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "dir: "+dir+"\nlisten: 10.0.0.1:7700\ninsecure: true\nsquash: [node1, node2]\nsquash-uid: 99\nlog-level: debug\n")
	// The flag overrides the file; the file overrides the defaults.
	out, err := runShoal(t, "mds", "--config", cfg, "--listen", "127.0.0.1:7800", "--print-config")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"dir: " + dir, "listen: 127.0.0.1:7800", "insecure: true", "squash: [node1, node2]", "squash-uid: 99", "squash-gid: 65534", "log-level: debug"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("--print-config lacks %q:\n%s", want, out)
		}
	}
	// The output is a config file that gives the same configuration.
	again, err := runShoal(t, "mds", "--config", writeConfig(t, out), "--print-config")
	if err != nil || again != out {
		t.Errorf("printed config read back: err %v\n%s\nwant\n%s", err, again, out)
	}

	mnt := t.TempDir()
	out, err = runShoal(t, "mount", "--config", writeConfig(t, "mds: a:1,b:2,c:3\nmountpoint: "+mnt+"\ninsecure: true\n"), "--print-config")
	if err != nil || !strings.Contains(out, "mountpoint: "+mnt+"\n") || !strings.Contains(out, "mds: a:1,b:2,c:3\n") {
		t.Errorf("mount --print-config: %v\n%s", err, out)
	}
	out, err = runShoal(t, "ost", "--config", writeConfig(t, "dir: "+dir+"\nmds: m:7700\ndata-listen: \"off\"\ninsecure: true\n"), "--print-config")
	if err != nil || !strings.Contains(out, "data-listen: off\n") {
		t.Errorf("ost --print-config: %v\n%s", err, out)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		cfg  string // written to a file and passed with --config
		want []string
	}{
		{"unknown key", []string{"mds"}, "dir: /x\nlisen: a:1\ninsecure: true\n", []string{":2: unknown key \"lisen\" (did you mean \"listen\"?)"}},
		{"twice", []string{"mds"}, "dir: /x\ndir: /y\ninsecure: true\n", []string{":2: dir: given twice"}},
		{"bad number", []string{"mds"}, "dir: /x\nsquash-uid: nobody\ninsecure: true\n", []string{":2: squash-uid:", "invalid"}},
		{"list for one value", []string{"mds"}, "dir: [a, b]\ninsecure: true\n", []string{":1: dir takes one value, not a list"}},
		{"not a mapping", []string{"mds"}, "- dir\n", []string{":1: want a mapping"}},
		{"bad yaml", []string{"mds"}, "dir: [\n", []string{"config ", "yaml"}},
		{"flag key", []string{"mds"}, "print-config: true\n", []string{"unknown key \"print-config\""}},
		{"missing dir", []string{"mds", "--insecure"}, "", []string{"dir: required"}},
		{"bad listen", []string{"mds", "--insecure", "--dir", dir}, "listen: localhost\n", []string{`listen: "localhost" is not HOST:PORT`}},
		{"bad metrics", []string{"mds", "--insecure", "--dir", dir, "--metrics", "9090"}, "", []string{`metrics: "9090" is not HOST:PORT`}},
		{"no certificates", []string{"mds", "--dir", dir}, "", []string{"cert, key, ca: required unless insecure"}},
		{"insecure and certificates", []string{"mds", "--dir", dir, "--insecure", "--cert", file}, "", []string{"insecure: plaintext was asked for, but cert name"}},
		{"missing key file", []string{"mds", "--dir", dir, "--cert", file, "--key", filepath.Join(dir, "nokey"), "--ca", file}, "", []string{"key: stat", "no such file"}},
		{"partial certificates", []string{"mds", "--dir", dir, "--cert", file}, "", []string{"key: required with cert", "ca: required with cert"}},
		{"peers", []string{"mds", "--insecure", "--dir", dir}, "peers: 1=a:1,x\nid: 1\n", []string{`peers: "x" is not ID=ADDR`}},
		{"id not in peers", []string{"mds", "--insecure", "--dir", dir}, "peers: 1=a:1,2=b:1\nid: 3\n", []string{"id: 3 is not among the peers"}},
		{"peers without id", []string{"mds", "--insecure", "--dir", dir}, "peers: 1=a:1\n", []string{"id: required with peers"}},
		{"log level", []string{"mds", "--insecure", "--dir", dir, "--log-level", "loud"}, "", []string{`log-level: "loud" is none of`}},
		{"ost without mds", []string{"ost", "--insecure", "--dir", dir, "--mds", ""}, "", []string{"mds: required"}},
		{"ost bad data-listen", []string{"ost", "--insecure", "--dir", dir, "--mds", "m:1"}, "data-listen: nowhere\n", []string{`data-listen: "nowhere" is not HOST:PORT`}},
		{"mount without mountpoint", []string{"mount", "--insecure", "--mds", "m:1"}, "", []string{"mountpoint: required"}},
		{"mount on a file", []string{"mount", "--insecure", "--mds", "m:1", file}, "", []string{"is not a directory"}},
		{"several problems at once", []string{"ost", "--mds", "m,"}, "", []string{"dir: required", `mds: an empty address in "m,"`, "cert, key, ca: required"}},
	} {
		args := tc.args
		if tc.cfg != "" {
			args = append(append([]string(nil), args...), "--config", writeConfig(t, tc.cfg))
		}
		// --print-config: the command never starts a server.
		out, err := runShoal(t, append(args, "--print-config")...)
		if err == nil {
			t.Errorf("%s: no error; output:\n%s", tc.name, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
}

// TestConfigExamples checks that the example config files of docs/deploy.md
// (tools/systemd, tools/k8s) have only known keys and valid values; their
// certificate files and mount point do not exist here, so the test gives
// those on the command line.
func TestConfigExamples(t *testing.T) {
	mnt := t.TempDir()
	override := []string{"--cert=", "--key=", "--ca=", "--insecure", "--print-config"}
	for _, tc := range []struct{ cmd, file string }{
		{"mds", "../../tools/systemd/mds.yaml"},
		{"ost", "../../tools/systemd/ost-0.yaml"},
		{"mount", "../../tools/systemd/mount.yaml"},
	} {
		args := append([]string{tc.cmd, "--config", tc.file}, override...)
		if tc.cmd == "mount" {
			args = append(args, mnt)
		}
		if out, err := runShoal(t, args...); err != nil {
			t.Errorf("%s: %v\n%s", tc.file, err, out)
		}
	}
	// The ConfigMap of tools/k8s holds the same three files.
	b, err := os.ReadFile("../../tools/k8s/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"mds", "ost", "mount"} {
		body, ok := cm.Data[c+".yaml"]
		if !ok {
			t.Errorf("tools/k8s/config.yaml has no %s.yaml", c)
			continue
		}
		args := append([]string{c, "--config", writeConfig(t, body)}, override...)
		if c == "mds" {
			args = append(args, "--id", "1")
		}
		if c == "mount" {
			args = append(args, mnt)
		}
		if out, err := runShoal(t, args...); err != nil {
			t.Errorf("tools/k8s/config.yaml %s.yaml: %v\n%s", c, err, out)
		}
	}
}

// TestConfigLogging: --log-level and --log-format, from flags or the
// config file, are checked; the logger they make writes JSON lines with
// the trace id of the request as "req".
func TestConfigLogging(t *testing.T) {
	dir := t.TempDir()
	out, err := runShoal(t, "mds", "--config", writeConfig(t, "dir: "+dir+"\ninsecure: true\nlog-format: json\nlog-level: warn\n"), "--print-config")
	if err != nil || !strings.Contains(out, "log-format: json\n") || !strings.Contains(out, "log-level: warn\n") {
		t.Errorf("log keys in the config file: %v\n%s", err, out)
	}
	out, err = runShoal(t, "mds", "--config", writeConfig(t, "dir: "+dir+"\ninsecure: true\nlog-format: xml\nlog-level: loud\n"), "--print-config")
	if err == nil || !strings.Contains(err.Error(), `log-format: "xml" is neither text nor json`) || !strings.Contains(err.Error(), `log-level: "loud" is none of`) {
		t.Errorf("bad log keys: %v\n%s", err, out)
	}
	if _, err := runShoal(t, "ost", "--dir", dir, "--mds", "m:1", "--insecure", "--log-format", "yaml", "--print-config"); err == nil || !strings.Contains(err.Error(), "log-format") {
		t.Errorf("ost --log-format yaml: %v", err)
	}
	// A command without a config file checks them before it runs.
	if _, err := runShoal(t, "local", "--log-format", "xml"); err == nil || !strings.Contains(err.Error(), "log-format") {
		t.Errorf("local --log-format xml: %v", err)
	}

	var buf bytes.Buffer
	log := newLogger(&buf, "debug", "json")
	log.InfoContext(wire.WithTraceID(context.Background(), "abc-1"), "hello", "ino", 7)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["req"] != "abc-1" || line["msg"] != "hello" || line["level"] != "INFO" {
		t.Errorf("JSON log line %q: %v", buf.String(), err)
	}
	buf.Reset()
	newLogger(&buf, "error", "text").Warn("quiet")
	if buf.Len() != 0 {
		t.Errorf("a warning at level error: %q", buf.String())
	}
}
