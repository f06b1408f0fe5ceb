package ost

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/shoalfs/shoal/internal/errs"
)

// loadOrCreateUUID returns the uuid in dir/ost.uuid, creating the file with
// a new random (version 4) uuid the first time.
func loadOrCreateUUID(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, uuidFile))
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
	if err := writeFileAtomic(dir, uuidFile, []byte(u+"\n")); err != nil {
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
func loadID(dir string) (uint32, error) {
	b, err := os.ReadFile(filepath.Join(dir, idFile))
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

func saveID(dir string, id uint32) error {
	return writeFileAtomic(dir, idFile, []byte(strconv.FormatUint(uint64(id), 10)+"\n"))
}

// writeFileAtomic replaces dir/name with b: temp file in dir/tmp, fsync,
// rename, fsync dir.
func writeFileAtomic(dir, name string, b []byte) error {
	tmp, err := writeTemp(filepath.Join(dir, tmpDir), name+"-", b)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}
