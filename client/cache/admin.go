package cache

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/shoalfs/shoal/internal/errs"
)

// DirStatus is what a cache directory holds, read from its metadata (a
// mount writes it every FlushInterval).
type DirStatus struct {
	Dir         string `json:"dir"`
	Files       int    `json:"files"`
	Complete    int    `json:"complete"`
	CachedBytes int64  `json:"cached_bytes"` // bytes of present blocks
	DiskBytes   int64  `json:"disk_bytes"`   // blocks allocated to data files
	InUse       bool   `json:"in_use"`       // a mount holds it
}

// Inspect reads the status of the cache directory dir without opening it
// (a mount may hold it).
func Inspect(dir string) (DirStatus, error) {
	st := DirStatus{Dir: dir}
	des, err := os.ReadDir(dir)
	if err != nil {
		return st, fmt.Errorf("cache: %w", err)
	}
	if lock, err := os.Open(filepath.Join(dir, "lock")); err == nil {
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
			st.InUse = true
		}
		lock.Close()
	}
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		switch {
		case strings.HasSuffix(de.Name(), ".data"):
			var s syscall.Stat_t
			if syscall.Stat(p, &s) == nil {
				st.DiskBytes += s.Blocks * 512
			}
		case strings.HasSuffix(de.Name(), ".meta"):
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			e, err := decodeMeta(b, blockSizeOf(b))
			if err != nil {
				continue
			}
			st.Files++
			if e.complete() {
				st.Complete++
			}
			st.CachedBytes += e.presentBytes()
		}
	}
	return st, nil
}

// blockSizeOf is the block size a meta was written with (0 if too short).
func blockSizeOf(b []byte) int64 {
	if len(b) < metaHeader {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(b[64:]))
}

// Drop empties the cache directory dir; it fails with errs.ErrExists
// while a mount holds it. It returns the number of files dropped.
func Drop(dir string) (int, error) {
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("cache: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return 0, fmt.Errorf("cache: %s is in use by a mount: %w", dir, errs.ErrExists)
	}
	metas, _ := filepath.Glob(filepath.Join(dir, "*.meta"))
	return len(metas), removeEntries(dir)
}
