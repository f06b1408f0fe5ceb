package ost

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"syscall"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

func TestErrorClassification(t *testing.T) {
	c := chunkID{0xab, 3}
	pathErr := func(e error) error { return &fs.PathError{Op: "write", Path: "x", Err: e} }
	tests := []struct {
		name string
		got  error
		want error
	}{
		{"ENOSPC", diskErr("write", c, pathErr(syscall.ENOSPC)), errs.ErrNoSpace},
		{"EDQUOT", diskErr("write", c, pathErr(syscall.EDQUOT)), errs.ErrNoSpace},
		{"ENOENT", diskErr("read", c, pathErr(syscall.ENOENT)), errs.ErrNotFound},
		{"EACCES keeps its cause", diskErr("read", c, pathErr(syscall.EACCES)), syscall.EACCES},
		{"short read", readErr(c, 1, io.ErrUnexpectedEOF), errs.ErrCorrupt},
		{"EOF", readErr(c, 1, io.EOF), errs.ErrCorrupt},
		{"EIO", readErr(c, 1, pathErr(syscall.EIO)), errs.ErrCorrupt},
		{"read ENOENT", readErr(c, 1, pathErr(syscall.ENOENT)), errs.ErrNotFound},
	}
	for _, tt := range tests {
		if !errors.Is(tt.got, tt.want) {
			t.Errorf("%s: %v is not %v", tt.name, tt.got, tt.want)
		}
	}
	if errors.Is(diskErr("read", c, pathErr(syscall.EACCES)), errs.ErrCorrupt) {
		t.Error("EACCES classified as corrupt")
	}
	err := fmt.Errorf("rpc: %w", corruptErr(c, SidecarBlock, "missing"))
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Block != SidecarBlock || !errors.Is(err, errs.ErrCorrupt) {
		t.Errorf("CorruptError chain: %v", err)
	}
	if want := "ost: chunk 00000000000000ab.3 checksum sidecar: missing: checksum mismatch: corrupt data"; ce.Error() != want {
		t.Errorf("message %q, want %q", ce.Error(), want)
	}
}
