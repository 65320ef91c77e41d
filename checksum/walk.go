package checksum

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

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
	// stateSIMD: pieces of 2 or 4 bytes (state rows) go through the state
	// rows' SIMD kernels (stateRows) when the machine has them.
	stateSIMD bool
	// m is the slice factor of each local head.
	m []uint64
	// keys is each local head's mix key of its word 0 under the plan's
	// run key, MixKeyOf(ckplan.Plan.MixKey, s, 0) (docs/spec.md §14); W the mix words of a cell.
	keys []uint64
	W    uint64
	// mixInRuns: the mix words are the pieces the runs hold (8-byte
	// pieces, every run whole pieces), so the walk mixes them as it sums
	// them; otherwise mixRow reads the cells for the mix check.
	mixInRuns bool
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

func newWalk(c *layout.LayerView, mixKey uint64) *walk {
	v := &c.Cells
	k := &walk{v: v, w: v.Width(), P: uint64(c.Pieces)}
	k.simd = useSIMD && k.w == 8
	k.stateSIMD = useSIMD && k.w != 8
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
	k.keys = make([]uint64, H)
	for h := range H {
		k.m[h] = c.Factor(c.HeadBase + h)
		k.keys[h] = MixKeyOf(mixKey, MixSlice(c, c.HeadBase+h), 0)
	}
	k.W = uint64(cellWords(c))
	k.mixInRuns = k.w == 8
	for _, r := range k.runs {
		k.mixInRuns = k.mixInRuns && r.aligned
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
	// state holds the SIMD kernel's lanes, 12 per head (16 with the mix
	// check).
	state []uint64
	// mixOn: the plan asks for the mix check (ckplan.Plan.Mix); mix is the
	// current row's, jbase the index of the row's first word (the
	// block's first token times W).
	mixOn bool
	mix   uint64
	jbase uint64
	// consts are the mix kernel's constants for (constsP, constsN).
	consts           [mixConsts]uint64
	constsP, constsN uint64
	// cell is a cell assembled for mixRow.
	cell []byte
	// stateConsts are the state rows' kernel's constants for pieces of
	// stateW bytes.
	stateConsts [stateConsts]uint64
	stateW      int
	// rowConsts are the short rows' kernel's constants for pieces of rowW
	// bytes, offs its element offsets.
	rowConsts [rowConsts]uint64
	rowW      int
	offs      []int64
	// adjConsts are the adjacent rows' kernel's constants (adjW: set up).
	adjConsts [adjConsts]uint64
	adjW      int
	// wordConsts are the one-word rows' kernel's constants for rows of
	// wordN bytes of wordW-byte elements, wordStride apart.
	wordConsts   [wordConsts]uint64
	wordW, wordN int
	wordStride   int64
	// pairConsts are the 64-byte rows' kernel's constants (pairSet: its
	// multipliers set).
	pairConsts [pairConsts]uint64
	pairSet    bool
}

// mixConsts is the size of the mix kernel's constants: six 4-lane
// vectors.
const mixConsts = 24

// mixKernelConsts returns the mix kernel's constants for cells of P pieces
// read in runs of n bytes: the key step of a 32-byte step (4*MixGamma),
// the key skip from the end of one run of a head to the start of its next
// ((P - n/8)*MixGamma), and Mix's four multipliers, each in 4 lanes.
func mixKernelConsts(P uint64, n int) (c [mixConsts]uint64) {
	for i, x := range [6]uint64{4 * mixGamma, (P - uint64(n/8)) * MixGamma, mixD[0], mixD[1], mixD[2], mixD[3]} {
		for l := range 4 {
			c[4*i+l] = x
		}
	}
	return c
}

// seedMixKeys sets head h's key lanes (state[16h+12 .. 16h+15]) to the keys
// of its stream's first four pieces: key, key+MixGamma, ...
func seedMixKeys(state []uint64, h int, key uint64) {
	for l := range 4 {
		state[16*h+12+l] = key + uint64(l)*MixGamma
	}
}

// useSIMD lets tests force the generic loops; the SIMD kernel is used only
// where simdAvailable.
var useSIMD = simdAvailable

func newScratch(heads int) *scratch {
	return &scratch{xa: make([]uint64, heads), ya: make([]uint64, heads), state: make([]uint64, 16*heads)}
}

// key returns the mix key of piece j (counted from the block's first
// token) of local head h.
func (s *scratch) key(k *walk, h int, j uint64) uint64 {
	return k.keys[h] + (s.jbase+j)*MixGamma
}

// sumMix is k.sum for 8-byte pieces, also adding their mix (local head h,
// first piece j) to the row's when the mix check is on.
func (s *scratch) sumMix(k *walk, p []byte, h int, j uint64) (A, B uint64) {
	if s.mixOn && k.mixInRuns {
		A, B, H := sumABMix(p, s.key(k, h, j))
		s.mix += H
		return A, B
	}
	return sumAB(p)
}

// accMix is k.acc, also adding the run's mix (local head h, the run's
// first piece j) to the row's when the mix check is on and in runs.
func (s *scratch) accMix(k *walk, p []byte, r *walkRun, h int, j uint64) (A, B uint64) {
	if s.mixOn && k.mixInRuns {
		return s.sumMix(k, p, h, j)
	}
	return k.acc(p, r)
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
//
// With the mix check on (and in runs), the kernel also mixes every piece
// with its key: xa's heads are local heads h0, h0+1, ...
func (s *scratch) simdAccum(k *walk, data []byte, off, stride int64, n, R int, headsInner bool, j0 uint64, h0 int, xa, ya []uint64) bool {
	H := len(xa)
	if !k.simd || n < 32 || n%32 != 0 || R < 1 || H < 1 || stride < 0 || off < 0 || 16*H > len(s.state) {
		return false
	}
	count := R * H
	_ = data[off+int64(count-1)*stride+int64(n)-1] // the kernel reads up to here
	lanes := 12
	mix := s.mixOn && k.mixInRuns
	if mix {
		lanes = 16
	}
	state := s.state[:lanes*H]
	clear(state)
	group := 1
	if !headsInner {
		group = R
	}
	if mix {
		if s.constsP != k.P || s.constsN != uint64(n) {
			s.consts = mixKernelConsts(k.P, n)
			s.constsP, s.constsN = k.P, uint64(n)
		}
		for h := range H {
			seedMixKeys(state, h, s.key(k, h0+h, j0))
		}
		var hsum [4]uint64
		accumMixSIMD(data, off, stride, n, count, group, H, state, &s.consts, &hsum)
		s.mix += hsum[0] + hsum[1] + hsum[2] + hsum[3]
	} else {
		accumSIMD(data, off, stride, n, count, group, H, state)
	}
	M := uint64(R) * uint64(n/32) // 32-byte steps of a head's stream
	Lp := uint64(n / 8)
	ya = ya[:H]
	for h := range xa {
		st := (*[12]uint64)(state[lanes*h : lanes*h+12])
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

// chunk adds the rows of one chunk to out (the worker's own sums).
func (s *scratch) chunk(j *job, c *chunk, out []uint64, p *ckplan.Plan) {
	rows := j.task.Rows
	s.mixOn = p.Mix
	for _, ri := range j.order[c.begin:c.end] {
		r := &rows[ri]
		v, X := s.block(j.walk, r)
		out[r.Out] += v
		if p.Slopes {
			out[p.Outputs+r.Out] += j.walk.P * X
		}
		if p.Mix {
			out[2*p.Outputs+r.Out] += s.mix
		}
	}
}

// block returns one cache's part of a block checksum, as ReferenceBlock:
// sum over heads of m * s, s = (2*first*P+1)*A + 2*Y, A the head's sum of
// pieces and Y the sum of piece * j with j counted from the block's first
// valid token (first = row.FirstToken). X = sum over heads of m*A is
// returned too: P*X is the row's slope (ckplan.Plan.Slopes). Each kernel row is
// walked the way the cache's memory order allows (newWalk).
func (s *scratch) block(k *walk, row *ckplan.Row) (uint64, uint64) {
	v := k.v
	s.mix = 0
	s.jbase = uint64(row.FirstToken) * k.W
	if k.w != 8 {
		// State rows: vLLM's sums and the mix check from their words.
		if X, Y, ok := s.stateRows(k, int64(row.Block)*v.RowStride); ok {
			return (2*uint64(row.FirstToken)*k.P+1)*X + 2*Y, X
		}
	}
	H := v.Heads
	xa := s.xa[:H]
	ya := s.ya[:len(xa)]
	clear(xa)
	clear(ya)
	for kr := 0; kr < v.KernelBlocks; kr++ {
		tok0 := kr * v.KernelTokens
		n := min(v.KernelTokens, row.Valid-tok0)
		if n <= 0 {
			break
		}
		base := int64(row.Block*v.KernelBlocks+kr) * v.RowStride
		switch {
		case k.stripe:
			s.stripeRow(k, base, tok0, xa, ya, n)
		case k.pieceRun:
			s.pieceRunRow(k, base, tok0, xa, ya, n)
		case k.runsOuter:
			s.runsRow(k, base, tok0, xa, ya, n)
		default:
			s.cellsRow(k, base, tok0, xa, ya, n)
		}
		if s.mixOn && !k.mixInRuns {
			s.mixRow(k, base, tok0, n)
		}
	}
	var X, Y uint64
	for h := range H {
		X += k.m[h] * xa[h]
		Y += k.m[h] * ya[h]
	}
	return (2*uint64(row.FirstToken)*k.P+1)*X + 2*Y, X
}

// stripeRow adds the first n tokens of the kernel row at base (its first
// token tok0 of the block) to the heads' sums xa and ya, for a walk whose
// heads' tokens are whole adjacent cells: one stretch of pieces per head.
func (s *scratch) stripeRow(k *walk, base int64, tok0 int, xa, ya []uint64, n int) {
	v := k.v
	j0 := uint64(tok0) * k.P // piece index of the kernel row's first piece
	L := int64(n) * int64(v.CellBytes)
	a := base + k.runs[0].off
	if s.simdAccum(k, v.Data, a, v.HeadStride, int(L), 1, true, j0, 0, xa, ya) {
		return
	}
	for h := range xa {
		var A, B uint64
		if k.w == 8 {
			A, B = s.sumMix(k, v.Data[a:a+L], h, j0)
		} else {
			A, B = k.sum(v.Data[a : a+L])
		}
		xa[h] += A
		ya[h] += j0*A + B
		a += v.HeadStride
	}
}

// pieceRunRow is stripeRow for a walk whose runs each hold one piece of
// every head, heads adjacent (a row-split state stored with the split
// axis last). Heads go in tiles whose sums stay in the first-level cache,
// each tile's runs read front to back.
func (s *scratch) pieceRunRow(k *walk, base int64, tok0 int, xa, ya []uint64, n int) {
	v := k.v
	w := int64(k.w)
	j0 := uint64(tok0) * k.P
	for t := range n {
		jt := j0 + uint64(t)*k.P
		a := base + int64(t)*v.TokenStride
		for h0 := 0; h0 < len(xa); h0 += pieceTile {
			h1 := min(h0+pieceTile, len(xa))
			for _, r := range k.runs {
				a := a + r.off + int64(h0)*w
				s.pieces(k, v.Data[a:a+int64(h1-h0)*w], jt+uint64(r.q/k.w), h0, xa[h0:h1], ya[h0:h1])
			}
		}
	}
}

// runsRow is stripeRow for a walk whose runs lie apart from each other's
// cells: run by run, each over the row's tokens and heads in the order of
// the nearer axis, through the SIMD kernel where the runs are evenly
// spaced.
func (s *scratch) runsRow(k *walk, base int64, tok0 int, xa, ya []uint64, n int) {
	v := k.v
	data := v.Data
	C := int64(v.CellBytes)
	w := int64(k.w)
	for ri := range k.runs {
		r := &k.runs[ri]
		L := int64(r.n)
		jr := uint64((int64(tok0)*C + int64(r.q)) / w) // the run's first piece in token 0
		if k.tokensInner {
			if r.aligned && v.HeadStride == int64(n)*v.TokenStride && s.simdAccum(k, data, base+r.off, v.TokenStride, r.n, n, false, jr, 0, xa, ya) {
				continue // evenly spaced (hnd, whole kernel row): one call
			}
			for h := range xa {
				a := base + int64(h)*v.HeadStride + r.off
				if r.aligned && s.simdAccum(k, data, a, v.TokenStride, r.n, n, false, jr, h, xa[h:h+1], ya[h:h+1]) {
					continue
				}
				var x, y uint64
				for t := range n {
					jb := uint64((int64(tok0+t)*C + int64(r.q)) / w)
					A, B := s.accMix(k, data[a:a+L], r, h, jb)
					x += A
					y += jb*A + B
					a += v.TokenStride
				}
				xa[h] += x
				ya[h] += y
			}
			continue
		}
		if r.aligned && v.TokenStride == int64(len(xa))*v.HeadStride && s.simdAccum(k, data, base+r.off, v.HeadStride, r.n, n, true, jr, 0, xa, ya) {
			continue // evenly spaced (flash, nhd): one call for the kernel row
		}
		for t := range n {
			jb := uint64((int64(tok0+t)*C + int64(r.q)) / w)
			a := base + int64(t)*v.TokenStride + r.off
			if r.aligned && s.simdAccum(k, data, a, v.HeadStride, r.n, 1, true, jb, 0, xa, ya) {
				continue
			}
			if k.w == 8 && r.aligned {
				// The common case (attention K or V of each head).
				for h := range xa {
					A, B := s.sumMix(k, data[a:a+L], h, jb)
					xa[h] += A
					ya[h] += jb*A + B
					a += v.HeadStride
				}
				continue
			}
			for h := range xa {
				A, B := s.accMix(k, data[a:a+L], r, h, jb)
				xa[h] += A
				ya[h] += jb*A + B
				a += v.HeadStride
			}
		}
	}
}

// cellsRow is stripeRow for a walk whose runs interleave with other
// cells: cell by cell, runs innermost, in the order of the nearer axis.
func (s *scratch) cellsRow(k *walk, base int64, tok0 int, xa, ya []uint64, n int) {
	v := k.v
	C := int64(v.CellBytes)
	w := int64(k.w)
	outer, inner := n, len(xa)
	ostride, istride := v.TokenStride, v.HeadStride
	if k.tokensInner {
		outer, inner, ostride, istride = len(xa), n, v.HeadStride, v.TokenStride
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
				A, B := s.accMix(k, v.Data[a:a+int64(r.n)], r, h, jb)
				xa[h] += A
				ya[h] += jb*A + B
			}
		}
	}
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

// pieceTile is how many heads' sums (16 bytes each) the piece-by-piece
// walk keeps hot at a time.
const pieceTile = 1024

// pieces adds a stretch of pieces, piece h to head h (local head h0+h),
// all at index j; 8-byte pieces are mixed too when the mix check is on.
func (s *scratch) pieces(k *walk, p []byte, j uint64, h0 int, xa, ya []uint64) {
	switch k.w {
	case 8:
		mix := s.mixOn && k.mixInRuns
		for h := range xa {
			x := binary.LittleEndian.Uint64(p[8*h:])
			xa[h] += x
			ya[h] += j * x
			if mix {
				s.mix += Mix(x ^ s.key(k, h0+h, j))
			}
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

// mixRow adds to the row's mix check the first n tokens of the kernel row
// at base (its first token tok0 of the block), for a walk whose mix words
// are not the pieces of its runs (state rows of 2- and 4-byte elements,
// runs that are not whole pieces): each cell is assembled in logical
// order and zero-padded to whole words (docs/spec.md §14).
func (s *scratch) mixRow(k *walk, base int64, tok0 int, n int) {
	v := k.v
	for t := range n {
		for h := range k.keys {
			a := base + int64(t)*v.TokenStride + int64(h)*v.HeadStride
			cell := s.cell[:0]
			for _, r := range v.Runs {
				cell = append(cell, v.Data[a+r.Offset:a+r.Offset+int64(r.Len)]...)
			}
			for len(cell)%8 != 0 {
				cell = append(cell, 0)
			}
			s.cell = cell
			s.mix += mixWords(cell, s.key(k, h, uint64(tok0+t)*k.W))
		}
	}
}
