package gpucheck

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/shoalfs/shoal/gds"
)

// ProbeResult is what `shoal gpu-check --probe` found.
type ProbeResult struct {
	Info gds.Info
	// TestRead is the path a cuFileRead of a small file in Options.Dir
	// took (confirming cuFile's mode from its statistics), or why there
	// was none.
	TestRead string
	// CuFile is cuFile's status after the test read.
	CuFile gds.CuFileStatus
	// Glibc is the C library's version ("" when not glibc).
	Glibc string
	// Udev says whether /run/udev is readable (cuFile looks up block
	// devices through udev; a container needs it mounted).
	Udev string
}

// probeReadSize is the size of the probe's test read.
const probeReadSize = 1 << 20

// Probe opens the device and describes it, or returns the reason there
// is no GPU. With a CUDA device, cuFile and Options.Dir, it reads a small
// file there with cuFileRead, which confirms cuFile's mode.
func Probe(o Options) (*ProbeResult, error) {
	dev, err := openDevice(o)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	p := &ProbeResult{Info: dev.Info(), Glibc: gds.GlibcVersion(), Udev: udevStatus()}
	switch {
	case p.Info.Kind != gds.KindCUDA:
		p.TestRead = "none (host backend)"
	case p.Info.DirectPath == gds.PathBounce:
		p.TestRead = "none: no cuFile (" + p.Info.CuFileMode + ")"
	case o.Dir == "":
		p.TestRead = "none: no --dir to read a file in"
	default:
		path, err := testRead(dev, o.Dir)
		if err != nil {
			p.TestRead = "FAILED: " + err.Error()
		} else {
			p.TestRead = path
		}
	}
	p.CuFile = dev.CuFileStatus()
	return p, nil
}

// testRead writes probeReadSize random bytes to a file in dir, reads it
// into device memory with cuFileRead and checks the bytes.
func testRead(dev *gds.Device, dir string) (string, error) {
	data := make([]byte, probeReadSize)
	rand.Read(data)
	f := filepath.Join(dir, "probe.bin")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		return "", err
	}
	defer os.Remove(f)
	buf, err := dev.Alloc(probeReadSize, true)
	if err != nil {
		return "", err
	}
	defer buf.Free()
	path, err := gds.ReadFileDirect(dev, f, buf)
	if err != nil {
		return "", err
	}
	got := make([]byte, probeReadSize)
	if err := buf.CopyToHost(got, 0); err != nil {
		return "", err
	}
	if !bytes.Equal(got, data) {
		return "", fmt.Errorf("the device bytes differ from the file after cuFileRead of %s", f)
	}
	return path, nil
}

func udevStatus() string {
	ents, err := os.ReadDir("/run/udev")
	if err != nil {
		return "not readable: " + err.Error() + " (cuFile looks up block devices through udev; in a container, mount /run/udev)"
	}
	return fmt.Sprintf("readable (%d entries)", len(ents))
}

func (p *ProbeResult) String() string {
	var b strings.Builder
	i := p.Info
	fmt.Fprintf(&b, "device: %s %s\n", i.Kind, i.Name)
	fmt.Fprintf(&b, "libraries loaded:\n")
	for _, l := range i.Libraries {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	if len(i.Libraries) == 0 {
		fmt.Fprintf(&b, "  none (host backend)\n")
	}
	fmt.Fprintf(&b, "cuFile at open: %s\n", orNone(i.CuFileMode))
	fmt.Fprintf(&b, "cuFile test read: %s\n", p.TestRead)
	if i.Kind == gds.KindCUDA {
		fmt.Fprintf(&b, "cuFile now: %s; %s\n", orNone(p.CuFile.Mode), statsLine(p.CuFile))
	}
	fmt.Fprintf(&b, "local chunk reads take the %s path\n", i.DirectPath)
	glibc := p.Glibc
	if glibc == "" {
		glibc = "unknown (not glibc?)"
	}
	fmt.Fprintf(&b, "glibc: %s\n/run/udev: %s\n", glibc, p.Udev)
	return b.String()
}
