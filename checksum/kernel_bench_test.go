package checksum

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

// BenchmarkKernels times the SIMD kernels alone on a flash-shaped kernel
// row (128 runs of 256 bytes, 8 heads interleaved), in the first-level
// caches and over 64 MiB.
func BenchmarkKernels(b *testing.B) {
	if !simdAvailable {
		b.Skip("no SIMD kernel")
	}
	for _, size := range []int{32 << 10, 64 << 20} {
		data := make([]byte, size)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		const n, heads = 256, 8
		count := 128
		state := make([]uint64, 16*heads)
		consts := mixKernelConsts(64, n)
		var hsum [4]uint64
		b.Run(byteSize(size)+"/ab", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for off := 0; off+count*n <= size; off += count * n {
					accumSIMD(data, int64(off), n, n, count, 1, heads, state)
				}
			}
		})
		b.Run(byteSize(size)+"/ab+mix", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				for off := 0; off+count*n <= size; off += count * n {
					accumMixSIMD(data, int64(off), n, n, count, 1, heads, state, &consts, &hsum)
				}
			}
		})
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MiB"
	}
	return strconv.Itoa(n>>10) + "KiB"
}

// BenchmarkStateKernels times the state rows' path of the cpu engine alone
// (scratch.block of each block: the kernel a row shape takes and its
// totals, no scheduling and no files), with and without the mix check, on
// the row shapes of the state presets: one-word conv rows (6 bytes: three
// bfloat16), 64-byte ssm rows of float32 (mamba1) and 4 KiB rows, contiguous
// rows of 128 heads per block, about 256 KiB of rows in all (in the
// second-level cache).
func BenchmarkStateKernels(b *testing.B) {
	for _, shape := range []struct {
		name        string
		cell, piece int
	}{{"rows-6B", 6, 2}, {"rows-64B", 64, 4}, {"rows-4KiB", 4096, 4}} {
		const heads = 128
		blocks := max(1, (256<<10)/(heads*shape.cell))
		v := layout.CellView{KernelBlocks: 1, KernelTokens: 1, Heads: heads, CellBytes: shape.cell, PieceBytes: shape.piece,
			HeadStride: int64(shape.cell), RowStride: int64(heads * shape.cell), Runs: []layout.CellRun{{Offset: 0, Len: shape.cell}}}
		c := memCache(v, blocks, 1, 0, rand.New(rand.NewPCG(1, 2)))
		rows := make([]ckplan.Row, blocks)
		for i := range rows {
			rows[i] = ckplan.Row{Block: i, FirstToken: int64(i), Valid: 1}
		}
		for _, mix := range []bool{false, true} {
			name := shape.name + "/ab"
			if mix {
				name += "+mix"
			}
			b.Run(name, func(b *testing.B) {
				k := newWalk(c, 0)
				s := newScratch(heads)
				s.mixOn = mix
				b.SetBytes(int64(blocks * heads * shape.cell))
				for b.Loop() {
					for i := range rows {
						s.block(k, &rows[i])
					}
				}
			})
		}
	}
}
