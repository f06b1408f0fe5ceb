// Package gpucheck is the program behind `make gpu-check` (`shoal
// gpu-check`): on a machine with a GPU it writes a checkpoint of random
// tensors to a cluster, restores it into GPU memory by every path gds has,
// checks every byte on the device (a SHA-256 of a copy back against the
// source), and prints GB/s for each path beside two baselines on a local
// file of the same size: plain cuFileRead, and pread + cudaMemcpy. On the
// host backend (Backend "host") the same steps run without a GPU, which is
// how CI tests this package.
package gpucheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/client/ckpt/safetensors"
	"github.com/shoalfs/shoal/gds"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
)

// Options configure a check.
type Options struct {
	MDS     string
	OSTDirs []string // OST directories on this node
	// Backend is "cuda" or "host".
	Backend string
	CUDA    gds.CUDAOptions
	// Size is the checkpoint's data size in bytes. Default 2 GiB.
	Size int64
	// TensorSize is the size of the large tensors. Default 64 MiB.
	TensorSize int64
	// Dir holds the baseline file and the check's summary (ckpt.json).
	Dir string
	// DropCaches writes 3 to /proc/sys/vm/drop_caches before each timed
	// read (needs root), so that buffered reads come from the disk.
	DropCaches bool
	Out        io.Writer
	// Creds is the client's mutual TLS identity; nil: plaintext (a
	// cluster run --insecure).
	Creds *wire.Creds
}

// Row is one measured way of reading.
type Row struct {
	Name    string  `json:"name"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	GBps    float64 `json:"gb_per_s"`
	Path    string  `json:"path"`
	Checked bool    `json:"checked"`
	// Measures is the path the row is there to measure, and Ran whether
	// that path carried the bytes: a row whose path did not run (no
	// cuFile, every local piece fell back) fails the check.
	Measures string `json:"measures"`
	Ran      bool   `json:"ran"`
	Note     string `json:"note,omitempty"`
}

// Result is a check's outcome.
type Result struct {
	Device     string `json:"device"`
	CuFileMode string `json:"cufile_mode"`
	// CuFileModeNow is the mode once reads confirmed it (cuFile's
	// statistics), and CuFileStats its read counters at the end.
	CuFileModeNow string           `json:"cufile_mode_now,omitempty"`
	CuFileStats   *gds.CuFileStats `json:"cufile_stats,omitempty"`
	Checkpoint    string           `json:"checkpoint"`
	SHA256        string           `json:"data_sha256"`
	Rows          []Row            `json:"rows"`
}

func openDevice(o Options) (*gds.Device, error) {
	switch o.Backend {
	case "cuda", "":
		return gds.OpenCUDA(o.CUDA)
	case "host":
		return gds.OpenHost(gds.HostOptions{}), nil
	}
	return nil, fmt.Errorf("gpu-check: backend %q: want cuda or host: %w", o.Backend, errs.ErrInvalid)
}

// Run runs the check. It fails if any restore delivers a wrong byte.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Size <= 0 {
		o.Size = 2 << 30
	}
	if o.TensorSize <= 0 {
		o.TensorSize = 64 << 20
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	start := time.Now()
	dev, err := openDevice(o)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	info := dev.Info()
	res := &Result{Device: info.Name, CuFileMode: info.CuFileMode}
	fmt.Fprintf(o.Out, "device: %s %s; local reads take the %s path; cuFile: %s\n", info.Kind, info.Name, info.DirectPath, orNone(info.CuFileMode))
	cl, err := client.New(ctx, client.Options{MDS: o.MDS, Name: "gpu-check", Creds: o.Creds})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	local, err := gds.DiscoverLocalOSTs(o.OSTDirs)
	if err != nil {
		return nil, err
	}
	if err := waitOSTs(ctx, cl, len(local)); err != nil {
		return nil, err
	}

	// The checkpoint.
	path := fmt.Sprintf("/gpu-check/ckpt-%d.safetensors", time.Now().UnixNano())
	t0 := time.Now()
	h, sum, err := writeCheckpoint(ctx, cl, path, o.Size, o.TensorSize)
	if err != nil {
		return nil, err
	}
	res.Checkpoint, res.SHA256 = path, sum
	fmt.Fprintf(o.Out, "wrote %s: %d tensors, %s of data in %.1fs (%.2f GB/s)\n", path, len(h.Tensors), human(h.DataLen), time.Since(t0).Seconds(), gbps(h.DataLen, time.Since(t0)))
	if o.Dir != "" {
		js, _ := json.Marshal(map[string]any{"mds": o.MDS, "path": path, "data_sha256": sum, "data_start": h.DataStart(), "data_len": h.DataLen})
		os.WriteFile(filepath.Join(o.Dir, "ckpt.json"), js, 0o644)
	}

	buf, err := dev.Alloc(h.DataLen, true)
	if err != nil {
		return nil, err
	}
	defer buf.Free()
	type variant struct {
		name string
		opts gds.Options
		io   int // extra cuFile threads (CUDA): a second device
	}
	variants := []variant{
		{name: "shoal restore, local chunks", opts: gds.Options{LocalOSTs: local}},
		{name: "shoal restore, local, checksums not checked", opts: gds.Options{LocalOSTs: local, TrustLocal: true}},
		{name: "shoal restore, all through the network (bounce)", opts: gds.Options{}},
	}
	if info.Kind == gds.KindCUDA {
		variants = append(variants, variant{name: "shoal restore, local, 4 cuFile threads", opts: gds.Options{LocalOSTs: local}, io: 4})
	}
	var failed []string
	for _, v := range variants {
		d, b := dev, buf
		if v.io > 0 {
			co := o.CUDA
			co.IOThreads = v.io
			d2, err := gds.OpenCUDA(co)
			if err == nil {
				defer d2.Close()
				b, err = d2.Alloc(h.DataLen, true)
			}
			if err != nil {
				row := Row{Name: v.name, Measures: "cuFile", Note: err.Error()}
				failed = append(failed, fmt.Sprintf("%s: %v", v.name, err))
				res.Rows = append(res.Rows, row)
				fmt.Fprintln(o.Out, row.String())
				continue
			}
			d = d2
		}
		row, rep, err := restoreOnce(ctx, cl, d, b, v.opts, path, sum, o)
		row.Name = v.name
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", v.name, err))
			row.Note = err.Error()
		} else if problem := ran(&row, d.Info(), v.opts.LocalOSTs != nil, rep); problem != "" {
			failed = append(failed, fmt.Sprintf("%s: %s", v.name, problem))
		}
		res.Rows = append(res.Rows, row)
		fmt.Fprintln(o.Out, row.String())
	}

	// Baselines on a local file of the same bytes.
	if o.Dir != "" {
		file := filepath.Join(o.Dir, "baseline.bin")
		if err := writeLocalFile(ctx, cl, path, h, file); err != nil {
			return nil, err
		}
		defer os.Remove(file)
		direct, bounce := "cuFile", "bounce"
		if info.Kind == gds.KindHost {
			direct, bounce = "host", "host"
		}
		for _, bl := range []struct {
			name, measures string
			fn             func() (string, error)
		}{
			{"baseline: cuFileRead of a local file", direct, func() (string, error) { return gds.ReadFileDirect(dev, file, buf) }},
			{"baseline: pread + cudaMemcpy of a local file", bounce, func() (string, error) { return gds.ReadFileBounce(dev, file, buf) }},
		} {
			dropCaches(o)
			buf.Zero(0, buf.Len())
			t0 := time.Now()
			p, err := bl.fn()
			d := time.Since(t0)
			row := Row{Name: bl.name, Bytes: h.DataLen, Seconds: d.Seconds(), GBps: gbps(h.DataLen, d), Path: p, Measures: bl.measures, Ran: err == nil}
			if err != nil {
				row.GBps, row.Note = 0, err.Error()
				failed = append(failed, fmt.Sprintf("%s: %v", bl.name, err))
			} else if got, err := deviceSum(buf, h.DataLen); err != nil || got != sum {
				failed = append(failed, fmt.Sprintf("%s: device bytes differ from the source", bl.name))
				row.Note = "device bytes differ from the source"
			} else {
				row.Checked = true
			}
			res.Rows = append(res.Rows, row)
			fmt.Fprintln(o.Out, row.String())
		}
	}
	cl.Remove(ctx, path)
	if info.Kind == gds.KindCUDA {
		st := dev.CuFileStatus()
		res.CuFileModeNow = st.Mode
		if st.StatsErr == "" {
			res.CuFileStats = &st.Stats
		}
		fmt.Fprintf(o.Out, "cuFile now: %s; %s\n", orNone(st.Mode), statsLine(st))
	}
	fmt.Fprintf(o.Out, "gpu-check: %d ways measured in %.1fs\n", len(res.Rows), time.Since(start).Seconds())
	if len(failed) > 0 {
		fmt.Fprintf(o.Out, "gpu-check: FAILED:\n  %s\n", strings.Join(failed, "\n  "))
		return res, fmt.Errorf("gpu-check: %s", strings.Join(failed, "; "))
	}
	return res, nil
}

func statsLine(st gds.CuFileStatus) string {
	if st.StatsErr != "" {
		return "no cuFile statistics (" + st.StatsErr + ")"
	}
	s := st.Stats
	return fmt.Sprintf("cuFile statistics: %d reads (%d P2P, %d nvidia-fs, %d POSIX), %s", s.Reads, s.P2P, s.NVFS, s.POSIX, human(int64(s.Bytes)))
}

func (r Row) String() string {
	ok := "checked"
	if !r.Checked {
		ok = "NOT CHECKED"
	}
	if r.Measures != "" && !r.Ran {
		ok += ", " + strings.ToUpper(r.Measures) + " PATH DID NOT RUN"
	}
	s := fmt.Sprintf("%-50s %8.2f GB/s  %-14s %s in %.2fs, %s", r.Name, r.GBps, r.Path, human(r.Bytes), r.Seconds, ok)
	if r.Note != "" {
		s += " (" + r.Note + ")"
	}
	return s
}

// ran fills in what row measures and whether that path carried its
// bytes, and returns why the row fails when it did not: local rows
// measure cuFile (the local path on the host backend), the network row
// the staging path.
func ran(row *Row, info gds.Info, local bool, rep gds.Report) string {
	if rep.Fallback > 0 {
		row.Note = strings.TrimPrefix(row.Note+"; ", "; ") + fmt.Sprintf("%s FELL BACK from local chunks to the network", human(rep.Fallback))
	}
	switch {
	case !local:
		row.Measures = "bounce"
		if info.Kind == gds.KindHost {
			row.Measures = "host"
		}
		row.Ran = rep.Remote > 0
		if !row.Ran {
			return "nothing was read through the network"
		}
	case info.Kind == gds.KindHost:
		row.Measures = "host"
		row.Ran = rep.Local > rep.Fallback
		if !row.Ran {
			return fmt.Sprintf("the local path did not run: %s of local chunks read, %s fell back (are --ost-dirs the OSTs of this node?)", human(rep.Local), human(rep.Fallback))
		}
	default:
		row.Measures = "cuFile"
		cu := rep.Paths[gds.PathDirect] + rep.Paths[gds.PathCompat]
		row.Ran = cu > 0
		switch {
		case info.DirectPath == gds.PathBounce:
			return "cuFile did not run: " + info.CuFileMode
		case !row.Ran:
			return fmt.Sprintf("no byte went through cuFile: %s of local chunks read, %s fell back (are --ost-dirs the OSTs of this node?)", human(rep.Local), human(rep.Fallback))
		}
	}
	return ""
}

// restoreOnce restores the checkpoint into buf and checks every byte.
func restoreOnce(ctx context.Context, cl *client.Client, dev *gds.Device, buf *gds.Buffer, ro gds.Options, path, sum string, o Options) (Row, gds.Report, error) {
	r, err := gds.NewReader(cl, dev, ro)
	if err != nil {
		return Row{}, gds.Report{}, err
	}
	defer r.Close()
	if err := buf.Zero(0, buf.Len()); err != nil {
		return Row{}, gds.Report{}, err
	}
	dropCaches(o)
	t0 := time.Now()
	s, err := r.Restore(ctx, path, buf, 0)
	d := time.Since(t0)
	if err != nil {
		return Row{Seconds: d.Seconds()}, gds.Report{}, err
	}
	row := Row{Bytes: s.Report.Bytes, Seconds: d.Seconds(), GBps: gbps(s.Report.Bytes, d), Path: s.Report.Path()}
	got, err := deviceSum(buf, s.Report.Bytes)
	if err != nil {
		return row, s.Report, err
	}
	if got != sum {
		return row, s.Report, fmt.Errorf("device bytes differ from the source (sha256 %s, want %s)", got, sum)
	}
	row.Checked = true
	return row, s.Report, nil
}

// deviceSum is the SHA-256 of the first n bytes of buf, copied back.
func deviceSum(buf *gds.Buffer, n int64) (string, error) {
	h := sha256.New()
	chunk := make([]byte, 64<<20)
	for off := int64(0); off < n; off += int64(len(chunk)) {
		p := chunk[:min(int64(len(chunk)), n-off)]
		if err := buf.CopyToHost(p, off); err != nil {
			return "", err
		}
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeCheckpoint writes a safetensors shard of random tensors with about
// size bytes of data: tensors of tensorSize bytes and a few small ones of
// odd sizes. It returns the header and the SHA-256 of the data region.
func writeCheckpoint(ctx context.Context, cl *client.Client, path string, size, tensorSize int64) (*safetensors.Header, string, error) {
	var specs []safetensors.Spec
	specs = append(specs, safetensors.Spec{Name: "norm.bias", DType: safetensors.F32, Shape: []int64{1000}})
	var total int64 = 4000
	for i := 0; total < size; i++ {
		n := min(tensorSize, size-total)
		if n < 2 {
			break
		}
		specs = append(specs, safetensors.Spec{Name: fmt.Sprintf("layers.%d.weight", i), DType: safetensors.BF16, Shape: []int64{n / 2}})
		total += n / 2 * 2
	}
	h, head, err := safetensors.Layout(map[string]string{"format": "pt", "writer": "shoal gpu-check"}, specs)
	if err != nil {
		return nil, "", err
	}
	if err := cl.MkdirAll(ctx, filepath.Dir(path), 0o755); err != nil {
		return nil, "", err
	}
	f, err := cl.Create(ctx, path, 0o644)
	if err != nil {
		return nil, "", err
	}
	if _, err := f.WriteAt(ctx, head, 0); err != nil {
		f.Close(ctx)
		return nil, "", err
	}
	sum := sha256.New()
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	block := make([]byte, 16<<20)
	off := h.DataStart()
	for done := int64(0); done < h.DataLen; {
		p := block[:min(int64(len(block)), h.DataLen-done)]
		fill(rnd, p)
		sum.Write(p)
		if _, err := f.WriteAt(ctx, p, off+done); err != nil {
			f.Close(ctx)
			return nil, "", err
		}
		done += int64(len(p))
	}
	if err := f.Close(ctx); err != nil {
		return nil, "", err
	}
	return h, hex.EncodeToString(sum.Sum(nil)), nil
}

func fill(r *rand.Rand, p []byte) {
	for i := 0; i+8 <= len(p); i += 8 {
		v := r.Uint64()
		p[i], p[i+1], p[i+2], p[i+3], p[i+4], p[i+5], p[i+6], p[i+7] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	for i := len(p) &^ 7; i < len(p); i++ {
		p[i] = byte(r.Uint32())
	}
}

// writeLocalFile copies the checkpoint's data region to a local file.
func writeLocalFile(ctx context.Context, cl *client.Client, path string, h *safetensors.Header, file string) error {
	src, err := cl.Open(ctx, path)
	if err != nil {
		return err
	}
	defer src.Close(ctx)
	dst, err := os.Create(file)
	if err != nil {
		return err
	}
	block := make([]byte, 16<<20)
	for done := int64(0); done < h.DataLen; {
		p := block[:min(int64(len(block)), h.DataLen-done)]
		if _, err := src.ReadAt(ctx, p, h.DataStart()+done); err != nil && !errors.Is(err, io.EOF) {
			dst.Close()
			return err
		}
		if _, err := dst.Write(p); err != nil {
			dst.Close()
			return err
		}
		done += int64(len(p))
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

func waitOSTs(ctx context.Context, cl *client.Client, want int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := cl.ListOsts(ctx)
		up := 0
		for _, o := range l.OSTs {
			if o.Up {
				up++
			}
		}
		if err == nil && up >= max(want, 1) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gpu-check: %d OSTs up, want %d (%v)", up, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func dropCaches(o Options) {
	if o.DropCaches {
		os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
	}
}

func gbps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e9
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}

func orNone(s string) string {
	if s == "" {
		return "none (host backend)"
	}
	return s
}
