package inject

import (
	"cmp"
	"fmt"
	"github.com/kvaudit/kvaudit/parse"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// planner decides one dump fault: its edits and what it expects. The
// kinds' dumpPlans use its machinery: the places a fault may change
// (places, tailRegions), the places reading a block (readers), the caches
// and heads the target allows, the writes (write, moveBlock) and the
// expectations they make (cellChanged, mismatch, detail).
type planner struct {
	ranks *ranks
	def   *kindDef
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
	if t.Request != "" && p.ranks.Request(t.Request) == nil {
		return &OptionError{Option: "Target.Request", Value: strconv.Quote(t.Request), Msg: "the side holds no such request"}
	}
	if t.Group != nil && p.ranks.Group(*t.Group) == nil {
		return &OptionError{Option: "Target.Group", Value: strconv.Itoa(*t.Group), Msg: "the side has no such group"}
	}
	if t.Rank != nil && !slices.ContainsFunc(p.ranks.Dumps, func(d *layout.Dump) bool {
		pp, tp := d.Rank()
		return pp == t.Rank.PP && tp == t.Rank.TP
	}) {
		return &OptionError{Option: "Target.Rank", Value: fmt.Sprintf("%d:%d", t.Rank.PP, t.Rank.TP), Msg: "no dump of the side is that rank"}
	}
	if p.opts.Bits < 0 {
		return &OptionError{Option: "Bits", Value: strconv.Itoa(p.opts.Bits), Msg: "is negative"}
	}
	return p.checkRanges()
}

// checkRanges rejects a target layer, head or position that no cache or
// request of the side (as narrowed by the other targets) has, naming the
// range there is: a kind's own reasons (no second head, no checksummed
// position) are for targets that exist.
func (p *planner) checkRanges() error {
	t := p.opts.Target
	var layers, heads []int
	state, attention := false, false
	for _, gid := range p.ranks.GroupIDs() {
		if t.Group != nil && *t.Group != gid {
			continue
		}
		for _, c := range p.ranks.Caches(gid) {
			layers = append(layers, c.View.Number)
			if layerMatch(c.View, t.Layer) {
				heads = append(heads, c.View.GlobalHeads)
				if c.Group.Kind == layout.KindMamba {
					state = true
				} else {
					attention = true
				}
			}
		}
	}
	what := "global KV heads"
	switch {
	case state && attention:
		what = "global KV heads (state rows of state layers)"
	case state:
		what = "global state rows"
	}
	if t.Layer != "" && len(heads) == 0 {
		return &OptionError{Option: "Target.Layer", Value: strconv.Quote(t.Layer), Msg: fmt.Sprintf("no layer of the side has that name or number: its layers are %s", ranges.Format(slices.Compact(slices.Sorted(slices.Values(layers)))))}
	}
	if t.Head != nil && len(heads) > 0 && *t.Head >= slices.Max(heads) {
		return &OptionError{Option: "Target.Head", Value: strconv.Itoa(*t.Head), Msg: fmt.Sprintf("out of range: the %s are 0-%d", what, slices.Max(heads)-1)}
	}
	if t.Position == nil {
		return nil
	}
	// The positions each request's block table has in the groups allowed
	// (blocks past the last token too: the tail faults' targets).
	var have []string
	for _, id := range p.ranks.ids {
		if t.Request != "" && id != t.Request {
			continue
		}
		r := p.ranks.Request(id)
		for _, gid := range p.ranks.GroupIDs() {
			g := p.ranks.Group(gid)
			if t.Group != nil && *t.Group != gid || g == nil {
				continue
			}
			key := strconv.Itoa(gid)
			n := len(r.BlockTable[key])
			if g.Kind == layout.KindMamba {
				n = 0
				if _, ok := r.StateBlock[key]; ok {
					n = 1
				}
			}
			if n == 0 {
				continue
			}
			if *t.Position < n {
				return nil
			}
			have = append(have, fmt.Sprintf("request %q group %d: 0-%d", id, gid, n-1))
		}
	}
	msg := "no request holds that block position"
	if len(have) > 0 {
		msg += " (" + strings.Join(have, "; ") + ")"
	}
	return &OptionError{Option: "Target.Position", Value: strconv.Itoa(*t.Position), Msg: msg}
}

// run plans the kind's fault on the side.
func (p *planner) run(plan dumpPlan) error {
	if err := refuseDevice(p.ranks.Dumps); err != nil {
		return err
	}
	return plan(p)
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
					return &parse.Error{Format: parse.Dump, File: d.Path, Field: fmt.Sprintf("groups[%d].layers[%d].source.cuda_ipc", gi, li),
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
	for _, id := range p.ranks.ids {
		r := p.ranks.RankRequest(di, id)
		if r == nil {
			continue
		}
		span, status, err := blockspan.Of(r, g)
		if err != nil || status != blockspan.OK {
			continue
		}
		for i, b := range span.Blocks {
			pl := place{id: id, g: g, pos: span.Start + i, valid: 1}
			if g.Kind != layout.KindMamba {
				pl.valid = blockspan.ValidTokens(r.NumTokens, pl.pos, g.BlockSize)
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
	for di := range p.ranks.Dumps {
		if b, ok := p.ranks.Block(di, pl.id, pl.g, pl.pos); ok && p.blockReads(di, pl.g)[b] > 1 {
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

// finish turns the accumulated expectations into the fault's Expect.
func (p *planner) finish() {
	e := &p.f.Expect
	for _, id := range p.ranks.ids {
		groups := p.mism[id]
		if len(groups) == 0 {
			continue
		}
		re := RequestExpect{ID: id, Verdict: string(verify.Mismatch)}
		for _, gid := range slices.Sorted(maps.Keys(groups)) {
			acc := groups[gid]
			slices.Sort(acc.positions)
			re.Groups = append(re.Groups, GroupExpect{ID: gid, Positions: slices.Compact(acc.positions), Checks: p.ranks.checks(gid, acc.keys)})
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
		return cmp.Or(cmp.Compare(slices.Index(p.ranks.ids, a.Request), slices.Index(p.ranks.ids, b.Request)),
			cmp.Compare(a.Group, b.Group), cmp.Compare(a.Position, b.Position))
	})
	p.f.Affected = slices.Compact(p.f.Affected)
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
// Options.Positions when the fault changes them (changes), and by pred.
// Unless the kind predicts every reader of what it changes, blocks read
// at several places are left out.
func (p *planner) places(state, changes bool, pred func(place) bool) []place {
	t := p.opts.Target
	var out []place
	for _, id := range p.ranks.ids {
		if t.Request != "" && id != t.Request {
			continue
		}
		r := p.ranks.Request(id)
		for _, gid := range p.ranks.GroupIDs() {
			g := p.ranks.Group(gid)
			if (t.Group != nil && gid != *t.Group) || (g.Kind == layout.KindMamba) != state || len(p.filterCaches(gid, nil)) == 0 {
				continue
			}
			span, status, err := blockspan.Of(r, g)
			if err != nil || status != blockspan.OK {
				continue
			}
			for i := range span.Blocks {
				pos := span.Start + i
				pl := place{id: id, g: g, pos: pos, valid: 1}
				if !state {
					pl.valid = blockspan.ValidTokens(r.NumTokens, pos, g.BlockSize)
				}
				if pl.valid == 0 || (t.Position != nil && pos != *t.Position) {
					continue
				}
				if changes && !p.opts.allows(id, gid, pos) {
					continue
				}
				if !p.def.everyReader && p.shared(pl) {
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
	for _, c := range p.ranks.Caches(g) {
		if t.Rank != nil && p.ranks.rankOf(c.Dump) != *t.Rank {
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

// hasBlocks says whether rank di holds blocks of request id at every
// position.
func (p *planner) hasBlocks(di int, id string, g *layout.Group, positions ...int) bool {
	for _, pos := range positions {
		if _, ok := p.ranks.Block(di, id, g, pos); !ok {
			return false
		}
	}
	return true
}

func (p *planner) blockOf(di int, id string, g *layout.Group, pos int) int {
	b, _ := p.ranks.Block(di, id, g, pos)
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

// blockCells calls fn for every (token slot, local head) of the target's
// heads of a cache.
func (p *planner) blockCells(c cache, fn func(slot, lh int)) {
	for slot := range c.View.Cells.KernelBlocks * c.View.Cells.KernelTokens {
		for _, lh := range p.heads(c.View) {
			fn(slot, lh)
		}
	}
}

// validDiffers says whether two blocks' valid cells of a head differ.
func (p *planner) validDiffers(c cache, blockA, blockB, valid, lh int) bool {
	for slot := range valid {
		if string(p.cell(c, blockA, slot, lh)) != string(p.cell(c, blockB, slot, lh)) {
			return true
		}
	}
	return false
}

// moveBlock writes, on the caches cs of one rank, the original contents of
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
