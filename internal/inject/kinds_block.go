package inject

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/blockspan"
)

// Block faults: whole blocks of a request holding the wrong contents
// (paired wrongly, shifted by one, another request's), as a connector that
// pairs block ids wrongly or reads a released block leaves them.

// Block fault kinds.
const (
	MisplaceBlock Kind = "misplace-block"
	ShiftBlocks   Kind = "shift-blocks"
	StaleBlock    Kind = "stale-block"
)

var misplaceBlock = kindDef{
	kind:     MisplaceBlock,
	models:   "blocks paired wrongly: the contents of two block ids of a request swapped",
	detector: DetectChecksum,
	plan:     dumpPlan((*planner).misplace),
}

var shiftBlocks = kindDef{
	kind:     ShiftBlocks,
	models:   "off-by-one pairing: from a position on, each block holds the previous one",
	detector: DetectChecksum,
	plan:     dumpPlan((*planner).shift),
}

var staleBlock = kindDef{
	kind:     StaleBlock,
	models:   "a lapsed lease: a block holds another request's KV",
	detector: DetectChecksum,
	plan:     dumpPlan((*planner).staleBlock),
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
		ba, bb, a.pos, b.pos, a.id, a.g.ID, p.ranks.rankOf(di))
	return nil
}

// shift makes each block of a request from a position on hold the block
// of the position before it (an off-by-one pairing), on one rank.
func (p *planner) shift() error {
	pls := p.places(false, true, func(pl place) bool { return pl.pos >= 1 })
	var ok []place
	cands := map[place][]cache{}
	for _, pl := range pls {
		r := p.ranks.Request(pl.id)
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
	r := p.ranks.Request(pl.id)
	S := pl.S()
	last := (r.NumTokens+S-1)/S - 1
	cs, di, err := p.rankCaches(pl.g, func(di int) bool { return slices.ContainsFunc(cands[pl], func(c cache) bool { return c.Dump == di }) })
	if err != nil {
		return err
	}
	for q := pl.pos; q <= last; q++ {
		src, dst := p.blockOf(di, pl.id, pl.g, q-1), p.blockOf(di, pl.id, pl.g, q)
		p.moveBlock(cs, src, dst, pl.id, pl.g, q, blockspan.ValidTokens(r.NumTokens, q, S), fmt.Sprintf("holds the block of position %d", q-1))
	}
	if len(p.details) == 0 {
		return p.na("the shifted blocks are equal")
	}
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("shifted request %q group %d by one block from position %d to %d: each holds the block before it, on rank %s",
		pl.id, pl.g.ID, pl.pos, last, p.ranks.rankOf(di))
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
		for _, id := range p.ranks.ids {
			if id == pl.id {
				continue
			}
			r2 := p.ranks.Request(id)
			if blockspan.ValidTokens(r2.NumTokens, pl.pos, pl.S()) < pl.valid {
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
		dst, pl.id, pl.g.ID, pl.pos, c.other, src, pl.pos, p.ranks.rankOf(di))
	return nil
}
