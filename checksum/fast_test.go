package checksum

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// kernels are the inner-loop variants a test runs Fast with: the SIMD
// kernel where this machine has one, and the generic loops always.
func kernels() []bool {
	if simdAvailable {
		return []bool{true, false}
	}
	return []bool{false}
}

// withSIMD runs fn with the SIMD kernel allowed or forced off.
func withSIMD(on bool, fn func()) {
	old := useSIMD
	useSIMD = on && simdAvailable
	defer func() { useSIMD = old }()
	fn()
}

func kernelName(simd bool) string {
	if simd {
		return "simd"
	}
	return "generic"
}

// fastVariants are the thread counts and chunk sizes Fast is checked at:
// one row per chunk, odd sizes, the default sizing.
var fastVariants = []Fast{
	{Threads: 1},
	{Threads: 1, ChunkBytes: 1},
	{Threads: 2, ChunkBytes: 1},
	{Threads: 3, ChunkBytes: 4097},
	{Threads: 2, ChunkBytes: 1 << 20},
	{},
}

// checkAgainstReference runs the reference and every Fast variant, with
// each kernel, on the plan and fails on the first difference: vLLM's
// checksum alone, and with the slopes and the mix check in the same pass.
func checkAgainstReference(t interface {
	Helper()
	Fatalf(string, ...any)
}, p *ckplan.Plan, what string) {
	t.Helper()
	for _, extra := range []bool{false, true} {
		q := *p
		q.Slopes, q.Mix = extra, extra
		if extra {
			// Every other call under a run key of its own (docs/spec.md
			// §14): the engines key each slice alike.
			if n := referenceCalls.Add(1); n%2 == 0 {
				q.MixKey = 0x5bd1e995<<32 ^ uint64(n)*MixGamma
			}
		}
		n := q.Outputs
		if extra {
			n = 3 * q.Outputs
		}
		want := make([]uint64, n)
		if err := (Reference{}).Run(context.Background(), &q, want); err != nil {
			t.Fatalf("%s: reference: %v", what, err)
		}
		for _, simd := range kernels() {
			for _, f := range fastVariants {
				got := make([]uint64, n)
				var err error
				withSIMD(simd, func() { err = f.Run(context.Background(), &q, got) })
				if err != nil {
					t.Fatalf("%s: fast %+v %s: %v", what, f, kernelName(simd), err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: fast %+v %s, slopes and mix %v:\n got %x\nwant %x", what, f, kernelName(simd), extra, got, want)
				}
			}
		}
	}
}

// referenceCalls counts checkAgainstReference's plans with the mix check.
var referenceCalls atomic.Uint64

// planDumps synthesizes cfg, opens every rank and returns its plans.
func planDumps(t testing.TB, cfg synth.Config) []*ckplan.Plan {
	t.Helper()
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var plans []*ckplan.Plan
	for _, path := range paths {
		d, err := layout.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		p, _, err := NewPlan(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	return plans
}

// TestFastMatchesReferenceDumps compares Fast (threads, chunk sizes, both
// kernels) with Reference on synthesized dumps of every preset, layout and
// file format (raw pads rows, so strides are not the contiguous ones), with
// kernel-block splits, one token, partial last blocks, block-size
// thresholds +-1, TP splits and a consumer's prefix hit (first token past
// 0). Plans hold several caches and rows of one output from every cache.
func TestFastMatchesReferenceDumps(t *testing.T) {
	type edge struct {
		name                 string
		tokens, bs, kbs, pre int
	}
	edges := []edge{
		{"one-token", 1, 16, 0, 0},
		{"block-minus-1", 15, 16, 0, 0},
		{"block", 16, 16, 0, 0},
		{"block-plus-1", 17, 16, 0, 0},
		{"kernel-split-partial", 37, 16, 4, 0},
		{"kernel-split-one", 33, 16, 1, 0},
		{"prefix-hit", 40, 16, 8, 17},
	}
	n := 0
	for _, preset := range synth.Presets {
		for _, lay := range synth.Layouts {
			for _, format := range synth.Formats {
				e := edges[n%len(edges)]
				n++
				cfg := synth.Config{Preset: preset, Layout: lay, Format: format, Layers: 2, TP: 1 + n%2,
					Tokens: e.tokens, BlockSize: e.bs, KernelBlockSize: e.kbs, Requests: 2, Seed: uint64(n)}
				if e.pre > 0 {
					cfg.Role, cfg.PrefixTokens = "consumer", e.pre
				}
				name := fmt.Sprintf("%s/%s/%s/%s", preset, lay, format, e.name)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					if _, err := cfg.Normalize(); err != nil {
						t.Skip(err)
					}
					for _, p := range planDumps(t, cfg) {
						checkAgainstReference(t, p, name)
					}
				})
			}
		}
	}
	for _, e := range edges {
		cfg := synth.Config{Preset: "llama", Layout: "flash", Layers: 2, Tokens: e.tokens, BlockSize: e.bs, KernelBlockSize: e.kbs, Requests: 3, Seed: 9}
		if e.pre > 0 {
			cfg.Role, cfg.PrefixTokens = "consumer", e.pre
		}
		t.Run("edges/"+e.name, func(t *testing.T) {
			t.Parallel()
			for _, p := range planDumps(t, cfg) {
				checkAgainstReference(t, p, e.name)
			}
		})
	}
}

// memCache returns a cache over fresh random bytes with the view's
// geometry (Data is set), holding blocks blocks, layer number layer and
// first global head base.
func memCache(v layout.CellView, blocks, layer, base int, rng *rand.Rand) *layout.LayerView {
	var size int64
	for kr := range v.KernelBlocks {
		for tok := range v.KernelTokens {
			for h := range v.Heads {
				for _, r := range v.Runs {
					size = max(size, v.Addr((blocks-1)*v.KernelBlocks+kr, tok, h)+r.Offset+int64(r.Len))
				}
			}
		}
	}
	v.Data = make([]byte, size+64)
	for i := range v.Data {
		v.Data[i] = byte(rng.Uint32())
	}
	return &layout.LayerView{
		Layer: &layout.Layer{Name: fmt.Sprintf("model.layers.%d.x", layer)}, Number: layer,
		Heads: v.Heads, HeadBase: base, Pieces: v.Pieces(), Cells: v,
	}
}

// handViews are cell geometries synth does not write: narrow pieces
// (state rows), runs that are not whole pieces (the gather path), runs out
// of logical order in memory, odd strides and padding.
func handViews() map[string]layout.CellView {
	return map[string]layout.CellView{
		// A conv state [4, 64] of bfloat16 split on its last axis: every
		// run is one 2-byte piece, heads adjacent.
		"state-2-byte-split-last": {KernelBlocks: 1, KernelTokens: 1, Heads: 64, CellBytes: 8, PieceBytes: 2,
			HeadStride: 2, RowStride: 4*128 + 6,
			Runs: []layout.CellRun{{Offset: 0, Len: 2}, {Offset: 128, Len: 2}, {Offset: 256, Len: 2}, {Offset: 384, Len: 2}}},
		// An ssm state row of 4-byte elements, rows contiguous.
		"state-4-byte-rows": {KernelBlocks: 1, KernelTokens: 1, Heads: 5, CellBytes: 96, PieceBytes: 4,
			HeadStride: 96, RowStride: 5*96 + 12, Runs: []layout.CellRun{{Offset: 0, Len: 96}}},
		// 4-byte pieces in runs of 12 bytes: three pieces each, odd stride.
		"state-4-byte-strided": {KernelBlocks: 1, KernelTokens: 1, Heads: 3, CellBytes: 24, PieceBytes: 4,
			HeadStride: 12, RowStride: 100, Runs: []layout.CellRun{{Offset: 0, Len: 12}, {Offset: 40, Len: 12}}},
		// bfloat16 elements with a dim stride of 3 elements: every run is
		// 2 bytes, a piece straddles four runs.
		"gather-2-byte-runs": {KernelBlocks: 2, KernelTokens: 3, Heads: 2, CellBytes: 16,
			TokenStride: 2 * 48, HeadStride: 48, RowStride: 3*2*48 + 10,
			Runs: runsAt(2, 0, 6, 12, 18, 24, 30, 36, 42)},
		// Runs of 6 and 10 bytes: pieces straddle runs, runs start
		// mid-piece.
		"gather-6-10": {KernelBlocks: 1, KernelTokens: 4, Heads: 3, CellBytes: 16,
			TokenStride: 3 * 24, HeadStride: 24, RowStride: 4*3*24 + 8,
			Runs: []layout.CellRun{{Offset: 10, Len: 6}, {Offset: 0, Len: 10}}},
		// K and V far apart (flash), V first in memory, 256-byte runs
		// (SIMD-sized) and a partial kernel row.
		"kv-apart-v-first": {KernelBlocks: 2, KernelTokens: 4, Heads: 3, CellBytes: 512,
			TokenStride: 3 * 256, HeadStride: 256, RowStride: 4*3*256 + 64,
			Runs: []layout.CellRun{{Offset: 1 << 19, Len: 256}, {Offset: 0, Len: 256}}},
		// Head-major (hnd) with 96-byte runs: a multiple of 32, not of 64.
		"head-major-96": {KernelBlocks: 1, KernelTokens: 5, Heads: 2, CellBytes: 192,
			TokenStride: 96, HeadStride: 5 * 96, RowStride: 2*2*5*96 + 32,
			Runs: []layout.CellRun{{Offset: 0, Len: 96}, {Offset: 2 * 5 * 96, Len: 96}}},
		// Packed cells: a head's tokens are one stretch (the stripe path),
		// 1152-byte cells like MLA's.
		"packed-1152": {KernelBlocks: 1, KernelTokens: 3, Heads: 2, CellBytes: 1152,
			TokenStride: 1152, HeadStride: 3*1152 + 64, RowStride: 2*(3*1152+64) + 8,
			Runs: []layout.CellRun{{Offset: 0, Len: 1152}}},
		// Runs interleaved with other cells' runs (runs innermost).
		"interleaved": {KernelBlocks: 1, KernelTokens: 2, Heads: 2, CellBytes: 16,
			TokenStride: 8, HeadStride: 32, RowStride: 64,
			Runs: []layout.CellRun{{Offset: 0, Len: 8}, {Offset: 16, Len: 8}}},
		// 40-byte runs: long enough for 32-byte steps plus a tail the
		// SIMD kernel does not take.
		"runs-40": {KernelBlocks: 1, KernelTokens: 2, Heads: 4, CellBytes: 80,
			TokenStride: 4 * 40, HeadStride: 40, RowStride: 2*4*40*2 + 16,
			Runs: []layout.CellRun{{Offset: 0, Len: 40}, {Offset: 2 * 4 * 40, Len: 40}}},
	}
}

// TestFastMatchesReferenceHandViews runs the hand-built geometries with
// repeated blocks, several caches in one plan and outputs shared across
// caches and rows.
func TestFastMatchesReferenceHandViews(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range handViews() {
			if !yield(k) {
				return
			}
		}
	})
	views := handViews()
	var all []ckplan.Task
	for i, name := range names {
		v := views[name]
		blocks := 6
		if err := checkView(&v, blocks); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := memCache(v, blocks, i+1, 3*i, rng)
		tokens := v.KernelBlocks * v.KernelTokens
		var rows []ckplan.Row
		for b := range blocks {
			for _, valid := range []int{tokens, max(tokens-1, 1), 1} {
				rows = append(rows, ckplan.Row{Block: (b * 5) % blocks, FirstToken: int64(b*tokens + valid), Valid: valid, Out: (b + valid) % 4})
			}
		}
		task := ckplan.Task{Cache: c, Rows: rows}
		all = append(all, task)
		t.Run(name, func(t *testing.T) {
			checkAgainstReference(t, &ckplan.Plan{Tasks: []ckplan.Task{task}, Outputs: 4}, name)
		})
	}
	t.Run("all-in-one-plan", func(t *testing.T) {
		checkAgainstReference(t, &ckplan.Plan{Tasks: all, Outputs: 4}, "all")
	})
}

// checkView checks that no byte belongs to two cells of a view's first
// blocks blocks, and that the runs hold the cell.
func checkView(v *layout.CellView, blocks int) error {
	seen := map[int64]bool{}
	for kr := range blocks * v.KernelBlocks {
		for tok := range v.KernelTokens {
			for h := range v.Heads {
				for _, r := range v.Runs {
					for i := range int64(r.Len) {
						a := v.Addr(kr, tok, h) + r.Offset + i
						if seen[a] {
							return fmt.Errorf("byte %d belongs to two cells", a)
						}
						seen[a] = true
					}
				}
			}
		}
	}
	n := 0
	for _, r := range v.Runs {
		n += r.Len
	}
	if n != v.CellBytes {
		return fmt.Errorf("runs hold %d bytes, cells %d", n, v.CellBytes)
	}
	return nil
}

// TestFastEmpty: plans without rows or tasks leave out alone.
func TestFastEmpty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c := memCache(handViews()["packed-1152"], 2, 1, 0, rng)
	for _, p := range []*ckplan.Plan{
		{Outputs: 2},
		{Outputs: 2, Tasks: []ckplan.Task{{Cache: c}}},
		{Outputs: 2, Tasks: []ckplan.Task{{Cache: c}, {Cache: c, Rows: []ckplan.Row{{Block: 1, Valid: 1, Out: 1}}}, {Cache: c}}},
	} {
		checkAgainstReference(t, p, fmt.Sprintf("%d tasks", len(p.Tasks)))
	}
}

// genView draws a random valid geometry: piece width 2, 4 or 8, cells of
// random runs (whole pieces or not) placed in one of four ways: each
// cell's runs together in some order with gaps; each run's cells in a
// region of their own (K/V apart); one piece per run with heads adjacent
// (row-split states); or head-major stripes.
func genView(t *rapid.T) layout.CellView {
	w := rapid.SampledFrom([]int{2, 4, 8}).Draw(t, "width")
	pieces := rapid.IntRange(1, 40).Draw(t, "pieces")
	if w == 8 {
		pieces = rapid.SampledFrom([]int{1, 2, 3, 4, 8, 16, 32, 36, 40}).Draw(t, "pieces8")
	}
	C := pieces * w
	v := layout.CellView{
		KernelBlocks: rapid.IntRange(1, 3).Draw(t, "kernel blocks"),
		KernelTokens: rapid.IntRange(1, 5).Draw(t, "kernel tokens"),
		Heads:        rapid.IntRange(1, 5).Draw(t, "heads"),
		CellBytes:    C,
	}
	if w != 8 {
		v.PieceBytes = w
	}
	// Logical runs: cut the cell at random byte offsets.
	var cuts []int
	if rapid.Bool().Draw(t, "whole pieces") {
		for p := 1; p < pieces; p++ {
			if rapid.IntRange(0, 3).Draw(t, "cut") == 0 {
				cuts = append(cuts, p*w)
			}
		}
	} else {
		for b := 1; b < C; b++ {
			if rapid.IntRange(0, 7).Draw(t, "cut") == 0 {
				cuts = append(cuts, b)
			}
		}
	}
	lens := []int{}
	prev := 0
	for _, c := range append(cuts, C) {
		lens = append(lens, c-prev)
		prev = c
	}
	pad := int64(rapid.IntRange(0, 3).Draw(t, "pad") * 8)
	H, KT := int64(v.Heads), int64(v.KernelTokens)
	mode := rapid.IntRange(0, 3).Draw(t, "placement")
	if mode == 2 && (lens[0] != w || !sameLen(lens)) {
		mode = 0
	}
	switch mode {
	case 0: // cells whole, runs in a random order with gaps
		order := rapid.Permutation(indices(len(lens))).Draw(t, "run order")
		var off int64
		v.Runs = make([]layout.CellRun, len(lens))
		for _, i := range order {
			off += int64(rapid.IntRange(0, 1).Draw(t, "gap") * 2)
			v.Runs[i] = layout.CellRun{Offset: off, Len: lens[i]}
			off += int64(lens[i])
		}
		cell := off + pad
		if rapid.Bool().Draw(t, "token major") {
			v.HeadStride, v.TokenStride = cell, H*cell+pad
			v.RowStride = KT*v.TokenStride + pad
		} else {
			v.TokenStride, v.HeadStride = cell, KT*cell+pad
			v.RowStride = H*v.HeadStride + pad
		}
	case 1, 3: // runs apart: each run's cells in a region of their own
		unit := int64(slices.Max(lens)) + pad
		tokenMajor := mode == 1
		if tokenMajor {
			v.HeadStride, v.TokenStride = unit, H*unit+pad
		} else {
			v.TokenStride, v.HeadStride = unit, KT*unit+pad
		}
		region := KT*v.TokenStride + H*v.HeadStride + pad
		order := rapid.Permutation(indices(len(lens))).Draw(t, "region order")
		v.Runs = make([]layout.CellRun, len(lens))
		for k, i := range order {
			v.Runs[i] = layout.CellRun{Offset: int64(k) * region, Len: lens[i]}
		}
		v.RowStride = int64(len(lens))*region + pad
	case 2: // one piece per run, heads adjacent
		v.HeadStride = int64(w)
		region := H*int64(w) + pad
		v.Runs = make([]layout.CellRun, len(lens))
		for i := range lens {
			v.Runs[i] = layout.CellRun{Offset: int64(i) * region, Len: w}
		}
		v.TokenStride = int64(len(lens)) * region
		v.RowStride = KT*v.TokenStride + pad
	}
	return v
}

// runsAt returns runs of n bytes at the given offsets.
func runsAt(n int, offsets ...int64) []layout.CellRun {
	rs := make([]layout.CellRun, len(offsets))
	for i, o := range offsets {
		rs[i] = layout.CellRun{Offset: o, Len: n}
	}
	return rs
}

func sameLen(lens []int) bool {
	for _, l := range lens {
		if l != lens[0] {
			return false
		}
	}
	return true
}

func indices(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// TestFastMatchesReferenceRapid: on random geometries, random rows
// (repeated blocks, any first token, partial blocks), random outputs shared
// between rows and caches, and random thread counts and chunk sizes, Fast
// with either kernel equals Reference bit for bit.
func TestFastMatchesReferenceRapid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))
		caches := rapid.IntRange(1, 3).Draw(t, "caches")
		outputs := rapid.IntRange(1, 4).Draw(t, "outputs")
		p := &ckplan.Plan{Outputs: outputs, Mix: true, MixKey: rapid.SampledFrom([]uint64{PublishedMixKey, rapid.Uint64().Draw(t, "key")}).Draw(t, "mix key")}
		for ci := range caches {
			v := genView(t)
			blocks := rapid.IntRange(1, 4).Draw(t, "blocks")
			if err := checkView(&v, blocks); err != nil {
				t.Fatalf("generated view: %v", err)
			}
			c := memCache(v, blocks, rapid.IntRange(0, 200).Draw(t, "layer"), ci*7, rng)
			tokens := v.KernelBlocks * v.KernelTokens
			n := rapid.IntRange(0, 6).Draw(t, "rows")
			rows := make([]ckplan.Row, n)
			for i := range rows {
				rows[i] = ckplan.Row{
					Block:      rapid.IntRange(0, blocks-1).Draw(t, "block"),
					FirstToken: int64(rapid.IntRange(0, 1<<20).Draw(t, "first token")),
					Valid:      rapid.IntRange(1, tokens).Draw(t, "valid"),
					Out:        rapid.IntRange(0, outputs-1).Draw(t, "out"),
				}
			}
			p.Tasks = append(p.Tasks, ckplan.Task{Cache: c, Rows: rows})
		}
		want := make([]uint64, 3*outputs)
		if err := (Reference{}).Run(context.Background(), p, want); err != nil {
			t.Fatal(err)
		}
		f := Fast{Threads: rapid.IntRange(1, 4).Draw(t, "threads"), ChunkBytes: int64(rapid.IntRange(0, 5000).Draw(t, "chunk"))}
		simd := rapid.Bool().Draw(t, "simd")
		got := make([]uint64, 3*outputs)
		var err error
		withSIMD(simd, func() { err = f.Run(context.Background(), p, got) })
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("fast %+v %s, mix key %#x:\n got %x\nwant %x", f, kernelName(simd), p.MixKey, got, want)
		}
	})
}

// TestFastBlockAllocs: checksumming a block allocates nothing, on every
// walk and with each kernel.
func TestFastBlockAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for name, v := range handViews() {
		c := memCache(v, 3, 1, 0, rng)
		for _, simd := range kernels() {
			withSIMD(simd, func() {
				k := newWalk(c, 0)
				s := newScratch(v.Heads)
				row := ckplan.Row{Block: 2, FirstToken: 5, Valid: v.KernelBlocks * v.KernelTokens}
				if n := testing.AllocsPerRun(100, func() { s.block(k, &row) }); n != 0 {
					t.Errorf("%s %s: %v allocations per block, want 0", name, kernelName(simd), n)
				}
			})
		}
	}
}

// TestFastRunAllocsIndependentOfBlocks: a run's allocations (per task and
// per thread) do not grow with the number of blocks.
func TestFastRunAllocsIndependentOfBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	v := handViews()["kv-apart-v-first"]
	c := memCache(v, 64, 1, 0, rng)
	plan := func(rows int) *ckplan.Plan {
		rs := make([]ckplan.Row, rows)
		for i := range rs {
			rs[i] = ckplan.Row{Block: (i * 7) % 64, FirstToken: int64(i), Valid: 8, Out: i % 3}
		}
		return &ckplan.Plan{Outputs: 3, Tasks: []ckplan.Task{{Cache: c, Rows: rs}}}
	}
	out := make([]uint64, 3)
	f := Fast{Threads: 1, ChunkBytes: 1}
	allocs := func(rows int) float64 {
		p := plan(rows)
		return testing.AllocsPerRun(20, func() { f.Run(context.Background(), p, out) })
	}
	few, many := allocs(4), allocs(4000)
	if many != few {
		t.Errorf("a run of 4000 blocks allocates %v times, one of 4 blocks %v: allocations grow with the blocks", many, few)
	}
}

// TestFastProgress: the progress callback receives exactly the plan's
// bytes, from any number of threads.
func TestFastProgress(t *testing.T) {
	for _, p := range planDumps(t, synth.Config{Preset: "indexer", Layers: 2, Tokens: 45, Requests: 3}) {
		var got atomic.Int64
		p.Progress = func(n int64) { got.Add(n) }
		out := make([]uint64, p.Outputs)
		if err := (Fast{Threads: 3, ChunkBytes: 5000}).Run(context.Background(), p, out); err != nil {
			t.Fatal(err)
		}
		if got.Load() != p.Bytes() {
			t.Errorf("progress reported %d bytes, the plan reads %d", got.Load(), p.Bytes())
		}
	}
}

// TestFastWorkerPanicIsInternalError: a panic in a worker goroutine (a
// bug) ends the run with an "internal error", never the process (Go exits
// 2 on an unrecovered panic, and 2 means "unverified").
func TestFastWorkerPanicIsInternalError(t *testing.T) {
	for _, p := range planDumps(t, synth.Config{Preset: "tiny"}) {
		// The plan's progress callback runs on the workers, after each
		// chunk: a panic there is one in a worker.
		p.Progress = func(int64) { panic("boom") }
		err := (Fast{Threads: 2}).Run(context.Background(), p, make([]uint64, p.Outputs))
		var ie *InternalError
		if !errors.As(err, &ie) || ie.Panic != "boom" || !strings.HasPrefix(err.Error(), "internal error: checksum worker: boom\n") {
			t.Errorf("got %v, want an *InternalError naming the panic", err)
		}
	}
}

// TestFastCanceled: a canceled context stops the run with its error.
func TestFastCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, p := range planDumps(t, synth.Config{Preset: "tiny"}) {
		if err := (Fast{}).Run(ctx, p, make([]uint64, p.Outputs)); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	}
}

// TestFastFaultIsError: a dump truncated while mapped makes either kernel
// return a *layout.FaultError naming the file instead of crashing.
func TestFastFaultIsError(t *testing.T) {
	for _, simd := range kernels() {
		for _, lay := range []string{"flash", "packed"} {
			paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layers: 2, Layout: lay, Tokens: 200})
			if err != nil {
				t.Fatal(err)
			}
			d, err := layout.Open(paths[0])
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := NewPlan(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(paths[0], 4096); err != nil {
				t.Fatal(err)
			}
			withSIMD(simd, func() { err = (Fast{Threads: 2}).Run(context.Background(), p, make([]uint64, p.Outputs)) })
			d.Close()
			var fe *layout.FaultError
			if !errors.As(err, &fe) || fe.What != paths[0] {
				t.Errorf("%s %s: got %v, want a fault error naming %s", lay, kernelName(simd), err, paths[0])
			}
		}
	}
}

// TestBlockOrder: rows are visited in block order, ties in plan order.
func TestBlockOrder(t *testing.T) {
	rows := []ckplan.Row{{Block: 5}, {Block: 1}, {Block: 5}, {Block: 0}, {Block: 1}}
	if got, want := blockOrder(rows), []int32{3, 1, 4, 0, 2}; !slices.Equal(got, want) {
		t.Errorf("blockOrder = %v, want %v", got, want)
	}
}
