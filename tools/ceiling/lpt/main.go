// Command lpt mounts go-fuse's loopback file system of SRC at MNT, with
// the kernel's FUSE passthrough on (or off with a third argument
// "nopt"), until SIGINT or SIGTERM: the least work any FUSE daemon can
// do per file, for the small-file ceiling in docs/cache.md.
//
//	lpt SRC MNT [nopt]
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: lpt SRC MNT [nopt]")
		os.Exit(2)
	}
	root, err := gofs.NewLoopbackRoot(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "lpt:", err)
		os.Exit(1)
	}
	var disabled uint64
	if len(os.Args) > 3 && os.Args[3] == "nopt" {
		disabled = gofuse.CAP_PASSTHROUGH
	}
	timeout := time.Second // as the Shoal mount and the bench's loopback
	srv, err := gofs.Mount(os.Args[2], root, &gofs.Options{
		MountOptions: gofuse.MountOptions{
			FsName: "lpt", Name: "lpt", MaxWrite: gofuse.MAX_KERNEL_WRITE, DirectMount: true,
			Options: []string{"default_permissions"}, DisabledCapabilities: disabled,
			DisableSplice: true, AllowOther: os.Geteuid() == 0,
		},
		AttrTimeout: &timeout, EntryTimeout: &timeout,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lpt:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		if err := srv.Unmount(); err != nil {
			fmt.Fprintln(os.Stderr, "lpt: unmount:", err)
		}
	}()
	srv.Wait()
}
