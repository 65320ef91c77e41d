package checksum

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

// TestStateRowsRapid: random state views (one token per block, rows of
// 2- or 4-byte elements, short and odd-length rows, many rows, stored
// contiguous with a random row stride or split on the last axis, one run
// per element) with random rows and layer numbers, checksummed by every
// kernel and Fast variant (rows of one word in more than one call of
// its kernel too), with and without both numberings and the mix
// check, equal the reference bit for bit: the state rows' kernels weigh
// rows by their factors across rows, and that must be the definition.
func TestStateRowsRapid(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := rapid.SampledFrom([]int{2, 4}).Draw(rt, "width")
		E := rapid.OneOf(rapid.IntRange(1, 5), rapid.IntRange(6, 80), rapid.SampledFrom([]int{16, 64, 128, 256, 512})).Draw(rt, "elements")
		H := rapid.OneOf(rapid.IntRange(1, 9), rapid.IntRange(10, 140)).Draw(rt, "rows")
		blocks := rapid.IntRange(1, 3).Draw(rt, "blocks")
		C := E * w
		if C <= 8 && rapid.IntRange(0, 3).Draw(rt, "many rows") == 0 {
			// More than one call of the one-word rows' kernel.
			H = rapid.IntRange(4*maxWordGroups-3, 8*maxWordGroups+9).Draw(rt, "many rows")
		}
		v := layout.CellView{KernelBlocks: 1, KernelTokens: 1, Heads: H, CellBytes: C, PieceBytes: w}
		pad := int64(rapid.IntRange(0, 2).Draw(rt, "pad") * w)
		if rapid.Bool().Draw(rt, "split on the last axis") {
			gap := int64(H*w) + pad
			v.HeadStride = int64(w)
			v.Runs = make([]layout.CellRun, E)
			for e := range v.Runs {
				v.Runs[e] = layout.CellRun{Offset: pad + int64(e)*gap, Len: w}
			}
			v.RowStride = pad + int64(E)*gap
		} else {
			v.HeadStride = int64(C) + pad
			v.Runs = []layout.CellRun{{Offset: pad, Len: C}}
			v.RowStride = pad + int64(H)*v.HeadStride + int64(rapid.IntRange(0, 1).Draw(rt, "tail")*8)
		}
		c := memCache(v, blocks, rapid.SampledFrom([]int{0, 1, 7, 200, 1000, 40000}).Draw(rt, "layer"), rapid.IntRange(0, 300).Draw(rt, "base"), rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 3)))
		if rapid.Bool().Draw(rt, "tensor ends at the last row") {
			c.Cells.Data = c.Cells.Data[:len(c.Cells.Data)-64]
		}
		var rows []ckplan.Row
		for b := range blocks {
			rows = append(rows, ckplan.Row{Block: b, FirstToken: int64(rapid.IntRange(0, 1<<20).Draw(rt, "first token")), Valid: 1, Out: b % 2})
		}
		checkAgainstReference(rt, &ckplan.Plan{Outputs: 2, Tasks: []ckplan.Task{{Cache: c, Rows: rows}}}, fmt.Sprintf("w %d elements %d rows %d", w, E, H))
	})
}
