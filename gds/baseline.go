package gds

import (
	"fmt"

	"github.com/shoalfs/shoal/internal/errs"
)

// baselineChunk is the size of one read of the baselines.
const baselineChunk = 16 << 20

// ReadFileDirect reads the local file at path into buf from offset 0 with
// the device's direct reads (cuFileRead through an O_DIRECT descriptor on
// CUDA, pread on the host backend), 16 MiB at a time: the baseline that
// Shoal's direct path is measured against. It returns the path that ran
// ("direct", "compat", or both as "direct+compat" busiest first).
func ReadFileDirect(dev *Device, path string, buf *Buffer) (string, error) {
	if dev.info.DirectPath == PathBounce {
		return "", fmt.Errorf("gds: no cuFile on this device (%s): %w", dev.info.CuFileMode, errs.ErrNotSupported)
	}
	f, err := dev.eng.openDirect(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	n := f.Size()
	if err := buf.check(0, n); err != nil {
		return "", err
	}
	var rep Report
	for off := int64(0); off < n; off += baselineChunk {
		m := min(baselineChunk, n-off)
		p, err := dev.eng.readDirect(f, buf, off, off, m)
		if err != nil {
			return "", err
		}
		rep.Paths[p] += m
	}
	return rep.Path(), nil
}

// ReadFileBounce reads the local file at path into buf from offset 0 with
// pread into two pinned buffers and asynchronous copies to the device
// (cudaMemcpyAsync), double buffered: the usual way to load a file into
// GPU memory, and the other baseline.
func ReadFileBounce(dev *Device, path string, buf *Buffer) (string, error) {
	f, err := openHostFile(path, true)
	if err != nil {
		return "", err
	}
	defer f.Close()
	n := f.size
	if err := buf.check(0, n); err != nil {
		return "", err
	}
	var stage [2][]byte
	var pending [2]<-chan error
	for i := range stage {
		if stage[i], err = dev.allocPinned(baselineChunk); err != nil {
			return "", err
		}
		defer dev.freePinned(stage[i])
	}
	var firstErr error
	for i, off := 0, int64(0); off < n; i, off = i+1, off+baselineChunk {
		s := i % 2
		if pending[s] != nil {
			if err := <-pending[s]; err != nil && firstErr == nil {
				firstErr = err
			}
			pending[s] = nil
		}
		if firstErr != nil {
			break
		}
		p := stage[s][:min(baselineChunk, n-off)]
		src := f.f
		if f.direct != nil && len(p)%Align == 0 {
			src = f.direct
		}
		if err := readFull(src, p, off); err != nil {
			firstErr = err
			break
		}
		pending[s] = dev.eng.copyIn(buf, off, p, s)
	}
	for _, c := range pending {
		if c != nil {
			if err := <-c; err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	p := PathBounce
	if dev.info.Kind == KindHost {
		p = PathHost
	}
	return p.String(), firstErr
}
