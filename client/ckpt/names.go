package ckpt

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/shoalfs/shoal/internal/errs"
)

// The namespace (docs/checkpoints.md, "Layout"):
//
//	<root>/<job>/step-<N>/              a committed checkpoint (N zero-padded to 10 digits)
//	<root>/<job>/step-<N>/manifest.json written last, inside the staging directory
//	<root>/<job>/.step-<N>[.<tag>].tmp/ a save in progress (or a crashed one)
//	<root>/<job>/.trash-<tag>/          a checkpoint or staging directory being removed
//
// Only step-<N> directories are checkpoints. Every name starting with "."
// is ignored by List; staging directories whose newest mtime is older
// than Options.StaleAfter and every trash directory are removed by GC.

const (
	// DefaultRoot is the directory holding every job's checkpoints.
	DefaultRoot = "/ckpt"
	// ManifestName is the manifest's file name inside a step directory.
	ManifestName = "manifest.json"
	// stepPrefix starts every checkpoint directory's name.
	stepPrefix = "step-"
	// stepDigits is the zero padding of canonical step names, so that a
	// plain ls lists steps in numeric order (up to step 9,999,999,999).
	stepDigits = 10
	// stagingSuffix ends every staging directory's name.
	stagingSuffix = ".tmp"
	// trashPrefix starts the names of directories being removed.
	trashPrefix = ".trash-"
	// maxName is the longest name in a directory (client.MaxNameLen).
	maxName = 255
)

// Latest, passed as a step, means the newest committed checkpoint.
const Latest int64 = -1

// StepName returns the canonical directory name of a step: "step-" and
// the step zero-padded to 10 digits ("step-0000001200").
func StepName(step int64) string { return fmt.Sprintf("%s%0*d", stepPrefix, stepDigits, step) }

// ParseStepName returns the step of a checkpoint directory name:
// "step-" followed by 1 to 19 decimal digits (so "step-1200", as a
// training script may write it through the mount, and the canonical
// "step-0000001200" are the same step). ok is false for anything else.
func ParseStepName(name string) (step int64, ok bool) {
	digits, found := strings.CutPrefix(name, stepPrefix)
	if !found || len(digits) == 0 || len(digits) > 19 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}

// stagingName returns a new staging directory name for step: unique per
// save, so that two saves of one step never share a directory.
func stagingName(step int64) string {
	return "." + StepName(step) + "." + tag() + stagingSuffix
}

// isStaging reports whether name is a staging directory: the API's
// ".step-<N>.<tag>.tmp" and the mount protocol's ".step-<N>.tmp".
func isStaging(name string) bool {
	return strings.HasPrefix(name, "."+stepPrefix) && strings.HasSuffix(name, stagingSuffix)
}

func isTrash(name string) bool { return strings.HasPrefix(name, trashPrefix) }

// trashName returns a new name for a directory being removed.
func trashName(of string) string {
	n := trashPrefix + tag() + "-" + strings.TrimPrefix(of, ".")
	if len(n) > maxName {
		n = n[:maxName]
	}
	return n
}

// tag returns 8 random hex digits.
func tag() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// checkName checks one path component chosen by a caller: a job name or
// a shard name. It must be a valid file name that List would not skip.
func checkName(kind, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s name: %w", kind, errs.ErrInvalid)
	case len(s) > maxName:
		return fmt.Errorf("%s name of %d bytes (max %d): %w", kind, len(s), maxName, errs.ErrNameTooLong)
	case strings.ContainsAny(s, "/\x00"):
		return fmt.Errorf("%s name %q contains '/' or NUL: %w", kind, s, errs.ErrInvalid)
	case strings.HasPrefix(s, "."):
		return fmt.Errorf("%s name %q starts with '.' (names starting with '.' are staging and trash): %w", kind, s, errs.ErrInvalid)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s name %q is not UTF-8: %w", kind, s, errs.ErrInvalid)
	}
	return nil
}

// checkShardName checks a shard's name as Save takes it: a valid file
// name (a leading '.' is fine: PyTorch DCP writes ".metadata"), neither
// the manifest's nor one of its temporary names.
func checkShardName(s string) error {
	if strings.HasPrefix(s, ".") && s != "." && s != ".." {
		s2 := "x" + s
		if err := checkName("shard", s2); err != nil {
			return err
		}
	} else if err := checkName("shard", s); err != nil {
		return err
	}
	if s == ManifestName || strings.HasPrefix(s, "."+ManifestName) {
		return fmt.Errorf("shard name %q is the manifest's: %w", s, errs.ErrInvalid)
	}
	return nil
}

// checkRelPath checks a shard path as a manifest may hold it: a relative
// slash-separated path inside the step directory, any component valid
// (mount-protocol checkpoints may hold ".metadata" or subdirectories).
func checkRelPath(p string) error {
	if p == "" || len(p) > 4096 || !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
		return fmt.Errorf("shard path %q: %w", p, errs.ErrInvalid)
	}
	if path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("shard path %q is not a clean relative path: %w", p, errs.ErrInvalid)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "." || c == ".." || c == "" || len(c) > maxName {
			return fmt.Errorf("shard path %q: %w", p, errs.ErrInvalid)
		}
	}
	if p == ManifestName {
		return fmt.Errorf("shard path %q is the manifest's: %w", p, errs.ErrInvalid)
	}
	return nil
}

func checkStep(step int64) error {
	if step < 0 {
		return fmt.Errorf("step %d: steps are 0 or more: %w", step, errs.ErrInvalid)
	}
	return nil
}
