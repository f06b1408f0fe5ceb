//go:build !cgo

// Command libshoal is Shoal's checkpoint API as a C library (for the
// Python package in python/); it needs cgo (a C compiler) to build: go
// build -buildmode=c-shared.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "libshoal: built without cgo; build it with a C compiler: go build -buildmode=c-shared -o bin/libshoal.so ./cmd/libshoal")
	os.Exit(1)
}
