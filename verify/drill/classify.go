package drill

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/kvaudit/kvaudit/layout"
)

// searchBudget bounds the cells one request's classification compares
// looking for where a differing cell came from.
const searchBudget = 1 << 20

// spend takes one cell from the request's search budget, reporting false
// once it is spent.
func (rs *reqState) spend() bool { return rs.budget.Add(-1) >= 0 }

// classify gives every differing slice its hint. Exact explanations come
// first (every differing consumer cell equals a producer cell from
// elsewhere: another token of the block, another head, another layer,
// another position, or another request on either side), then zeroed
// cells, then a few flipped bits, else random bytes. Zeroed cells are
// told apart first, being cheap; tokens swapped are looked for only when
// the differing cells' sums agree; the other sources are found by the
// hash of the first differing cell in an index of every cell at the same
// offset of a block position (indexes), then compared cell by cell.
func (e *explainer) classify(diffs []ref) error {
	rest := make([]ref, 0, len(diffs))
	var swaps []ref // those whose differing cells add up the same on both sides
	for _, r := range diffs {
		s := r.s()
		switch {
		case s.zero:
			s.hint = hint{kind: hintZeroed}
			continue
		case s.cells >= 2 && s.sumC == s.sumP:
			swaps = append(swaps, r)
		}
		rest = append(rest, r)
	}
	if len(swaps) > 0 {
		if err := e.parallel(len(swaps), func(w *worker, i int) {
			if r := swaps[i]; w.tokensSwapped(r.u, r.s()) {
				r.s().hint = hint{kind: hintTokens}
			}
		}); err != nil {
			return err
		}
		rest = slices.DeleteFunc(rest, func(r ref) bool { return r.s().hint.kind != hintNone })
	}
	idx, err := e.indexes(rest)
	if err != nil {
		return err
	}
	return e.parallel(len(rest), func(w *worker, i int) {
		u, s := rest[i].u, rest[i].s()
		if s.hint = w.source(u, s, idx[ikey{u.group, int(s.first) - u.lo}]); s.hint.kind != hintNone {
			return
		}
		if s.bits <= FlipBits {
			s.hint = hint{kind: hintFlips}
		} else {
			s.hint = hint{kind: hintRandom}
		}
	})
}

// blockSize is the consumer's block size of a group.
func (e *explainer) blockSize(group int) int {
	return e.c.group(group).S
}

// tokensSwapped says whether each differing consumer cell of s is the
// producer's cell of another token of the block (the differing cells
// adding up the same on both sides, as a permutation of them does).
func (w *worker) tokensSwapped(u *unit, s *slice) bool {
	if s.cells < 2 || s.sumC != s.sumP {
		return false
	}
	e := w.e
	cg, pg := u.cg, u.pg
	cv, pv := &cg.caches[u.ci].View.Cells, &pg.caches[s.pci].View.Cells
	plh := int(s.head) - pg.caches[s.pci].View.HeadBase
	segs := w.segs.get(cv, pv)
	for t := int(s.first); t <= int(s.last); t++ {
		if !u.differs(s, t) {
			continue
		}
		x := cv.CellAddr(u.block, t%u.S, int(s.lh))
		found := false
		for v := u.lo; v < u.hi && !found; v++ {
			if v == t || !u.rs.spend() {
				continue
			}
			y, ok := pg.addr(e.p, int(s.pci), u.rs.pri, plh, v)
			found = ok && equalCells(cv.Data, x, pv.Data, y, segs)
		}
		if !found {
			return false
		}
	}
	return true
}

// ikey names an index: the cells at offset k of every block position
// (of the consumer's block size) of a group.
type ikey struct{ group, k int }

// entry is one cell of an index: request ri of side (0 the producer, 1
// the consumer) at token pos*S + k, local head lh of cache ci.
type entry struct {
	hash        uint64
	side        uint8
	ri, pos, ci int32
	lh          int32
}

// index is a hash table of entries: a counting Bloom filter of their
// hashes (two 2-bit saturating counters per hash, 16 counters per
// entry), so that most hashes held once are told apart at one read, and
// a table of the entries the filter cannot tell apart so: head[bucket]
// is the first such entry (an index in entries) of the bucket, next[i]
// the one after the i-th entry of the table (-1 ends).
type index struct {
	entries    []entry
	counts     []uint64
	cshift     uint
	head, next []int32
	at         []int32 // the table's entries, by index in next
	shift      uint
}

func (x *index) bucket(h uint64) uint64 { return (h * 0x9e3779b97f4a7c15) >> x.shift }

// probes returns the two counters of hash h.
func (x *index) probes(h uint64) (uint64, uint64) {
	return (h * 0x9e3779b97f4a7c15) >> x.cshift, (h * 0xc2b2ae3d27d4eb4f) >> x.cshift
}

// count returns counter i.
func (x *index) count(i uint64) uint64 { return x.counts[i/32] >> (2 * (i % 32)) & 3 }

// bump adds one to counter i, saturating at 3.
func (x *index) bump(i uint64) {
	if x.count(i) < 3 {
		x.counts[i/32] += 1 << (2 * (i % 32))
	}
}

// once says whether at most one entry has hash h; false may also mean
// that the filter cannot tell (1-2% of the hashes held once). Counters
// never undercount, so true is always right.
func (x *index) once(h uint64) bool {
	a, b := x.probes(h)
	return min(x.count(a), x.count(b)) <= 1
}

// newIndex builds the index of entries on up to threads goroutines: each
// counts a share of the entries in a filter of its own, the filters are
// added up, and each picks the entries of its share for the table.
func newIndex(entries []entry, threads int) *index {
	cbits := uint(5)
	for 1<<cbits < 16*len(entries) {
		cbits++
	}
	x := &index{entries: entries, cshift: 64 - cbits}
	parts := max(min(threads, len(entries)/(1<<16)), 1) // small indexes on one
	share := func(p int) []entry { return entries[p*len(entries)/parts : (p+1)*len(entries)/parts] }
	filters := make([]*index, parts)
	at := make([][]int32, parts)
	run := func(fn func(p int)) {
		var wg sync.WaitGroup
		for p := range parts {
			wg.Go(func() { fn(p) })
		}
		wg.Wait()
	}
	run(func(p int) {
		f := &index{counts: make([]uint64, 1<<cbits/32), cshift: x.cshift}
		for _, en := range share(p) {
			a, b := f.probes(en.hash)
			f.bump(a)
			f.bump(b)
		}
		filters[p] = f
	})
	x.counts = filters[0].counts
	for _, f := range filters[1:] {
		for i, w := range f.counts {
			x.counts[i] = addCounters(x.counts[i], w)
		}
	}
	// The table holds only the entries whose hash once cannot tell apart:
	// any other hash looked up has no such entry.
	run(func(p int) {
		base := int32(p * len(entries) / parts)
		for i, en := range share(p) {
			if !x.once(en.hash) {
				at[p] = append(at[p], base+int32(i))
			}
		}
	})
	x.at = slices.Concat(at...)
	bits := uint(1)
	for 1<<bits < 2*len(x.at) {
		bits++
	}
	x.head, x.next, x.shift = make([]int32, 1<<bits), make([]int32, len(x.at)), 64-bits
	for i := range x.head {
		x.head[i] = -1
	}
	for j, i := range x.at {
		b := x.bucket(entries[i].hash)
		x.next[j] = x.head[b]
		x.head[b] = int32(j)
	}
	return x
}

// addCounters adds the 32 2-bit counters of a and b, each saturating at
// 3.
func addCounters(a, b uint64) uint64 {
	const lo = 0x5555555555555555
	a0, b0 := a&lo, b&lo
	a1, b1 := a>>1&lo, b>>1&lo
	c0 := a0 & b0              // carry into the high bit
	s0, s1 := a0^b0, a1^b1^c0  // the sum's bits
	over := a1&b1 | c0&(a1^b1) // the sum is 4 or more
	return (s0 | over) | (s1|over)<<1
}

// shared calls fn for each entry with hash h when more than one entry
// may have it (once(h) is false), and does nothing when at most one has:
// the table does not hold that one.
func (x *index) shared(h uint64, fn func(en entry)) {
	if x == nil || x.once(h) {
		return
	}
	for j := x.head[x.bucket(h)]; j >= 0; j = x.next[j] {
		if en := x.entries[x.at[j]]; en.hash == h {
			fn(en)
		}
	}
}

// indexes builds the index of every (group, offset) the slices need: the
// cells of every request of both sides at that offset of each block
// position, of every producer cache (the copy find prefers) and every
// consumer cache.
func (e *explainer) indexes(rest []ref) (map[ikey]*index, error) {
	need := map[ikey]bool{}
	last := ikey{-1, -1}
	for _, r := range rest {
		// Most slices differ from their first token on: one key for long
		// runs of them.
		if k := (ikey{r.u.group, int(r.s().first) - r.u.lo}); k != last {
			need[k], last = true, k
		}
	}
	type task struct {
		key  ikey
		side uint8
		ri   int
	}
	var tasks []task
	for _, k := range slices.SortedFunc(maps.Keys(need), func(a, b ikey) int { return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.k, b.k)) }) {
		for sd, s := range []*side{e.p, e.c} {
			for ri := range s.ids {
				tasks = append(tasks, task{k, uint8(sd), ri})
			}
		}
	}
	// Count each task's entries, then fill one array per index in place
	// (after the entries compare hashed).
	counts := make([]int, len(tasks))
	if err := e.parallel(len(tasks), func(w *worker, i int) {
		t := tasks[i]
		counts[i] = w.indexCells(t.key, t.side, t.ri, nil)
	}); err != nil {
		return nil, err
	}
	at := map[ikey]int{}
	for k := range need {
		if k.k == 0 {
			for _, sp := range e.early[k.group] {
				at[k] += sp.n
			}
		}
	}
	starts := make([]int, len(tasks))
	for i, t := range tasks {
		starts[i] = at[t.key]
		at[t.key] += counts[i]
	}
	all := map[ikey][]entry{}
	type fill struct {
		sp  earlySpan
		dst []entry
	}
	var fills []fill
	for k, n := range at {
		all[k] = make([]entry, n)
		if k.k == 0 {
			i := 0
			for _, sp := range e.early[k.group] {
				fills = append(fills, fill{sp, all[k][i : i+sp.n]})
				i += sp.n
			}
		}
	}
	if err := e.parallel(len(fills), func(w *worker, i int) { w.marks.earlyEntries(fills[i].sp, fills[i].dst) }); err != nil {
		return nil, err
	}
	if err := e.parallel(len(tasks), func(w *worker, i int) {
		t := tasks[i]
		w.indexCells(t.key, t.side, t.ri, all[t.key][starts[i]:starts[i]+counts[i]])
	}); err != nil {
		return nil, err
	}
	out := map[ikey]*index{}
	for k, entries := range all {
		out[k] = newIndex(entries, e.threads)
	}
	return out, nil
}

// indexCells fills dst with the entries of request ri of one side at
// offset key.k of every block position of group key.group, or, with a
// nil dst, counts them; it returns their number.
func (w *worker) indexCells(key ikey, sd uint8, ri int, dst []entry) int {
	e := w.e
	s := e.p
	if sd == 1 {
		s = e.c
	}
	g := s.group(key.group)
	S := e.blockSize(key.group)
	positions := (g.tokens[ri] + S - 1) / S
	n := 0
	var covered []bool
	if key.k == 0 {
		covered = e.covered[coverKey{key.group, sd, int32(ri)}]
	}
	for ci, heads := range g.indexed {
		v := g.caches[ci].View
		// Position by position, the heads of a token are near each other
		// in most layouts.
		for x := range positions {
			if x < len(covered) && covered[x] {
				continue // hashed by compare
			}
			for _, lh := range heads {
				a, ok := g.addr(s, ci, ri, lh, x*S+key.k)
				if !ok {
					continue
				}
				if dst != nil {
					dst[n] = entry{hash: hashCell(&v.Cells, a), side: sd, ri: int32(ri), pos: int32(x), ci: int32(ci), lh: int32(lh)}
				}
				n++
			}
		}
	}
	return n
}

// hashBytes is how many leading bytes of a cell hashCell reads: one
// cache line, so that an index costs one read per cell however large.
const hashBytes = 64

// hashCell returns a hash of the first hashBytes logical bytes of the
// cell at address a of v (equal cells hash equal whatever their layout):
// their sum as 8-byte words, word j weighted by 2j+1. It only finds
// candidates, which are then compared byte for byte.
func hashCell(v *layout.CellView, a int64) uint64 {
	h, q := uint64(0), 0
	for _, r := range v.Runs {
		p := v.Data[a+r.Offset : a+r.Offset+int64(min(r.Len, hashBytes-q))]
		if q%8 == 0 {
			m := uint64(2*(q/8) + 1)
			for len(p) >= 8 {
				h += binary.LittleEndian.Uint64(p) * m
				m += 2
				p = p[8:]
				q += 8
			}
		}
		for _, b := range p {
			h += uint64(b) << (8 * (q % 8)) * uint64(2*(q/8)+1)
			q++
		}
		if q == hashBytes {
			break
		}
	}
	return h + uint64(q)
}

// candidate is a source a differing slice may have come from.
type candidate struct {
	prio  int // 1 heads, 2 layers, 3 positions, 4 producer requests, 5 consumer requests
	order [2]int
	e     entry
}

// source returns the exact source of s's differing cells as a hint, or
// the zero hint when none is found (within the request's budget).
func (w *worker) source(u *unit, s *slice, x *index) hint {
	// The index holds the consumer's own differing cell: a hash held once
	// is that cell's, and there is no candidate (shared does nothing).
	if x == nil || x.once(s.hash) {
		return hint{}
	}
	e := w.e
	rs := u.rs
	cg, pg := u.cg, u.pg
	c := cg.caches[u.ci]
	cv := &c.View.Cells
	name := c.View.Layer.Name
	head := int(s.head)
	tpRank := e.c.Dumps[c.Dump].Manifest.Parallel.TPRank
	firstHead := c.View.HeadBase - (tpRank/c.View.Replicas)*c.View.Heads
	pidInC, cidInP := int32(-1), int32(-1)
	if i, ok := e.c.index[rs.req.ProducerID]; ok {
		pidInC = int32(i)
	}
	if i, ok := e.p.index[rs.req.ID]; ok {
		cidInP = int32(i)
	}
	var cands []candidate
	x.shared(s.hash, func(en entry) {
		if en.side == 1 {
			if int(en.ci) == u.ci && en.lh == s.lh && int(en.ri) != rs.cri && en.ri != pidInC {
				cands = append(cands, candidate{5, [2]int{int(en.ri), int(en.pos)}, en})
			}
			return
		}
		pv := pg.caches[en.ci].View
		gh := pv.HeadBase + int(en.lh)
		same := int(en.ri) == rs.pri
		switch {
		case same && int(en.pos) == u.pos && pg.holds(int(en.ci), name) && gh != head && gh >= firstHead && gh < firstHead+c.View.GlobalHeads:
			cands = append(cands, candidate{1, [2]int{gh, 0}, en})
		case same && int(en.pos) == u.pos && pv.Number != c.View.Number && gh == head && pv.Cells.CellBytes == cv.CellBytes:
			cands = append(cands, candidate{2, [2]int{int(en.ci), 0}, en})
		case same && int(en.pos) != u.pos && pg.holds(int(en.ci), name) && gh == head:
			cands = append(cands, candidate{3, [2]int{int(en.pos), 0}, en})
		case !same && en.ri != cidInP && pg.holds(int(en.ci), name) && gh == head:
			cands = append(cands, candidate{4, [2]int{int(en.ri), int(en.pos)}, en})
		}
	})
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.prio, b.prio), cmp.Compare(a.order[0], b.order[0]), cmp.Compare(a.order[1], b.order[1]))
	})
	for _, cd := range cands {
		src, sg := e.p, pg
		if cd.e.side == 1 {
			src, sg = e.c, cg
		}
		if !w.from(u, s, sg, src, cd.e, (int(cd.e.pos)-u.pos)*u.S) {
			continue
		}
		v := sg.caches[cd.e.ci].View
		switch cd.prio {
		case 1:
			return hint{kind: hintHeads, arg: int32(v.HeadBase + int(cd.e.lh))}
		case 2:
			return hint{kind: hintLayers, arg: int32(v.Number)}
		case 3:
			return hint{kind: hintPosition, arg: cd.e.pos}
		}
		return hint{kind: hintRequest, side: cd.e.side, arg: cd.e.ri}
	}
	return hint{}
}

// from says whether every differing consumer cell of s equals the cell
// of the candidate source en (of side src, group g) at its token shifted
// by shift.
func (w *worker) from(u *unit, s *slice, g *sideGroup, src *side, en entry, shift int) bool {
	cv := &u.cg.caches[u.ci].View.Cells
	sv := &g.caches[en.ci].View.Cells
	segs := w.segs.get(cv, sv)
	for t := int(s.first); t <= int(s.last); t++ {
		if !u.differs(s, t) {
			continue
		}
		if !u.rs.spend() {
			return false
		}
		x := cv.CellAddr(u.block, t%u.S, int(s.lh))
		y, ok := g.addr(src, int(en.ci), int(en.ri), int(en.lh), t+shift)
		if !ok || !equalCells(cv.Data, x, sv.Data, y, segs) {
			return false
		}
	}
	return true
}

// text writes a hint of a slice of head head in a layer numbered layer,
// with bits differing bits.
func (e *explainer) text(h hint, head, layer int, bits int64) string {
	switch h.kind {
	case hintZeroed:
		return "zeroed"
	case hintTokens:
		return "tokens swapped"
	case hintHeads:
		return fmt.Sprintf("heads %d<->%d swapped", min(head, int(h.arg)), max(head, int(h.arg)))
	case hintLayers:
		return fmt.Sprintf("layers %d<->%d swapped", min(layer, int(h.arg)), max(layer, int(h.arg)))
	case hintPosition:
		return fmt.Sprintf("holds the block of position %d", h.arg)
	case hintRequest:
		src := e.p
		if h.side == 1 {
			src = e.c
		}
		return "holds KV of request " + src.ids[h.arg]
	case hintFlips:
		return bitsHint(int(bits))
	}
	return "random bytes"
}
