package ost

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The chunk store reaches the disk through a vfs.FS (Options.FS, default
// vfs.Default), so that tests can inject EIO, ENOSPC, torn writes and
// crashes (errorfs, vfs.NewCrashableMem) as they do at the MDS. On
// vfs.Default, and only there (store.raw), five things go around the
// interface to the OS, because vfs.FS cannot express them or costs more:
//
//   - temp files of chunk writes are created by st.openFile with O_EXCL,
//     mode 0600 and, for data, O_DIRECT (createTemp);
//   - chunk data is opened with O_DIRECT for reads (openData);
//   - data files and sidecars are opened for reading by st.openFile
//     (open): vfs.Default's Open adds an fstatfs (and on ext4 a
//     sync_file_range probe) to every open, twice per chunk read;
//   - lstat, so that a symlink never passes for a chunk (lstat);
//   - directory listings with the entries' types from the directory
//     itself, without a stat per sidecar (readDir).
//
// Everything else (rename, remove, sync, reads, the sidecars, and outside
// the store the directory lock, ost.uuid, ost.id and statfs) goes through
// the FS on every FS. Any FS other than vfs.Default turns O_DIRECT off.

// osFile is an *os.File opened by the store itself (the O_DIRECT and
// O_EXCL fast path) seen as a vfs.File.
type osFile struct{ *os.File }

var _ vfs.File = osFile{}

func (f osFile) Preallocate(off, n int64) error        { return nil }
func (f osFile) Prefetch(off, n int64) error           { return nil }
func (f osFile) SyncData() error                       { return fdatasync(f.File) }
func (f osFile) SyncTo(int64) (fullSync bool, _ error) { return true, fdatasync(f.File) }

func (f osFile) Stat() (vfs.FileInfo, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	return osFileInfo{fi}, nil
}

// osFileInfo is an os.FileInfo seen as a vfs.FileInfo (no device id: the
// store never asks for it).
type osFileInfo struct{ os.FileInfo }

func (osFileInfo) DeviceID() (d vfs.DeviceID) { return d }

// createTemp creates the temp file path of a chunk write, for writing;
// with direct (set only on vfs.Default), with O_DIRECT. A name that
// exists already is fs.ErrExist on vfs.Default; other FSs replace it
// (names come from a counter in a tmp/ emptied at open, so they never
// meet one).
func (st *store) createTemp(path string, direct bool) (vfs.File, error) {
	if !st.raw {
		return st.fs.Create(path, vfs.WriteCategoryUnspecified)
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if direct {
		flags |= syscall.O_DIRECT
	}
	f, err := st.openFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// open opens path for reading: os.OpenFile on vfs.Default (see above),
// the FS's Open elsewhere.
func (st *store) open(path string) (vfs.File, error) {
	if !st.raw {
		return st.fs.Open(path)
	}
	f, err := st.openFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// lstat is os.Lstat on vfs.Default, the FS's Stat elsewhere.
func (st *store) lstat(path string) (os.FileInfo, error) {
	if st.raw {
		return os.Lstat(path)
	}
	return st.fs.Stat(path)
}

// readDir lists dir sorted by name, as os.ReadDir does (which it is on
// vfs.Default). On other FSs each entry is stat'ed; one that vanishes
// between the listing and its stat is left out.
func (st *store) readDir(dir string) ([]fs.DirEntry, error) {
	if st.raw {
		return os.ReadDir(dir)
	}
	names, err := st.fs.List(dir)
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, 0, len(names))
	for _, name := range names {
		fi, err := st.fs.Stat(st.fs.PathJoin(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, fs.FileInfoToDirEntry(fi))
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// fsyncDir fsyncs a directory of the store, making the names in it
// durable.
func (st *store) fsyncDir(dir string) error {
	d, err := st.fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
