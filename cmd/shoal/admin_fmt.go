package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Exit statuses of `shoal` (and of `shoal admin` in particular):
// 0 success, 1 the command failed (bad arguments, MDS unreachable, an
// error reply), 2 the command ran but found a problem it reports (fsck not
// clean, a job that failed or lost data).
const (
	exitFailed  = 1
	exitProblem = 2
)

// problemError is a command that ran and reports a problem: exit status 2.
type problemError struct{ msg string }

func (e *problemError) Error() string { return e.msg }

func problemf(format string, args ...any) error {
	return &problemError{msg: fmt.Sprintf(format, args...)}
}

// exitCode maps a command's error to the process exit status.
func exitCode(err error) int {
	var p *problemError
	if errors.As(err, &p) {
		return exitProblem
	}
	return exitFailed
}

// printJSON writes v as indented JSON: protos as protojson writes them
// (field names as in the .proto, zero values included) but with 64-bit
// integers as numbers, anything else with encoding/json. protojson
// writes int64 and uint64 as strings ("used": "29380608"), which a
// script has to convert; a JSON number holds them exactly, and jq and
// Python read them as integers.
func printJSON(w io.Writer, v any) error {
	if m, ok := v.(proto.Message); ok {
		v = protoMap(m)
		if v == nil {
			return fmt.Errorf("json: cannot encode %T", m)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// protoMap turns a proto into a generic JSON value, to print it or embed
// it in a bigger JSON document, with 64-bit integers as numbers (see
// printJSON). nil if it cannot be encoded.
func protoMap(m proto.Message) any {
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil
	}
	return numbers64(m.ProtoReflect().Descriptor(), v)
}

// numbers64 replaces, in v (the protojson form of a message of type md),
// the strings of 64-bit integer fields with JSON numbers, in nested
// messages, lists and map values too.
func numbers64(md protoreflect.MessageDescriptor, v any) any {
	obj, ok := v.(map[string]any)
	if !ok || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return v // well-known types have JSON forms of their own
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		x, ok := obj[string(fd.Name())]
		if !ok {
			continue
		}
		one := func(fd protoreflect.FieldDescriptor, x any) any {
			switch fd.Kind() {
			case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
				protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				if s, ok := x.(string); ok {
					if _, err := strconv.ParseFloat(s, 64); err == nil {
						return json.Number(s)
					}
				}
			case protoreflect.MessageKind, protoreflect.GroupKind:
				return numbers64(fd.Message(), x)
			}
			return x
		}
		switch {
		case fd.IsList():
			if l, ok := x.([]any); ok {
				for j := range l {
					l[j] = one(fd, l[j])
				}
			}
		case fd.IsMap():
			if mv, ok := x.(map[string]any); ok {
				for k := range mv {
					mv[k] = one(fd.MapValue(), mv[k])
				}
			}
		default:
			obj[string(fd.Name())] = one(fd, x)
		}
	}
	return obj
}

// humanBytes formats n with binary units: 1.5 GiB.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// parseBytes parses a size or rate such as 100MiB, 1.5G, 4096, 200MB/s
// (binary and decimal suffixes; a trailing "/s" is ignored).
func parseBytes(s string) (uint64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	i := strings.IndexFunc(t, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
	num, suf := t, ""
	if i >= 0 {
		num, suf = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("bad size %q (examples: 4096, 64MiB, 1.5GB, 200MiB/s)", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[suf]
	if mult == 0 {
		return 0, fmt.Errorf("bad size %q: unknown unit %q", s, suf)
	}
	return uint64(f * mult), nil
}

// isTerminal reports whether f is a terminal (for the progress bar).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
