package drill

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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
	// early are where the index entries at offset 0 that compare hashed
	// are, by group, for the block positions it covered whole (covered,
	// by position).
	early   map[int][]earlySpan
	covered map[coverKey][]bool
}

// coverKey names one side's request in a group.
type coverKey struct {
	group int
	side  uint8
	ri    int32
}

// reqState is what the drill-down gathers for one request.
type reqState struct {
	req   *Request
	pri   int // the producer request's index in the producer's ids, -1 when none
	cri   int // the consumer request's, -1 when none
	notes []string
	units []*unit
	// stateParts are the state groups' differing views, stateHeat their
	// heats.
	stateParts []stateParts
	stateHeat  []Heat
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
	// Compare in the consumer's memory order (cache by cache, block by
	// block) rather than position by position: the pages of a mapping
	// are then walked in order.
	type key struct{ dump, group, ci, block, i int }
	keys := make([]key, len(units))
	for i, u := range units {
		keys[i] = key{u.cg.caches[u.ci].Dump, u.group, u.ci, u.block, i}
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.dump, b.dump), cmp.Compare(a.group, b.group), cmp.Compare(a.ci, b.ci), cmp.Compare(a.block, b.block), cmp.Compare(a.i, b.i))
	})
	order := make([]*unit, len(units))
	for i, k := range keys {
		order[i] = units[k.i]
	}
	if err := e.parallel(len(order), func(w *worker, i int) { w.compare(order[i]) }); err != nil {
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
	var arena []unit // units are allocated a group's worth at a time
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
		pg := e.p.group(g.ID)
		ptokens := pg.tokens[pri]
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
				if len(arena) == cap(arena) {
					arena = make([]unit, 0, max(len(g.Positions)*len(cg.caches), 64))
				}
				arena = append(arena, unit{rs: rs, cg: cg, pg: pg, S: S, group: g.ID, pos: pos, ci: ci, block: b, lo: lo, hi: hi})
				u := &arena[len(arena)-1]
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

// collectEarly notes the block positions whose every index entry of
// offset 0 compare hashed (each side's cells that indexCells would index
// there), and where those entries are (e.early; indexes copies them).
// Units come by request, group and position, so a position's units are
// consecutive.
func (e *explainer) collectEarly(units []*unit) {
	e.early, e.covered = map[int][]earlySpan{}, map[coverKey][]bool{}
	var marks earlyMarks
	for i := 0; i < len(units); {
		u := units[i]
		j := i + 1
		for j < len(units) && units[j].rs == u.rs && units[j].group == u.group && units[j].pos == u.pos {
			j++
		}
		for sd, s := range []*side{e.p, e.c} {
			g, ri := u.pg, u.rs.pri
			if sd == 1 {
				g, ri = u.cg, u.rs.cri
			}
			sp := earlySpan{units: units[i:j], side: uint8(sd)}
			sp.n = marks.earlyEntries(sp, nil)
			if sp.n == 0 || sp.n != e.indexable(s, g, ri, u.pos) {
				continue
			}
			k := coverKey{u.group, uint8(sd), int32(ri)}
			cov := e.covered[k]
			if cov == nil {
				cov = make([]bool, (g.tokens[ri]+g.S-1)/max(g.S, 1)+1)
				e.covered[k] = cov
			}
			if u.pos < len(cov) && !cov[u.pos] {
				cov[u.pos] = true
				e.early[u.group] = append(e.early[u.group], sp)
			}
		}
		i = j
	}
}

// earlySpan is the entries of one side that the units of one block
// position hashed: n of them.
type earlySpan struct {
	units []*unit
	side  uint8
	n     int
}

// earlyMarks is the scratch of earlyEntries: m[g][g.flat(ci, lh)] ==
// stamp says the producer cell of (ci, lh) is taken already.
type earlyMarks struct {
	m     map[*sideGroup][]int32
	stamp int32
}

// earlyEntries fills dst with the entries of sp (the producer's cells
// once each: consumer caches may share one) or, with a nil dst, counts
// them; it returns their number.
func (em *earlyMarks) earlyEntries(sp earlySpan, dst []entry) int {
	var marks []int32
	pg := sp.units[0].pg
	if sp.side == 0 {
		if em.m == nil {
			em.m = map[*sideGroup][]int32{}
		}
		marks = em.m[pg]
		if marks == nil {
			marks = make([]int32, pg.flat(len(pg.caches), 0))
			em.m[pg] = marks
		}
		em.stamp++
	}
	n := 0
	for _, x := range sp.units {
		for _, en := range x.early {
			if en.side != sp.side {
				continue
			}
			if sp.side == 0 {
				f := pg.flat(int(en.ci), int(en.lh))
				if marks[f] == em.stamp {
					continue
				}
				marks[f] = em.stamp
			}
			if dst != nil {
				dst[n] = en
			}
			n++
		}
	}
	return n
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
	diff     itemsDiff // diffItems' result
	masks    []uint64  // the heads' differing tokens, compare's
	// entries, slices and maskBuf are where compare carves its units'
	// early, diffs and masks from (none holds a pointer).
	entries []entry
	slices  []slice
	maskBuf []uint64

	// headsOf is the consumer cache (unit's group and ci) w.heads was set
	// up for.
	headsOf *layout.LayerView
	headsPG *sideGroup
	strided bool
	marks   earlyMarks
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

// carve returns an empty slice of capacity n from the chunk at *buf,
// taking a new chunk when it has less room: one allocation for many
// units.
func carve[T any](buf *[]T, n int) []T {
	if cap(*buf)-len(*buf) < n {
		*buf = make([]T, 0, max(n, 4096))
	}
	b := *buf
	*buf = b[:len(b)+n]
	return b[len(b) : len(b) : len(b)+n]
}

// headCmp is how one head of a unit is compared: the producer cache
// holding it and the segments of a cell in both views; and what differs
// so far.
type headCmp struct {
	ok   bool
	pci  int
	plh  int // the head in the producer cache
	pv   *layout.CellView
	segs segList
	// The differing cells so far: how many, the first and last tokens,
	// the first's address and first differing logical byte, the counts,
	// whether every differing consumer cell is all zero, the sums of
	// every compared cell (equal ones add the same to both) and the
	// differing tokens (bit t-lo).
	cells, first, last int
	firstX             int64
	firstOff           int
	bytes, bits        int64
	zero               bool
	sumC, sumP         uint64
	mask               []uint64
	hashLo             uint64 // hashCell of the consumer's cell at lo
}

// add records that the cell of token t (at address x) differs.
func (h *headCmp) add(u *unit, t int, x int64, firstOff int, bytes, bits int64, zero bool) {
	if h.cells == 0 {
		h.first, h.firstX, h.firstOff, h.zero = t, x, firstOff, true
	}
	i := t - u.lo
	h.mask[i/64] |= 1 << (i % 64)
	h.cells++
	h.last = t
	h.bytes += bytes
	h.bits += bits
	h.zero = h.zero && zero
}

// compare compares every head of a unit's consumer cache, token by token
// in place, with the producer's cells of the same layer and head, in the
// consumer's memory order: a token's heads at a time where they are
// nearer each other than a head's tokens (token-major layouts), else a
// head's tokens at a time; runs of evenly spaced cells through the SIMD
// kernel (diffItems), others cell by cell.
func (w *worker) compare(u *unit) {
	cg, pg := u.cg, u.pg
	c := cg.caches[u.ci]
	cv := &c.View.Cells
	name := c.View.Layer.Name
	// The heads' producer caches and segments, once for the units of one
	// consumer cache (they come cache by cache).
	if w.headsOf != c.View || w.headsPG != pg {
		hs := w.heads[:0]
		w.strided = cv.TokenStride >= 0 && cv.HeadStride >= 0
		for lh := range c.View.Heads {
			head := c.View.HeadBase + lh
			h := headCmp{}
			if pci, ok := pg.find(name, head, -1); ok {
				pc := pg.caches[pci]
				if pv := &pc.View.Cells; pv.Data != nil {
					h = headCmp{ok: true, pci: pci, plh: head - pc.View.HeadBase, pv: pv, segs: w.segs.get(cv, pv)}
					w.strided = w.strided && pv.TokenStride >= 0 && pv.HeadStride >= 0
				}
			}
			hs = append(hs, h)
		}
		w.heads, w.headBase, w.headsOf, w.headsPG = hs, c.View.HeadBase, c.View, pg
	}
	hs := w.heads
	words := (u.hi - u.lo + 63) / 64
	w.masks = slices.Grow(w.masks[:0], len(hs)*words)[:len(hs)*words]
	clear(w.masks)
	for lh := range hs {
		h := &hs[lh]
		h.cells, h.bytes, h.bits, h.sumC, h.sumP = 0, 0, 0, 0, 0
		h.mask = w.masks[lh*words : (lh+1)*words]
	}
	strided := w.strided
	S := c.Group.BlockSize
	switch {
	case !strided:
		for lh := range hs {
			for t := u.lo; t < u.hi; t++ {
				w.cell(u, cv, S, lh, t)
			}
		}
	case c.View.Heads > 1 && cv.TokenStride > cv.HeadStride:
		for t := u.lo; t < u.hi; t++ {
			w.token(u, c, t)
		}
	default:
		for lh := range hs {
			if hs[lh].ok {
				w.head(u, c, lh)
			}
		}
	}
	// Hash the cells at lo, the index entries of offset 0 (classify's most
	// needed), while they are still in the processor's caches.
	u.whole = true
	ndiff := 0
	for lh := range hs {
		h := &hs[lh]
		if !h.ok {
			u.whole = false
			continue
		}
		if h.cells > 0 {
			ndiff++
		}
		if u.early == nil {
			u.early = carve(&w.entries, 2*len(hs))
		}
		x := cv.CellAddr(u.block, u.lo%S, lh)
		h.hashLo = hashCell(cv, x)
		u.early = append(u.early, entry{hash: h.hashLo, side: 1, ri: int32(u.rs.cri), pos: int32(u.pos), ci: int32(u.ci), lh: int32(lh)})
		if y, ok := pg.addr(w.e.p, h.pci, u.rs.pri, h.plh, u.lo); ok {
			u.early = append(u.early, entry{hash: hashCell(h.pv, y), side: 0, ri: int32(u.rs.pri), pos: int32(u.pos), ci: int32(h.pci), lh: int32(h.plh)})
		}
	}
	if ndiff > 0 {
		u.diffs = carve(&w.slices, ndiff)
		u.masks = carve(&w.maskBuf, ndiff*words)
	}
	for lh := range hs {
		h := &hs[lh]
		if h.cells == 0 {
			continue
		}
		k := len(u.masks)
		u.masks = append(u.masks, h.mask...)
		hash := h.hashLo
		if h.first != u.lo {
			hash = hashCell(cv, h.firstX)
		}
		u.diffs = append(u.diffs, slice{
			lh: int32(lh), head: int32(w.headBase + lh), pci: int32(h.pci), first: int32(h.first), last: int32(h.last), cells: int32(h.cells),
			mask: int32(k), zero: h.zero, bytes: h.bytes, bits: h.bits, sumC: h.sumC, sumP: h.sumP,
			off: fileOffset(cv, h.firstX, h.firstOff), hash: hash,
		})
	}
}

// items adds what diffItems found for count items starting at local head
// lh0 and token t0 (lh advancing with the item for a token's heads, t
// for a head's tokens), the first item's consumer cell at x, items
// stride apart.
func (w *worker) items(u *unit, d *itemsDiff, count, lh0, t0 int, x, stride int64, byHead bool) {
	n := int64(d.n)
	for i := range count {
		lh, t := lh0, t0+i
		if byHead {
			lh, t = lh0+i, t0
		}
		h := &w.heads[lh]
		it := &d.items[i]
		h.sumC += it.sumA
		h.sumP += it.sumB
		if d.differs&(1<<i) == 0 {
			continue
		}
		h.add(u, t, x+int64(i)*stride, int(it.first), n-int64(it.equal), int64(it.bits), d.nonzero&(1<<i) == 0)
	}
}

// token compares the cells of token t of every head of a unit, the heads
// that one producer cache holds one after the other at a time.
func (w *worker) token(u *unit, c cache, t int) {
	cv := &c.View.Cells
	slot := t - u.lo
	KT, KB := cv.KernelTokens, cv.KernelBlocks
	for lh0 := 0; lh0 < len(w.heads); {
		h0 := &w.heads[lh0]
		if !h0.ok {
			lh0++
			continue
		}
		n := 1
		for n < 32 && lh0+n < len(w.heads) {
			h := &w.heads[lh0+n]
			if !h.ok || h.pci != h0.pci || h.plh != h0.plh+n {
				break
			}
			n++
		}
		y, ok := u.pg.addr(w.e.p, h0.pci, u.rs.pri, h0.plh, t)
		if ok {
			x := cv.Addr(u.block*KB+slot/KT, slot%KT, lh0)
			d := &w.diff
			d.reset(n)
			diffItems(cv.Data, x, cv.HeadStride, h0.pv.Data, y, h0.pv.HeadStride, n, h0.segs, d)
			w.items(u, d, n, lh0, t, x, cv.HeadStride, true)
		}
		lh0 += n
	}
}

// head compares the cells of local head lh of a unit, a run of tokens at
// a time: the tokens of one kernel block on each side (whose cells are
// evenly spaced), at most 32.
func (w *worker) head(u *unit, c cache, lh int) {
	h := &w.heads[lh]
	cv, pv := &c.View.Cells, h.pv
	pc := u.pg.caches[h.pci]
	KT, KB := cv.KernelTokens, cv.KernelBlocks
	pKT, pS := pv.KernelTokens, pc.Group.BlockSize
	for t0 := u.lo; t0 < u.hi; {
		slot := t0 - u.lo
		kr, ct := slot/KT, slot%KT
		t1 := min(u.hi, t0+KT-ct, t0+pKT-(t0%pS)%pKT, t0+32)
		if y, ok := u.pg.addr(w.e.p, h.pci, u.rs.pri, h.plh, t0); ok {
			x := cv.Addr(u.block*KB+kr, ct, lh)
			d := &w.diff
			d.reset(t1 - t0)
			diffItems(cv.Data, x, cv.TokenStride, pv.Data, y, pv.TokenStride, t1-t0, h.segs, d)
			w.items(u, d, t1-t0, lh, t0, x, cv.TokenStride, false)
		}
		t0 = t1
	}
}

// cell compares the consumer's cell of local head lh at token t with the
// producer's, cell by cell.
func (w *worker) cell(u *unit, cv *layout.CellView, S, lh, t int) {
	h := &w.heads[lh]
	if !h.ok {
		return
	}
	y, ok := u.pg.addr(w.e.p, h.pci, u.rs.pri, h.plh, t)
	if !ok {
		return
	}
	x := cv.CellAddr(u.block, t%S, lh)
	var d cellDiff
	if !diffCells(cv.Data, x, h.pv.Data, y, h.segs, &d) {
		return
	}
	h.sumC += d.sumC
	h.sumP += d.sumP
	h.add(u, t, x, d.first, int64(d.bytes), int64(d.bits), !d.nonzero)
}
