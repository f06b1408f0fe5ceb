package gpucheck

import "github.com/shoalfs/shoal/gds"

// cudaNone finds no CUDA library, whatever the machine has.
func cudaNone() gds.CUDAOptions {
	return gds.CUDAOptions{Libs: gds.LibOptions{NoSystem: true}}
}
