package test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencyRules enforces DESIGN.md's one-way arrows: servers never
// import the client, the FUSE layer or each other; the client never imports
// servers; gds uses the client, never the servers or the mount; internal/
// packages import no Shoal package but internal/ ones; the client's
// users (fuse, gds, the checkpoint API, tools) reach the servers only
// through its calls, never their gRPC stubs (issue 19); and no library
// imports the testing package.
func TestDependencyRules(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): go list over the module")
	}
	out, err := exec.Command("go", "list", "-deps=false", "-json", "github.com/shoalfs/shoal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/shoalfs/shoal/"
	type pkg struct {
		ImportPath string
		Imports    []string
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	rules := []struct {
		from   string // package prefix
		banned []string
	}{
		{mod + "mds", []string{mod + "client", mod + "fuse", mod + "ost", mod + "gds", mod + "cmd", mod + "test"}},
		{mod + "ost", []string{mod + "client", mod + "fuse", mod + "mds", mod + "gds", mod + "cmd", mod + "test"}},
		{mod + "client", []string{mod + "mds", mod + "ost", mod + "fuse", mod + "gds", mod + "cmd", mod + "test"}},
		{mod + "fuse", []string{mod + "mds", mod + "ost", mod + "cmd", mod + "test"}},
		{mod + "gds", []string{mod + "mds", mod + "ost", mod + "fuse", mod + "cmd", mod + "test"}},
		{mod + "internal", []string{mod + "mds", mod + "ost", mod + "client", mod + "fuse", mod + "gds", mod + "cmd", mod + "test"}},
	}
	allowed := func(imp string) bool { // the generated stubs are the servers' public API
		return strings.HasSuffix(imp, "/mdspb") || strings.HasSuffix(imp, "/ostpb")
	}
	stubs := []string{mod + "mds/mdspb", mod + "ost/ostpb"}
	clientUsers := []string{mod + "fuse", mod + "gds", mod + "client/ckpt", mod + "tools"}
	n := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		for _, r := range rules {
			if p.ImportPath != r.from && !strings.HasPrefix(p.ImportPath, r.from+"/") {
				continue
			}
			for _, imp := range p.Imports {
				for _, b := range r.banned {
					if (imp == b || strings.HasPrefix(imp, b+"/")) && !allowed(imp) && !strings.HasPrefix(imp, r.from) {
						t.Errorf("%s imports %s", p.ImportPath, imp)
					}
				}
			}
		}
		for _, u := range clientUsers {
			if p.ImportPath != u && !strings.HasPrefix(p.ImportPath, u+"/") {
				continue
			}
			for _, imp := range p.Imports {
				if slices.Contains(stubs, imp) {
					t.Errorf("%s imports %s: it must use the client", p.ImportPath, imp)
				}
			}
		}
		if !strings.HasPrefix(p.ImportPath, mod+"test") {
			for _, imp := range p.Imports {
				if imp == "testing" {
					t.Errorf("library %s imports testing", p.ImportPath)
				}
			}
		}
	}
	if n < 8 {
		t.Fatalf("go list found only %d packages", n)
	}
}
