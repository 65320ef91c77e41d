package drill

import (
	"context"
	"fmt"
	mathbits "math/bits"
	"sync"
	"sync/atomic"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
)

// explainer is one Explain: both sides and every request's state.
type explainer struct {
	ctx     context.Context
	p, c    *side
	reqs    []*reqState
	threads int
	// early are the index entries at offset 0 that compare hashed, by
	// group, for the block positions it covered whole (covered).
	early   map[int][][]entry
	covered map[cover]bool
}

// cover names the cells of one side's request at one block position of a
// group.
type cover struct {
	group   int
	side    uint8
	ri, pos int32
}

// reqState is what the drill-down gathers for one request.
type reqState struct {
	req   *Request
	pri   int // the producer request's index in the producer's ids, -1 when none
	cri   int // the consumer request's, -1 when none
	notes []string
	units []*unit
	// stateParts are the state groups' differing views.
	stateParts []stateParts
	budget     atomic.Int64
	// positions are the (group, position)s of the attention groups to
	// compare, unreadable those in device memory; quiet[group] lists the
	// positions where no cell differs, found[group] says whether any
	// position of it differs.
	positions  [][2]int
	unreadable map[[2]int]bool
	quiet      map[int][]int
	found      map[int]bool
}

// unit is the work of comparing one consumer cache (all its heads) at one
// mismatching block position of one request.
type unit struct {
	rs     *reqState
	cg, pg *sideGroup // the group on each side
	S      int        // the consumer's block size
	group  int
	pos    int
	ci     int // the consumer cache, in its sideGroup
	block  int // the consumer block id at pos
	lo, hi int // the tokens compared
	// diffs are the differing heads (allocated once, for every head, at
	// the first), masks their differing tokens.
	diffs []slice
	masks []uint64
	// early are the index entries (offset 0) of the cells at lo that
	// compare hashed, of both sides; whole says it hashed every head.
	early []entry
	whole bool
}

// slice is one differing (layer, global head, replica) of a unit. It
// holds no pointer, so that the garbage collector need not look into
// the many a fully differing pair has.
type slice struct {
	lh    int32 // local head in the consumer cache
	head  int32 // global head
	pci   int32 // the producer cache, in its sideGroup
	first int32 // first and last differing tokens
	last  int32
	cells int32 // differing cells
	mask  int32 // the differing tokens are u.masks[mask:], bit t-u.lo
	zero  bool  // every differing consumer cell is all zero
	hint  hint
	bytes int64
	bits  int64
	sumC  uint64
	sumP  uint64
	off   int64  // file offset of the first differing byte
	hash  uint64 // hashCell of the first differing cell
}

// hint is what a slice's difference looks like, as data; text writes it.
type hint struct {
	kind hintKind
	side uint8 // hintRequest: 0 the producer, 1 the consumer
	arg  int32 // the other head, layer, position or request index
}

type hintKind uint8

const (
	hintNone hintKind = iota
	hintZeroed
	hintTokens
	hintHeads
	hintLayers
	hintPosition
	hintRequest
	hintFlips
	hintRandom
)

// ref is a slice of a unit.
type ref struct {
	u *unit
	i int
}

func (r ref) s() *slice { return &r.u.diffs[r.i] }

// differs says whether token t of slice s of unit u differs.
func (u *unit) differs(s *slice, t int) bool {
	i := t - u.lo
	return u.masks[int(s.mask)+i/64]&(1<<(i%64)) != 0
}

// run drills every request down: plans the units, compares them in
// parallel, classifies what differs and adds the state groups.
func (e *explainer) run() error {
	var units []*unit
	for _, rs := range e.reqs {
		units = append(units, e.plan(rs)...)
	}
	if err := e.parallel(len(units), func(w *worker, i int) { w.compare(units[i]) }); err != nil {
		return err
	}
	n := 0
	for _, u := range units {
		n += len(u.diffs)
	}
	diffs := make([]ref, 0, n)
	for _, u := range units {
		for i := range u.diffs {
			diffs = append(diffs, ref{u, i})
		}
	}
	for _, rs := range e.reqs {
		rs.settle()
	}
	e.collectEarly(units)
	if err := e.classify(diffs); err != nil {
		return err
	}
	for _, rs := range e.reqs {
		if err := e.stateGroups(rs); err != nil {
			return err
		}
	}
	return nil
}

// plan lists the units of one request's attention groups and notes what
// cannot be compared.
func (e *explainer) plan(rs *reqState) []*unit {
	rs.quiet, rs.found, rs.unreadable = map[int][]int{}, map[int]bool{}, map[[2]int]bool{}
	pri, okp := e.p.index[rs.req.ProducerID]
	cri, okc := e.c.index[rs.req.ID]
	rs.pri, rs.cri = -1, -1
	if !okp || !okc {
		rs.notes = append(rs.notes, "no drill-down: the request is not in both sides' dumps")
		return nil
	}
	rs.pri, rs.cri = pri, cri
	var units []*unit
	for _, g := range rs.req.Groups {
		cg := e.c.group(g.ID)
		if len(cg.caches) > 0 && cg.caches[0].Group.Kind == layout.KindMamba {
			continue // stateGroups
		}
		if len(cg.caches) == 0 {
			rs.notes = append(rs.notes, fmt.Sprintf("group %d: no drill-down: the consumer's dumps do not hold its caches", g.ID))
			continue
		}
		S := cg.caches[0].Group.BlockSize
		ptokens := e.p.group(g.ID).tokens[pri]
		for _, pos := range g.Positions {
			rs.positions = append(rs.positions, [2]int{g.ID, pos})
			lo, hi := pos*S, min((pos+1)*S, cg.tokens[cri], ptokens)
			unreadable := false
			for ci, c := range cg.caches {
				if c.View.Cells.Data == nil {
					unreadable = true
					continue
				}
				b, ok := cg.block(e.c, ci, cri, pos)
				if !ok || lo >= hi {
					continue
				}
				u := &unit{rs: rs, cg: cg, pg: e.p.group(g.ID), S: S, group: g.ID, pos: pos, ci: ci, block: b, lo: lo, hi: hi}
				rs.units = append(rs.units, u)
				units = append(units, u)
			}
			if unreadable {
				rs.unreadable[[2]int{g.ID, pos}] = true
				rs.notes = append(rs.notes, fmt.Sprintf("group %d position %d: some caches are in device memory and were not compared", g.ID, pos))
			}
		}
	}
	return units
}

// collectEarly keeps the entries compare hashed for the block positions
// whose every index entry of offset 0 it hashed (each side's cells that
// indexCells would index there). Units come by request, group and
// position, so a position's units are consecutive.
func (e *explainer) collectEarly(units []*unit) {
	e.early, e.covered = map[int][][]entry{}, map[cover]bool{}
	seen := map[int][]int32{} // per producer group: stamp of each (cache, head)
	stamp := int32(0)
	for i := 0; i < len(units); {
		u := units[i]
		j := i + 1
		for j < len(units) && units[j].rs == u.rs && units[j].group == u.group && units[j].pos == u.pos {
			j++
		}
		pg, cg := u.pg, u.cg
		marks := seen[u.group]
		if marks == nil {
			marks = make([]int32, pg.flat(len(pg.caches), 0))
			seen[u.group] = marks
		}
		stamp++
		var pe, ce []entry
		for _, x := range units[i:j] {
			for _, en := range x.early {
				if en.side == 1 {
					ce = append(ce, en)
				} else if f := pg.flat(int(en.ci), int(en.lh)); marks[f] != stamp {
					marks[f] = stamp
					pe = append(pe, en)
				}
			}
		}
		for sd, ens := range [][]entry{pe, ce} {
			if len(ens) == 0 {
				continue
			}
			s, g := e.p, pg
			if sd == 1 {
				s, g = e.c, cg
			}
			k := cover{u.group, uint8(sd), ens[0].ri, int32(u.pos)}
			if !e.covered[k] && len(ens) == e.indexable(s, g, int(k.ri), u.pos) {
				e.covered[k] = true
				e.early[u.group] = append(e.early[u.group], ens)
			}
		}
		i = j
	}
}

// indexable counts the cells indexCells indexes at offset 0 of block
// position pos of request ri of one side.
func (e *explainer) indexable(s *side, g *sideGroup, ri, pos int) int {
	n := 0
	S := e.blockSize(g.id)
	for ci, heads := range g.indexed {
		if len(heads) > 0 {
			if _, ok := g.addr(s, ci, ri, heads[0], pos*S); ok {
				n += len(heads)
			}
		}
	}
	return n
}

// settle notes, per group, whether any position differs and which
// compared positions do not.
func (rs *reqState) settle() {
	differs := map[[2]int]bool{}
	for _, u := range rs.units {
		k := [2]int{u.group, u.pos}
		differs[k] = differs[k] || len(u.diffs) > 0
	}
	for _, pp := range rs.positions {
		switch {
		case differs[pp]:
			rs.found[pp[0]] = true
		case !rs.unreadable[pp]:
			rs.quiet[pp[0]] = append(rs.quiet[pp[0]], pp[1])
		}
	}
}

// worker is one goroutine's scratch.
type worker struct {
	e        *explainer
	segs     segCache
	heads    []headCmp // compare's, and the consumer cache's first head
	headBase int
}

// parallel calls fn(w, i) for i in [0, n) on e.threads goroutines, each
// inside layout.Guard, and returns the first error (a fault on mapped
// data, a recovered panic as an internal error, or ctx's).
func (e *explainer) parallel(n int, fn func(w *worker, i int)) error {
	if n == 0 {
		return e.ctx.Err()
	}
	var next atomic.Int64
	threads := min(e.threads, n)
	step := min(max(n/(threads*64), 1), 256) // items taken at a time
	errs := make([]error, threads)
	var wg sync.WaitGroup
	for t := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					errs[t] = checksum.Recovered("drill-down worker", r)
					next.Store(int64(n))
				}
			}()
			w := &worker{e: e, segs: segCache{}}
			errs[t] = layout.Guard("dump data during the drill-down", func() error {
				for {
					i := int(next.Add(int64(step)) - int64(step))
					if i >= n {
						return nil
					}
					if err := e.ctx.Err(); err != nil {
						return err
					}
					for k := i; k < min(i+step, n); k++ {
						fn(w, k)
					}
				}
			})
			if errs[t] != nil {
				next.Store(int64(n)) // stop the others
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return e.ctx.Err()
}

// headCmp is how one head of a unit is compared: the producer cache
// holding it and the segments of a cell in both views.
type headCmp struct {
	ok   bool
	pci  int
	plh  int // the head in the producer cache
	pv   *layout.CellView
	segs segList
	s    int // the head's slice in u.diffs, -1 while none differs
	// firstOff is head's: the first differing logical byte of the first
	// differing cell.
	firstOff int
}

// compare compares every head of a unit's consumer cache, token by token
// in place, with the producer's cells of the same layer and head, in the
// consumer's memory order (heads inner where a token's heads are
// nearer than a head's tokens).
func (w *worker) compare(u *unit) {
	cg, pg := u.cg, u.pg
	c := cg.caches[u.ci]
	cv := &c.View.Cells
	name := c.View.Layer.Name
	hs := w.heads[:0]
	for lh := range c.View.Heads {
		head := c.View.HeadBase + lh
		h := headCmp{s: -1}
		if pci, ok := pg.find(name, head, -1); ok {
			pc := pg.caches[pci]
			if pv := &pc.View.Cells; pv.Data != nil {
				h = headCmp{ok: true, pci: pci, plh: head - pc.View.HeadBase, pv: pv, segs: w.segs.get(cv, pv), s: -1}
			}
		}
		hs = append(hs, h)
	}
	w.heads, w.headBase = hs, c.View.HeadBase
	S := c.Group.BlockSize
	// Hash the cells at lo, the index entries of offset 0 (classify's most
	// needed), while they are at hand.
	u.whole = true
	for lh, h := range hs {
		if !h.ok {
			u.whole = false
			continue
		}
		x := cv.CellAddr(u.block, u.lo%S, lh)
		u.early = append(u.early, entry{hash: hashCell(cv, x), side: 1, ri: int32(u.rs.cri), pos: int32(u.pos), ci: int32(u.ci), lh: int32(lh)})
		if y, ok := pg.addr(w.e.p, h.pci, u.rs.pri, h.plh, u.lo); ok {
			u.early = append(u.early, entry{hash: hashCell(h.pv, y), side: 0, ri: int32(u.rs.pri), pos: int32(u.pos), ci: int32(h.pci), lh: int32(h.plh)})
		}
	}
	if cv.TokenStride >= 0 {
		for lh := range hs {
			if h := &hs[lh]; h.ok && h.pv.TokenStride >= 0 {
				w.head(u, c, lh)
			}
		}
		return
	}
	if c.View.Heads == 1 || cv.TokenStride <= cv.HeadStride {
		for lh := range hs {
			for t := u.lo; t < u.hi; t++ {
				w.cell(u, cv, S, lh, t)
			}
		}
		return
	}
	for t := u.lo; t < u.hi; t++ {
		for lh := range hs {
			w.cell(u, cv, S, lh, t)
		}
	}
}

// head compares the cells of local head lh of a unit, a run of tokens
// at a time: the tokens of one kernel block on each side (whose cells are
// evenly spaced), at most 32.
func (w *worker) head(u *unit, c cache, lh int) {
	e := w.e
	h := &w.heads[lh]
	cv, pv := &c.View.Cells, h.pv
	pc := u.pg.caches[h.pci]
	KT, KB := cv.KernelTokens, cv.KernelBlocks
	pKT, pS := pv.KernelTokens, pc.Group.BlockSize
	var first, last, cells int
	var firstX int64
	var bytes, bits int
	var sumC, sumP uint64
	zero := true
	words := (u.hi - u.lo + 63) / 64
	var mask []uint64
	for t0 := u.lo; t0 < u.hi; {
		slot := t0 - u.lo
		kr, ct := slot/KT, slot%KT
		t1 := min(u.hi, t0+KT-ct, t0+pKT-(t0%pS)%pKT, t0+32)
		y, ok := u.pg.addr(e.p, h.pci, u.rs.pri, h.plh, t0)
		if !ok {
			t0 = t1
			continue
		}
		x := cv.Addr(u.block*KB+kr, ct, lh)
		tc := tokCells{firstTok: -1}
		diffTokens(cv.Data, x, cv.TokenStride, pv.Data, y, pv.TokenStride, t1-t0, h.segs, &tc)
		if tc.differs != 0 {
			if mask == nil {
				first, firstX = t0+tc.firstTok, x+int64(tc.firstTok)*cv.TokenStride
				mask = make([]uint64, words)
				h.firstOff = tc.firstOff
			}
			for m := tc.differs; m != 0; m &= m - 1 {
				i := t0 - u.lo + mathbits.TrailingZeros64(m)
				mask[i/64] |= 1 << (i % 64)
				last = u.lo + i
				cells++
			}
			zero = zero && tc.differs&tc.nonzero == 0
			bytes += tc.bytes
			bits += tc.bits
		}
		sumC += tc.sumC
		sumP += tc.sumP
		t0 = t1
	}
	if mask == nil {
		return
	}
	if u.diffs == nil {
		u.diffs = make([]slice, 0, len(w.heads))
	}
	k := len(u.masks)
	u.masks = append(u.masks, mask...)
	u.diffs = append(u.diffs, slice{
		lh: int32(lh), head: int32(w.headBase + lh), pci: int32(h.pci), first: int32(first), last: int32(last), cells: int32(cells),
		mask: int32(k), zero: zero, bytes: int64(bytes), bits: int64(bits), sumC: sumC, sumP: sumP,
		off: fileOffset(cv, firstX, h.firstOff), hash: hashCell(cv, firstX),
	})
}

// cell compares the consumer's cell of local head lh at token t with the
// producer's, and adds it to the head's slice when it differs.
func (w *worker) cell(u *unit, cv *layout.CellView, S, lh, t int) {
	h := &w.heads[lh]
	if !h.ok {
		return
	}
	e := w.e
	y, ok := u.pg.addr(e.p, h.pci, u.rs.pri, h.plh, t)
	if !ok {
		return
	}
	x := cv.CellAddr(u.block, t%S, lh)
	var d cellDiff
	if !diffCells(cv.Data, x, h.pv.Data, y, h.segs, &d) {
		return
	}
	words := (u.hi - u.lo + 63) / 64
	if h.s < 0 {
		if u.diffs == nil {
			u.diffs = make([]slice, 0, len(w.heads))
		}
		k := len(u.diffs)
		u.diffs = append(u.diffs, slice{lh: int32(lh), head: int32(w.headBase + lh), pci: int32(h.pci), first: int32(t), mask: int32(len(u.masks)), zero: true, off: fileOffset(cv, x, d.first), hash: hashCell(cv, x)})
		u.masks = append(u.masks, make([]uint64, words)...)
		h.s = k
	}
	s := &u.diffs[h.s]
	i := t - u.lo
	u.masks[int(s.mask)+i/64] |= 1 << (i % 64)
	s.last = int32(t)
	s.cells++
	s.bytes += int64(d.bytes)
	s.bits += int64(d.bits)
	s.zero = s.zero && !d.nonzero
	s.sumC += d.sumC
	s.sumP += d.sumP
}
