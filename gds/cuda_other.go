//go:build !(linux && (amd64 || arm64))

package gds

import (
	"fmt"
	"runtime"
	"time"
)

// CUDAOptions configure the CUDA backend.
type CUDAOptions struct {
	Libs         LibOptions
	Device       int
	Streams      int
	IOThreads    int
	NoCuFile     bool
	PollInterval time.Duration
}

// OpenCUDA is not available on this platform.
func OpenCUDA(o CUDAOptions) (*Device, error) {
	return nil, fmt.Errorf("gds: %w: the CUDA backend is built for linux/amd64 and linux/arm64, not %s/%s", ErrNoGPU, runtime.GOOS, runtime.GOARCH)
}

// GlibcVersion is "" on this platform.
func GlibcVersion() string { return "" }
