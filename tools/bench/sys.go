package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dropCaches writes back dirty data and, where it may, drops the kernel's
// page, dentry and inode caches (needs root). It reports whether the
// caches were dropped.
func dropCaches() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("drop caches: %w", err)
	}
	return nil
}

// cpuMeter adds up the CPU time (user + system) of this process, of its
// children that have exited, and of the live process pid when non-zero
// (the local cluster: getrusage does not count a child until it exits).
type cpuMeter struct{ pid int }

func (m cpuMeter) now() time.Duration {
	var total time.Duration
	for _, who := range []int{unix.RUSAGE_SELF, unix.RUSAGE_CHILDREN} {
		var ru unix.Rusage
		if unix.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	if m.pid > 0 {
		if d, err := procCPU(m.pid); err == nil {
			total += d
		}
	}
	return total
}

// selfCPU is the CPU time (user + system) of this process so far.
func selfCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU reads utime + stime of process pid (all its threads) from
// /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(string(b))
}

// userHZ is the unit of /proc/PID/stat times: USER_HZ, 100 on every Linux
// architecture Go supports.
const userHZ = 100

func parseProcStatCPU(s string) (time.Duration, error) {
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// After ')': state is field 3, utime field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("malformed /proc stat times")
	}
	return time.Duration(u+st) * time.Second / userHZ, nil
}

// isMountPoint reports whether dir is mounted over (its device differs
// from its parent's), or a dead FUSE mount (ENOTCONN).
func isMountPoint(dir string) (bool, error) {
	var st, pst unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		if errors.Is(err, syscall.ENOTCONN) {
			return true, nil
		}
		return false, err
	}
	if err := unix.Stat(filepath.Dir(dir), &pst); err != nil {
		return false, err
	}
	return st.Dev != pst.Dev, nil
}

// readAheadKB returns the kernel read-ahead of the file system holding
// path (its bdi), or 0 when it cannot be read.
func readAheadKB(path string) int {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	b, err := os.ReadFile(bdiReadAhead(st.Dev))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func setReadAheadKB(path string, kb int) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	return os.WriteFile(bdiReadAhead(st.Dev), []byte(strconv.Itoa(kb)+"\n"), 0)
}

func bdiReadAhead(dev uint64) string {
	return fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(dev), unix.Minor(dev))
}

// machine describes this machine in one line.
func machine() string {
	var u unix.Utsname
	unix.Uname(&u)
	mem := ""
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		mem = fmt.Sprintf(", %.0f GiB memory", float64(si.Totalram)*float64(si.Unit)/(1<<30))
	}
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = " (" + strings.TrimSpace(v) + ")"
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs%s%s, kernel %s, %s", runtime.NumCPU(), model, mem, unix.ByteSliceToString(u.Release[:]), runtime.Version())
}

// loadAvg returns the 1, 5 and 15 minute load averages as /proc/loadavg
// prints them.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// goFuseVersion returns the version of go-fuse built in, as the build
// records it.
func goFuseVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/hanwen/go-fuse/v2" {
				return d.Version
			}
		}
	}
	return "v2"
}
