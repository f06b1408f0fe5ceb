package main

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/shoalfs/shoal/internal/datanet"
)

// outFile is the temporary file `shoal ckpt restore --to` writes a shard
// into. The pieces CopyFile hands it are aligned buffers at aligned
// offsets: those go to an O_DIRECT twin of the file, so that the restore
// does not copy every byte into the local page cache and have the kernel
// write it back later (on two CPUs that copy and its writeback were the
// largest cost of a CLI restore after the reads: docs/performance.md,
// "Checkpoint CLI restore without the page cache"). What is not aligned
// (the last piece's tail, or every write where the file system refuses
// O_DIRECT, as tmpfs does) goes through the page cache. Sync makes both
// durable; the two never cover the same page.
type outFile struct {
	f, twin *os.File // twin: the O_DIRECT one, nil if none
	// refused is set once the twin refused an aligned write (a disk
	// that wants a larger alignment): the page cache does the rest.
	refused atomic.Bool
}

// createOut creates name (which must not exist) for writing, with its
// O_DIRECT twin where the file system has it.
func createOut(name string) (*outFile, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	o := &outFile{f: f}
	if d, err := os.OpenFile(name, os.O_WRONLY|unix.O_DIRECT, 0); err == nil {
		o.twin = d
	}
	return o, nil
}

// WriteAt writes p at off: its aligned head with O_DIRECT when p and off
// are aligned, the rest through the page cache. It is safe for
// concurrent use on ranges apart, as CopyFile calls it.
func (o *outFile) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	if o.twin != nil && !o.refused.Load() && off%datanet.Align == 0 && datanet.IsAligned(p) {
		if m := len(p) &^ (datanet.Align - 1); m > 0 {
			k, err := o.twin.WriteAt(p[:m], off)
			switch {
			case errors.Is(err, unix.EINVAL) && k == 0:
				o.refused.Store(true)
			case err != nil:
				return k, err
			default:
				n = k
			}
		}
	}
	k, err := o.f.WriteAt(p[n:], off+int64(n))
	return n + k, err
}

// Sync makes what was written durable (one fsync covers the writes of
// both descriptors: they are one file).
func (o *outFile) Sync() error { return o.f.Sync() }

// Close closes both descriptors.
func (o *outFile) Close() error {
	if o.twin != nil {
		o.twin.Close()
	}
	return o.f.Close()
}

// syncDir makes the entries of directory dir durable (a rename into it).
func syncDir(dir string) error {
	d, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
