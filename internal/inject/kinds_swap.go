package inject

import (
	"fmt"
	"slices"
)

// Mapping faults: a block's cells in the wrong place within it (tokens,
// heads or layers swapped), as a connector with a wrong offset, head
// mapping or layer region writes them.

// Mapping fault kinds.
const (
	SwapTokens Kind = "swap-tokens"
	SwapHeads  Kind = "swap-heads"
	SwapLayers Kind = "swap-layers"
)

var swapTokens = kindDef{
	kind:     SwapTokens,
	models:   "wrong token offset: two tokens of a block swapped in one layer",
	detector: DetectChecksum,
	plan:     dumpPlan((*planner).swapTokens),
}

var swapHeads = kindDef{
	kind:     SwapHeads,
	models:   "wrong head mapping (across TP): two heads of a layer swapped in a block",
	detector: DetectChecksum,
	plan:     dumpPlan((*planner).swapHeads),
}

var swapLayers = kindDef{
	kind:     SwapLayers,
	models:   "wrong layer region: two layers' cells of a block swapped",
	detector: DetectChecksum,
	plan:     dumpPlan((*planner).swapLayers),
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
		base+t1, base+t2, pl.id, pl.g.ID, pl.pos, c.View.Number, c.View.Layer.Name, p.ranks.rankOf(c.Dump))
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
		ga, p.ranks.rankOf(a.c.Dump), gb, p.ranks.rankOf(b.c.Dump), a.c.View.Number, a.c.View.Layer.Name, pl.id, pl.g.ID, pl.pos)
	return nil
}

// swapLayers swaps a block's cells of two layers with the same geometry on
// one rank.
func (p *planner) swapLayers() error {
	type pair struct{ a, b cache }
	pairsOf := func(pl place) []pair {
		var out []pair
		all := p.ranks.Caches(pl.g.ID)
		for _, a := range all {
			if t := p.opts.Target.Rank; t != nil && p.ranks.rankOf(a.Dump) != *t {
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
		pr.a.View.Number, pr.a.View.Layer.Name, pr.b.View.Number, pr.b.View.Layer.Name, pl.id, pl.g.ID, pl.pos, block, p.ranks.rankOf(pr.a.Dump))
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
