// Command rd reads every file of the subdirectories t* of DIR to its end,
// one reader per subdirectory (at most N), after sync and
// drop_caches (as root), and prints files/s: the small-file reads of
// docs/cache.md's FUSE ceiling, on a disk, a loopback or a Shoal mount.
//
//	rd DIR [N]
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rd DIR [N]")
		os.Exit(2)
	}
	dir := os.Args[1]
	subs, _ := filepath.Glob(filepath.Join(dir, "t*"))
	sort.Strings(subs)
	if len(os.Args) > 2 {
		if n, err := strconv.Atoi(os.Args[2]); err == nil && n < len(subs) {
			subs = subs[:n]
		}
	}
	// The names are listed before the caches are dropped, as a job that
	// knows its file list.
	lists := make([][]string, len(subs))
	for i, s := range subs {
		es, err := os.ReadDir(s)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rd:", err)
			os.Exit(1)
		}
		for _, e := range es {
			lists[i] = append(lists[i], filepath.Join(s, e.Name()))
		}
	}
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		fmt.Fprintln(os.Stderr, "rd: caches not dropped (warm reads):", err)
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(lists))
	total := 0
	for _, l := range lists {
		total += len(l)
		wg.Go(func() {
			buf := make([]byte, 256<<10)
			for _, p := range l {
				if err := readAll(p, buf); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(t0)
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, "rd:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %d files in %v: %.0f files/s\n", dir, total, d, float64(total)/d.Seconds())
}

func readAll(p string, buf []byte) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		_, err := f.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
