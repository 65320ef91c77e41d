package scrub

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/internal/bench"
)

// benchStore writes n files of 256 KiB of format under a temporary
// directory and returns it.
func benchStore(b *testing.B, format Format, n int) (string, []string) {
	b.Helper()
	dir := b.TempDir()
	var blocks []Block
	for i := range n {
		h := bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 16)
		blocks = append(blocks, Block{Model: "m", TP: 1, Hash: h, Data: bytes.Repeat([]byte{byte(i), 0x5a, byte(i >> 3), 0xc3}, 64<<10)})
	}
	files, warnings, err := WriteStore(dir, format, blocks)
	if err != nil {
		b.Fatal(err)
	}
	if len(warnings) > 0 {
		b.Skip(warnings[0])
	}
	return dir, files
}

// plainRead is the plain read of a store: it walks dir as a scrub does
// (filepath.WalkDir: a store's files are found by listing it) and reads
// every regular file whole through a 1 MiB buffer on threads goroutines,
// summing its bytes with the vectorised read (internal/bench's
// ReadSumVec, the baseline every kvaudit ratio is quoted against).
func plainRead(b *testing.B, dir string, threads int) uint64 {
	files := make(chan string, 256)
	var sum atomic.Uint64
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() {
			buf := make([]byte, chunkSize)
			for p := range files {
				f, err := os.Open(p)
				if err != nil {
					b.Error(err)
					continue
				}
				var off int64
				for {
					k, err := f.ReadAt(buf, off)
					sum.Add(bench.ReadSumVec(buf[:k]))
					off += int64(k)
					if err != nil {
						break
					}
				}
				f.Close()
			}
		})
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files <- p
		}
		return err
	})
	close(files)
	wg.Wait()
	return sum.Load()
}

// BenchmarkScrubVsRead scrubs a store of 256 files of 256 KiB on 2 threads
// and reads the same store plainly (walked and read) on 2 threads,
// alternately, and reports
// the scrub's speed as a fraction of the read's (x-read: the fastest read
// pass over the fastest scrub pass of the same run; 1 is as fast as
// reading, the target is >= 0.8). The files stay in
// the page cache: the ratio is what the checks cost over the read.
func BenchmarkScrubVsRead(b *testing.B) {
	for _, format := range []Format{VLLMFS, LMCacheFS, LMCacheFrame, MooncakeSSD} {
		b.Run(string(format), func(b *testing.B) {
			dir, files := benchStore(b, format, 256)
			var size int64
			for _, f := range files {
				st, _ := os.Stat(f)
				size += st.Size()
			}
			plainRead(b, dir, 2) // warm the page cache
			// The fastest of each: the machine's other load only ever
			// slows a pass down.
			tScrub, tRead := time.Duration(1<<62), time.Duration(1<<62)
			b.SetBytes(size)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				res, err := Scrub(context.Background(), []string{dir}, Options{Format: format, Threads: 2})
				tScrub = min(tScrub, time.Since(t0))
				if err != nil || res.Verdict() != Verified {
					b.Fatalf("%v %s", err, res.Summary())
				}
				t0 = time.Now()
				plainRead(b, dir, 2)
				tRead = min(tRead, time.Since(t0))
			}
			b.ReportMetric(float64(tRead)/float64(tScrub), "x-read")
		})
	}
}
