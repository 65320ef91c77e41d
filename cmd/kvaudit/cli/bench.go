package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/bench"
	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/synth"
)

// BenchOptions are the settings of `kvaudit bench`.
type BenchOptions struct {
	IO *Streams
	// Paths are the side to measure; empty means synthesize one of Size
	// bytes under Dir (removed afterwards unless Keep).
	Paths  []string
	Size   int64
	Preset string
	Layout string
	PP     int
	Dir    string
	Keep   bool
	Output string
	// Engine is "cpu" (the CPU engines beside a plain read) or "cuda" (the
	// GPU kernel beside a plain-read kernel and a device-to-device copy,
	// on a cache of Size bytes the runner fills on the device).
	Engine string
	// Bench holds the measurement settings (Paths is set by the run).
	Bench bench.Options
	// Runner says how to start the runner for --engine cuda.
	Runner kernels.RunnerOptions
}

// NewCmdBench builds `kvaudit bench`. runF replaces the run function in
// tests.
func NewCmdBench(s *Streams, runF func(context.Context, *BenchOptions) error) *cobra.Command {
	opts := &BenchOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "bench [DUMP|DIR...]",
		Short: "Measure the checksum engines against a plain read of the same bytes",
		Long: `Bench measures how fast kvaudit checksums a side, next to the limits of
reading it: over the same mapped bytes and for 1..--threads threads it
times a plain read of every byte the checksum covers (a vectorised uint64
sum, AVX2 on amd64: the practical limit, which every ratio is relative
to), the same sum as a scalar loop, a copy of the bytes (memmove: memory
bandwidth), the fast cpu engine alone (vLLM's checksum, one numbering) and
computing what records hold in its one pass (both numberings and kvaudit's
mix check), the reference engine on a sample, CRC32C and xxh3, and prints
each one's GB/s and ratio to the plain read (the median of several
repetitions after a warm-up), the peak Go heap and
resident set, and a whole ` + "`kvaudit checksum`" + ` of the side against opening
and reading it.

Without arguments it synthesizes a producer side of --size bytes (the llama
preset, 32 layers) in a temporary directory and removes it afterwards. The
side is in the page cache when measured: the numbers are the CPU cost of
reading mapped memory, not the speed of a disk. Quote ratios, which one run
measures side by side; absolute speeds depend on the machine and its load.`,
		Example: `  # measure on a synthesized 4 GB side in the HND layout
  $ kvaudit bench

  # a 4 GB side in the HND layout, as JSON
  $ kvaudit bench --size 4GB --layout hnd -o json

  # measure on existing dumps, one and two threads, 9 repetitions
  $ kvaudit bench --threads 2 --reps 9 out/producer

  # the GPU kernel on a 4 GiB cache beside a device-to-device copy
  $ kvaudit bench --engine cuda --size 4GiB`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			opts.Paths = args
			if opts.Output, err = outputOf(cfg); err != nil {
				return err
			}
			if opts.Size, err = parseSize(cfg.String("size")); err != nil {
				return usageErrorf("--size: %v", err)
			}
			opts.Preset, opts.Layout, opts.PP = cfg.String("preset"), cfg.String("layout"), cfg.Int("pp")
			switch opts.Engine = cfg.String("engine"); opts.Engine {
			case "cpu":
			case "cuda":
				if len(args) > 0 {
					return usageErrorf("--engine cuda measures the kernel on a cache the runner fills on the device; it takes no dumps")
				}
				if opts.Runner, err = runnerOptions(cfg); err != nil {
					return err
				}
			default:
				return usageErrorf("--engine %q: want cpu or cuda", opts.Engine)
			}
			opts.Dir, opts.Keep = cfg.String("dir"), cfg.Bool("keep")
			if len(args) > 0 && opts.Engine == "cpu" {
				// --size, --preset, --layout and --pp describe the side bench
				// synthesizes; dumps given are measured as they are.
				for _, name := range []string{"size", "preset", "layout", "pp"} {
					if src, ok := cfg.Explicit(name); ok {
						return usageErrorf("%s describes the side bench synthesizes when given no dump; the dumps given are measured as they are: drop one or the other", strings.TrimSuffix(src, " (default)"))
					}
				}
			}
			if len(args) == 0 {
				if _, err := bench.InputConfig(opts.Size, opts.Preset, opts.Layout, opts.PP); err != nil {
					return &UsageError{err}
				}
			}
			switch n := cfg.Int("threads"); {
			case n < 0:
				return usageErrorf("--threads %d: want a positive number (or 0 for GOMAXPROCS)", n)
			case n > 0:
				for t := 1; t <= n; t++ {
					opts.Bench.Threads = append(opts.Bench.Threads, t)
				}
			}
			opts.Bench.Reps, opts.Bench.Warmup = cfg.Int("reps"), cfg.Int("warmup")
			if opts.Bench.Reps < 1 {
				return usageErrorf("--reps %d: want at least 1", opts.Bench.Reps)
			}
			if opts.Bench.Warmup == 0 {
				opts.Bench.Warmup = -1 // bench.Options: negative means none
			}
			if opts.Bench.RefSample, err = parseSize(cfg.String("ref-sample")); err != nil {
				return usageErrorf("--ref-sample: %v", err)
			}
			opts.Bench.EndToEnd = !cfg.Bool("no-end-to-end")
			if cfg.Changed("end-to-end") {
				opts.Bench.EndToEnd = cfg.Bool("end-to-end")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return benchRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	addOutputFlag(cmd, "")
	f.String("size", "2GB", "bytes of KV to synthesize when no dump is given (e.g. 512MB, 4GB, 2GiB)")
	f.String("preset", "llama", "model preset of the synthesized side: "+strings.Join(synth.Presets, ", "))
	f.String("layout", "flash", "layout of the synthesized side: "+strings.Join(synth.Layouts, ", "))
	f.Int("pp", 1, "pipeline stages of the synthesized side (one dump each)")
	f.String("dir", "", "directory to synthesize the side under, removed afterwards unless --keep (default: the system's temporary directory)")
	f.Bool("keep", false, "keep the synthesized side and print where it is")
	f.Int("threads", 0, "measure 1 to this many threads (default GOMAXPROCS)")
	f.Int("reps", 5, "timed repetitions of each measurement (the median is reported)")
	f.Int("warmup", 1, "untimed runs of each method before timing")
	f.String("ref-sample", "32MB", "bytes the reference engine reads (it is slow)")
	f.Bool("no-end-to-end", false, "skip timing a whole checksum of the side against opening and reading it")
	f.Bool("end-to-end", true, "")
	_ = f.MarkDeprecated("end-to-end", "use --no-end-to-end")
	f.String("engine", "cpu", "cpu: the CPU engines beside a plain read; cuda: the GPU kernel beside a plain-read kernel and a device-to-device copy (kvaudit-cuda runner)")
	addCUDATimeoutFlag(f)
	return cmd
}

func benchRun(ctx context.Context, opts *BenchOptions) error {
	if opts.Engine == "cuda" {
		return benchCUDA(ctx, opts)
	}
	status := newStatus(opts.IO)
	paths := opts.Paths
	if len(paths) == 0 {
		dir, err := safeio.TempDir(opts.Dir, "kvaudit-bench-")
		if err != nil {
			return err
		}
		if opts.Keep {
			fmt.Fprintf(opts.IO.Err, "kvaudit: synthesizing into %s (kept)\n", dir)
			defer safeio.Forget(dir)
		} else {
			defer safeio.RemoveTemp(dir)
		}
		if paths, err = benchInput(opts, dir, status); err != nil {
			return err
		}
	}
	bo := opts.Bench
	bo.Paths = paths
	bo.Log = status.show
	res, err := bench.Run(ctx, bo)
	status.done()
	if err != nil {
		return err
	}
	if opts.Output == "json" {
		return report.WriteJSON(opts.IO.Out, benchJSON{Format: BenchFormat, Engine: "cpu", Result: res})
	}
	return opts.IO.renderTables(opts.Output, benchTable(res))
}

// benchInput synthesizes bench's side into dir (bench.WriteInput) under a
// bar of the work, or a status line where synth cannot count it.
func benchInput(opts *BenchOptions, dir string, status *status) ([]string, error) {
	cfg, err := bench.InputConfig(opts.Size, opts.Preset, opts.Layout, opts.PP)
	if err != nil {
		return nil, err
	}
	desc := fmt.Sprintf("synthesizing %s of %s KV", decimalBytes(opts.Size), opts.Preset)
	var bar *progress
	if total, err := synth.TotalWork(cfg); err == nil && total > 0 {
		bar = newWorkProgress(opts.IO, total, desc)
		cfg.Progress = bar.Callback()
	} else {
		status.show(fmt.Sprintf("%s (%s layout)", desc, opts.Layout))
	}
	paths, err := synth.Write(dir, cfg)
	bar.Finish()
	if err != nil {
		status.done()
	}
	return paths, err
}

// The versions of bench -o json (docs/spec.md §12: fields are added, never renamed
// or removed): the cpu engines' measurements, and the GPU kernel's.
const (
	BenchFormat     = "kvaudit-bench/1"
	BenchCUDAFormat = "kvaudit-bench-cuda/1"
)

// benchJSON is bench -o json: the format and engine, then the result's
// fields.
type benchJSON struct {
	Format string `json:"format"`
	Engine string `json:"engine"`
	*bench.Result
}

// benchCUDAJSON is bench --engine cuda -o json.
type benchCUDAJSON struct {
	Format string `json:"format"`
	Engine string `json:"engine"`
	*kernels.BenchResult
}

// benchTable lays out a bench result: one row per thread count and method.
func benchTable(r *bench.Result) *report.Table {
	m := r.Machine
	t := &report.Table{
		Title:  fmt.Sprintf("bench: %s of KV in %d dump(s), %d caches, %d blocks", decimalBytes(r.Bytes), r.Dumps, r.Caches, r.Rows),
		Header: []string{"threads", "method", "GB/s", "x read"},
	}
	for _, x := range r.Measurements {
		tone := report.Plain
		switch x.Method {
		case bench.MethodRead:
			tone = report.Dim
		case bench.MethodFast, bench.MethodFastMix:
			tone = report.Good
			if x.Ratio < 0.8 {
				tone = report.Warn
			}
		}
		t.Add(report.C("%d", x.Threads), report.C("%s", benchMethodName(x.Method)), report.C("%.2f", x.GBPerS), report.Cell{Text: fmt.Sprintf("%.2f", x.Ratio), Tone: tone})
	}
	cpu := m.CPU
	if cpu == "" {
		cpu = "cpu unknown"
	}
	load := "unknown"
	if m.LoadAverage >= 0 {
		load = fmt.Sprintf("%.2f", m.LoadAverage)
	}
	t.Notes = append(t.Notes, fmt.Sprintf("machine: %s, %d CPUs, GOMAXPROCS %d, %s/%s, %s, load average %s at start", cpu, m.NumCPU, m.GOMAXPROCS, m.GOOS, m.GOARCH, m.GoVersion, load))
	if e := r.EndToEnd; e != nil {
		t.Notes = append(t.Notes, fmt.Sprintf("kvaudit checksum end to end (open, checksum, merge, close; %d threads): %.2fx the time of opening and reading the side plainly, %.2fx the plain read of the mapped side", e.Threads, e.Ratio, e.RatioWarm))
	}
	t.Notes = append(t.Notes, fmt.Sprintf("peak Go heap %s; peak RSS %s (%s; counts the mapped dump pages)", mb(r.PeakHeapBytes), mb(r.PeakRSSBytes), r.RSSSource))
	t.Notes = append(t.Notes, r.Notes...)
	return t
}

func benchMethodName(m string) string {
	switch m {
	case bench.MethodRead:
		return "read (vectorised sum)"
	case bench.MethodReadScalar:
		return "read (scalar sum)"
	case bench.MethodCopy:
		return "copy (memmove)"
	case bench.MethodFast:
		return "cpu engine"
	case bench.MethodFastMix:
		return "cpu engine, both numberings + mix check"
	case bench.MethodRef:
		return "ref engine (sample)"
	}
	return m
}

// decimalBytes writes a size as bench measures them, in powers of 1000
// with the unit that keeps it readable: "1.05 MB", "4.29 GB".
func decimalBytes(n int64) string {
	v, unit := float64(n), "B"
	for _, u := range []string{"kB", "MB", "GB", "TB"} {
		if v < 1000 {
			break
		}
		v, unit = v/1000, u
	}
	if unit == "B" {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

func mb(b uint64) string {
	if b == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f MB", float64(b)/1e6)
}

// parseSize reads a byte count: a number with an optional unit (B, KB, MB,
// GB, TB in powers of 1000; KiB, MiB, GiB, TiB in powers of 1024).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v*mult > 1<<50 {
		return 0, fmt.Errorf("%q is not a size (e.g. 512MB, 2GB, 1GiB)", s)
	}
	return int64(v * mult), nil
}

// benchCUDA times the GPU kernel on a cache of opts.Size bytes that the
// kvaudit-cuda runner allocates and fills on the device, beside a
// plain-read kernel and a device-to-device copy of the same bytes, in one
// run; a few rows are checked against the reference on the host.
func benchCUDA(ctx context.Context, opts *BenchOptions) error {
	r, err := kernels.StartRunner(ctx, opts.Runner)
	if err != nil {
		return fmt.Errorf("the CUDA engine is unavailable: %w", err)
	}
	res, err := r.Bench(ctx, kernels.BenchRequest{Bytes: opts.Size, Reps: opts.Bench.Reps})
	if err != nil {
		return err
	}
	if opts.Output == "json" {
		return report.WriteJSON(opts.IO.Out, benchCUDAJSON{Format: BenchCUDAFormat, Engine: "cuda", BenchResult: res})
	}
	return res.WriteText(opts.IO.Out)
}
