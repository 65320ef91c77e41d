package bench

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// openPlans synthesizes cfg and returns every rank's plan.
func openPlans(t *testing.T, cfg synth.Config) ([]*ckplan.Plan, []string) {
	t.Helper()
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var plans []*ckplan.Plan
	for _, p := range paths {
		d, err := layout.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		plan, _, err := checksum.NewPlan(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, plan)
	}
	return plans, paths
}

// TestWorkCoversTheCells: the extents of a work are exactly the bytes of
// the valid tokens' cells, every layout, kernel split and file format
// (raw pads rows), in any unit size.
func TestWorkCoversTheCells(t *testing.T) {
	for _, lay := range synth.Layouts {
		for _, cfg := range []synth.Config{
			{Preset: "llama", Layers: 2, Layout: lay, Tokens: 37, Requests: 2},
			{Preset: "mla", Layers: 2, Layout: lay, Tokens: 20, KernelBlockSize: 4, Format: "raw"},
			{Preset: "indexer", Layers: 1, Layout: lay, Tokens: 33, TP: 2, Format: "dir"},
		} {
			t.Run(fmt.Sprintf("%s/%s/%s", cfg.Preset, lay, cfg.Format), func(t *testing.T) {
				plans, _ := openPlans(t, cfg)
				// The definition: every valid token's cells, byte by byte.
				var wantBytes, wantSum uint64
				var planBytes int64
				var cell []byte
				for _, p := range plans {
					planBytes += p.Bytes()
					for _, task := range p.Tasks {
						c := task.Cache
						for _, r := range task.Rows {
							for tok := range r.Valid {
								for h := range c.Heads {
									cell = c.Cells.ReadCell(cell[:0], r.Block, tok, h)
									for _, b := range cell {
										wantSum += uint64(b)
									}
									wantBytes += uint64(len(cell))
								}
							}
						}
					}
				}
				for _, unit := range []int64{1, 5000, 0} {
					w := NewWork(plans, unit)
					if w.Bytes != planBytes {
						t.Fatalf("unit %d: work of %d bytes, plans read %d", unit, w.Bytes, planBytes)
					}
					sums := make([][2]uint64, 2)
					err := w.Each(context.Background(), 2, func(worker int, b []byte) {
						for _, x := range b {
							sums[worker][0] += uint64(x)
						}
						sums[worker][1] += uint64(len(b))
					})
					if err != nil {
						t.Fatal(err)
					}
					gotSum, gotBytes := sums[0][0]+sums[1][0], sums[0][1]+sums[1][1]
					if gotSum != wantSum || gotBytes != wantBytes {
						t.Fatalf("unit %d: extents hold %d bytes summing to %d, the cells %d bytes summing to %d", unit, gotBytes, gotSum, wantBytes, wantSum)
					}
				}
			})
		}
	}
}

// TestWorkMethodsAgree: the reference over a work is the sum of
// ReferenceBlock over the plans' rows, whatever the threads; the plain
// read, CRC32C and xxh3 do not depend on the threads either; a sample's
// plans checksum the same with both engines.
func TestWorkMethodsAgree(t *testing.T) {
	plans, _ := openPlans(t, synth.Config{Preset: "llama", Layers: 3, Layout: "hnd", Tokens: 50, Requests: 3})
	var want uint64
	for _, p := range plans {
		for _, task := range p.Tasks {
			for _, r := range task.Rows {
				want += checksum.ReferenceBlock(task.Cache, r)
			}
		}
	}
	w := NewWork(plans, 3000)
	ctx := context.Background()
	sums := map[string]uint64{}
	for _, fn := range []struct {
		name string
		f    func(context.Context, int) (uint64, error)
	}{{"read", w.Read}, {"read-scalar", w.ReadScalar}, {"copy", w.Copy}, {"crc32c", w.CRC32C}, {"xxh3", w.XXH3}, {"ref", w.Reference}} {
		var got []uint64
		for _, threads := range []int{1, 2, 3} {
			v, err := fn.f(ctx, threads)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, v)
		}
		if got[0] != got[1] || got[1] != got[2] {
			t.Errorf("%s: results depend on the threads: %x", fn.name, got)
		}
		if fn.name == "ref" && got[0] != want {
			t.Errorf("ref over the work = %x, sum of ReferenceBlock = %x", got[0], want)
		}
		sums[fn.name] = got[0]
	}
	if sums["read"] != sums["read-scalar"] || sums["copy"] != uint64(w.Bytes) {
		t.Errorf("read %x, read-scalar %x (the same sum); copy %d bytes of %d", sums["read"], sums["read-scalar"], sums["copy"], w.Bytes)
	}
	s := w.Sample(w.Bytes / 4)
	if s.Bytes == 0 || s.Bytes > w.Bytes/4+4000 || s.Units() == 0 {
		t.Errorf("sample of %d bytes (%d units) for a quarter of %d", s.Bytes, s.Units(), w.Bytes)
	}
	if err := crossCheck(ctx, s); err != nil {
		t.Error(err)
	}
}

// TestReadSum checks the plain read, scalar and vectorised, against its
// definition: words, then the remaining bytes one by one.
func TestReadSum(t *testing.T) {
	b := make([]byte, 300)
	for i := range b {
		b[i] = byte(i*37 + 11)
	}
	for n := 0; n <= len(b); n++ {
		var want uint64
		p := b[:n]
		for len(p) >= 8 {
			for k := range 8 {
				want += uint64(p[k]) << (8 * k)
			}
			p = p[8:]
		}
		for _, x := range p {
			want += uint64(x)
		}
		if got := ReadSum(b[:n]); got != want {
			t.Fatalf("ReadSum of %d bytes = %x, want %x", n, got, want)
		}
		if got := ReadSumVec(b[:n]); got != want {
			t.Fatalf("ReadSumVec of %d bytes = %x, want %x", n, got, want)
		}
	}
}

// TestInputConfig: a synthesized side holds about the size asked, in whole
// requests of at most 2048 tokens.
func TestInputConfig(t *testing.T) {
	for _, size := range []int64{1 << 20, 48 << 20, 2e9, 4e9} {
		cfg, err := InputConfig(size, "llama", "flash", 1)
		if err != nil {
			t.Fatal(err)
		}
		perToken := int64(InputLayers * 8 * 2 * 128 * 2)
		got := int64(cfg.Requests) * int64(cfg.Tokens) * perToken
		if got > size || got < size-int64(cfg.Requests)*perToken || cfg.Tokens > 2048 {
			t.Errorf("size %d: %d requests of %d tokens hold %d bytes", size, cfg.Requests, cfg.Tokens, got)
		}
		if need := cfg.Requests * ((cfg.Tokens + 15) / 16); cfg.NumBlocks != need {
			t.Errorf("size %d: %d blocks, the requests need %d", size, cfg.NumBlocks, need)
		}
	}
	if _, err := InputConfig(100, "llama", "flash", 1); err == nil {
		t.Error("a side smaller than one token was accepted")
	}
}

// TestInputPresets: every preset bench offers synthesizes, state presets
// too (their caches have states, not a dtype of their own), and its files
// hold about the size asked: within a block's worth of tokens of each
// request below it, never more than twice it.
func TestInputPresets(t *testing.T) {
	const size = 8 << 20
	for _, preset := range synth.Presets {
		t.Run(preset, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := WriteInput(dir, size, preset, "flash", 1); err != nil {
				t.Fatal(err)
			}
			var got int64
			err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				info, err := d.Info()
				if err == nil {
					got += info.Size()
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if got < size/2 || got > 2*size {
				t.Errorf("%s: the side's files hold %d bytes, asked %d", preset, got, size)
			}
		})
	}
}

// TestRun measures a small side and checks the shape of the result (never
// its speeds).
func TestRun(t *testing.T) {
	paths, err := WriteInput(t.TempDir(), 6<<20, "llama", "nhd", 2)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	res, err := Run(context.Background(), Options{
		Paths: paths, Threads: []int{1, 2}, Reps: 2, Warmup: -1, RefSample: 1 << 20, EndToEnd: true,
		Log: func(l string) { lines = append(lines, l) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Format != "kvaudit-bench/1" {
		t.Errorf("format %q", res.Format)
	}
	if res.Dumps != 2 || res.Bytes <= 0 || res.Rows == 0 || res.Caches != InputLayers {
		t.Errorf("result describes %d dumps, %d bytes, %d rows, %d caches", res.Dumps, res.Bytes, res.Rows, res.Caches)
	}
	var got []string
	for _, m := range res.Measurements {
		got = append(got, fmt.Sprintf("%d/%s", m.Threads, m.Method))
		if m.Seconds <= 0 || m.GBPerS <= 0 || m.Ratio <= 0 {
			t.Errorf("%s at %d threads: %v s, %v GB/s, ratio %v", m.Method, m.Threads, m.Seconds, m.GBPerS, m.Ratio)
		}
		if m.Method == MethodRead && m.Ratio != 1 {
			t.Errorf("read's ratio to itself is %v", m.Ratio)
		}
		if m.Method != MethodRef && m.Bytes != res.Bytes {
			t.Errorf("%s read %d bytes, the side covers %d", m.Method, m.Bytes, res.Bytes)
		}
	}
	var want []string
	for _, th := range []int{1, 2} {
		for _, m := range Methods {
			want = append(want, fmt.Sprintf("%d/%s", th, m))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("measurements %v, want %v", got, want)
	}
	if e := res.EndToEnd; e == nil || e.Threads != 2 || e.Ratio <= 0 || e.RatioWarm <= 0 {
		t.Errorf("end to end: %+v", e)
	}
	if res.PeakHeapBytes == 0 || len(res.Notes) == 0 || len(lines) == 0 {
		t.Errorf("peak heap %d, notes %q, %d log lines", res.PeakHeapBytes, res.Notes, len(lines))
	}
}

// TestRunErrors: bad thread counts and sides without checksummed bytes
// are errors.
func TestRunErrors(t *testing.T) {
	paths, err := WriteInput(t.TempDir(), 1<<20, "llama", "flash", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Options{Paths: paths, Threads: []int{0}}); err == nil {
		t.Error("0 threads accepted")
	}
	if _, err := Run(context.Background(), Options{Paths: []string{t.TempDir()}}); err == nil {
		t.Error("a directory without dumps accepted")
	}
}
