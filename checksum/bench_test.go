package checksum_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/bench"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
)

// benchShape is a layout shape the hot loops must handle at memory speed.
type benchShape struct {
	name string
	// cfg, for a synthesized dump; else view builds a cache in memory.
	cfg  synth.Config
	view func() (*layout.LayerView, []ckplan.Row)
	// stateOnly keeps the state caches of a synthesized hybrid.
	stateOnly bool
}

// benchBytes is about how much each shape reads: more than the last level
// cache of the machines we measure on.
const benchBytes = 96 << 20

func benchShapes() []benchShape {
	// llama: 8 heads of 128 bfloat16, 512-byte cells; mla: one 1152-byte
	// latent cell per token. Tokens are sized to about benchBytes.
	llama := func(lay string) synth.Config {
		return synth.Config{Preset: "llama", Layers: 4, Layout: lay, Requests: 6, Tokens: benchBytes / (4 * 8 * 512) / 6, Seed: 1}
	}
	shapes := []benchShape{
		{name: "flash-token-major-kv-apart", cfg: llama("flash")},
		{name: "nhd-token-major", cfg: llama("nhd")},
		{name: "hnd-head-major", cfg: llama("hnd")},
		{name: "packed-contiguous-cells", cfg: llama("packed")},
		{name: "packed-token-major", cfg: llama("packed-token-major")},
		{name: "mla-1152-byte-cells", cfg: synth.Config{Preset: "mla", Layers: 4, Layout: "flash", Requests: 6, Tokens: benchBytes / (4 * 1152) / 6, Seed: 1}},
		{name: "long-16KiB-cells", view: func() (*layout.LayerView, []ckplan.Row) {
			return memView(layout.CellView{KernelBlocks: 1, KernelTokens: 16, Heads: 2, CellBytes: 16 << 10,
				TokenStride: 16 << 10, HeadStride: 16 * 16 << 10, RowStride: 2 * 16 * 16 << 10,
				Runs: []layout.CellRun{{Offset: 0, Len: 16 << 10}}})
		}},
		{name: "state-rows-2-byte-channels-last", view: func() (*layout.LayerView, []ckplan.Row) {
			// A conv state [width 4, channels 4096] of bfloat16 split on
			// channels: a row's elements are 8192 bytes apart.
			runs := make([]layout.CellRun, 4)
			for k := range runs {
				runs[k] = layout.CellRun{Offset: int64(k) * 8192, Len: 2}
			}
			return memView(layout.CellView{KernelBlocks: 1, KernelTokens: 1, Heads: 4096, CellBytes: 8, PieceBytes: 2,
				HeadStride: 2, RowStride: 4 * 8192, Runs: runs})
		}},
	}
	// The state presets, each conv layout: their state caches only (a
	// request's one state block per layer), 8 layers, 512 requests.
	for _, preset := range []string{"mamba1", "mamba2-hybrid", "gdn-hybrid"} {
		for _, conv := range synth.ConvLayouts {
			shapes = append(shapes, benchShape{name: "state-" + preset + "-" + conv, stateOnly: true,
				cfg: synth.Config{Preset: preset, Layers: 8, ConvLayout: conv, Requests: 512, Tokens: 16, Seed: 1}})
		}
	}
	return shapes
}

// memView fills a cache of about benchBytes in memory with the view's
// geometry and returns it with one row per block.
func memView(v layout.CellView) (*layout.LayerView, []ckplan.Row) {
	blocks := max(int(benchBytes/v.RowStride), 1)
	v.Data = make([]byte, int64(blocks)*v.RowStride)
	for i := range v.Data {
		v.Data[i] = byte(i*131 + i>>9)
	}
	c := &layout.LayerView{Layer: &layout.Layer{Name: "model.layers.3.x"}, Number: 3, Heads: v.Heads, Pieces: v.Pieces(), Cells: v}
	rows := make([]ckplan.Row, blocks)
	tokens := v.KernelBlocks * v.KernelTokens
	for b := range rows {
		rows[b] = ckplan.Row{Block: b, FirstToken: int64(b * tokens), Valid: tokens, Out: b % 7}
	}
	return c, rows
}

// benchPlan returns the plans of a shape (opened under dir).
func benchPlan(b *testing.B, s benchShape, dir string) []*ckplan.Plan {
	b.Helper()
	if s.view != nil {
		c, rows := s.view()
		return []*ckplan.Plan{{Tasks: []ckplan.Task{{Cache: c, Rows: rows}}, Outputs: 7}}
	}
	paths, err := synth.Write(dir, s.cfg)
	if err != nil {
		b.Fatal(err)
	}
	var plans []*ckplan.Plan
	for _, p := range paths {
		d, err := layout.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		plan, _, err := checksum.NewPlan(d, nil)
		if err != nil {
			b.Fatal(err)
		}
		if s.stateOnly {
			plan.Tasks = slices.DeleteFunc(plan.Tasks, func(t ckplan.Task) bool { return !t.Cache.State })
		}
		plans = append(plans, plan)
	}
	return plans
}

// BenchmarkHotLoop measures, for every layout shape, the plain read of the
// bytes the checksum covers (read: a vectorised sum, the practical limit;
// read-scalar: the same sum in a scalar loop) and the fast engine over the
// same bytes, on one thread and on GOMAXPROCS; the ratio of their MB/s is
// the engine's efficiency. cpu+slopes is the fast engine giving both
// numberings in its one pass (ckplan.Plan.Slopes), cpu+mix both numberings and
// kvaudit's mix check (ckplan.Plan.Mix, docs/spec.md §14): what records hold.
func BenchmarkHotLoop(b *testing.B) {
	ctx := context.Background()
	for _, s := range benchShapes() {
		b.Run(s.name, func(b *testing.B) {
			dir, err := os.MkdirTemp("", "kvaudit-bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			plans := benchPlan(b, s, dir)
			work := bench.NewWork(plans, 0)
			outs := make([][]uint64, len(plans))
			slopePlans := make([]*ckplan.Plan, len(plans))
			mixPlans := make([]*ckplan.Plan, len(plans))
			for i, p := range plans {
				outs[i] = make([]uint64, 3*p.Outputs)
				q := *p
				q.Slopes = true
				slopePlans[i] = &q
				m := q
				m.Mix = true
				mixPlans[i] = &m
			}
			for _, threads := range []int{1, 0} {
				suffix := fmt.Sprintf("threads=%d", threads)
				if threads == 0 {
					suffix = "threads=max"
				}
				for _, r := range []struct {
					name string
					read func(context.Context, int) (uint64, error)
				}{{"read", work.Read}, {"read-scalar", work.ReadScalar}} {
					b.Run(r.name+"/"+suffix, func(b *testing.B) {
						b.SetBytes(work.Bytes)
						for b.Loop() {
							if _, err := r.read(ctx, threads); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
				for _, e := range []struct {
					name  string
					plans []*ckplan.Plan
				}{{"cpu", plans}, {"cpu+slopes", slopePlans}, {"cpu+mix", mixPlans}} {
					b.Run(e.name+"/"+suffix, func(b *testing.B) {
						b.SetBytes(work.Bytes)
						f := checksum.Fast{Threads: threads}
						for b.Loop() {
							for i, p := range e.plans {
								if err := f.Run(ctx, p, outs[i]); err != nil {
									b.Fatal(err)
								}
							}
						}
					})
				}
			}
		})
	}
}
