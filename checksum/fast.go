package checksum

import (
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kvaudit/kvaudit/layout"
)

// Fast is the CPU engine: parallel over (cache, block range), walking each
// kernel block in memory order and forming the sums of SPEC section 1 with
// the addition-only A/B decomposition. It allocates nothing per block.
type Fast struct {
	// Threads is the number of goroutines; 0 means GOMAXPROCS.
	Threads int
	// ChunkBytes is the work of one unit handed to a goroutine; 0 means
	// 4 MiB.
	ChunkBytes int64
}

// Name returns "cpu".
func (Fast) Name() string { return "cpu" }

type chunk struct {
	task       int
	begin, end int
}

// chunks splits the plan's tasks into row ranges of about size bytes.
func chunks(p *Plan, size int64) []chunk {
	var cs []chunk
	for ti, t := range p.Tasks {
		per := max(t.Cache.Cells.BlockBytes(), 1)
		rows := int(max(size/per, 1))
		for b := 0; b < len(t.Rows); b += rows {
			cs = append(cs, chunk{ti, b, min(b+rows, len(t.Rows))})
		}
	}
	return cs
}

// Run implements Engine.
func (f Fast) Run(ctx context.Context, p *Plan, out []uint64) error {
	if err := deviceCheck("cpu", p); err != nil {
		return err
	}
	threads := f.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	size := f.ChunkBytes
	if size <= 0 {
		size = 4 << 20
	}
	cs := chunks(p, size)
	threads = min(threads, len(cs))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, threads)
	for w := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s scratch
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cs) || ctx.Err() != nil {
					return
				}
				c := cs[i]
				task := &p.Tasks[c.task]
				err := layout.Guard(task.Cache.Cells.File, func() error {
					var done int64
					for _, row := range task.Rows[c.begin:c.end] {
						atomic.AddUint64(&out[row.Out], s.block(task.Cache, row))
						done += int64(row.Valid*task.Cache.Heads) * int64(task.Cache.Cells.CellBytes)
					}
					if p.Progress != nil {
						p.Progress(done)
					}
					return nil
				})
				if err != nil {
					errs[w] = err
					next.Store(int64(len(cs))) // stop the others
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// scratch is one goroutine's reusable state: per-head sums and a buffer to
// assemble cells whose pieces straddle runs.
type scratch struct {
	s    []uint64
	cell []byte
}

// block returns one cache's part of a block checksum, as ReferenceBlock.
func (w *scratch) block(c *layout.LayerView, row Row) uint64 {
	v := &c.Cells
	H := c.Heads
	if cap(w.s) < H {
		w.s = make([]uint64, H)
	}
	s := w.s[:H]
	clear(s)
	P := uint64(c.Pieces)
	data := v.Data
	w8 := v.Width()
	sum := sumAB
	if w8 != 8 {
		sum = narrowSum(w8)
	}
	contiguous := v.Contiguous()
	// One run per head per kernel block when a head's tokens are adjacent
	// whole cells: their pieces are consecutive in memory and in j.
	merged := len(v.Runs) == 1 && v.Runs[0].Len == v.CellBytes && v.TokenStride == int64(v.CellBytes)
	headInner := v.HeadStride < v.TokenStride
	for kr := 0; kr < v.KernelBlocks; kr++ {
		t0 := kr * v.KernelTokens
		n := min(v.KernelTokens, row.Valid-t0)
		if n <= 0 {
			break
		}
		base := int64(row.Block*v.KernelBlocks+kr) * v.RowStride
		first := uint64(row.FirstToken) + uint64(t0) // request position of token 0 of the kernel block
		switch {
		case merged:
			off := base + v.Runs[0].Offset
			length := int64(n) * int64(v.CellBytes)
			for h := range H {
				a := off + int64(h)*v.HeadStride
				A, B := sum(data[a : a+length])
				s[h] += (2*first*P+1)*A + 2*B
			}
		case contiguous:
			var pieceOff uint64
			for _, r := range v.Runs {
				L := int64(r.Len)
				if headInner {
					for t := range n {
						j0 := (first+uint64(t))*P + pieceOff
						a := base + int64(t)*v.TokenStride + r.Offset
						for h := range H {
							A, B := sum(data[a : a+L])
							s[h] += (2*j0+1)*A + 2*B
							a += v.HeadStride
						}
					}
				} else {
					for h := range H {
						a := base + int64(h)*v.HeadStride + r.Offset
						for t := range n {
							j0 := (first+uint64(t))*P + pieceOff
							A, B := sum(data[a : a+L])
							s[h] += (2*j0+1)*A + 2*B
							a += v.TokenStride
						}
					}
				}
				pieceOff += uint64(r.Len / w8)
			}
		default:
			for h := range H {
				for t := range n {
					cellAddr := base + int64(t)*v.TokenStride + int64(h)*v.HeadStride
					w.cell = w.cell[:0]
					for _, r := range v.Runs {
						a := cellAddr + r.Offset
						w.cell = append(w.cell, data[a:a+int64(r.Len)]...)
					}
					A, B := sum(w.cell)
					s[h] += (2*(first+uint64(t))*P+1)*A + 2*B
				}
			}
		}
	}
	var total uint64
	for h := range H {
		total += c.Factor(c.HeadBase+h) * s[h]
	}
	return total
}

// narrowSum returns sumAB for pieces of 2 or 4 bytes, zero-extended.
func narrowSum(width int) func(p []byte) (A, B uint64) {
	return func(p []byte) (A, B uint64) {
		var k uint64
		for ; len(p) >= width; p = p[width:] {
			var x uint64
			if width == 2 {
				x = uint64(binary.LittleEndian.Uint16(p))
			} else {
				x = uint64(binary.LittleEndian.Uint32(p))
			}
			A += x
			B += k * x
			k++
		}
		return A, B
	}
}

// sumAB returns A = sum_k x_k and B = sum_k k*x_k over the little-endian
// 8-byte pieces of p (len(p) a multiple of 8), so that a run starting at
// piece index j0 weighs sum_k x_k*(2*(j0+k)+1) = (2*j0+1)*A + 2*B. It uses
// additions only in its loop (a += x; b += a), on four independent lanes.
func sumAB(p []byte) (A, B uint64) {
	var a0, a1, a2, a3, b0, b1, b2, b3 uint64
	m := uint64(len(p) / 32)
	for len(p) >= 32 {
		a0 += binary.LittleEndian.Uint64(p[0:8])
		a1 += binary.LittleEndian.Uint64(p[8:16])
		a2 += binary.LittleEndian.Uint64(p[16:24])
		a3 += binary.LittleEndian.Uint64(p[24:32])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		p = p[32:]
	}
	// Lane l holds x_{4i+l}, i < m: a_l = sum x, b_l = sum (m-i)*x, so
	// sum_i (4i+l)*x_{4i+l} = 4*(m*a_l - b_l) + l*a_l.
	A = a0 + a1 + a2 + a3
	B = 4*(m*A-(b0+b1+b2+b3)) + a1 + 2*a2 + 3*a3
	k := 4 * m
	for len(p) >= 8 {
		x := binary.LittleEndian.Uint64(p)
		A += x
		B += k * x
		k++
		p = p[8:]
	}
	return A, B
}
