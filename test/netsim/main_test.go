package netsim

import (
	"os"
	"testing"
)

// TestMain removes the binaries Binaries built once the tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildOnce.dir != "" {
		os.RemoveAll(buildOnce.dir)
	}
	os.Exit(code)
}
