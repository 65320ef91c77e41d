// Package bench measures the checksum engines next to their limits. Over
// the same mapped bytes of a side's dumps, and for each thread count, it
// times a plain read of every byte the checksum covers (a vectorised sum:
// the practical limit of any checksum), the same sum as a scalar loop, a
// copy of the bytes (memory bandwidth), the fast engine alone and computing
// both numberings and kvaudit's mix check in its pass, the reference engine
// on a sample, CRC32C and xxh3, and reports each one's throughput relative
// to the vectorised read, with the peak heap and resident set of the
// process.
//
// The data are expected to be in the page cache: the numbers are the CPU
// cost of reading mapped memory, not the speed of a disk.
package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
)

// Method names, in the order they are reported.
const (
	// MethodRead is the plain read: the uint64 sum of the covered bytes,
	// vectorised (AVX2 on amd64), the baseline of every ratio.
	MethodRead = "read"
	// MethodReadScalar is the same sum with a scalar Go loop.
	MethodReadScalar = "read-scalar"
	// MethodCopy copies the covered bytes (memmove): memory bandwidth.
	MethodCopy = "copy"
	// MethodFast is checksum.Fast alone: vLLM's checksum, one numbering.
	MethodFast = "cpu"
	// MethodFastMix is checksum.Fast computing what records hold in its
	// one pass: both numberings (Plan.Slopes) and kvaudit's mix check
	// (Plan.Mix, docs/spec.md §14).
	MethodFastMix = "cpu+mix"
	MethodCRC32C  = "crc32c" // hash/crc32 Castagnoli over the same extents
	MethodXXH3    = "xxh3"   // github.com/zeebo/xxh3 over the same extents
	MethodRef     = "ref"    // checksum.ReferenceBlock, on a sample
)

// Methods lists the methods in report order.
var Methods = []string{MethodRead, MethodReadScalar, MethodCopy, MethodFast, MethodFastMix, MethodCRC32C, MethodXXH3, MethodRef}

// Options say what to measure.
type Options struct {
	// Paths are the side's dumps, or directories holding them
	// (layout.FindDumps). Run opens them itself, and again for each
	// end-to-end repetition.
	Paths []string
	// Threads are the thread counts; empty means 1..GOMAXPROCS.
	Threads []int
	// Reps is the number of timed repetitions (the median is reported);
	// 0 means 5. Warmup runs of each method come first, untimed; 0 means
	// 1, negative none.
	Reps, Warmup int
	// RefSample is the bytes the reference engine reads; 0 means 32 MiB.
	RefSample int64
	// EndToEnd also times what `kvaudit checksum` does (open the side,
	// checksum every request, merge, close) against opening the side and
	// reading it plainly, at the largest thread count.
	EndToEnd bool
	// Log, when set, receives one line per step (for a status display).
	Log func(line string)
}

// Format is the format tag of a Result in JSON (`kvaudit bench -o json`).
const Format = "kvaudit-bench/1"

// Result is a benchmark run: one data value for every renderer.
type Result struct {
	// Format is always Format.
	Format  string  `json:"format"`
	Machine Machine `json:"machine"`
	// Bytes is the number of bytes the checksum covers (one pass).
	Bytes  int64 `json:"bytes"`
	Dumps  int   `json:"dumps"`
	Caches int   `json:"caches"`
	// Rows is the number of (cache, block) rows.
	Rows   int `json:"rows"`
	Reps   int `json:"reps"`
	Warmup int `json:"warmup"`
	// Measurements are in thread-count order, Methods order within each.
	Measurements []Measurement `json:"measurements"`
	EndToEnd     *EndToEnd     `json:"end_to_end,omitempty"`
	// PeakHeapBytes is the largest live Go heap seen while measuring
	// (sampled every millisecond, and at the end of every run).
	PeakHeapBytes uint64 `json:"peak_heap_bytes"`
	// PeakRSSBytes is the peak resident set while measuring (Linux: VmHWM,
	// reset when measuring starts; elsewhere getrusage since the process
	// started, or 0 when unknown). It includes the mapped pages of the
	// dumps, which belong to the page cache.
	PeakRSSBytes uint64   `json:"peak_rss_bytes"`
	RSSSource    string   `json:"rss_source"`
	Notes        []string `json:"notes"`
}

// Machine describes where the numbers were measured.
type Machine struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	CPU        string `json:"cpu,omitempty"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
	// LoadAverage is the 1-minute load average when the run started (-1
	// when unknown): a busy machine makes every number noisier.
	LoadAverage float64 `json:"load_average"`
}

// Measurement is one method at one thread count.
type Measurement struct {
	Method  string `json:"method"`
	Threads int    `json:"threads"`
	// Bytes is what one repetition reads.
	Bytes int64 `json:"bytes"`
	// Seconds is the median time of a repetition.
	Seconds float64 `json:"seconds"`
	// GBPerS is Bytes / Seconds in 10^9 bytes per second.
	GBPerS float64 `json:"gb_per_s"`
	// Ratio is the median over repetitions of this method's throughput
	// divided by the plain read's in the same repetition (1 for read).
	Ratio float64 `json:"ratio_to_read"`
}

// EndToEnd compares a whole `kvaudit checksum` of the side with a plain
// read of it, both from opening the dumps to closing them.
type EndToEnd struct {
	Threads int `json:"threads"`
	// ChecksumSeconds is the median time to open the side, compute every
	// request's checks with the fast engine, merge them and close it.
	ChecksumSeconds float64 `json:"checksum_seconds"`
	// ReadSeconds is the median time to open the side, lay out the same
	// work, read it plainly and close it.
	ReadSeconds float64 `json:"read_seconds"`
	// Ratio is the median over repetitions of checksum time / read time
	// (the target is at most 1.2).
	Ratio float64 `json:"time_ratio"`
	// RatioWarm is ChecksumSeconds over the plain read of the already
	// mapped side at the same thread count.
	RatioWarm float64 `json:"time_ratio_to_warm_read"`
}

// Run measures the side at opts.Paths.
func Run(ctx context.Context, opts Options) (*Result, error) {
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			opts.Log(fmt.Sprintf(format, args...))
		}
	}
	o, err := opts.settled()
	if err != nil {
		return nil, err
	}
	s, err := openSubject(opts.Paths)
	if err != nil {
		return nil, err
	}
	defer func() { closeAll(s.dumps) }() // a closure: s.dumps is released before the end-to-end run
	work := NewWork(s.plans, 0)
	if work.Bytes == 0 {
		return nil, fmt.Errorf("the side holds no checksummed bytes: no request has a supported group")
	}
	sample := work.Sample(o.RefSample)

	res := &Result{
		Format: Format, Machine: machine(), Bytes: work.Bytes, Dumps: len(s.dumps), Caches: s.caches, Rows: s.rows,
		Reps: o.Reps, Warmup: o.Warmup,
	}
	logf("%d dump(s), %d cache(s), %d rows, %.2f GB covered", len(s.dumps), s.caches, s.rows, float64(work.Bytes)/1e9)

	// The engines must agree on the sample before their speed means
	// anything.
	if err := crossCheck(ctx, sample); err != nil {
		return nil, err
	}

	runtime.GC()
	debug.FreeOSMemory()
	res.RSSSource = resetPeakRSS()
	peak := startHeapSampler()
	for _, t := range o.Threads {
		ms, err := measure(ctx, t, s, work, sample, o, logf, peak)
		if err != nil {
			peak.stop()
			return nil, err
		}
		res.Measurements = append(res.Measurements, ms...)
	}

	if opts.EndToEnd {
		// The side is opened afresh for each repetition: unmap the
		// measured one first, so the resident set counts one mapping.
		closeAll(s.dumps)
		s.dumps = nil
		t := slices.Max(o.Threads)
		e, err := endToEnd(ctx, opts.Paths, t, o.Reps, o.Warmup, logf, peak)
		if err != nil {
			peak.stop()
			return nil, err
		}
		for _, m := range res.Measurements {
			if m.Method == MethodRead && m.Threads == t {
				e.RatioWarm = e.ChecksumSeconds / m.Seconds
			}
		}
		res.EndToEnd = e
	}
	res.PeakHeapBytes = peak.stop()
	res.PeakRSSBytes = peakRSS()
	res.Notes = append(res.Notes,
		"the side is in the page cache (synthesized or read just before): this is the CPU cost of reading mapped memory, not disk speed",
		fmt.Sprintf("ratio: throughput over the plain read's in the same repetition, median of %d; ref runs on a %.0f MB sample", o.Reps, float64(sample.Bytes)/1e6),
	)
	return res, nil
}

// settled returns the options with their defaults filled in (Reps 5, one
// warm-up, threads 1..GOMAXPROCS, a 32 MiB reference sample); a thread
// count below 1 is an error.
func (opts Options) settled() (Options, error) {
	o := opts
	if o.Reps <= 0 {
		o.Reps = 5
	}
	switch {
	case o.Warmup == 0:
		o.Warmup = 1
	case o.Warmup < 0:
		o.Warmup = 0
	}
	o.Threads = slices.Clone(opts.Threads)
	if len(o.Threads) == 0 {
		for t := 1; t <= runtime.GOMAXPROCS(0); t++ {
			o.Threads = append(o.Threads, t)
		}
	}
	for _, t := range o.Threads {
		if t < 1 {
			return Options{}, fmt.Errorf("thread count %d: want at least 1", t)
		}
	}
	if o.RefSample <= 0 {
		o.RefSample = 32 << 20
	}
	return o, nil
}

// subject is what is measured: the side's dumps, opened, each rank's plan
// and output, and the counts the result reports.
type subject struct {
	dumps []*layout.Dump
	// plans ask for vLLM's checksum alone, mixPlans for what records hold
	// (both numberings and the mix check); outs have room for either.
	plans, mixPlans []*ckplan.Plan
	outs            [][]uint64
	caches, rows    int
}

// openSubject opens the side at paths and plans every rank. A layer in
// device memory is an error: bench measures mapped files.
func openSubject(paths []string) (*subject, error) {
	dumps, err := layout.OpenPaths(paths)
	if err != nil {
		return nil, err
	}
	s := &subject{dumps: dumps, plans: make([]*ckplan.Plan, len(dumps)), mixPlans: make([]*ckplan.Plan, len(dumps)), outs: make([][]uint64, len(dumps))}
	for i, d := range dumps {
		if s.plans[i], _, err = checksum.NewPlan(d, nil); err != nil {
			closeAll(dumps)
			return nil, err
		}
		for _, t := range s.plans[i].Tasks {
			if t.Cache.Cells.Device != nil {
				closeAll(dumps)
				return nil, fmt.Errorf("dump %q: layer %q lives in device memory; bench measures mapped files", d.Path, t.Cache.Layer.Name)
			}
			s.rows += len(t.Rows)
		}
		s.caches += len(s.plans[i].Tasks)
		s.outs[i] = make([]uint64, 3*s.plans[i].Outputs)
		q := *s.plans[i]
		q.Slopes, q.Mix = true, true
		s.mixPlans[i] = &q
	}
	return s, nil
}

// measure times every method at t threads: o.Warmup untimed runs of each,
// then o.Reps timed repetitions with the methods interleaved, and returns
// each method's median time and median ratio to the plain read of the
// same repetition.
func measure(ctx context.Context, t int, s *subject, work, sample *Work, o Options, logf func(string, ...any), peak *heapSampler) ([]Measurement, error) {
	fast := func(plans []*ckplan.Plan) func() error {
		return func() error {
			f := checksum.Fast{Threads: t}
			for i, p := range plans {
				clear(s.outs[i])
				if err := f.Run(ctx, p, s.outs[i]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	baseline := func(fn func(context.Context, int) (uint64, error)) func() error {
		return func() error {
			_, err := fn(ctx, t)
			return err
		}
	}
	runs := map[string]func() error{
		MethodRead:       baseline(work.Read),
		MethodReadScalar: baseline(work.ReadScalar),
		MethodCopy:       baseline(work.Copy),
		MethodFast:       fast(s.plans),
		MethodFastMix:    fast(s.mixPlans),
		MethodCRC32C:     baseline(work.CRC32C),
		MethodXXH3:       baseline(work.XXH3),
		MethodRef:        baseline(sample.Reference),
	}
	bytes := map[string]int64{MethodRef: sample.Bytes}
	times := map[string][]float64{}
	for w := range o.Warmup {
		for _, m := range Methods {
			logf("threads %d: warm-up %d/%d: %s", t, w+1, o.Warmup, m)
			if err := runs[m](); err != nil {
				return nil, err
			}
		}
	}
	for r := range o.Reps {
		for _, m := range Methods {
			logf("threads %d: repetition %d/%d: %s", t, r+1, o.Reps, m)
			start := time.Now()
			if err := runs[m](); err != nil {
				return nil, err
			}
			times[m] = append(times[m], time.Since(start).Seconds())
			peak.sample()
		}
	}
	var out []Measurement
	for _, m := range Methods {
		b, ok := bytes[m]
		if !ok {
			b = work.Bytes
		}
		sec := median(times[m])
		ratios := make([]float64, o.Reps)
		for r := range o.Reps {
			ratios[r] = times[MethodRead][r] / times[m][r] * float64(b) / float64(work.Bytes)
		}
		out = append(out, Measurement{
			Method: m, Threads: t, Bytes: b, Seconds: sec,
			GBPerS: float64(b) / sec / 1e9, Ratio: median(ratios),
		})
	}
	return out, nil
}

// crossCheck runs the fast and reference engines on every unit of the
// sample, with both numberings and the mix check, and fails when they
// differ.
func crossCheck(ctx context.Context, sample *Work) error {
	for _, p := range sample.Plans() {
		p.Slopes, p.Mix = true, true
		a := make([]uint64, 3*p.Outputs)
		b := make([]uint64, 3*p.Outputs)
		if err := (checksum.Fast{}).Run(ctx, p, a); err != nil {
			return err
		}
		if err := (checksum.Reference{}).Run(ctx, p, b); err != nil {
			return err
		}
		if !slices.Equal(a, b) {
			return fmt.Errorf("the fast engine disagrees with the reference on layer %q of %q", p.Tasks[0].Cache.Layer.Name, p.Dump.Path)
		}
	}
	return nil
}

// endToEnd times Compute against open + plain read, interleaved.
func endToEnd(ctx context.Context, paths []string, threads, reps, warm int, logf func(string, ...any), peak *heapSampler) (*EndToEnd, error) {
	check := func() error {
		dumps, err := layout.OpenPaths(paths)
		if err != nil {
			return err
		}
		defer closeAll(dumps)
		_, err = side.Compute(ctx, dumps, checksum.Options{Engine: checksum.Fast{Threads: threads}})
		return err
	}
	read := func() error {
		dumps, err := layout.OpenPaths(paths)
		if err != nil {
			return err
		}
		defer closeAll(dumps)
		plans := make([]*ckplan.Plan, len(dumps))
		for i, d := range dumps {
			if plans[i], _, err = checksum.NewPlan(d, nil); err != nil {
				return err
			}
		}
		_, err = NewWork(plans, 0).Read(ctx, threads)
		return err
	}
	var tc, tr []float64
	for r := range warm + reps {
		logf("end to end: %d/%d", r+1, warm+reps)
		for _, step := range []struct {
			fn func() error
			to *[]float64
		}{{read, &tr}, {check, &tc}} {
			start := time.Now()
			if err := step.fn(); err != nil {
				return nil, err
			}
			if r >= warm {
				*step.to = append(*step.to, time.Since(start).Seconds())
			}
			peak.sample()
		}
	}
	ratios := make([]float64, reps)
	for i := range ratios {
		ratios[i] = tc[i] / tr[i]
	}
	return &EndToEnd{Threads: threads, ChecksumSeconds: median(tc), ReadSeconds: median(tr), Ratio: median(ratios)}, nil
}

func closeAll(dumps []*layout.Dump) {
	for _, d := range dumps {
		d.Close()
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func machine() Machine {
	return Machine{
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPU: cpuModel(),
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion: runtime.Version(), LoadAverage: loadAverage(),
	}
}

// heapSampler records the peak of the live heap.
type heapSampler struct {
	mu   sync.Mutex
	peak uint64
	s    []metrics.Sample
	done chan struct{}
	wg   sync.WaitGroup
}

const heapMetric = "/memory/classes/heap/objects:bytes"

func startHeapSampler() *heapSampler {
	h := &heapSampler{s: []metrics.Sample{{Name: heapMetric}}, done: make(chan struct{})}
	h.sample()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-tick.C:
				h.sample()
			}
		}
	}()
	return h
}

func (h *heapSampler) sample() {
	h.mu.Lock()
	defer h.mu.Unlock()
	metrics.Read(h.s)
	if h.s[0].Value.Kind() == metrics.KindUint64 {
		h.peak = max(h.peak, h.s[0].Value.Uint64())
	}
}

// stop ends sampling and returns the peak. It may be called again.
func (h *heapSampler) stop() uint64 {
	select {
	case <-h.done:
	default:
		close(h.done)
	}
	h.wg.Wait()
	h.sample()
	return h.peak
}

// readFile reads a small system file, "" on error.
func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}
