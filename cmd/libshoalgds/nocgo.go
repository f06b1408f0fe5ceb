//go:build !cgo

// Command libshoalgds is Shoal's GPU read path as a C library; it needs
// cgo (a C compiler) to build: go build -buildmode=c-shared.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "libshoalgds: built without cgo; build it with a C compiler: go build -buildmode=c-shared -o bin/libshoalgds.so ./cmd/libshoalgds")
	os.Exit(1)
}
