package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoalfs/shoal/gds"
	"github.com/shoalfs/shoal/tools/bench"
	"github.com/shoalfs/shoal/tools/gpucheck"
)

type gpuCheckFlags struct {
	mds, ostDirs, backend, dir, size, jsonOut string
	device, streams                           int
	probe, dropCaches                         bool
	tls                                       tlsFlags
}

func newGPUCheckCmd(g *globals) *cobra.Command {
	f := &gpuCheckFlags{}
	cmd := &cobra.Command{
		Use:   "gpu-check",
		Short: "Restore a checkpoint into GPU memory by every path and measure it (make gpu-check)",
		Long: `gpu-check writes a checkpoint of random tensors to the cluster, restores it
into GPU memory through cuFile (local chunks), through pinned buffers and
async copies (remote chunks), checks every byte on the device, and prints
GB/s for each beside plain cuFileRead and pread+cudaMemcpy of a local file.
--probe only opens the GPU and says what it found: the library files
loaded, the cuFile mode (confirmed by a test read of a file in --dir and
cuFile's statistics), the glibc version and whether /run/udev is
readable. The CUDA libraries are
found as SHOAL_CUDA_LIB, SHOAL_CUFILE_LIB, SHOAL_CUDA_LIB_DIRS and the
Python environment (nvidia/*/lib) say. It reaches the cluster with the TLS
flags of the other client commands (--cert, --key, --ca, or $SHOAL_CERT,
$SHOAL_KEY, $SHOAL_CA: . DIR/tls/env of a shoal local), or --insecure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runGPUCheck(f) },
	}
	mdsFlag(cmd, &f.mds)
	addTLSFlags(cmd, &f.tls)
	cmd.Flags().StringVar(&f.ostDirs, "ost-dirs", "", "OST directories on this node, ':'-separated (globs allowed), e.g. DIR/ost-*")
	cmd.Flags().StringVar(&f.backend, "backend", "cuda", "device backend: cuda, or host (no GPU)")
	cmd.Flags().StringVar(&f.dir, "dir", "", "scratch directory for the baseline file and ckpt.json")
	cmd.Flags().StringVar(&f.size, "size", "2GiB", "checkpoint data size")
	cmd.Flags().StringVar(&f.jsonOut, "json", "", "also write the results as JSON to this file")
	cmd.Flags().IntVar(&f.device, "device", 0, "CUDA device")
	cmd.Flags().IntVar(&f.streams, "streams", 4, "CUDA copy streams")
	cmd.Flags().BoolVar(&f.probe, "probe", false, "only open the device and describe it; exit 1 without a GPU")
	cmd.Flags().BoolVar(&f.dropCaches, "drop-caches", false, "drop the page cache before each timed read (root)")
	return cmd
}

func runGPUCheck(f *gpuCheckFlags) error {
	size, err := bench.ParseSize(f.size)
	if err != nil {
		return err
	}
	var dirs []string
	for _, pat := range strings.Split(f.ostDirs, ":") {
		if pat == "" {
			continue
		}
		m, err := filepath.Glob(pat)
		if err != nil || len(m) == 0 {
			return fmt.Errorf("--ost-dirs: %q matches nothing", pat)
		}
		dirs = append(dirs, m...)
	}
	o := gpucheck.Options{MDS: f.mds, OSTDirs: dirs, Backend: f.backend, Size: size, Dir: f.dir, DropCaches: f.dropCaches, Out: os.Stdout,
		CUDA: gds.CUDAOptions{Libs: gds.LibOptionsFromEnv(os.Getenv), Device: f.device, Streams: f.streams}}
	if f.probe {
		p, err := gpucheck.Probe(o)
		if err != nil {
			fmt.Printf("glibc: %s\n", gds.GlibcVersion())
			if !errors.Is(err, gds.ErrNoGPU) {
				return fmt.Errorf("no usable GPU: %w", err)
			}
			return err // says "no GPU" and what it tried
		}
		fmt.Print(p.String())
		if strings.HasPrefix(p.TestRead, "FAILED") {
			return fmt.Errorf("gpu-check --probe: the cuFile test read failed")
		}
		return nil
	}
	if err := requireMDS(f.mds); err != nil {
		return err
	}
	if o.Creds, err = f.tls.load(); err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	res, err := gpucheck.Run(ctx, o)
	if res != nil && f.jsonOut != "" {
		js, _ := json.MarshalIndent(res, "", "  ")
		if werr := os.WriteFile(f.jsonOut, js, 0o644); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}
