package inject

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"

	"github.com/kvaudit/kvaudit/verify/drill"
)

// Cell faults: bytes of one cell, or of a whole block, changed in place.
// Each predicts every place that reads the changed cells.

// Cell fault kinds.
const (
	BitFlip   Kind = "bit-flip"
	ByteNoise Kind = "byte-noise"
	ZeroBlock Kind = "zero-block"
)

var bitFlip = kindDef{
	kind:        BitFlip,
	models:      "bit rot, bad DMA: a few bits of one cell flipped",
	detector:    DetectChecksum,
	everyReader: true,
	plan: dumpPlan(func(p *planner) error {
		return p.flipCell(p.places(false, true, nil), false, nil)
	}),
}

var byteNoise = kindDef{
	kind:        ByteNoise,
	models:      "torn or garbage write: a run of one cell's bytes replaced by noise",
	detector:    DetectChecksum,
	everyReader: true,
	plan:        dumpPlan((*planner).byteNoise),
}

var zeroBlock = kindDef{
	kind:        ZeroBlock,
	models:      "lost write: a block's cells zeroed on one rank",
	detector:    DetectChecksum,
	everyReader: true,
	plan:        dumpPlan((*planner).zeroBlock),
}

// flipCell flips Bits bits of one cell (a state row's, when state) at one
// of the places pls, in a cache cachePred accepts (nil: any): bit-flip,
// state-flip and replica-diverge.
func (p *planner) flipCell(pls []place, state bool, cachePred func(cache) bool) error {
	if len(pls) == 0 {
		return p.na("no checksummed position to corrupt")
	}
	pl := pick(p.rng, pls)
	cs := p.filterCaches(pl.g.ID, func(c cache) bool {
		return (cachePred == nil || cachePred(c)) && p.hasBlocks(c.Dump, pl.id, pl.g, pl.pos) && len(p.heads(c.View)) > 0
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
		n, flipped, pl.id, pl.g.ID, c.View.Number, c.View.Layer.Name, what, c.View.ReplicaIndex, c.View.Replicas, p.ranks.rankOf(c.Dump))
	return nil
}

// hintBits is the drill-down's hint for n flipped bits of a cell.
func hintBits(n int) string {
	switch {
	case n == 1:
		return "1 bit flipped"
	case n <= drill.FlipBits:
		return fmt.Sprintf("%d bits flipped", n)
	}
	return "random bytes"
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
		start, start+n-1, pl.id, pl.g.ID, c.View.Number, c.View.Layer.Name, tok, c.View.HeadBase+lh, p.ranks.rankOf(c.Dump))
	return nil
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
		block, pl.id, pl.g.ID, pl.pos, len(cs), p.ranks.rankOf(di))
	return nil
}
