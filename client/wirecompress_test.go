package client

import (
	"errors"
	"testing"

	"github.com/shoalfs/shoal/internal/errs"
)

// TestWireCompressionOption: the modes of Options.WireCompression, and
// what auto takes for loopback.
func TestWireCompressionOption(t *testing.T) {
	for addr, loop := range map[string]bool{
		"127.0.0.1:7000": true, "127.1.2.3:1": true, "[::1]:7000": true, "localhost:7000": true, "LocalHost:1": true,
		"[::ffff:127.0.0.1]:1": true, "10.0.0.5:7000": false, "[2001:db8::1]:1": false, "ost-3.example:7000": false,
	} {
		if got := isLoopback(addr); got != loop {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
		if got := wireCompress(WireAuto)(addr); got == loop {
			t.Errorf("auto compresses to %q: %v", addr, got)
		}
		if !wireCompress(WireS2)(addr) {
			t.Errorf("s2 does not compress to %q", addr)
		}
	}
	if wireCompress(WireNone) != nil {
		t.Error("none compresses")
	}
	o := Options{MDS: "x:1"}
	if err := o.setDefaults(); err != nil || o.WireCompression != WireNone {
		t.Errorf("default: %q, %v", o.WireCompression, err)
	}
	o = Options{MDS: "x:1", WireCompression: "zstd"}
	if err := o.setDefaults(); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("zstd: %v", err)
	}
}
