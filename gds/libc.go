//go:build linux && (amd64 || arm64)

package gds

import (
	"sync"

	"github.com/ebitengine/purego"
)

// libc holds the two C library functions the CUDA backend needs: errno
// after a failed cuFileRead, and the glibc version for gpu-check --probe.
var libc struct {
	once    sync.Once
	errno   func() *int32 // __errno_location: this thread's errno
	version func() string // gnu_get_libc_version
}

func loadLibc() {
	libc.once.Do(func() {
		for _, name := range []string{"libc.so.6", "libc.so"} {
			h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err != nil {
				continue
			}
			if p, err := purego.Dlsym(h, "__errno_location"); err == nil && p != 0 {
				purego.RegisterFunc(&libc.errno, p)
			}
			if p, err := purego.Dlsym(h, "gnu_get_libc_version"); err == nil && p != 0 {
				purego.RegisterFunc(&libc.version, p)
			}
			return
		}
	})
}

// threadErrno returns the calling OS thread's errno (0 when unknown). Call
// it on the thread, locked, that made the failed call, before any other C
// call there.
func threadErrno() int32 {
	loadLibc()
	if libc.errno == nil {
		return 0
	}
	return *libc.errno()
}

// GlibcVersion returns the C library's version ("2.35"), or "" when it is
// not glibc or cannot be asked.
func GlibcVersion() string {
	loadLibc()
	if libc.version == nil {
		return ""
	}
	return libc.version()
}
