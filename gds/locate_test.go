package gds

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The NVIDIA wheels are found in Python installations that no variable
// names: a venv used without activating it, a project's .venv, pyenv's
// versions and environments, uv's own Pythons.
func TestPythonPrefixes(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	pwd := filepath.Join(root, "project")
	wheels := map[string]string{
		"venv on PATH":  filepath.Join(root, "env1"),
		"project .venv": filepath.Join(pwd, ".venv"),
		"pyenv":         filepath.Join(home, ".pyenv/versions/3.11.9"),
		"pyenv env":     filepath.Join(home, ".pyenv/versions/3.11.9/envs/train"),
		"uv python":     filepath.Join(home, ".local/share/uv/python/cpython-3.12.8-linux-x86_64-gnu"),
	}
	for _, p := range wheels {
		lib := filepath.Join(p, "lib/python3.12/site-packages/nvidia/cufile/lib/libcufile.so.0")
		if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(lib, nil, 0o644)
	}
	os.WriteFile(filepath.Join(pwd, ".venv/pyvenv.cfg"), []byte("home = /usr/bin\n"), 0o644)
	for _, d := range []string{"env1/bin", "pyenvshims/shims"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
		os.WriteFile(filepath.Join(root, d, "python3"), nil, 0o755)
	}
	env := map[string]string{
		"HOME": home, "PWD": pwd,
		"PATH": filepath.Join(root, "pyenvshims/shims") + ":" + filepath.Join(root, "env1/bin") + ":/usr/bin",
	}
	o := LibOptionsFromEnv(func(k string) string { return env[k] })
	o.NoSystem = true
	got := candidates("", cufileNames, o)
	for what, p := range wheels {
		want := filepath.Join(p, "lib/python3.12/site-packages/nvidia/cufile/lib/libcufile.so.0")
		if !slices.Contains(got, want) {
			t.Errorf("%s: %s not among the candidates %v (prefixes %v)", what, want, got, o.PythonPrefixes)
		}
	}
	if slices.Contains(o.PythonPrefixes, filepath.Join(root, "pyenvshims")) {
		t.Errorf("pyenv's shims taken for a Python prefix: %v", o.PythonPrefixes)
	}
}
