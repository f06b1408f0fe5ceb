package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// localLockFile, under shoal local's --dir, is held (flock) by the process
// running on that directory and holds its PID, so that a second one can
// say which process has it.
const localLockFile = "local.lock"

// lockLocalDir takes the lock of dir for this process; the lock goes with
// the process (or with closing the file).
func lockLocalDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, localLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return nil, fmt.Errorf("%s is in use by process %d (another shoal local): stop it first, or use another --dir", dir, pid)
			}
			return nil, fmt.Errorf("%s is in use by another process (another shoal local): stop it first, or use another --dir", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
