package gds

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// LibOptions say where to find libcudart and libcufile.
type LibOptions struct {
	// Cudart and Cufile are explicit library files; when set, only that
	// file is tried.
	Cudart, Cufile string
	// Dirs are searched first, in order.
	Dirs []string
	// PythonPrefixes are Python installations or virtual environments
	// (sys.prefix: $VIRTUAL_ENV, $CONDA_PREFIX, /usr, /usr/local...) whose
	// site-packages may hold NVIDIA's wheels (nvidia/*/lib).
	PythonPrefixes []string
	// NoSystem skips the usual system directories and the dynamic
	// loader's own search (ld.so.cache, LD_LIBRARY_PATH), for tests.
	NoSystem bool
}

// Library file names, newest first.
var (
	cudartNames = []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}
	cufileNames = []string{"libcufile.so.0", "libcufile.so.1", "libcufile.so"}
)

// LibOptionsFromEnv returns the library options that the environment
// asks for: SHOAL_CUDA_LIB and SHOAL_CUFILE_LIB (files),
// SHOAL_CUDA_LIB_DIRS (a list of directories separated by ':'), and the
// Python installations whose NVIDIA wheels may hold the libraries, in
// this order: $VIRTUAL_ENV, $CONDA_PREFIX, $UV_PROJECT_ENVIRONMENT; the
// python3 first on $PATH (a virtual environment used without being
// activated; pyenv's shims are skipped); .venv and venv in $PWD (uv's and
// poetry's project environments); ~/.local; pyenv's versions and their
// environments ($PYENV_ROOT, default ~/.pyenv); uv's own Pythons
// ($UV_PYTHON_INSTALL_DIR, default $XDG_DATA_HOME/uv/python or
// ~/.local/share/uv/python). Only commands call it (getenv is os.Getenv
// there).
func LibOptionsFromEnv(getenv func(string) string) LibOptions {
	o := LibOptions{Cudart: getenv("SHOAL_CUDA_LIB"), Cufile: getenv("SHOAL_CUFILE_LIB")}
	for _, d := range strings.Split(getenv("SHOAL_CUDA_LIB_DIRS"), ":") {
		if d != "" {
			o.Dirs = append(o.Dirs, d)
		}
	}
	o.PythonPrefixes = pythonPrefixes(getenv)
	return o
}

// pythonPrefixes lists the Python installations named by the environment
// or found where the usual tools put them, without duplicates.
func pythonPrefixes(getenv func(string) string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, k := range []string{"VIRTUAL_ENV", "CONDA_PREFIX", "UV_PROJECT_ENVIRONMENT"} {
		add(getenv(k))
	}
	for _, d := range filepath.SplitList(getenv("PATH")) {
		if d == "" || filepath.Base(d) == "shims" {
			continue
		}
		if fileExists(filepath.Join(d, "python3")) {
			add(filepath.Dir(d)) // PREFIX/bin/python3, not resolved: a venv's python is a link
			break
		}
	}
	if pwd := getenv("PWD"); pwd != "" {
		for _, v := range []string{".venv", "venv"} {
			if fileExists(filepath.Join(pwd, v, "pyvenv.cfg")) {
				add(filepath.Join(pwd, v))
			}
		}
	}
	home := getenv("HOME")
	if home != "" {
		add(filepath.Join(home, ".local"))
	}
	pyenv := getenv("PYENV_ROOT")
	if pyenv == "" && home != "" {
		pyenv = filepath.Join(home, ".pyenv")
	}
	uv := getenv("UV_PYTHON_INSTALL_DIR")
	if uv == "" {
		if x := getenv("XDG_DATA_HOME"); x != "" {
			uv = filepath.Join(x, "uv", "python")
		} else if home != "" {
			uv = filepath.Join(home, ".local", "share", "uv", "python")
		}
	}
	for _, pat := range []string{"versions/*", "versions/*/envs/*"} {
		if pyenv != "" {
			for _, p := range newestFirst(filepath.Join(pyenv, pat)) {
				add(p)
			}
		}
	}
	if uv != "" {
		for _, p := range newestFirst(filepath.Join(uv, "*")) {
			add(p)
		}
	}
	return out
}

func newestFirst(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	sort.Sort(sort.Reverse(sort.StringSlice(m)))
	return m
}

// candidates lists the files to try for a library, in order: the explicit
// file alone when set; else each name in o.Dirs, in the NVIDIA wheels of
// the Python installations, then the bare names (for the dynamic loader's
// own search) and the usual CUDA directories.
func candidates(explicit string, names []string, o LibOptions) []string {
	if explicit != "" {
		return []string{explicit}
	}
	var dirs []string
	dirs = append(dirs, o.Dirs...)
	prefixes := append([]string(nil), o.PythonPrefixes...)
	if !o.NoSystem {
		prefixes = append(prefixes, "/usr", "/usr/local", "/opt/conda")
	}
	for _, p := range prefixes {
		dirs = append(dirs, pythonLibDirs(p)...)
	}
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, d := range dirs {
		for _, n := range names {
			if p := filepath.Join(d, n); fileExists(p) {
				add(p)
			}
		}
	}
	if o.NoSystem {
		return out
	}
	for _, n := range names {
		add(n) // dlopen searches LD_LIBRARY_PATH and the ld.so cache
	}
	arch := "x86_64"
	if runtime.GOARCH == "arm64" {
		arch = "sbsa"
	}
	sys := []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/" + arch + "-linux/lib", "/usr/lib/" + runtime.GOARCH + "-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"}
	versioned, _ := filepath.Glob("/usr/local/cuda-*/lib64")
	sort.Sort(sort.Reverse(sort.StringSlice(versioned)))
	sys = append(sys, versioned...)
	for _, d := range sys {
		for _, n := range names {
			if p := filepath.Join(d, n); fileExists(p) {
				add(p)
			}
		}
	}
	return out
}

// pythonLibDirs returns the library folders of NVIDIA's Python wheels
// under a Python prefix: site-packages/nvidia/<pkg>/lib (CUDA 12 wheels:
// nvidia/cuda_runtime/lib, nvidia/cufile/lib) and nvidia/cu13/lib (CUDA 13
// wheels), for every python3.* found there.
func pythonLibDirs(prefix string) []string {
	var out []string
	for _, pat := range []string{
		"lib/python3*/site-packages/nvidia/*/lib",
		"lib/python3*/dist-packages/nvidia/*/lib",
		"lib/python3/dist-packages/nvidia/*/lib",
		"local/lib/python3*/dist-packages/nvidia/*/lib",
		"lib64/python3*/site-packages/nvidia/*/lib",
	} {
		m, _ := filepath.Glob(filepath.Join(prefix, pat))
		sort.Strings(m)
		out = append(out, m...)
	}
	return out
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
