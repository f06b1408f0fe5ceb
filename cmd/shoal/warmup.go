package main

// shoal warmup PATH...: read files through a mount so that its node-local
// cache holds them before a job starts (docs/fuse.md, "Node-local cache").

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// warmupResult is what --json prints.
type warmupResult struct {
	Files   int64   `json:"files"`
	Bytes   int64   `json:"bytes"`
	Errors  int64   `json:"errors"`
	Seconds float64 `json:"seconds"`
}

func newWarmupCmd(g *globals) *cobra.Command {
	var asJSON bool
	var workers int
	cmd := &cobra.Command{
		Use:   "warmup PATH...",
		Short: "Read files (directories recursively) through a mount with --cache-dir, so that its node-local cache holds them",
		Long: `Reads every regular file under each PATH (which must be in a Shoal mount
started with --cache-dir) once, so that later reads are served from the
node's cache. The kernel's page cache is left as it was (the pages read
are dropped). Files that do not fit in the cache are read anyway.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log := g.logger().With("proc", "warmup")
			var files []string
			var total int64
			for _, a := range args {
				err := filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if d.Type().IsRegular() {
						if fi, err := d.Info(); err == nil {
							files = append(files, p)
							total += fi.Size()
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			var bar *progressbar.ProgressBar
			if !asJSON && isTerminal(os.Stderr) {
				bar = progressbar.NewOptions64(total,
					progressbar.OptionSetWriter(os.Stderr),
					progressbar.OptionSetDescription("warmup"),
					progressbar.OptionShowBytes(true),
					progressbar.OptionSetPredictTime(true),
					progressbar.OptionFullWidth(),
					progressbar.OptionThrottle(200*time.Millisecond),
					progressbar.OptionClearOnFinish(),
				)
			}
			start := time.Now()
			var res warmupResult
			next := make(chan string)
			var wg sync.WaitGroup
			for range max(workers, 1) {
				wg.Go(func() {
					buf := make([]byte, 1<<20)
					for p := range next {
						n, err := warmFile(cmd.Context(), p, buf, bar)
						atomic.AddInt64(&res.Bytes, n)
						if err != nil {
							atomic.AddInt64(&res.Errors, 1)
							log.Warn("warmup read", "path", p, "err", err)
							continue
						}
						atomic.AddInt64(&res.Files, 1)
					}
				})
			}
			for _, p := range files {
				next <- p
			}
			close(next)
			wg.Wait()
			if bar != nil {
				bar.Finish()
			}
			res.Seconds = time.Since(start).Seconds()
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(res)
			}
			fmt.Printf("warmed %d files, %s in %.1fs (%d errors)\n", res.Files, humanBytes(uint64(res.Bytes)), res.Seconds, res.Errors)
			if res.Errors > 0 {
				return fmt.Errorf("%d files could not be read", res.Errors)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON (and no progress bar)")
	cmd.Flags().IntVar(&workers, "workers", 8, "files read at once")
	return cmd
}

// warmFile reads p to its end and drops the pages it read from the
// kernel's page cache.
func warmFile(ctx context.Context, p string, buf []byte, bar *progressbar.ProgressBar) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for ctx.Err() == nil {
		m, err := f.Read(buf)
		n += int64(m)
		if bar != nil {
			bar.Add(m)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	return n, ctx.Err()
}
