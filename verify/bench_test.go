package verify_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// rankConfigs are the splits BenchmarkRanks compares, TP 1 first: the
// same model and requests (the same logical KV), so the same bytes to
// checksum.
var rankConfigs = []struct {
	name   string
	tp, pp int
}{{"tp1", 1, 1}, {"tp8", 8, 1}, {"tp4xpp2", 4, 2}}

// benchSide synthesizes cfg under b.TempDir().
func benchSide(b *testing.B, cfg synth.Config) []string {
	b.Helper()
	paths, err := synth.Write(b.TempDir(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	return paths
}

// BenchmarkRanks checksums one Llama-shaped side (32 layers, 8 KV heads,
// 512 MiB of KV) split as TP 1, TP 8 and TP 4 x PP 2, the three in turn
// in every iteration so that they share the machine's state: "warm" on
// dumps opened once (the checksum and the merge), "end-to-end" opening,
// checksumming and closing the side as `kvaudit checksum` does. It
// reports each split's ms per op and its time relative to TP 1 (x-tp1).
func BenchmarkRanks(b *testing.B) {
	sides := make([][]string, len(rankConfigs))
	for i, rc := range rankConfigs {
		sides[i] = benchSide(b, synth.Config{Preset: "llama", Layers: 32, TP: rc.tp, PP: rc.pp, Requests: 4, Tokens: 1024, NumBlocks: 260, Seed: 1})
	}
	ctx := context.Background()
	run := func(b *testing.B, each func(i int) error) {
		spent := make([]time.Duration, len(sides))
		cpu := make([]time.Duration, len(sides))
		for b.Loop() {
			for i := range sides {
				start, cpu0 := time.Now(), cpuTime()
				if err := each(i); err != nil {
					b.Fatal(err)
				}
				spent[i] += time.Since(start)
				cpu[i] += cpuTime() - cpu0
			}
		}
		for i, rc := range rankConfigs {
			b.ReportMetric(float64(spent[i].Microseconds())/1e3/float64(b.N), rc.name+"-ms/op")
			if i > 0 {
				b.ReportMetric(float64(spent[i])/float64(spent[0]), rc.name+"-x-tp1")
				b.ReportMetric(float64(cpu[i])/float64(cpu[0]), rc.name+"-cpu-x-tp1")
			}
		}
	}
	b.Run("warm", func(b *testing.B) {
		dumps := make([][]*layout.Dump, len(sides))
		for i, paths := range sides {
			d, err := layout.OpenSide(paths)
			if err != nil {
				b.Fatal(err)
			}
			defer layout.CloseAll(d)
			dumps[i] = d
		}
		run(b, func(i int) error {
			_, err := side.Compute(ctx, dumps[i], checksum.Options{})
			return err
		})
	})
	b.Run("end-to-end", func(b *testing.B) {
		run(b, func(i int) error {
			_, err := side.Checksum(ctx, side.Input{Paths: sides[i]}, side.ChecksumOptions{})
			return err
		})
	})
}

// cpuTime is the CPU time (user and system) the process has used: on a
// shared machine, a measure of work that waiting for a CPU does not
// inflate.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakHeap samples the Go heap in use while fn runs and returns its peak
// over what was in use before.
func peakHeap(fn func() error) (uint64, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	err := fn()
	close(stop)
	wg.Wait()
	runtime.ReadMemStats(&ms)
	p := max(peak.Load(), ms.HeapInuse)
	return p - min(p, base), err
}

// BenchmarkStateRowsHeap checksums Mamba1 sides at TP 8 with 4096
// requests and 8 or 32 layers (a plan of 0.5M or 2M rows: requests x
// layers x 2 states x 8 ranks), and reports the peak Go heap over the
// open dumps (peak-heap-MB), the rows and what 32-byte rows of their own
// for every cache would take (rows-MB). The heap follows the requests and
// ranks (the records and checks), not the rows.
func BenchmarkStateRowsHeap(b *testing.B) {
	for _, layers := range []int{8, 32} {
		b.Run(fmt.Sprintf("layers=%d", layers), func(b *testing.B) {
			paths := benchSide(b, synth.Config{Preset: "mamba1", Layers: layers, TP: 8, Requests: 4096, Tokens: 16, Seed: 1})
			dumps, err := layout.OpenSide(paths)
			if err != nil {
				b.Fatal(err)
			}
			defer layout.CloseAll(dumps)
			rows := 0
			for _, d := range dumps {
				p, _, err := checksum.NewPlan(d, nil)
				if err != nil {
					b.Fatal(err)
				}
				for _, t := range p.Tasks {
					rows += len(t.Rows)
				}
			}
			ctx := context.Background()
			var peak uint64
			for b.Loop() {
				p, err := peakHeap(func() error {
					_, err := side.Compute(ctx, dumps, checksum.Options{})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				peak = max(peak, p)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(rows), "rows")
			b.ReportMetric(float64(rows)*32/(1<<20), "rows-MB")
		})
	}
}

// BenchmarkDrill compares a producer and a consumer of 2 GiB each (32
// Llama layers, 4 requests of 4096 tokens) that differ in every block
// (other seeds: random bytes everywhere, the drill-down's worst case: every
// cell differs and no source is found), the three in turn in every
// iteration (in turn forwards and backwards): `diff --no-drill`, `diff`
// (the default cap) and `diff --max-details -1`. It reports each one's ms per op and the drill-downs'
// times, wall and CPU, relative to --no-drill (x-nodrill).
func BenchmarkDrill(b *testing.B) {
	cfg := synth.Config{Preset: "llama", Layers: 32, Requests: 4, Tokens: 4096, NumBlocks: 1030, Seed: 1}
	dir := b.TempDir()
	p, err := synth.Write(dir, cfg)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Role, cfg.Seed = "consumer", 2
	c, err := synth.Write(dir, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	runs := []struct {
		name string
		opts verify.CompareOptions
	}{
		{"nodrill", verify.CompareOptions{NoDrill: true}},
		{"drill", verify.CompareOptions{}},
		{"drill-nocap", verify.CompareOptions{MaxDetails: -1}},
	}
	spent := make([]time.Duration, len(runs))
	cpu := make([]time.Duration, len(runs))
	details := 0
	iter := 0
	for b.Loop() {
		iter++
		for k := range runs {
			// Every other iteration in the other order, so that none gains
			// from running after another (page cache, frequency).
			i := k
			if iter%2 == 0 {
				i = len(runs) - 1 - k
			}
			r := runs[i]
			start, cpu0 := time.Now(), cpuTime()
			res, err := verify.Compare(ctx, side.Input{Paths: p}, side.Input{Paths: c}, r.opts)
			if err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(start)
			cpu[i] += cpuTime() - cpu0
			if res.Diff.Verdict != verify.Mismatch {
				b.Fatalf("%s: %s", r.name, res.Diff.Verdict)
			}
			if r.name == "drill-nocap" {
				details = 0
				for _, rv := range res.Diff.Requests {
					details += len(rv.Details)
				}
			}
		}
	}
	for i, r := range runs {
		b.ReportMetric(float64(spent[i].Microseconds())/1e3/float64(b.N), r.name+"-ms/op")
		if i > 0 {
			b.ReportMetric(float64(spent[i])/float64(spent[0]), r.name+"-x-nodrill")
			b.ReportMetric(float64(cpu[i])/float64(cpu[0]), r.name+"-cpu-x-nodrill")
		}
	}
	b.ReportMetric(float64(details), "details")
}
