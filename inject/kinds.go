package inject

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// planner decides one dump fault: its edits and what it expects.
type planner struct {
	s     *side
	opts  Options
	rng   *rand.Rand
	f     *Fault
	edits []edit
	// mism accumulates the expected mismatches by request and group.
	mism    map[string]map[int]*groupAcc
	details []DetailExpect
	abs     map[string]string
	// reads counts, per (rank, group id), the places reading each block.
	reads map[[2]int]map[int]int
}

type groupAcc struct {
	positions []int
	keys      []layout.ReplicaKey
}

func (p *planner) na(format string, args ...any) error {
	return &NotApplicableError{Kind: p.opts.Kind, Msg: fmt.Sprintf(format, args...)}
}

// checkTarget rejects targets that name nothing of the side.
func (p *planner) checkTarget() error {
	t := p.opts.Target
	if t.Request != "" && p.s.Request(t.Request) == nil {
		return &OptionError{Option: "Target.Request", Value: strconv.Quote(t.Request), Msg: "the side holds no such request"}
	}
	if t.Group != nil && p.s.Group(*t.Group) == nil {
		return &OptionError{Option: "Target.Group", Value: strconv.Itoa(*t.Group), Msg: "the side has no such group"}
	}
	if t.Rank != nil && !slices.ContainsFunc(p.s.Dumps, func(d *layout.Dump) bool {
		pp, tp := d.Rank()
		return pp == t.Rank.PP && tp == t.Rank.TP
	}) {
		return &OptionError{Option: "Target.Rank", Value: fmt.Sprintf("%d:%d", t.Rank.PP, t.Rank.TP), Msg: "no dump of the side is that rank"}
	}
	if p.opts.Bits < 0 {
		return &OptionError{Option: "Bits", Value: strconv.Itoa(p.opts.Bits), Msg: "is negative"}
	}
	return nil
}

func (p *planner) plan() error {
	if err := refuseDevice(p.s.Dumps); err != nil {
		return err
	}
	switch p.opts.Kind {
	case None:
		p.f.Description = "no change: a clean copy of the side"
		p.f.Expect.Details, p.f.Expect.Tail, p.f.Expect.Stored = []DetailExpect{}, []AuditPlace{}, []AuditPlace{}
		return nil
	case BitFlip:
		return p.flip(false, false)
	case ReplicaDiverge:
		return p.flip(false, true)
	case StateFlip:
		return p.flip(true, false)
	case ByteNoise:
		return p.byteNoise()
	case ZeroBlock:
		return p.zeroBlock()
	case SwapTokens:
		return p.swapTokens()
	case SwapHeads:
		return p.swapHeads()
	case SwapLayers:
		return p.swapLayers()
	case MisplaceBlock:
		return p.misplace()
	case ShiftBlocks:
		return p.shift()
	case StaleBlock:
		return p.staleBlock()
	case StrayWrite:
		return p.strayWrite()
	case StaleTail:
		return p.pastTokens(true)
	case PastNumTokens:
		return p.pastTokens(false)
	case WrongPrefix:
		return p.wrongPrefix()
	}
	return fmt.Errorf("fault %s: not a dump fault", p.opts.Kind)
}

// refuseDevice rejects dumps with a layer in live device memory (a cuda_ipc
// source): inject, its preparations (--zero-tails, --extra-blocks, --stored)
// and every fault write into a copy of the dump's files, and device memory
// is neither readable here nor copyable.
func refuseDevice(dumps []*layout.Dump) error {
	for _, d := range dumps {
		for gi, g := range d.Manifest.Groups {
			for li, l := range g.Layers {
				if l.Source != nil && l.Source.CUDAIPC != "" {
					return &layout.DumpError{File: d.Path, Field: fmt.Sprintf("groups[%d].layers[%d].source.cuda_ipc", gi, li),
						Err: fmt.Errorf("layer %q lives in device memory: inject corrupts copies of dump files, so it needs a dump written to files (a cuda_ipc source cannot be copied)", l.Name)}
				}
			}
		}
	}
	return nil
}

// readers returns every place of group g on rank di whose block is block:
// a block id named at several positions (of one request, or of several
// sharing a prefix) is one block of memory, read at each of them
// (docs/dump-format.md), so a change to it shows at each position whose
// valid tokens cover it. Places are in request order, then position.
func (p *planner) readers(di int, g *layout.Group, block int) []place {
	var out []place
	p.eachRead(di, g, func(pl place, b int) {
		if b == block {
			out = append(out, pl)
		}
	})
	return out
}

// eachRead calls fn with every place of group g on rank di that reads a
// block, and the block: the positions of each request's span that hold
// valid tokens (a state group's running-state block always), in request
// order, then position.
func (p *planner) eachRead(di int, g *layout.Group, fn func(pl place, block int)) {
	for _, id := range p.s.ids {
		r := p.s.RankRequest(di, id)
		if r == nil {
			continue
		}
		span, status, err := layout.RequestSpan(r, g)
		if err != nil || status != layout.SpanOK {
			continue
		}
		for i, b := range span.Blocks {
			pl := place{id: id, g: g, pos: span.Start + i, valid: 1}
			if g.Kind != layout.KindMamba {
				pl.valid = layout.ValidTokens(r.NumTokens, pl.pos, g.BlockSize)
			}
			if pl.valid > 0 {
				fn(pl, b)
			}
		}
	}
}

// shared says whether a place's block is read at another place on some
// rank. Faults that move or swap blocks predict only the places they pick,
// so they leave shared blocks alone; cell faults (bit flips, noise, a
// zeroed block) predict every reader.
func (p *planner) shared(pl place) bool {
	for di := range p.s.Dumps {
		if b, ok := p.s.Block(di, pl.id, pl.g, pl.pos); ok && p.blockReads(di, pl.g)[b] > 1 {
			return true
		}
	}
	return false
}

// blockReads counts the places of group g on rank di reading each block
// (as readers lists them), computed once per rank and group.
func (p *planner) blockReads(di int, g *layout.Group) map[int]int {
	key := [2]int{di, g.ID}
	if m, ok := p.reads[key]; ok {
		return m
	}
	m := map[int]int{}
	p.eachRead(di, g, func(_ place, b int) { m[b]++ })
	if p.reads == nil {
		p.reads = map[[2]int]map[int]int{}
	}
	p.reads[key] = m
	return m
}

// cellFault marks the kinds that predict every reader of the cells they
// change.
func cellFault(k Kind) bool {
	return k == BitFlip || k == ReplicaDiverge || k == StateFlip || k == ByteNoise || k == ZeroBlock
}

// finish turns the accumulated expectations into the fault's Expect.
func (p *planner) finish() {
	e := &p.f.Expect
	for _, id := range p.s.ids {
		groups := p.mism[id]
		if len(groups) == 0 {
			continue
		}
		re := RequestExpect{ID: id, Verdict: string(verify.Mismatch)}
		for _, gid := range slices.Sorted(mapsKeys(groups)) {
			acc := groups[gid]
			slices.Sort(acc.positions)
			re.Groups = append(re.Groups, GroupExpect{ID: gid, Positions: slices.Compact(acc.positions), Checks: p.s.checks(gid, acc.keys)})
		}
		e.Requests = append(e.Requests, re)
		e.Verdict = string(verify.Mismatch)
	}
	if e.Details == nil && p.details != nil {
		e.Details = p.details
	}
	slices.SortFunc(e.Details, func(a, b DetailExpect) int {
		return cmp.Or(cmp.Compare(a.Request, b.Request), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Position, b.Position),
			cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Head, b.Head), cmp.Compare(a.Replica, b.Replica))
	})
	slices.SortFunc(p.f.Affected, func(a, b Place) int {
		return cmp.Or(cmp.Compare(slices.Index(p.s.ids, a.Request), slices.Index(p.s.ids, b.Request)),
			cmp.Compare(a.Group, b.Group), cmp.Compare(a.Position, b.Position))
	})
	p.f.Affected = slices.Compact(p.f.Affected)
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// mismatch records that request id must mismatch at pos of group g, the
// sums under key changed.
func (p *planner) mismatch(id string, g, pos int, key layout.ReplicaKey) {
	if p.mism == nil {
		p.mism = map[string]map[int]*groupAcc{}
	}
	if p.mism[id] == nil {
		p.mism[id] = map[int]*groupAcc{}
	}
	acc := p.mism[id][g]
	if acc == nil {
		acc = &groupAcc{}
		p.mism[id][g] = acc
	}
	acc.positions = append(acc.positions, pos)
	if !slices.Contains(acc.keys, key) {
		acc.keys = append(acc.keys, key)
	}
	p.affect(id, g, pos)
}

func (p *planner) affect(id string, g, pos int) {
	pl := Place{id, g, pos}
	if !slices.Contains(p.f.Affected, pl) {
		p.f.Affected = append(p.f.Affected, pl)
	}
}

func (p *planner) detail(id string, g, pos int, c cache, lh int, hint string, tokens *[2]int) {
	p.details = append(p.details, DetailExpect{Request: id, Group: g, Position: pos, Layer: c.View.Number,
		Head: c.View.HeadBase + lh, Replica: c.View.ReplicaIndex, Hint: hint, Tokens: tokens})
}

// absFile returns the absolute path of a cache's file.
func (p *planner) absFile(name string) string {
	if a, ok := p.abs[name]; ok {
		return a
	}
	a, err := filepath.Abs(name)
	if err != nil {
		a = name
	}
	if p.abs == nil {
		p.abs = map[string]string{}
	}
	p.abs[name] = a
	return a
}

// cell returns a copy of the logical bytes of a cell (local head lh,
// token slot t of block).
func (p *planner) cell(c cache, block, t, lh int) []byte {
	return c.View.Cells.ReadCell(nil, block, t, lh)
}

// write replaces a cell's logical bytes in the copy.
func (p *planner) write(c cache, block, t, lh int, data []byte) {
	cv := &c.View.Cells
	a := cv.CellAddr(block, t, lh)
	file := p.absFile(cv.File)
	i := 0
	for _, r := range cv.Runs {
		p.edits = append(p.edits, edit{file: file, off: cv.FileOffset + a + r.Offset, data: slices.Clone(data[i : i+r.Len]), tensor: c.View.Layer.Name})
		i += r.Len
	}
}

// cellChanged records what a changed cell (token slot of block, local
// head lh, of cache c) makes the comparison report: a mismatch, with the
// drill-down's detail, at every place reading the block whose valid tokens
// include the slot (a state block: at position 0, without tokens).
func (p *planner) cellChanged(c cache, block, slot, lh int, hint string) {
	for _, rd := range p.readers(c.Dump, c.Group, block) {
		if c.Group.Kind == layout.KindMamba {
			p.mismatch(rd.id, rd.g.ID, rd.pos, c.View.Key())
			p.detail(rd.id, rd.g.ID, rd.pos, c, lh, hint, nil)
			continue
		}
		if slot >= rd.valid {
			continue
		}
		tok := rd.pos*rd.S() + slot
		p.mismatch(rd.id, rd.g.ID, rd.pos, c.View.Key())
		p.detail(rd.id, rd.g.ID, rd.pos, c, lh, hint, &[2]int{tok, tok})
	}
}

// place is a block position of a request in a group.
type place struct {
	id    string
	g     *layout.Group
	pos   int
	valid int // tokens it holds (1 for a state block)
}

func (pl place) S() int { return pl.g.BlockSize }

// full says whether the position holds block_size tokens.
func (pl place) full() bool { return pl.g.Kind != layout.KindMamba && pl.valid == pl.g.BlockSize }

// places lists the checksummed positions of the side's requests in the
// groups state selects (state or attention), narrowed by the target, by
// Allow when allow is set, and by pred.
func (p *planner) places(state, allow bool, pred func(place) bool) []place {
	t := p.opts.Target
	var out []place
	for _, id := range p.s.ids {
		if t.Request != "" && id != t.Request {
			continue
		}
		r := p.s.Request(id)
		for _, gid := range p.s.GroupIDs() {
			g := p.s.Group(gid)
			if (t.Group != nil && gid != *t.Group) || (g.Kind == layout.KindMamba) != state || len(p.filterCaches(gid, nil)) == 0 {
				continue
			}
			span, status, err := layout.RequestSpan(r, g)
			if err != nil || status != layout.SpanOK {
				continue
			}
			for i := range span.Blocks {
				pos := span.Start + i
				pl := place{id: id, g: g, pos: pos, valid: 1}
				if !state {
					pl.valid = layout.ValidTokens(r.NumTokens, pos, g.BlockSize)
				}
				if pl.valid == 0 || (t.Position != nil && pos != *t.Position) {
					continue
				}
				if allow && p.opts.Allow != nil && !p.opts.Allow(id, gid, pos) {
					continue
				}
				if !cellFault(p.opts.Kind) && p.shared(pl) {
					continue
				}
				if pred == nil || pred(pl) {
					out = append(out, pl)
				}
			}
		}
	}
	return out
}

// layerMatch says whether a cache is the target's layer.
func layerMatch(v *layout.LayerView, layer string) bool {
	return layer == "" || v.Layer.Name == layer || slices.Contains(v.Aliases, layer) || strconv.Itoa(v.Number) == layer
}

// filterCaches returns group g's caches on the target's rank and layer
// that pred accepts.
func (p *planner) filterCaches(g int, pred func(cache) bool) []cache {
	t := p.opts.Target
	var out []cache
	for _, c := range p.s.Caches(g) {
		if t.Rank != nil && p.s.rank(c.Dump) != *t.Rank {
			continue
		}
		if !layerMatch(c.View, t.Layer) {
			continue
		}
		if pred == nil || pred(c) {
			out = append(out, c)
		}
	}
	return out
}

// heads returns a cache's local heads (state rows) the target allows.
func (p *planner) heads(v *layout.LayerView) []int {
	var out []int
	for lh := range v.Heads {
		if h := p.opts.Target.Head; h == nil || *h == v.HeadBase+lh {
			out = append(out, lh)
		}
	}
	return out
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// hasBlocks says whether rank c.Dump holds blocks of request id at every
// position.
func (p *planner) hasBlocks(di int, id string, g *layout.Group, positions ...int) bool {
	for _, pos := range positions {
		if _, ok := p.s.Block(di, id, g, pos); !ok {
			return false
		}
	}
	return true
}

func (p *planner) blockOf(di int, id string, g *layout.Group, pos int) int {
	b, _ := p.s.Block(di, id, g, pos)
	return b
}

// rankCaches picks a rank holding group g's caches (the target's, with
// the blocks of the positions) and returns its filtered caches.
func (p *planner) rankCaches(g *layout.Group, ok func(di int) bool) ([]cache, int, error) {
	byRank := map[int][]cache{}
	var ranks []int
	for _, c := range p.filterCaches(g.ID, nil) {
		if !ok(c.Dump) {
			continue
		}
		if byRank[c.Dump] == nil {
			ranks = append(ranks, c.Dump)
		}
		byRank[c.Dump] = append(byRank[c.Dump], c)
	}
	if len(ranks) == 0 {
		return nil, 0, p.na("no rank holds the blocks of group %d", g.ID)
	}
	di := pick(p.rng, ranks)
	return byRank[di], di, nil
}

func hintBits(n int) string {
	switch {
	case n == 1:
		return "1 bit flipped"
	case n <= drill.FlipBits:
		return fmt.Sprintf("%d bits flipped", n)
	}
	return "random bytes"
}

// flipBits flips n distinct bits of b, chosen by rng.
func flipBits(rng *rand.Rand, b []byte, n int) []int {
	var chosen []int
	for len(chosen) < n {
		i := rng.IntN(len(b) * 8)
		if !slices.Contains(chosen, i) {
			chosen = append(chosen, i)
			b[i/8] ^= 1 << (i % 8)
		}
	}
	slices.Sort(chosen)
	return chosen
}

// flip flips bits of one cell: of an attention cache (bit-flip), of a
// replica copy other than the first (replica-diverge, attention or state
// rows), or of a state row (state-flip).
func (p *planner) flip(state, replicated bool) error {
	cachePred := func(c cache) bool { return !replicated || (c.View.Replicas > 1 && c.View.ReplicaIndex >= 1) }
	var pls []place
	if replicated {
		// Pick the group first, so hybrids exercise attention heads and
		// state rows alike.
		var groups []int
		for _, gid := range p.s.GroupIDs() {
			if len(p.filterCaches(gid, cachePred)) > 0 && (p.opts.Target.Group == nil || *p.opts.Target.Group == gid) {
				groups = append(groups, gid)
			}
		}
		if len(groups) == 0 {
			return p.na("the side holds no replicated head or state row (replicas > 1) to diverge")
		}
		slices.Sort(groups)
		for _, perm := range p.rng.Perm(len(groups)) {
			gid := groups[perm]
			isState := p.s.Group(gid).Kind == layout.KindMamba
			pls = p.places(isState, true, func(pl place) bool { return pl.g.ID == gid })
			if len(pls) > 0 {
				state = isState
				break
			}
		}
	} else {
		pls = p.places(state, true, nil)
	}
	if len(pls) == 0 {
		return p.na("no checksummed position to corrupt")
	}
	pl := pick(p.rng, pls)
	cs := p.filterCaches(pl.g.ID, func(c cache) bool {
		return cachePred(c) && p.hasBlocks(c.Dump, pl.id, pl.g, pl.pos) && len(p.heads(c.View)) > 0
	})
	if len(cs) == 0 {
		return p.na("no cache holds request %q at position %d of group %d", pl.id, pl.pos, pl.g.ID)
	}
	c := pick(p.rng, cs)
	lh := pick(p.rng, p.heads(c.View))
	slot := 0
	if !state {
		slot = p.rng.IntN(pl.valid)
	}
	block := p.blockOf(c.Dump, pl.id, pl.g, pl.pos)
	b := p.cell(c, block, slot, lh)
	n := max(p.opts.Bits, 1)
	if n > len(b)*8 {
		return &OptionError{Option: "Bits", Value: strconv.Itoa(n), Msg: fmt.Sprintf("a cell of %q holds %d bits", c.View.Layer.Name, len(b)*8)}
	}
	flipped := flipBits(p.rng, b, n)
	p.write(c, block, slot, lh, b)
	p.cellChanged(c, block, slot, lh, hintBits(n))
	tok := pl.pos*pl.S() + slot
	what := fmt.Sprintf("token %d (block position %d, block id %d), global head %d", tok, pl.pos, block, c.View.HeadBase+lh)
	if state {
		what = fmt.Sprintf("state block %d, global row %d", block, c.View.HeadBase+lh)
	}
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("flipped %d bit(s) %v of the cell of request %q group %d layer %d (%s), %s, replica %d of %d, on rank %s",
		n, flipped, pl.id, pl.g.ID, c.View.Number, c.View.Layer.Name, what, c.View.ReplicaIndex, c.View.Replicas, p.s.rank(c.Dump))
	return nil
}

// byteNoise replaces a run of 6 to 64 bytes of one cell with noise: every
// byte changes in at least 3 bits, so the drill-down sees random bytes,
// not a few flipped bits.
func (p *planner) byteNoise() error {
	pls := p.places(false, true, nil)
	if len(pls) == 0 {
		return p.na("no checksummed position to corrupt")
	}
	pl := pick(p.rng, pls)
	cs := p.filterCaches(pl.g.ID, func(c cache) bool { return p.hasBlocks(c.Dump, pl.id, pl.g, pl.pos) && len(p.heads(c.View)) > 0 })
	if len(cs) == 0 {
		return p.na("no cache holds request %q at position %d of group %d", pl.id, pl.pos, pl.g.ID)
	}
	c := pick(p.rng, cs)
	lh := pick(p.rng, p.heads(c.View))
	slot := p.rng.IntN(pl.valid)
	block := p.blockOf(c.Dump, pl.id, pl.g, pl.pos)
	b := p.cell(c, block, slot, lh)
	lo := min(6, len(b))
	n := lo + p.rng.IntN(min(64, len(b))-lo+1)
	start := p.rng.IntN(len(b) - n + 1)
	for i := start; i < start+n; i++ {
		m := byte(0)
		for bits.OnesCount8(m) < 3 {
			m = byte(p.rng.UintN(256))
		}
		b[i] ^= m
	}
	p.write(c, block, slot, lh, b)
	p.cellChanged(c, block, slot, lh, "random bytes")
	tok := pl.pos*pl.S() + slot
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("noise over bytes %d..%d of the cell of request %q group %d layer %d (%s), token %d, global head %d, on rank %s",
		start, start+n-1, pl.id, pl.g.ID, c.View.Number, c.View.Layer.Name, tok, c.View.HeadBase+lh, p.s.rank(c.Dump))
	return nil
}

// blockCells calls fn for every (token slot, local head) of the target's
// heads of a cache.
func (p *planner) blockCells(c cache, fn func(slot, lh int)) {
	for slot := range c.View.Cells.KernelBlocks * c.View.Cells.KernelTokens {
		for _, lh := range p.heads(c.View) {
			fn(slot, lh)
		}
	}
}

// cellsDiffer says whether two blocks' valid cells of a head differ.
func (p *planner) validDiffers(c cache, blockA, blockB, valid, lh int) bool {
	for slot := range valid {
		if string(p.cell(c, blockA, slot, lh)) != string(p.cell(c, blockB, slot, lh)) {
			return true
		}
	}
	return false
}

// zeroBlock zeroes every cell of a request's block on one rank (the
// target's caches and heads).
func (p *planner) zeroBlock() error {
	pls := p.places(false, true, nil)
	if len(pls) == 0 {
		return p.na("no checksummed position to zero")
	}
	pl := pick(p.rng, pls)
	cs, di, err := p.rankCaches(pl.g, func(di int) bool { return p.hasBlocks(di, pl.id, pl.g, pl.pos) })
	if err != nil {
		return err
	}
	block := p.blockOf(di, pl.id, pl.g, pl.pos)
	for _, c := range cs {
		zero := make([]byte, c.View.Cells.CellBytes)
		p.blockCells(c, func(slot, lh int) { p.write(c, block, slot, lh, zero) })
		// Every place reading the block sees the zeros in its valid cells.
		for _, rd := range p.readers(di, pl.g, block) {
			for _, lh := range p.heads(c.View) {
				nonzero := false
				for slot := range rd.valid {
					if slices.ContainsFunc(p.cell(c, block, slot, lh), func(x byte) bool { return x != 0 }) {
						nonzero = true
					}
				}
				if nonzero {
					p.mismatch(rd.id, rd.g.ID, rd.pos, c.View.Key())
					p.detail(rd.id, rd.g.ID, rd.pos, c, lh, "zeroed", nil)
				}
			}
		}
	}
	if len(p.details) == 0 {
		return p.na("the block is zero already")
	}
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("zeroed block id %d (request %q group %d position %d) in %d cache(s) of rank %s",
		block, pl.id, pl.g.ID, pl.pos, len(cs), p.s.rank(di))
	return nil
}

// swapTokens swaps two valid tokens of a block in one cache (all the
// target's heads).
func (p *planner) swapTokens() error {
	pls := p.places(false, true, func(pl place) bool { return pl.valid >= 2 })
	if len(pls) == 0 {
		return p.na("no checksummed position holds two tokens")
	}
	pl := pick(p.rng, pls)
	cs := p.filterCaches(pl.g.ID, func(c cache) bool { return p.hasBlocks(c.Dump, pl.id, pl.g, pl.pos) && len(p.heads(c.View)) > 0 })
	if len(cs) == 0 {
		return p.na("no cache holds request %q at position %d of group %d", pl.id, pl.pos, pl.g.ID)
	}
	c := pick(p.rng, cs)
	block := p.blockOf(c.Dump, pl.id, pl.g, pl.pos)
	perm := p.rng.Perm(pl.valid)
	t1, t2 := min(perm[0], perm[1]), max(perm[0], perm[1])
	base := pl.pos * pl.S()
	for _, lh := range p.heads(c.View) {
		a, b := p.cell(c, block, t1, lh), p.cell(c, block, t2, lh)
		if string(a) == string(b) {
			continue
		}
		p.write(c, block, t1, lh, b)
		p.write(c, block, t2, lh, a)
		p.mismatch(pl.id, pl.g.ID, pl.pos, c.View.Key())
		p.detail(pl.id, pl.g.ID, pl.pos, c, lh, "tokens swapped", &[2]int{base + t1, base + t2})
	}
	if len(p.details) == 0 {
		return p.na("the two tokens' cells are equal")
	}
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("swapped tokens %d and %d of request %q group %d position %d in layer %d (%s) on rank %s",
		base+t1, base+t2, pl.id, pl.g.ID, pl.pos, c.View.Number, c.View.Layer.Name, p.s.rank(c.Dump))
	return nil
}

// swapHeads swaps two global heads of a layer (sharded, not replicated)
// over a whole block, on one rank or across two.
func (p *planner) swapHeads() error {
	type headAt struct {
		c  cache
		lh int
	}
	// layer name -> global head -> where it lives, per group
	sharded := func(c cache) bool { return c.View.Replicas == 1 && !c.View.State }
	pls := p.places(false, true, func(pl place) bool {
		n := map[string]int{}
		for _, c := range p.filterCaches(pl.g.ID, sharded) {
			n[c.View.Layer.Name] += c.View.Heads
		}
		for _, k := range n {
			if k >= 2 {
				return true
			}
		}
		return false
	})
	if len(pls) == 0 {
		return p.na("no layer has two heads that are not replicated")
	}
	pl := pick(p.rng, pls)
	heads := map[string][]headAt{}
	var names []string
	for _, c := range p.filterCaches(pl.g.ID, func(c cache) bool { return sharded(c) && p.hasBlocks(c.Dump, pl.id, pl.g, pl.pos) }) {
		if heads[c.View.Layer.Name] == nil {
			names = append(names, c.View.Layer.Name)
		}
		for lh := range c.View.Heads {
			heads[c.View.Layer.Name] = append(heads[c.View.Layer.Name], headAt{c, lh})
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { return len(heads[n]) < 2 })
	if len(names) == 0 {
		return p.na("no layer has two heads that are not replicated")
	}
	hs := heads[pick(p.rng, names)]
	var firsts []int
	for i, h := range hs {
		if t := p.opts.Target.Head; t == nil || *t == h.c.View.HeadBase+h.lh {
			firsts = append(firsts, i)
		}
	}
	if len(firsts) == 0 {
		return p.na("the target head is not in the chosen layer")
	}
	i := pick(p.rng, firsts)
	j := p.rng.IntN(len(hs) - 1)
	if j >= i {
		j++
	}
	a, b := hs[i], hs[j]
	ga, gb := a.c.View.HeadBase+a.lh, b.c.View.HeadBase+b.lh
	ba, bb := p.blockOf(a.c.Dump, pl.id, pl.g, pl.pos), p.blockOf(b.c.Dump, pl.id, pl.g, pl.pos)
	differ := false
	for slot := range a.c.View.Cells.KernelBlocks * a.c.View.Cells.KernelTokens {
		x, y := p.cell(a.c, ba, slot, a.lh), p.cell(b.c, bb, slot, b.lh)
		p.write(a.c, ba, slot, a.lh, y)
		p.write(b.c, bb, slot, b.lh, x)
		differ = differ || (slot < pl.valid && string(x) != string(y))
	}
	if !differ {
		return p.na("the two heads' cells are equal")
	}
	hint := fmt.Sprintf("heads %d<->%d swapped", min(ga, gb), max(ga, gb))
	for _, h := range []headAt{a, b} {
		p.mismatch(pl.id, pl.g.ID, pl.pos, h.c.View.Key())
		p.detail(pl.id, pl.g.ID, pl.pos, h.c, h.lh, hint, nil)
	}
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("swapped global heads %d (rank %s) and %d (rank %s) of layer %d (%s) in request %q group %d position %d",
		ga, p.s.rank(a.c.Dump), gb, p.s.rank(b.c.Dump), a.c.View.Number, a.c.View.Layer.Name, pl.id, pl.g.ID, pl.pos)
	return nil
}

// swapLayers swaps a block's cells of two layers with the same geometry on
// one rank.
func (p *planner) swapLayers() error {
	type pair struct{ a, b cache }
	pairsOf := func(pl place) []pair {
		var out []pair
		all := p.s.Caches(pl.g.ID)
		for _, a := range all {
			if t := p.opts.Target.Rank; t != nil && p.s.rank(a.Dump) != *t {
				continue
			}
			if !layerMatch(a.View, p.opts.Target.Layer) || !p.hasBlocks(a.Dump, pl.id, pl.g, pl.pos) {
				continue
			}
			for _, b := range all {
				if b.Dump == a.Dump && b.View != a.View && b.View.Number != a.View.Number && b.View.Cells.CellBytes == a.View.Cells.CellBytes &&
					b.View.Heads == a.View.Heads && b.View.HeadBase == a.View.HeadBase && b.View.Key() == a.View.Key() && !a.View.State {
					out = append(out, pair{a, b})
				}
			}
		}
		return out
	}
	pls := p.places(false, true, func(pl place) bool { return len(pairsOf(pl)) > 0 })
	if len(pls) == 0 {
		return p.na("no rank holds two layers of one group with the same cell geometry")
	}
	pl := pick(p.rng, pls)
	pr := pick(p.rng, pairsOf(pl))
	block := p.blockOf(pr.a.Dump, pl.id, pl.g, pl.pos)
	hint := fmt.Sprintf("layers %d<->%d swapped", min(pr.a.View.Number, pr.b.View.Number), max(pr.a.View.Number, pr.b.View.Number))
	for _, lh := range p.heads(pr.a.View) {
		for slot := range pr.a.View.Cells.KernelBlocks * pr.a.View.Cells.KernelTokens {
			x, y := p.cell(pr.a, block, slot, lh), p.cell(pr.b, block, slot, lh)
			p.write(pr.a, block, slot, lh, y)
			p.write(pr.b, block, slot, lh, x)
		}
		if p.validDiffersAcross(pr.a, pr.b, block, pl.valid, lh) {
			for _, c := range []cache{pr.a, pr.b} {
				p.mismatch(pl.id, pl.g.ID, pl.pos, c.View.Key())
				p.detail(pl.id, pl.g.ID, pl.pos, c, lh, hint, nil)
			}
		}
	}
	if len(p.details) == 0 {
		return p.na("the two layers' cells are equal")
	}
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("swapped layers %d (%s) and %d (%s) of request %q group %d position %d (block id %d) on rank %s",
		pr.a.View.Number, pr.a.View.Layer.Name, pr.b.View.Number, pr.b.View.Layer.Name, pl.id, pl.g.ID, pl.pos, block, p.s.rank(pr.a.Dump))
	return nil
}

func (p *planner) validDiffersAcross(a, b cache, block, valid, lh int) bool {
	for slot := range valid {
		if string(p.cell(a, block, slot, lh)) != string(p.cell(b, block, slot, lh)) {
			return true
		}
	}
	return false
}

// moveBlocks writes, on the caches cs of one rank, the original contents of
// block src over block dst (every slot and target head), and records the
// mismatch and details with hint for every head whose valid cells change.
func (p *planner) moveBlock(cs []cache, src, dst int, id string, g *layout.Group, pos, valid int, hint string) {
	for _, c := range cs {
		p.blockCells(c, func(slot, lh int) { p.write(c, dst, slot, lh, p.cell(c, src, slot, lh)) })
		for _, lh := range p.heads(c.View) {
			if p.validDiffers(c, src, dst, valid, lh) {
				p.mismatch(id, g.ID, pos, c.View.Key())
				p.detail(id, g.ID, pos, c, lh, hint, nil)
			}
		}
	}
}

// misplace swaps the contents of two full blocks of a request on one rank:
// the connector paired the two block ids wrongly. (The block table stays
// as the scheduler wrote it; the data is in the wrong blocks.)
func (p *planner) misplace() error {
	pls := p.places(false, true, place.full)
	byReq := map[[2]string][]place{}
	var keys [][2]string
	for _, pl := range pls {
		k := [2]string{pl.id, strconv.Itoa(pl.g.ID)}
		if byReq[k] == nil {
			keys = append(keys, k)
		}
		byReq[k] = append(byReq[k], pl)
	}
	keys = slices.DeleteFunc(keys, func(k [2]string) bool { return len(byReq[k]) < 2 })
	if len(keys) == 0 {
		return p.na("no request has two full checksummed blocks in a group")
	}
	cands := byReq[pick(p.rng, keys)]
	perm := p.rng.Perm(len(cands))
	a, b := cands[perm[0]], cands[perm[1]]
	cs, di, err := p.rankCaches(a.g, func(di int) bool { return p.hasBlocks(di, a.id, a.g, a.pos, b.pos) })
	if err != nil {
		return err
	}
	ba, bb := p.blockOf(di, a.id, a.g, a.pos), p.blockOf(di, a.id, a.g, b.pos)
	p.moveBlock(cs, bb, ba, a.id, a.g, a.pos, a.valid, fmt.Sprintf("holds the block of position %d", b.pos))
	p.moveBlock(cs, ba, bb, a.id, a.g, b.pos, b.valid, fmt.Sprintf("holds the block of position %d", a.pos))
	if len(p.details) == 0 {
		return p.na("the two blocks are equal")
	}
	p.f.Request = a.id
	p.f.Description = fmt.Sprintf("swapped the contents of block ids %d and %d (positions %d and %d of request %q group %d) on rank %s",
		ba, bb, a.pos, b.pos, a.id, a.g.ID, p.s.rank(di))
	return nil
}

// shift makes each block of a request from a position on hold the block
// of the position before it (an off-by-one pairing), on one rank.
func (p *planner) shift() error {
	pls := p.places(false, true, func(pl place) bool { return pl.pos >= 1 })
	var ok []place
	cands := map[place][]cache{}
	for _, pl := range pls {
		r := p.s.Request(pl.id)
		last := (r.NumTokens+pl.S()-1)/pl.S() - 1
		positions := []int{}
		for q := pl.pos - 1; q <= last; q++ {
			positions = append(positions, q)
		}
		cs := p.filterCaches(pl.g.ID, func(c cache) bool { return p.hasBlocks(c.Dump, pl.id, pl.g, positions...) })
		if len(cs) > 0 {
			ok = append(ok, pl)
			cands[pl] = cs
		}
	}
	if len(ok) == 0 {
		return p.na("no request has a checksummed block after another block")
	}
	pl := pick(p.rng, ok)
	r := p.s.Request(pl.id)
	S := pl.S()
	last := (r.NumTokens+S-1)/S - 1
	cs, di, err := p.rankCaches(pl.g, func(di int) bool { return slices.ContainsFunc(cands[pl], func(c cache) bool { return c.Dump == di }) })
	if err != nil {
		return err
	}
	for q := pl.pos; q <= last; q++ {
		src, dst := p.blockOf(di, pl.id, pl.g, q-1), p.blockOf(di, pl.id, pl.g, q)
		p.moveBlock(cs, src, dst, pl.id, pl.g, q, layout.ValidTokens(r.NumTokens, q, S), fmt.Sprintf("holds the block of position %d", q-1))
	}
	if len(p.details) == 0 {
		return p.na("the shifted blocks are equal")
	}
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("shifted request %q group %d by one block from position %d to %d: each holds the block before it, on rank %s",
		pl.id, pl.g.ID, pl.pos, last, p.s.rank(di))
	return nil
}

// staleBlock makes a request's block hold another request's KV at the same
// position (a block the producer released and another request reused).
func (p *planner) staleBlock() error {
	type cand struct {
		pl    place
		other string
	}
	var cands []cand
	for _, pl := range p.places(false, true, nil) {
		for _, id := range p.s.ids {
			if id == pl.id {
				continue
			}
			r2 := p.s.Request(id)
			if layout.ValidTokens(r2.NumTokens, pl.pos, pl.S()) < pl.valid {
				continue
			}
			if len(p.filterCaches(pl.g.ID, func(c cache) bool {
				return p.hasBlocks(c.Dump, pl.id, pl.g, pl.pos) && p.hasBlocks(c.Dump, id, pl.g, pl.pos)
			})) > 0 {
				cands = append(cands, cand{pl, id})
			}
		}
	}
	if len(cands) == 0 {
		return p.na("no second request holds a block at a checksummed position (stale-block copies another request's KV)")
	}
	c := pick(p.rng, cands)
	pl := c.pl
	cs, di, err := p.rankCaches(pl.g, func(di int) bool {
		return p.hasBlocks(di, pl.id, pl.g, pl.pos) && p.hasBlocks(di, c.other, pl.g, pl.pos)
	})
	if err != nil {
		return err
	}
	src, dst := p.blockOf(di, c.other, pl.g, pl.pos), p.blockOf(di, pl.id, pl.g, pl.pos)
	p.moveBlock(cs, src, dst, pl.id, pl.g, pl.pos, pl.valid, "holds KV of request "+c.other)
	if len(p.details) == 0 {
		return p.na("the two requests' blocks are equal")
	}
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("block id %d (request %q group %d position %d) holds request %q's block %d (its position %d) on rank %s",
		dst, pl.id, pl.g.ID, pl.pos, c.other, src, pl.pos, p.s.rank(di))
	return nil
}

// strayWrite copies a full block of the targeted request into a block
// another request owns, on one rank; the targeted request is untouched.
func (p *planner) strayWrite() error {
	type cand struct {
		src    place
		victim place
	}
	var cands []cand
	t := p.opts.Target
	for _, src := range p.places(false, false, place.full) {
		if t.Position != nil && src.pos != *t.Position {
			continue
		}
		for _, id := range p.s.ids {
			if id == src.id {
				continue
			}
			// The victim's positions: the target's request names the
			// source, so look at the other requests without it.
			saved := p.opts.Target
			p.opts.Target.Request, p.opts.Target.Position = id, nil
			victims := p.places(false, true, func(v place) bool { return v.g.ID == src.g.ID })
			p.opts.Target = saved
			for _, v := range victims {
				if len(p.filterCaches(src.g.ID, func(c cache) bool {
					return p.hasBlocks(c.Dump, src.id, src.g, src.pos) && p.hasBlocks(c.Dump, v.id, v.g, v.pos)
				})) > 0 {
					cands = append(cands, cand{src, v})
				}
			}
		}
	}
	if len(cands) == 0 {
		return p.na("no second request: a stray write needs a block another request owns")
	}
	c := pick(p.rng, cands)
	cs, di, err := p.rankCaches(c.src.g, func(di int) bool {
		return p.hasBlocks(di, c.src.id, c.src.g, c.src.pos) && p.hasBlocks(di, c.victim.id, c.victim.g, c.victim.pos)
	})
	if err != nil {
		return err
	}
	src, dst := p.blockOf(di, c.src.id, c.src.g, c.src.pos), p.blockOf(di, c.victim.id, c.victim.g, c.victim.pos)
	p.moveBlock(cs, src, dst, c.victim.id, c.victim.g, c.victim.pos, c.victim.valid, "holds KV of request "+c.src.id)
	if len(p.details) == 0 {
		return p.na("the two blocks are equal")
	}
	p.f.Request = c.src.id
	p.f.Description = fmt.Sprintf("request %q's block %d (group %d position %d) was also written into block id %d, which request %q owns at position %d, on rank %s",
		c.src.id, src, c.src.g.ID, c.src.pos, dst, c.victim.id, c.victim.pos, p.s.rank(di))
	return nil
}

// tailRegion is a range of token slots of a block past a request's
// tokens: the tail of its last block, or a whole block past the last
// token.
type tailRegion struct {
	id     string
	g      *layout.Group
	pos    int
	lo, hi int // slots
	whole  bool
}

// tailRegions lists, for the target's requests and attention groups, the
// slots past num_tokens: the last block's tail and the table's blocks past
// the last token.
func (p *planner) tailRegions() []tailRegion {
	t := p.opts.Target
	var out []tailRegion
	for _, id := range p.s.ids {
		if t.Request != "" && id != t.Request {
			continue
		}
		r := p.s.Request(id)
		for _, gid := range p.s.GroupIDs() {
			g := p.s.Group(gid)
			if (t.Group != nil && gid != *t.Group) || g.Kind == layout.KindMamba || len(p.filterCaches(gid, nil)) == 0 {
				continue
			}
			table := r.BlockTable[strconv.Itoa(gid)]
			S := g.BlockSize
			for pos := r.NumTokens / S; pos < len(table); pos++ {
				if table[pos] == layout.NoBlock || (t.Position != nil && pos != *t.Position) {
					continue
				}
				lo := max(0, r.NumTokens-pos*S)
				if lo >= S {
					continue
				}
				out = append(out, tailRegion{id: id, g: g, pos: pos, lo: lo, hi: S, whole: lo == 0})
			}
		}
	}
	return out
}

// pastTokens writes bytes into slots past num_tokens on one rank: noise
// left in the tail of the last block or in a block past the transfer
// (stale-tail: only the tail audit sees it), or a decode's next tokens'
// KV (past-num-tokens: nothing may report it).
func (p *planner) pastTokens(stale bool) error {
	regions := p.tailRegions()
	if len(regions) == 0 {
		return p.na("no request has slots past num_tokens in its blocks (num_tokens is a multiple of the block size and the table ends at the last token)")
	}
	rg := pick(p.rng, regions)
	if !stale {
		// A decode writes the next tokens: from the first free slot on.
		rg.hi = rg.lo + 1 + p.rng.IntN(rg.hi-rg.lo)
	}
	cs, di, err := p.rankCaches(rg.g, func(di int) bool { return p.hasBlocks(di, rg.id, rg.g, rg.pos) })
	if err != nil {
		return err
	}
	block := p.blockOf(di, rg.id, rg.g, rg.pos)
	tail := []AuditPlace{}
	for _, c := range cs {
		for slot := rg.lo; slot < rg.hi; slot++ {
			for _, lh := range p.heads(c.View) {
				b := make([]byte, c.View.Cells.CellBytes)
				for i := range b {
					b[i] = byte(1 + p.rng.IntN(255)) // never zero
				}
				p.write(c, block, slot, lh, b)
			}
		}
		tail = append(tail, AuditPlace{Request: rg.id, Group: rg.g.ID, Position: rg.pos, Rank: p.s.rank(di), Layer: c.View.Layer.Name})
	}
	p.affect(rg.id, rg.g.ID, rg.pos)
	e := &p.f.Expect
	e.Details, e.Stored = []DetailExpect{}, []AuditPlace{}
	where := fmt.Sprintf("slots %d..%d of the last block", rg.lo, rg.hi-1)
	if rg.whole {
		where = "every slot of a block past the last token"
	}
	p.f.Request = rg.id
	if stale {
		e.Tail = tail
		p.f.Description = fmt.Sprintf("left noise in %s (block id %d, position %d) of request %q group %d in %d cache(s) on rank %s",
			where, block, rg.pos, rg.id, rg.g.ID, len(cs), p.s.rank(di))
	} else {
		p.f.Description = fmt.Sprintf("wrote KV of tokens %d..%d (past num_tokens) into block id %d (position %d) of request %q group %d in %d cache(s) on rank %s; the checksum excludes them (the tail audit, a load-time check, would report them)",
			rg.pos*rg.g.BlockSize+rg.lo, rg.pos*rg.g.BlockSize+rg.hi-1, block, rg.pos, rg.id, rg.g.ID, len(cs), p.s.rank(di))
	}
	return nil
}

// wrongPrefix makes a block and its stored checksum those the offload
// store keeps for another prefix (another request's full block with a
// different block hash), on one rank.
func (p *planner) wrongPrefix() error {
	type stored struct {
		pl   place
		hash string
		text string
	}
	type cand struct {
		di          int
		victim, src stored
	}
	var cands []cand
	for di, d := range p.s.Dumps {
		if t := p.opts.Target.Rank; t != nil && p.s.rank(di) != *t {
			continue
		}
		var all []stored
		for _, r := range d.Manifest.Requests {
			for _, key := range slices.Sorted(mapsKeys(r.StoredChecksums)) {
				gid, _ := strconv.Atoi(key)
				g := d.Manifest.Group(gid)
				gv := d.GroupView(gid)
				if g.Kind == layout.KindMamba || gv.Skip != "" || len(gv.Caches) == 0 {
					continue
				}
				for pos, text := range r.StoredChecksums[key] {
					if pos >= len(r.BlockHashes[key]) || layout.ValidTokens(r.NumTokens, pos, g.BlockSize) != g.BlockSize {
						continue
					}
					if _, ok := p.s.Block(di, r.ID, g, pos); !ok {
						continue
					}
					all = append(all, stored{place{r.ID, g, pos, g.BlockSize}, r.BlockHashes[key][pos], text})
				}
			}
		}
		for _, v := range all {
			t := p.opts.Target
			if (t.Request != "" && v.pl.id != t.Request) || (t.Group != nil && v.pl.g.ID != *t.Group) || (t.Position != nil && v.pl.pos != *t.Position) {
				continue
			}
			if p.opts.Allow != nil && !p.opts.Allow(v.pl.id, v.pl.g.ID, v.pl.pos) {
				continue
			}
			for _, s := range all {
				// Another prefix's block at the same position: its sum
				// alone equals the loaded block's, only the tag differs.
				if s.pl.id != v.pl.id && s.pl.g.ID == v.pl.g.ID && s.pl.pos == v.pl.pos && s.hash != v.hash && s.text != v.text {
					cands = append(cands, cand{di, v, s})
				}
			}
		}
	}
	if len(cands) == 0 {
		return p.na("no rank lists stored checksums (block_hashes and stored_checksums) for full blocks of two requests")
	}
	c := pick(p.rng, cands)
	d := p.s.Dumps[c.di]
	for _, s := range []stored{c.victim, c.src} {
		if _, err := layout.ParseHex64(s.text); err != nil || len(s.text) != 18 {
			return p.na("stored checksum %q is not 0x and 16 hex digits", s.text)
		}
	}
	mf, err := manifestFile(d)
	if err != nil {
		return err
	}
	text, err := readManifestBytes(mf)
	if err != nil {
		return err
	}
	e, err := replaceText(mf, text, c.victim.text, c.src.text)
	if err != nil {
		return p.na("%v", err)
	}
	p.edits = append(p.edits, e)
	g := c.victim.pl.g
	var cs []cache
	for _, x := range p.s.Caches(g.ID) {
		if x.Dump == c.di {
			cs = append(cs, x)
		}
	}
	src, dst := p.blockOf(c.di, c.src.pl.id, g, c.src.pl.pos), p.blockOf(c.di, c.victim.pl.id, g, c.victim.pl.pos)
	for _, x := range cs {
		for slot := range g.BlockSize {
			for lh := range x.View.Heads {
				p.write(x, dst, slot, lh, p.cell(x, src, slot, lh))
			}
		}
		for lh := range x.View.Heads {
			if p.validDiffers(x, src, dst, g.BlockSize, lh) {
				p.mismatch(c.victim.pl.id, g.ID, c.victim.pl.pos, x.View.Key())
				p.detail(c.victim.pl.id, g.ID, c.victim.pl.pos, x, lh, "holds KV of request "+c.src.pl.id, nil)
			}
		}
	}
	p.f.Expect.Stored = []AuditPlace{{Request: c.victim.pl.id, Group: g.ID, Position: c.victim.pl.pos, Rank: p.s.rank(c.di)}}
	p.f.Request = c.victim.pl.id
	p.f.Description = fmt.Sprintf("the offload store returned, for request %q group %d position %d (block id %d) on rank %s, the block and stored checksum %s it keeps for request %q position %d (another prefix)",
		c.victim.pl.id, g.ID, c.victim.pl.pos, dst, p.s.rank(c.di), c.src.text, c.src.pl.id, c.src.pl.pos)
	return nil
}

// readManifestBytes reads a manifest.json, or the header of a
// .safetensors dump (where an embedded manifest lives).
func readManifestBytes(path string) ([]byte, error) {
	if filepath.Base(path) == "manifest.json" {
		return layout.ReadRegularFile(path, layout.MaxManifestSize, "manifest")
	}
	f, _, err := layout.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var n [8]byte
	if _, err := f.ReadAt(n[:], 0); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > layout.MaxSafetensorsHeader {
		return nil, fmt.Errorf("%q: header of %d bytes", path, size)
	}
	b := make([]byte, 8+size)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}
