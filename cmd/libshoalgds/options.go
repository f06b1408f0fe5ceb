//go:build cgo

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/shoalfs/shoal/gds"
	"github.com/shoalfs/shoal/internal/wire"
)

// openOptions are shoal_gds_open2's options (JSON). Absent fields come
// from the environment, as for the shoal command.
type openOptions struct {
	// Cert, Key and CA are the client's mutual TLS identity (PEM files),
	// like --cert, --key and --ca: each overrides $SHOAL_CERT, $SHOAL_KEY
	// or $SHOAL_CA, and given, they override $SHOAL_INSECURE=1.
	Cert *string `json:"cert"`
	Key  *string `json:"key"`
	CA   *string `json:"ca"`
	// Insecure is plaintext, like --insecure: given, it overrides
	// certificates from the environment.
	Insecure *bool `json:"insecure"`
	// Env overrides the process environment as the library saw it when
	// it was loaded (a Go library reads the environment once, then; a
	// Python program may have changed os.environ since).
	Env map[string]string `json:"env"`
	// PythonPrefixes and LibDirs are searched for libcudart and
	// libcufile before what the environment names (sys.prefix, the
	// nvidia wheels' lib directories of the calling Python).
	PythonPrefixes []string `json:"python_prefixes"`
	LibDirs        []string `json:"lib_dirs"`
}

func parseOptions(js string) (openOptions, error) {
	var o openOptions
	if js == "" {
		return o, nil
	}
	if err := json.Unmarshal([]byte(js), &o); err != nil {
		return o, fmt.Errorf("options: %v", err)
	}
	return o, nil
}

// getenv looks in o.Env first, then in the process environment.
func (o openOptions) getenv(k string) string {
	if v, ok := o.Env[k]; ok {
		return v
	}
	return os.Getenv(k)
}

// libs are the CUDA library options: the caller's directories and Python
// prefixes first, then what the environment says.
func (o openOptions) libs() gds.LibOptions {
	l := gds.LibOptionsFromEnv(o.getenv)
	l.Dirs = append(append([]string(nil), o.LibDirs...), l.Dirs...)
	l.PythonPrefixes = append(append([]string(nil), o.PythonPrefixes...), l.PythonPrefixes...)
	return l
}

// creds returns the client's credentials (nil: plaintext), with the
// shoal command's precedence: a value given explicitly wins over one from
// the environment; certificates and plaintext both given the same way is
// an error; neither is an error.
func (o openOptions) creds() (*wire.Creds, error) {
	files := wire.TLSFiles{Cert: o.getenv("SHOAL_CERT"), Key: o.getenv("SHOAL_KEY"), CA: o.getenv("SHOAL_CA")}
	insecure := o.getenv("SHOAL_INSECURE") == "1"
	certsGiven := false
	for _, x := range []struct {
		v   *string
		dst *string
	}{{o.Cert, &files.Cert}, {o.Key, &files.Key}, {o.CA, &files.CA}} {
		if x.v != nil {
			*x.dst, certsGiven = *x.v, true
		}
	}
	insecureGiven := o.Insecure != nil
	if insecureGiven {
		insecure = *o.Insecure
	}
	if insecure && !files.IsZero() {
		switch {
		case insecureGiven && !certsGiven:
			files = wire.TLSFiles{}
		case !insecureGiven && certsGiven:
			insecure = false
		case !insecureGiven:
			return nil, errors.New("$SHOAL_INSECURE=1 with $SHOAL_CERT, $SHOAL_KEY or $SHOAL_CA: choose one (or pass insecure, or cert, key and ca)")
		default:
			return nil, errors.New("insecure with cert, key or ca: choose one")
		}
	}
	if insecure {
		return nil, nil
	}
	if files.IsZero() {
		return nil, errors.New("no certificate: set SHOAL_CERT, SHOAL_KEY and SHOAL_CA (. DIR/tls/env of a shoal local; docs/security.md) or pass cert, key and ca; or SHOAL_INSECURE=1 (insecure) for a plaintext cluster")
	}
	return wire.LoadCreds(files)
}
