// Package kerneltest holds the cases that the GPU engine and its Go model
// are tested on: hand-built cache geometries with odd shapes, random ones,
// and the synth configurations of every preset, layout, TP, kernel-block
// split and format. Tests of package kernels (model) and of the
// kvaudit-cuda runner (device, built with -tags cuda) share them.
package kerneltest

import (
	"fmt"
	"math/rand/v2"

	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// Geometry describes a hand-built cache: cells of the given runs (in
// logical order, offsets from the cell's address), laid out token-major or
// head-major with gaps, in Blocks blocks of KernelBlocks kernel rows.
type Geometry struct {
	Name         string
	Heads        int
	KernelBlocks int
	KernelTokens int
	Width        int // piece bytes: 8 (0 means 8), or 2 or 4
	Runs         []layout.CellRun
	HeadMajor    bool  // heads outer, tokens inner within a kernel row
	CellGap      int64 // bytes after each cell
	RowGap       int64 // bytes after each kernel row
	Base         int   // bytes before the tensor in its buffer (misaligns it)
	Blocks       int
	Number       int // layer number
	HeadBase     int
}

// Contiguous returns one run of p pieces of w bytes.
func Contiguous(p, w int) []layout.CellRun { return []layout.CellRun{{Offset: 0, Len: p * w}} }

// Build returns the cache filled with random bytes from seed.
func (g Geometry) Build(seed uint64) *layout.LayerView {
	w := g.Width
	if w == 0 {
		w = 8
	}
	var cellBytes int
	var foot int64
	for _, r := range g.Runs {
		cellBytes += r.Len
		foot = max(foot, r.Offset+int64(r.Len))
	}
	inner := foot + g.CellGap
	v := layout.CellView{
		KernelBlocks: g.KernelBlocks, KernelTokens: g.KernelTokens, Heads: g.Heads,
		CellBytes: cellBytes, Runs: g.Runs, File: "memory:" + g.Name,
	}
	if w != 8 {
		v.PieceBytes = w
	}
	var rowBytes int64
	if g.HeadMajor {
		v.TokenStride = inner
		v.HeadStride = int64(g.KernelTokens)*inner + g.CellGap
		rowBytes = int64(g.Heads) * v.HeadStride
	} else {
		v.HeadStride = inner
		v.TokenStride = int64(g.Heads)*inner + g.CellGap
		rowBytes = int64(g.KernelTokens) * v.TokenStride
	}
	v.RowStride = rowBytes + g.RowGap
	size := int64(g.Base) + int64(g.Blocks*g.KernelBlocks)*v.RowStride + 16
	buf := make([]byte, size)
	rng := rand.New(rand.NewPCG(seed, 0x6b76))
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	v.Data = buf[g.Base:]
	v.FileOffset = int64(g.Base)
	name := fmt.Sprintf("model.layers.%d.%s", g.Number, g.Name)
	return &layout.LayerView{
		Layer:  &layout.Layer{Name: name},
		Number: g.Number, Heads: g.Heads, HeadBase: g.HeadBase,
		GlobalHeads: g.HeadBase + g.Heads, Replicas: 1,
		Pieces: cellBytes / w, Cells: v,
	}
}

// Case is a cache and the rows to checksum in it.
type Case struct {
	Name    string
	Cache   *layout.LayerView
	Rows    []ckplan.Row
	Outputs int
}

// Plan returns the case as a one-task plan.
func (c Case) Plan() *ckplan.Plan {
	return &ckplan.Plan{
		Dump:    &layout.Dump{Path: "memory:" + c.Name},
		Tasks:   []ckplan.Task{{Cache: c.Cache, Rows: c.Rows}},
		Outputs: c.Outputs,
	}
}

// Reference returns the case's outputs computed by checksum.ReferenceBlock.
func (c Case) Reference() []uint64 {
	out := make([]uint64, c.Outputs)
	for _, r := range c.Rows {
		out[r.Out] += checksum.ReferenceBlock(c.Cache, r)
	}
	return out
}

// rows returns every block once, with valid token counts cycling through
// 1 .. S and outputs shared by pairs of rows.
func rows(g Geometry, firstToken int64) []ckplan.Row {
	S := g.KernelBlocks * g.KernelTokens
	var rs []ckplan.Row
	for b := range g.Blocks {
		valid := S - (b*5)%S // S, then partial blocks
		rs = append(rs, ckplan.Row{Block: (b * 7) % g.Blocks, FirstToken: firstToken + int64(b*S), Valid: valid, Out: b / 2})
	}
	return rs
}

// OddCases returns hand-built caches whose geometry exercises each corner
// of the kernel's decomposition; the comment of each says which.
func OddCases() []Case {
	geos := []Geometry{
		// Partial blocks, kernel-block split, token-major, 16-byte loads.
		{Name: "partial", Heads: 2, KernelBlocks: 2, KernelTokens: 4, Runs: Contiguous(8, 8), Blocks: 6, Number: 3, HeadBase: 4},
		// 7 heads of 150 pieces: 525 lanes of pairs, 2 tiles of 263
		// lanes (not a power of two), 288 threads.
		{Name: "tiles", Heads: 7, KernelBlocks: 1, KernelTokens: 3, Runs: Contiguous(150, 8), Blocks: 3, Number: 1},
		// 150 tokens per block in 3 kernel rows of 50 and 256 lanes: 5
		// chunks per row; rows span several chunks and kernel rows.
		{Name: "chunks", Heads: 4, KernelBlocks: 3, KernelTokens: 50, Runs: Contiguous(128, 8), Blocks: 3, Number: 2, HeadBase: 8},
		// 64 lanes, 3-token kernel rows, 12-token blocks: 8 token lanes,
		// so each step crosses 2 kernel rows and 2 tokens, and wraps.
		{Name: "wrap", Heads: 2, KernelBlocks: 4, KernelTokens: 3, Runs: Contiguous(64, 8), HeadMajor: true, Blocks: 4, Number: 5},
		// K and V apart (V first in memory), head-major, gaps.
		{Name: "kv-apart", Heads: 3, KernelBlocks: 2, KernelTokens: 5, Runs: []layout.CellRun{{Offset: 256, Len: 64}, {Offset: 0, Len: 64}}, HeadMajor: true, CellGap: 16, RowGap: 48, Blocks: 4, Number: 7},
		// An odd number of pieces: no pairs, 8-byte loads.
		{Name: "odd-pieces", Heads: 3, KernelBlocks: 1, KernelTokens: 7, Runs: Contiguous(9, 8), Blocks: 5, Number: 9},
		// State rows: 2- and 4-byte elements, zero-extended.
		{Name: "narrow2", Heads: 5, KernelBlocks: 1, KernelTokens: 1, Width: 2, Runs: Contiguous(24, 2), Blocks: 4, Number: 11},
		{Name: "narrow4", Heads: 3, KernelBlocks: 2, KernelTokens: 3, Width: 4, Runs: Contiguous(10, 4), CellGap: 4, Blocks: 4, Number: 12},
		// Runs that are not whole pieces: pieces straddle runs (gather).
		{Name: "straddle", Heads: 2, KernelBlocks: 1, KernelTokens: 6, Runs: []layout.CellRun{{Offset: 0, Len: 6}, {Offset: 40, Len: 10}, {Offset: 20, Len: 8}}, Blocks: 4, Number: 13},
		// A tensor 4 bytes off alignment: gather in place, pairs staged.
		{Name: "misaligned", Heads: 2, KernelBlocks: 1, KernelTokens: 4, Runs: Contiguous(4, 8), Base: 4, Blocks: 4, Number: 14},
		// One head, one piece, one token (the smallest cell).
		{Name: "one", Heads: 1, KernelBlocks: 1, KernelTokens: 1, Runs: Contiguous(1, 8), Blocks: 3, Number: 0},
		// Many lanes and tokens: 20 heads of 72 pieces in scalar mode is
		// 1440 lanes, 3 tiles of 480.
		{Name: "wide", Heads: 20, KernelBlocks: 1, KernelTokens: 17, Runs: Contiguous(72, 8), Blocks: 2, Number: 15, HeadBase: 20},
	}
	var cs []Case
	for i, g := range geos {
		c := Case{Name: g.Name, Cache: g.Build(uint64(i + 1)), Rows: rows(g, int64(i)*1000)}
		c.Outputs = c.Rows[len(c.Rows)-1].Out + 1
		cs = append(cs, c)
	}
	return cs
}

// Random draws a cache geometry and rows.
func Random(t *rapid.T) Case {
	w := rapid.SampledFrom([]int{8, 8, 8, 4, 2}).Draw(t, "width")
	pieces := rapid.IntRange(1, 40).Draw(t, "pieces")
	cellBytes := pieces * w
	// Cut the cell into runs, at piece boundaries or anywhere.
	anywhere := rapid.IntRange(0, 3).Draw(t, "cut_anywhere") == 0
	nruns := rapid.IntRange(1, min(4, cellBytes)).Draw(t, "runs")
	cuts := map[int]bool{}
	for range nruns - 1 {
		unit := w
		if anywhere {
			unit = 1
		}
		if cellBytes/unit > 1 {
			cuts[rapid.IntRange(1, cellBytes/unit-1).Draw(t, "cut")*unit] = true
		}
	}
	var runs []layout.CellRun
	last := 0
	for b := 1; b <= cellBytes; b++ {
		if b == cellBytes || cuts[b] {
			runs = append(runs, layout.CellRun{Len: b - last})
			last = b
		}
	}
	// Place the runs in a random physical order with gaps.
	order := rapid.Permutation(intsTo(len(runs))).Draw(t, "order")
	var at int64
	for _, i := range order {
		at += int64(rapid.IntRange(0, 2).Draw(t, "gap") * w)
		runs[i].Offset = at
		at += int64(runs[i].Len)
	}
	g := Geometry{
		Name:         "random",
		Heads:        rapid.IntRange(1, 24).Draw(t, "heads"),
		KernelBlocks: rapid.IntRange(1, 4).Draw(t, "kernel_blocks"),
		KernelTokens: rapid.IntRange(1, 24).Draw(t, "kernel_tokens"),
		Width:        w,
		Runs:         runs,
		HeadMajor:    rapid.Bool().Draw(t, "head_major"),
		CellGap:      int64(rapid.IntRange(0, 3).Draw(t, "cell_gap") * w),
		RowGap:       int64(rapid.IntRange(0, 3).Draw(t, "row_gap") * 8),
		Base:         rapid.IntRange(0, 15).Draw(t, "base"),
		Blocks:       rapid.IntRange(1, 5).Draw(t, "blocks"),
		Number:       rapid.IntRange(0, 200).Draw(t, "layer"),
	}
	g.HeadBase = rapid.IntRange(0, 3).Draw(t, "head_shard") * g.Heads
	S := g.KernelBlocks * g.KernelTokens
	c := Case{Name: "random", Cache: g.Build(rapid.Uint64().Draw(t, "seed"))}
	nrows := rapid.IntRange(1, 8).Draw(t, "rows")
	for range nrows {
		r := ckplan.Row{
			Block:      rapid.IntRange(0, g.Blocks-1).Draw(t, "block"),
			FirstToken: int64(rapid.IntRange(0, 1<<20).Draw(t, "first_token")),
			Valid:      rapid.IntRange(1, S).Draw(t, "valid"),
			Out:        rapid.IntRange(0, 3).Draw(t, "out"),
		}
		c.Rows = append(c.Rows, r)
		c.Outputs = max(c.Outputs, r.Out+1)
	}
	return c
}

func intsTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// SynthConfigs returns synth configurations covering every preset and
// layout at TP 1, 2 and 4, every format (rotating), a kernel-block split
// of half the block size at TP 2, PP 2 at TP 4, and partial last blocks.
func SynthConfigs() []synth.Config {
	var cs []synth.Config
	i := 0
	for _, preset := range synth.Presets {
		for _, lay := range synth.Layouts {
			for _, tp := range []int{1, 2, 4} {
				cfg := synth.Config{Preset: preset, Layout: lay, TP: tp, Seed: uint64(11 + i), Format: synth.Formats[i%len(synth.Formats)]}
				i++
				switch tp {
				case 2:
					n, _ := cfg.Normalize()
					if n.BlockSize%2 == 0 {
						cfg.KernelBlockSize = n.BlockSize / 2
					}
				case 4:
					cfg.PP = 2
				}
				cs = append(cs, cfg)
			}
		}
	}
	return cs
}

// Name returns a short name of a synth configuration for subtests.
func Name(c synth.Config) string {
	n := fmt.Sprintf("%s/%s/tp%d/%s", c.Preset, c.Layout, c.TP, c.Format)
	if c.KernelBlockSize != 0 {
		n += fmt.Sprintf("/kb%d", c.KernelBlockSize)
	}
	if c.PP > 1 {
		n += fmt.Sprintf("/pp%d", c.PP)
	}
	return n
}
