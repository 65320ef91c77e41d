package checksum

import (
	"cmp"
	"context"
	"encoding/binary"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvaudit/kvaudit/layout"
)

// Fast is the CPU engine. It cuts the plan into chunks of (cache, rows in
// block order) sized to the data, checksums them on Threads goroutines, and
// within a block walks the cache tensor in memory order, adding each
// contiguous run of bytes into per-head accumulators with the
// addition-only A/B sums of docs/spec.md §1 (several independent lanes).
// It tells the kernel it reads the mapped ranges sequentially. Its
// allocations depend on the plan's size, never on the number of blocks
// done, and its results are bit-identical to Reference.
type Fast struct {
	// Threads is the number of goroutines; 0 means GOMAXPROCS.
	Threads int
	// ChunkBytes is the cell bytes of one unit of work handed to a
	// goroutine; 0 sizes chunks to the plan (between 256 KiB and 4 MiB,
	// at least 8 per thread when the plan is large enough).
	ChunkBytes int64
}

// Name returns "cpu".
func (Fast) Name() string { return "cpu" }

// Slopes returns true: Fast fills Plan.Slopes from the sums it forms
// anyway (the slope is P times the weighted plain sum X of block).
func (Fast) Slopes() bool { return true }

const (
	minChunk = 256 << 10
	maxChunk = 4 << 20
)

// chunk is a unit of work: rows order[begin:end] of one task.
type chunk struct {
	task       int32
	begin, end int32
	bytes      int64
}

// job is one task prepared for the walk: its rows in block order and how
// to walk its tensor.
type job struct {
	task  *Task
	order []int32 // row indices sorted by block id
	walk  *walk
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
	jobs := make([]job, len(p.Tasks))
	var total int64
	maxHeads := 0
	for i := range p.Tasks {
		t := &p.Tasks[i]
		var order []int32
		if i > 0 && sameBlocks(t.Rows, p.Tasks[i-1].Rows) {
			order = jobs[i-1].order // the caches of a group share their rows' blocks
		} else {
			order = blockOrder(t.Rows)
		}
		jobs[i] = job{task: t, order: order, walk: newWalk(t.Cache)}
		total += int64(len(t.Rows)) * jobs[i].walk.rowBytes
		maxHeads = max(maxHeads, t.Cache.Cells.Heads)
	}
	size := f.ChunkBytes
	if size <= 0 {
		size = min(max(total/int64(threads*8), minChunk), maxChunk)
	}
	cs := chunks(jobs, size)
	if len(cs) == 0 {
		return ctx.Err()
	}
	for i := range jobs {
		jobs[i].advise()
	}
	threads = min(threads, len(cs))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, threads)
	for w := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				// A panic here would end the process with Go's exit
				// status 2, which means "unverified": make it an
				// internal error the caller reports as such.
				if r := recover(); r != nil {
					errs[w] = Recovered("checksum worker", r)
					next.Store(int64(len(cs)))
				}
			}()
			s := newScratch(maxHeads)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cs) || ctx.Err() != nil {
					return
				}
				c := &cs[i]
				j := &jobs[c.task]
				err := layout.Guard(j.task.Cache.Cells.File, func() error {
					if testChunkHook != nil {
						testChunkHook()
					}
					s.chunk(j, c, out, p)
					return nil
				})
				if err != nil {
					errs[w] = err
					next.Store(int64(len(cs))) // stop the others
					return
				}
				if p.Progress != nil {
					p.Progress(c.bytes)
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

// testChunkHook, when set (by tests), runs before each chunk.
var testChunkHook func()

// blockOrder returns the indices of rows sorted by block id (stable), so
// that a chunk reads the tensor front to back.
func blockOrder(rows []Row) []int32 {
	order := make([]int32, len(rows))
	for i := range order {
		order[i] = int32(i)
	}
	if slices.IsSortedFunc(rows, func(a, b Row) int { return a.Block - b.Block }) {
		return order
	}
	slices.SortStableFunc(order, func(a, b int32) int { return rows[a].Block - rows[b].Block })
	return order
}

// sameBlocks says whether two tasks' rows name the same blocks in the same
// order (then they share one block order).
func sameBlocks(a, b []Row) bool {
	return slices.EqualFunc(a, b, func(x, y Row) bool { return x.Block == y.Block })
}

// chunks cuts every job's ordered rows into ranges of about size bytes.
// It allocates once, whatever the number of chunks.
func chunks(jobs []job, size int64) []chunk {
	each := func(emit func(chunk)) {
		for ti := range jobs {
			j := &jobs[ti]
			c := chunk{task: int32(ti)}
			for i, ri := range j.order {
				c.bytes += int64(j.task.Rows[ri].Valid) * j.walk.tokenBytes
				if c.bytes >= size || i == len(j.order)-1 {
					c.end = int32(i + 1)
					emit(c)
					c = chunk{task: int32(ti), begin: int32(i + 1)}
				}
			}
		}
	}
	n := 0
	each(func(chunk) { n++ })
	cs := make([]chunk, 0, n)
	each(func(c chunk) { cs = append(cs, c) })
	return cs
}

// advise tells the kernel that the job reads its part of the mapped tensor
// front to back (MADV_SEQUENTIAL), so that faults on data not in memory
// read far ahead. (MADV_WILLNEED would also queue the reads at once, but
// it walks the page cache of the whole range: 4 ms per 2 GB already in
// memory, 5% of reading it on two cores.) It is a hint: it does nothing for
// data that is not a mapped file.
func (j *job) advise() {
	v := &j.task.Cache.Cells
	if len(j.order) == 0 || len(v.Data) == 0 || v.FileOffset < 0 {
		return
	}
	rows := j.task.Rows
	lo := int64(rows[j.order[0]].Block*v.KernelBlocks) * v.RowStride
	hi := int64(rows[j.order[len(j.order)-1]].Block*v.KernelBlocks+v.KernelBlocks) * v.RowStride
	// Data[0] is byte FileOffset of a file mapped from its start, so
	// Data[skip] is page-aligned: a Mapping from there is one Advise
	// understands.
	page := int64(os.Getpagesize())
	skip := (page - v.FileOffset%page) % page
	if skip >= int64(len(v.Data)) {
		return
	}
	m := layout.Mapping{Data: v.Data[skip:]}
	lo = max(lo-skip, 0)
	m.Advise(lo, hi-skip-lo, true)
}

// walk is how to read one cache's blocks in memory order.
type walk struct {
	v *layout.CellView
	// w is the piece width, P the pieces of a cell.
	w int
	P uint64
	// runs are the cell's runs sorted by memory offset.
	runs []walkRun
	// runsOuter: each run's cells (all tokens and heads) lie apart from
	// the other runs', so a kernel row is walked run by run; otherwise
	// cell by cell with the runs innermost.
	runsOuter bool
	// tokensInner: a head's tokens are nearer in memory than a token's
	// heads.
	tokensInner bool
	// stripe: a head's tokens are whole adjacent cells, so one head of a
	// kernel row is a single run of consecutive pieces.
	stripe bool
	// pieceRun: every run is one piece and heads are adjacent pieces, so a
	// token's run over all heads is one stretch of pieces, one per head.
	pieceRun bool
	// simd: runs of whole 8-byte pieces, a multiple of 32 bytes long, go
	// through the SIMD kernel (accumSIMD) when the machine has one.
	simd bool
	// m is the slice factor of each local head.
	m []uint64
	// rowBytes and tokenBytes are the cell bytes of a block and a token.
	rowBytes, tokenBytes int64
}

// walkRun is one run of a cell: n bytes at memory offset off from the
// cell's address, holding the cell's logical bytes q .. q+n-1.
type walkRun struct {
	off     int64
	n       int
	q       int
	aligned bool // q and n are whole pieces
}

func newWalk(c *layout.LayerView) *walk {
	v := &c.Cells
	k := &walk{v: v, w: v.Width(), P: uint64(c.Pieces)}
	k.simd = useSIMD && k.w == 8
	q := 0
	for _, r := range v.Runs {
		k.runs = append(k.runs, walkRun{off: r.Offset, n: r.Len, q: q, aligned: q%k.w == 0 && r.Len%k.w == 0})
		q += r.Len
	}
	slices.SortStableFunc(k.runs, func(a, b walkRun) int { return cmp.Compare(a.off, b.off) })
	H, KT := v.Heads, v.KernelTokens
	switch {
	case H == 1:
		k.tokensInner = true
	case KT == 1:
		k.tokensInner = false
	default:
		k.tokensInner = v.TokenStride <= v.HeadStride
	}
	// The span of one run over a kernel row's cells.
	span := int64(KT-1)*abs(v.TokenStride) + int64(H-1)*abs(v.HeadStride)
	k.runsOuter = v.TokenStride >= 0 && v.HeadStride >= 0
	for i := 1; i < len(k.runs) && k.runsOuter; i++ {
		prev := k.runs[i-1]
		k.runsOuter = prev.off+span+int64(prev.n) <= k.runs[i].off
	}
	if len(k.runs) == 1 {
		k.runsOuter = true
		r := k.runs[0]
		k.stripe = k.tokensInner && r.n == v.CellBytes && v.TokenStride == int64(v.CellBytes) && r.aligned
	}
	k.pieceRun = k.runsOuter && !k.tokensInner && v.HeadStride == int64(k.w)
	for _, r := range k.runs {
		k.pieceRun = k.pieceRun && r.n == k.w && r.aligned
	}
	k.m = make([]uint64, H)
	for h := range H {
		k.m[h] = c.Factor(c.HeadBase + h)
	}
	k.tokenBytes = int64(H) * int64(v.CellBytes)
	k.rowBytes = int64(v.KernelBlocks*KT) * k.tokenBytes
	return k
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// scratch is one goroutine's per-head accumulators: xa[h] = sum of the
// head's pieces, ya[h] = sum of piece * (its index j from the block's
// first token).
type scratch struct {
	xa, ya []uint64
	// state holds the SIMD kernel's lanes, 12 per head.
	state []uint64
}

// useSIMD lets tests force the generic loops; the SIMD kernel is used only
// where simdAvailable.
var useSIMD = simdAvailable

func newScratch(heads int) *scratch {
	return &scratch{xa: make([]uint64, heads), ya: make([]uint64, heads), state: make([]uint64, 12*heads)}
}

// simdAccum adds the runs of the heads of xa and ya to their sums with the
// SIMD kernel, and reports false, doing nothing, where the kernel does not
// apply. Each head has R runs of n bytes of whole 8-byte pieces, the
// runs of consecutive tokens: run t of a head starts at piece index
// j0 + t*P. All R*len(xa) runs are evenly spaced by stride from data[off]:
// with headsInner, run i is head i%H's run i/H (a token-major kernel row),
// otherwise head i/R's run i%R.
//
// The kernel reads each head's runs as one stream: lanes a, b with
// B_stream = sum of (stream piece index)*x, and c, which gives
// T = sum_t t*A_t. The pieces of run t have stream index t*Lp+k and piece
// index j0+t*P+k, so the head's sum of j*x is j0*A + B_stream + (P-Lp)*T.
func (s *scratch) simdAccum(k *walk, data []byte, off, stride int64, n, R int, headsInner bool, j0 uint64, xa, ya []uint64) bool {
	H := len(xa)
	if !k.simd || n < 32 || n%32 != 0 || R < 1 || H < 1 || stride < 0 || off < 0 || 12*H > len(s.state) {
		return false
	}
	count := R * H
	_ = data[off+int64(count-1)*stride+int64(n)-1] // the kernel reads up to here
	state := s.state[:12*H]
	clear(state)
	group := 1
	if !headsInner {
		group = R
	}
	accumSIMD(data, off, stride, n, count, group, H, state)
	M := uint64(R) * uint64(n/32) // 32-byte steps of a head's stream
	Lp := uint64(n / 8)
	ya = ya[:H]
	for h := range xa {
		st := (*[12]uint64)(state[12*h : 12*h+12])
		A := st[0] + st[1] + st[2] + st[3]
		Sb := st[4] + st[5] + st[6] + st[7]
		Sc := st[8] + st[9] + st[10] + st[11]
		B := 4*(M*A-Sb) + st[1] + 2*st[2] + 3*st[3]
		T := uint64(R-1)*A - Sc
		xa[h] += A
		ya[h] += j0*A + B + (k.P-Lp)*T
	}
	return true
}

// chunk adds the rows of one chunk to out.
func (s *scratch) chunk(j *job, c *chunk, out []uint64, p *Plan) {
	rows := j.task.Rows
	for _, ri := range j.order[c.begin:c.end] {
		r := &rows[ri]
		v, X := s.block(j.walk, r)
		atomic.AddUint64(&out[r.Out], v)
		if p.Slopes {
			atomic.AddUint64(&out[p.Outputs+r.Out], j.walk.P*X)
		}
	}
}

// block returns one cache's part of a block checksum, as ReferenceBlock:
// sum over heads of m * s, s = (2*first*P+1)*A + 2*Y, A the head's sum of
// pieces and Y the sum of piece * j with j counted from the block's first
// valid token (first = row.FirstToken). X = sum over heads of m*A is
// returned too: P*X is the row's slope (Plan.Slopes).
func (s *scratch) block(k *walk, row *Row) (uint64, uint64) {
	v := k.v
	H := v.Heads
	xa := s.xa[:H]
	ya := s.ya[:len(xa)]
	clear(xa)
	clear(ya)
	data := v.Data
	C := int64(v.CellBytes)
	w := int64(k.w)
	for kr := 0; kr < v.KernelBlocks; kr++ {
		tok0 := kr * v.KernelTokens
		n := min(v.KernelTokens, row.Valid-tok0)
		if n <= 0 {
			break
		}
		base := int64(row.Block*v.KernelBlocks+kr) * v.RowStride
		j0 := uint64(tok0) * k.P // piece index of the kernel row's first piece
		switch {
		case k.stripe:
			L := int64(n) * C
			a := base + k.runs[0].off
			if s.simdAccum(k, data, a, v.HeadStride, int(L), 1, true, j0, xa, ya) {
				continue
			}
			for h := range H {
				A, B := k.sum(data[a : a+L])
				xa[h] += A
				ya[h] += j0*A + B
				a += v.HeadStride
			}
		case k.pieceRun:
			// Each run holds one piece of every head, heads adjacent (a
			// row-split state stored with the split axis last). Heads go
			// in tiles whose sums stay in the first-level cache, each
			// tile's runs read front to back.
			for t := range n {
				jt := j0 + uint64(t)*k.P
				a := base + int64(t)*v.TokenStride
				for h0 := 0; h0 < H; h0 += pieceTile {
					h1 := min(h0+pieceTile, H)
					for _, r := range k.runs {
						a := a + r.off + int64(h0)*w
						k.pieces(data[a:a+int64(h1-h0)*w], jt+uint64(r.q/k.w), xa[h0:h1], ya[h0:h1])
					}
				}
			}
		case k.runsOuter:
			for ri := range k.runs {
				r := &k.runs[ri]
				L := int64(r.n)
				jr := uint64((int64(tok0)*C + int64(r.q)) / w) // the run's first piece in token 0
				if k.tokensInner {
					if r.aligned && v.HeadStride == int64(n)*v.TokenStride && s.simdAccum(k, data, base+r.off, v.TokenStride, r.n, n, false, jr, xa, ya) {
						continue // evenly spaced (hnd, whole kernel row): one call
					}
					for h := range xa {
						a := base + int64(h)*v.HeadStride + r.off
						if r.aligned && s.simdAccum(k, data, a, v.TokenStride, r.n, n, false, jr, xa[h:h+1], ya[h:h+1]) {
							continue
						}
						var x, y uint64
						for t := range n {
							jb := uint64((int64(tok0+t)*C + int64(r.q)) / w)
							A, B := k.acc(data[a:a+L], r)
							x += A
							y += jb*A + B
							a += v.TokenStride
						}
						xa[h] += x
						ya[h] += y
					}
					continue
				}
				if r.aligned && v.TokenStride == int64(H)*v.HeadStride && s.simdAccum(k, data, base+r.off, v.HeadStride, r.n, n, true, jr, xa, ya) {
					continue // evenly spaced (flash, nhd): one call for the kernel row
				}
				for t := range n {
					jb := uint64((int64(tok0+t)*C + int64(r.q)) / w)
					a := base + int64(t)*v.TokenStride + r.off
					if r.aligned && s.simdAccum(k, data, a, v.HeadStride, r.n, 1, true, jb, xa, ya) {
						continue
					}
					if k.w == 8 && r.aligned {
						// The common case (attention K or V of each head).
						for h := range xa {
							A, B := sumAB(data[a : a+L])
							xa[h] += A
							ya[h] += jb*A + B
							a += v.HeadStride
						}
						continue
					}
					for h := range xa {
						A, B := k.acc(data[a:a+L], r)
						xa[h] += A
						ya[h] += jb*A + B
						a += v.HeadStride
					}
				}
			}
		default:
			// Runs interleave with other cells: visit cell by cell, runs
			// innermost, in the order of the nearer axis.
			outer, inner := n, H
			ostride, istride := v.TokenStride, v.HeadStride
			if k.tokensInner {
				outer, inner, ostride, istride = H, n, v.HeadStride, v.TokenStride
			}
			for o := range outer {
				for i := range inner {
					t, h := o, i
					if k.tokensInner {
						t, h = i, o
					}
					cell := base + int64(o)*ostride + int64(i)*istride
					for ri := range k.runs {
						r := &k.runs[ri]
						a := cell + r.off
						jb := uint64((int64(tok0+t)*C + int64(r.q)) / w)
						A, B := k.acc(data[a:a+int64(r.n)], r)
						xa[h] += A
						ya[h] += jb*A + B
					}
				}
			}
		}
	}
	var X, Y uint64
	for h := range H {
		X += k.m[h] * xa[h]
		Y += k.m[h] * ya[h]
	}
	return (2*uint64(row.FirstToken)*k.P+1)*X + 2*Y, X
}

// sum returns A and B of whole pieces of the walk's width.
func (k *walk) sum(p []byte) (A, B uint64) {
	switch k.w {
	case 8:
		return sumAB(p)
	case 4:
		return sumAB32(p)
	default:
		return sumAB16(p)
	}
}

// acc returns A = sum of the values and B = sum of value * (piece index
// relative to the piece holding p[0]) of run bytes p. A run that is not
// whole pieces contributes its partial pieces as their bytes shifted to
// their place in the piece: piece values are sums of such parts.
func (k *walk) acc(p []byte, r *walkRun) (A, B uint64) {
	if r.aligned {
		return k.sum(p)
	}
	return partialAB(p, r.q%k.w, k.w)
}

// partialAB is acc for bytes p that start at byte q of a piece of width w.
func partialAB(p []byte, q, w int) (A, B uint64) {
	var j uint64
	for len(p) > 0 {
		if q == 0 && len(p) >= w {
			whole := len(p) - len(p)%w
			var a, b uint64
			switch w {
			case 8:
				a, b = sumAB(p[:whole])
			case 4:
				a, b = sumAB32(p[:whole])
			default:
				a, b = sumAB16(p[:whole])
			}
			A += a
			B += j*a + b
			j += uint64(whole / w)
			p = p[whole:]
			continue
		}
		c := min(len(p), w-q)
		var x uint64
		for i := c - 1; i >= 0; i-- {
			x = x<<8 | uint64(p[i])
		}
		x <<= 8 * uint(q)
		A += x
		B += j * x
		p = p[c:]
		q += c
		if q == w {
			q = 0
			j++
		}
	}
	return A, B
}

// pieceTile is how many heads' sums (16 bytes each) the piece-by-piece
// walk keeps hot at a time.
const pieceTile = 1024

// pieces adds a stretch of pieces, piece h to head h, all at index j.
func (k *walk) pieces(p []byte, j uint64, xa, ya []uint64) {
	switch k.w {
	case 8:
		for h := range xa {
			x := binary.LittleEndian.Uint64(p[8*h:])
			xa[h] += x
			ya[h] += j * x
		}
	case 4:
		for h := range xa {
			x := uint64(binary.LittleEndian.Uint32(p[4*h:]))
			xa[h] += x
			ya[h] += j * x
		}
	default:
		for h := range xa {
			x := uint64(binary.LittleEndian.Uint16(p[2*h:]))
			xa[h] += x
			ya[h] += j * x
		}
	}
}

// sumAB returns A = sum_k x_k and B = sum_k k*x_k over the little-endian
// 8-byte pieces of p (len(p) a multiple of 8), so that a run starting at
// piece index j0 weighs sum_k x_k*(2*(j0+k)+1) = (2*j0+1)*A + 2*B. Its loop
// uses additions only (a += x; b += a) on four independent lanes, unrolled
// four times.
func sumAB(p []byte) (A, B uint64) {
	var a0, a1, a2, a3, b0, b1, b2, b3 uint64
	i := 0
	for ; i+128 <= len(p); i += 128 {
		q := (*[128]byte)(p[i : i+128])
		a0 += binary.LittleEndian.Uint64(q[0:8])
		a1 += binary.LittleEndian.Uint64(q[8:16])
		a2 += binary.LittleEndian.Uint64(q[16:24])
		a3 += binary.LittleEndian.Uint64(q[24:32])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += binary.LittleEndian.Uint64(q[32:40])
		a1 += binary.LittleEndian.Uint64(q[40:48])
		a2 += binary.LittleEndian.Uint64(q[48:56])
		a3 += binary.LittleEndian.Uint64(q[56:64])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += binary.LittleEndian.Uint64(q[64:72])
		a1 += binary.LittleEndian.Uint64(q[72:80])
		a2 += binary.LittleEndian.Uint64(q[80:88])
		a3 += binary.LittleEndian.Uint64(q[88:96])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += binary.LittleEndian.Uint64(q[96:104])
		a1 += binary.LittleEndian.Uint64(q[104:112])
		a2 += binary.LittleEndian.Uint64(q[112:120])
		a3 += binary.LittleEndian.Uint64(q[120:128])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	for ; i+32 <= len(p); i += 32 {
		q := (*[32]byte)(p[i : i+32])
		a0 += binary.LittleEndian.Uint64(q[0:8])
		a1 += binary.LittleEndian.Uint64(q[8:16])
		a2 += binary.LittleEndian.Uint64(q[16:24])
		a3 += binary.LittleEndian.Uint64(q[24:32])
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	m := uint64(i / 32)
	// Lane l holds x_{4i+l}, i < m: a_l = sum x, b_l = sum (m-i)*x, so
	// sum_i (4i+l)*x_{4i+l} = 4*(m*a_l - b_l) + l*a_l.
	A = a0 + a1 + a2 + a3
	B = 4*(m*A-(b0+b1+b2+b3)) + a1 + 2*a2 + 3*a3
	k := 4 * m
	for ; i+8 <= len(p); i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		A += x
		B += k * x
		k++
	}
	return A, B
}

// sumAB32 is sumAB for 4-byte pieces, zero-extended.
func sumAB32(p []byte) (A, B uint64) {
	var a0, a1, a2, a3, b0, b1, b2, b3 uint64
	i := 0
	for ; i+64 <= len(p); i += 64 {
		q := (*[64]byte)(p[i : i+64])
		a0 += uint64(binary.LittleEndian.Uint32(q[0:4]))
		a1 += uint64(binary.LittleEndian.Uint32(q[4:8]))
		a2 += uint64(binary.LittleEndian.Uint32(q[8:12]))
		a3 += uint64(binary.LittleEndian.Uint32(q[12:16]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint32(q[16:20]))
		a1 += uint64(binary.LittleEndian.Uint32(q[20:24]))
		a2 += uint64(binary.LittleEndian.Uint32(q[24:28]))
		a3 += uint64(binary.LittleEndian.Uint32(q[28:32]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint32(q[32:36]))
		a1 += uint64(binary.LittleEndian.Uint32(q[36:40]))
		a2 += uint64(binary.LittleEndian.Uint32(q[40:44]))
		a3 += uint64(binary.LittleEndian.Uint32(q[44:48]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint32(q[48:52]))
		a1 += uint64(binary.LittleEndian.Uint32(q[52:56]))
		a2 += uint64(binary.LittleEndian.Uint32(q[56:60]))
		a3 += uint64(binary.LittleEndian.Uint32(q[60:64]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	for ; i+16 <= len(p); i += 16 {
		q := (*[16]byte)(p[i : i+16])
		a0 += uint64(binary.LittleEndian.Uint32(q[0:4]))
		a1 += uint64(binary.LittleEndian.Uint32(q[4:8]))
		a2 += uint64(binary.LittleEndian.Uint32(q[8:12]))
		a3 += uint64(binary.LittleEndian.Uint32(q[12:16]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	m := uint64(i / 16)
	A = a0 + a1 + a2 + a3
	B = 4*(m*A-(b0+b1+b2+b3)) + a1 + 2*a2 + 3*a3
	k := 4 * m
	for ; i+4 <= len(p); i += 4 {
		x := uint64(binary.LittleEndian.Uint32(p[i:]))
		A += x
		B += k * x
		k++
	}
	return A, B
}

// sumAB16 is sumAB for 2-byte pieces, zero-extended.
func sumAB16(p []byte) (A, B uint64) {
	var a0, a1, a2, a3, b0, b1, b2, b3 uint64
	i := 0
	for ; i+32 <= len(p); i += 32 {
		q := (*[32]byte)(p[i : i+32])
		a0 += uint64(binary.LittleEndian.Uint16(q[0:2]))
		a1 += uint64(binary.LittleEndian.Uint16(q[2:4]))
		a2 += uint64(binary.LittleEndian.Uint16(q[4:6]))
		a3 += uint64(binary.LittleEndian.Uint16(q[6:8]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint16(q[8:10]))
		a1 += uint64(binary.LittleEndian.Uint16(q[10:12]))
		a2 += uint64(binary.LittleEndian.Uint16(q[12:14]))
		a3 += uint64(binary.LittleEndian.Uint16(q[14:16]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint16(q[16:18]))
		a1 += uint64(binary.LittleEndian.Uint16(q[18:20]))
		a2 += uint64(binary.LittleEndian.Uint16(q[20:22]))
		a3 += uint64(binary.LittleEndian.Uint16(q[22:24]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
		a0 += uint64(binary.LittleEndian.Uint16(q[24:26]))
		a1 += uint64(binary.LittleEndian.Uint16(q[26:28]))
		a2 += uint64(binary.LittleEndian.Uint16(q[28:30]))
		a3 += uint64(binary.LittleEndian.Uint16(q[30:32]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	for ; i+8 <= len(p); i += 8 {
		q := (*[8]byte)(p[i : i+8])
		a0 += uint64(binary.LittleEndian.Uint16(q[0:2]))
		a1 += uint64(binary.LittleEndian.Uint16(q[2:4]))
		a2 += uint64(binary.LittleEndian.Uint16(q[4:6]))
		a3 += uint64(binary.LittleEndian.Uint16(q[6:8]))
		b0 += a0
		b1 += a1
		b2 += a2
		b3 += a3
	}
	m := uint64(i / 8)
	A = a0 + a1 + a2 + a3
	B = 4*(m*A-(b0+b1+b2+b3)) + a1 + 2*a2 + 3*a3
	k := 4 * m
	for ; i+2 <= len(p); i += 2 {
		x := uint64(binary.LittleEndian.Uint16(p[i:]))
		A += x
		B += k * x
		k++
	}
	return A, B
}
