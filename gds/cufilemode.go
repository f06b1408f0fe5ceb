//go:build linux && (amd64 || arm64)

package gds

import (
	"fmt"
	"sync"
	"unsafe"
)

// The cuFile driver is opened once per process and shared by every CUDA
// device: cuFileDriverOpen succeeds again on an open driver, but a
// cuFileDriverClose may close it for everyone however many opens there
// were, so the first device opens it and the last one closes it.
//
// Which mode cuFile reads in is confirmed from its statistics, not from
// the driver's properties: fflags bit 4 (CU_FILE_P2P_SUPPORTED) says the
// platform supports PCIe P2PDMA, not that cuFile uses it, and a loaded
// nvidia-fs still leaves some file systems in compatibility mode. Until a
// read has shown up in the level 3 statistics as a P2P or nvidia-fs read,
// cuFile reads are reported as compat.

// cuFileStatsL3 is CUfileStatsLevel3_t (cufile.h of CUDA 13, as mirrored
// by cuda-python's cycufile.pxd): the level 2 part is skipped.
type cuFileStatsL3 struct {
	_       [1136]byte // CUfileStatsLevel2_t
	NumGPUs uint32
	_       uint32
	PerGPU  [16]cuFilePerGPUStats
}

// cuFilePerGPUStats is CUfilePerGpuStats_t; only the read counters are named.
type cuFilePerGPUStats struct {
	UUID                                   [16]byte
	ReadBytes, ReadBW, ReadUtil, ReadDurUs uint64
	NTotalReads, NP2PReads, NNvfsReads     uint64
	NPosixReads                            uint64
	_                                      [21]uint64
}

// cuFileStatsL3Buf leaves room behind the struct, in case a later
// library's struct is larger than the one declared here.
type cuFileStatsL3Buf struct {
	s cuFileStatsL3
	_ [8192]byte
}

var (
	_ [248]byte  = [unsafe.Sizeof(cuFilePerGPUStats{})]byte{}
	_ [56]byte   = [unsafe.Offsetof(cuFilePerGPUStats{}.NP2PReads)]byte{}
	_ [72]byte   = [unsafe.Offsetof(cuFilePerGPUStats{}.NPosixReads)]byte{}
	_ [5112]byte = [unsafe.Sizeof(cuFileStatsL3{})]byte{}
	_ [1136]byte = [unsafe.Offsetof(cuFileStatsL3{}.NumGPUs)]byte{}
	_ [1144]byte = [unsafe.Offsetof(cuFileStatsL3{}.PerGPU)]byte{}
)

const (
	cuFileParamProfileStats = 0 // CUFILE_PARAM_PROFILE_STATS
	cuFileStatsLevel        = 3
	// confirmTries is how many reads may show nothing in the statistics
	// before the mode is left unconfirmed (and reported as compat).
	confirmTries = 8
)

// modeState is what the statistics have said about cuFile's mode.
type modeState int

const (
	modeCompat      modeState = iota // compat: the properties say so, or the statistics did
	modeUnconfirmed                  // the properties allow direct reads; no read observed yet
	modeDirect                       // a read was counted as P2P or nvidia-fs
)

// cufileDriver is the process's cuFile driver.
var cufileDriver cufileDriverState

type cufileDriverState struct {
	// observe serialises reads whose statistics are being compared, so
	// that a difference belongs to one read. Taken before mu.
	observe sync.Mutex

	// mu guards the fields below.
	mu       sync.Mutex
	lib      *cufile
	refs     int
	mode     string // Info.CuFileMode
	state    modeState
	tries    int
	statsErr string // why there are no statistics ("" when there are)
}

// acquireCuFile opens the driver (on the calling device's owner thread,
// through do) or takes another reference to the open one. It returns the
// library and the mode, or the reason cuFile is unavailable.
func acquireCuFile(o LibOptions, do func(func()) error) (*cufile, string, error) {
	d := &cufileDriver
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refs > 0 {
		d.refs++
		return d.lib, d.mode, nil
	}
	cf, err := loadCufile(o)
	if err != nil {
		return nil, "", err
	}
	var mode, statsErr string
	state := modeCompat
	if derr := do(func() {
		// Statistics are collected only at a level set before the driver
		// opens (cufile.json's profile.cufile_stats) or with
		// cuFileSetStatsLevel after.
		if cf.SetParameterSizeT != nil {
			cf.SetParameterSizeT(cuFileParamProfileStats, cuFileStatsLevel)
		}
		if err = cf.DriverOpen().err("cuFileDriverOpen"); err != nil {
			return
		}
		var props cuFileDrvProps
		if err = cf.DriverGetProperties(&props).err("cuFileDriverGetProperties"); err != nil {
			cf.DriverClose()
			return
		}
		mode, state = cuFileModeOf(cf, props)
		statsErr = startStats(cf)
	}); derr != nil {
		return nil, "", derr
	}
	if err != nil {
		return nil, "", err
	}
	d.lib, d.refs, d.state, d.tries, d.statsErr = cf, 1, state, 0, statsErr
	d.mode = mode
	if state == modeUnconfirmed && statsErr != "" {
		d.state = modeCompat
		d.mode += "; reported as compat: no cuFile statistics to confirm it (" + statsErr + ")"
	}
	return cf, d.mode, nil
}

// releaseCuFile drops a reference; the last one closes the driver (on
// the calling device's owner thread: call it there).
func releaseCuFile(cf *cufile) {
	d := &cufileDriver
	d.mu.Lock()
	defer d.mu.Unlock()
	if cf == nil || d.lib != cf || d.refs == 0 {
		return
	}
	d.refs--
	if d.refs == 0 {
		cf.DriverClose()
		d.lib = nil
	}
}

// startStats turns on level 3 statistics; it returns why it could not.
func startStats(cf *cufile) string {
	if cf.SetStatsLevel == nil || cf.GetStatsL3 == nil {
		return "this libcufile has no cuFileSetStatsLevel/cuFileGetStatsL3 (cuFile 1.15+)"
	}
	if err := cf.SetStatsLevel(cuFileStatsLevel).err("cuFileSetStatsLevel(3)"); err != nil {
		return err.Error()
	}
	if cf.StatsStart != nil {
		if err := cf.StatsStart().err("cuFileStatsStart"); err != nil {
			return err.Error()
		}
	}
	if _, err := readStats(cf); err != nil {
		return err.Error()
	}
	return ""
}

// cuFileModeOf reads the driver's properties: compat for sure, or direct
// possible (to be confirmed by a read).
func cuFileModeOf(cf *cufile, p cuFileDrvProps) (string, modeState) {
	var v int32
	version := ""
	if cf.GetVersion != nil && cf.GetVersion(&v).Err == cuFileSuccess {
		version = fmt.Sprintf(" (libcufile %d)", v)
	}
	if cf.GetParameterBool != nil {
		var force bool
		if cf.GetParameterBool(cuFileParamForceCompat, &force).Err == cuFileSuccess && force {
			return "compat: force_compat_mode is set" + version, modeCompat
		}
	}
	switch {
	case p.NvfsMajor != 0:
		return fmt.Sprintf("direct unconfirmed: nvidia-fs %d.%d loaded%s", p.NvfsMajor, p.NvfsMinor, version), modeUnconfirmed
	case p.FFlags&(1<<cuFileP2PSupportedBit) != 0:
		return "direct unconfirmed: PCIe P2PDMA supported" + version, modeUnconfirmed
	}
	return "compat: nvidia-fs not loaded, no PCIe P2PDMA" + version, modeCompat
}

func (s CuFileStats) sub(o CuFileStats) CuFileStats {
	return CuFileStats{s.Reads - o.Reads, s.P2P - o.P2P, s.NVFS - o.NVFS, s.POSIX - o.POSIX, s.Bytes - o.Bytes}
}

func readStats(cf *cufile) (CuFileStats, error) {
	if cf.GetStatsL3 == nil {
		return CuFileStats{}, fmt.Errorf("no cuFileGetStatsL3")
	}
	var b cuFileStatsL3Buf
	if err := cf.GetStatsL3(&b).err("cuFileGetStatsL3"); err != nil {
		return CuFileStats{}, err
	}
	if b.s.NumGPUs > uint32(len(b.s.PerGPU)) {
		return CuFileStats{}, fmt.Errorf("cuFileGetStatsL3: %d GPUs: not the CUfileStatsLevel3_t declared here", b.s.NumGPUs)
	}
	var s CuFileStats
	for _, g := range b.s.PerGPU[:b.s.NumGPUs] {
		s.Reads += g.NTotalReads
		s.P2P += g.NP2PReads
		s.NVFS += g.NNvfsReads
		s.POSIX += g.NPosixReads
		s.Bytes += g.ReadBytes
	}
	return s, nil
}

// readPath runs read (one cuFileRead, on the caller's thread, inside run)
// and returns the path to report it under: direct only once the
// statistics have shown a direct read.
func readPath(cf *cufile, run func(func()) error, read func()) (Path, error) {
	d := &cufileDriver
	d.mu.Lock()
	state := d.state
	d.mu.Unlock()
	switch state {
	case modeDirect:
		return PathDirect, run(read)
	case modeCompat:
		return PathCompat, run(read)
	}
	d.observe.Lock()
	defer d.observe.Unlock()
	var before, after CuFileStats
	var berr, aerr error
	if err := run(func() {
		before, berr = readStats(cf)
		read()
		after, aerr = readStats(cf)
	}); err != nil {
		return PathCompat, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != modeUnconfirmed {
		return PathCompat, nil
	}
	if berr != nil || aerr != nil {
		d.state = modeCompat
		d.mode += fmt.Sprintf("; reported as compat: cuFile statistics failed (%v)", firstErr(berr, aerr))
		return PathCompat, nil
	}
	delta := after.sub(before)
	switch {
	case delta.P2P+delta.NVFS > 0 && delta.POSIX == 0:
		d.state = modeDirect
		d.mode = "direct (confirmed by cuFile statistics): " + d.mode[len("direct unconfirmed: "):]
		return PathDirect, nil
	case delta.POSIX > 0 && delta.P2P+delta.NVFS == 0:
		d.state = modeCompat
		d.mode = "compat (cuFile statistics counted a POSIX read): " + d.mode[len("direct unconfirmed: "):] + " but not used"
		return PathCompat, nil
	}
	d.tries++
	if d.tries >= confirmTries {
		d.state = modeCompat
		d.mode += fmt.Sprintf("; reported as compat: %d reads left cuFile statistics silent or mixed", d.tries)
	}
	return PathCompat, nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// directConfirmed reports whether a read was counted as direct.
func (d *cufileDriverState) directConfirmed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state == modeDirect
}

// cuFileStatus is the driver's mode now and its counters.
func cuFileStatus() CuFileStatus {
	d := &cufileDriver
	d.mu.Lock()
	defer d.mu.Unlock()
	st := CuFileStatus{Mode: d.mode, StatsErr: d.statsErr}
	if d.lib == nil {
		st.StatsErr = "cuFile is not open"
		return st
	}
	if st.StatsErr == "" {
		s, err := readStats(d.lib)
		if err != nil {
			st.StatsErr = err.Error()
		}
		st.Stats = s
	}
	return st
}
