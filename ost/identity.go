package ost

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shoalfs/shoal/internal/errs"
)

// The identity files ost.uuid and ost.id are read and written through the
// store's FS, as the chunks are (vfs.go).

// loadOrCreateUUID returns the uuid in dir/ost.uuid, creating the file with
// a new random (version 4) uuid the first time.
func (st *store) loadOrCreateUUID() (string, error) {
	b, err := st.readFile(uuidFile)
	switch {
	case err == nil:
		u := strings.TrimSpace(string(b))
		if !validUUID(u) {
			return "", fmt.Errorf("ost: %s holds %q, not a uuid: %w", uuidFile, u, errs.ErrCorrupt)
		}
		return u, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("ost: %w", err)
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("ost: %w", err)
	}
	r[6] = r[6]&0x0f | 0x40 // version 4
	r[8] = r[8]&0x3f | 0x80 // RFC 4122 variant
	u := fmt.Sprintf("%x-%x-%x-%x-%x", r[0:4], r[4:6], r[6:8], r[8:10], r[10:16])
	if err := st.writeFileAtomic(uuidFile, []byte(u+"\n")); err != nil {
		return "", fmt.Errorf("ost: %w", err)
	}
	return u, nil
}

func validUUID(u string) bool {
	if len(u) != 36 {
		return false
	}
	for i, r := range u {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdef", r) {
				return false
			}
		}
	}
	return true
}

// loadID returns the id in dir/ost.id, or 0 when the OST never registered.
func (st *store) loadID() (uint32, error) {
	b, err := st.readFile(idFile)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ost: %w", err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("ost: %s holds %q, not an OST id: %w", idFile, b, errs.ErrCorrupt)
	}
	return uint32(id), nil
}

func (st *store) saveID(id uint32) error {
	return st.writeFileAtomic(idFile, []byte(strconv.FormatUint(uint64(id), 10)+"\n"))
}

// readFile returns the contents of dir/name.
func (st *store) readFile(name string) ([]byte, error) {
	f, err := st.fs.Open(filepath.Join(st.dir, name))
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return b, err
}

// writeFileAtomic replaces dir/name with b: temp file in dir/tmp (named
// from the counter of chunk writes), fsync, rename, fsync dir.
func (st *store) writeFileAtomic(name string, b []byte) error {
	tmp := filepath.Join(st.dir, tmpDir, name+"-"+strconv.FormatUint(st.tmpSeq.Add(1), 10))
	f, err := st.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = st.fs.Rename(tmp, filepath.Join(st.dir, name))
	}
	if err != nil {
		st.fs.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := st.fsyncDir(st.dir); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
