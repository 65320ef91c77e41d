package inject

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// Cell faults: bytes of one cell, or of a whole block, changed in place.
// Each predicts every place that reads the changed cells.

// Cell fault kinds.
const (
	BitFlip   Kind = "bit-flip"
	ByteNoise Kind = "byte-noise"
	ZeroBlock Kind = "zero-block"
	// CancellingFlips flips the top bit of an even number of 8-byte pieces
	// of one block position: vLLM's checksum provably misses it (each flip
	// changes it by 2^63 whatever the piece's odd weight), kvaudit's mix
	// check does not (docs/spec.md §14).
	CancellingFlips Kind = "cancelling-flips"
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

var cancellingFlips = kindDef{
	kind:     CancellingFlips,
	models:   "sign flips that cancel: bit 63 of an even number of 8-byte pieces (bf16 signs) in one block position, over layers, heads and ranks, which vLLM's checksum misses",
	detector: DetectChecksum,
	plan:     dumpPlan((*planner).cancellingFlips),
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

// cancellingFlips flips bit 63 of one 8-byte piece in each of 2 or 4
// (Options.Bits, when above 1: an even number) distinct (cache, head) slices
// of one attention block position, all under one replica key (on a
// replicated head, one replica), taking the slices round-robin over the
// ranks that hold them. Each flip changes that key's partial vLLM
// checksum by exactly 2^63 (odd weights), so an even number cancel in
// every check: only kvaudit's mix check sees them.
func (p *planner) cancellingFlips() error {
	n := 2 * (1 + p.rng.IntN(2))
	if p.opts.Bits > 1 {
		if p.opts.Bits%2 != 0 {
			return &OptionError{Option: "Bits", Value: strconv.Itoa(p.opts.Bits), Msg: "cancelling flips are an even number of top bits"}
		}
		n = p.opts.Bits
	}
	type slice struct {
		c  cache
		lh int
	}
	// The slices of each place, by replica key, in rank order.
	var pls []place
	var choices [][]slice
	for _, pl := range p.places(false, true, nil) {
		byKey := map[layout.ReplicaKey][]slice{}
		var keys []layout.ReplicaKey
		for _, c := range p.filterCaches(pl.g.ID, func(c cache) bool { return p.hasBlocks(c.Dump, pl.id, pl.g, pl.pos) }) {
			if c.View.Cells.CellBytes%8 != 0 {
				continue
			}
			for _, lh := range p.heads(c.View) {
				k := c.View.Key()
				if byKey[k] == nil {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], slice{c, lh})
			}
		}
		for _, k := range keys {
			if len(byKey[k]) >= n {
				pls = append(pls, pl)
				choices = append(choices, byKey[k])
			}
		}
	}
	if len(pls) == 0 {
		return p.na("no block position holds %d slices under one replica key", n)
	}
	i := p.rng.IntN(len(pls))
	pl, cands := pls[i], choices[i]
	// Round-robin over the ranks, each rank's slices shuffled: the flips
	// spread over ranks first, then over layers and heads.
	byRank := map[int][]slice{}
	var rankOrder []int
	for _, k := range p.rng.Perm(len(cands)) {
		s := cands[k]
		if byRank[s.c.Dump] == nil {
			rankOrder = append(rankOrder, s.c.Dump)
		}
		byRank[s.c.Dump] = append(byRank[s.c.Dump], s)
	}
	var picked []slice
	for len(picked) < n {
		for _, di := range rankOrder {
			if len(picked) < n && len(byRank[di]) > 0 {
				picked = append(picked, byRank[di][0])
				byRank[di] = byRank[di][1:]
			}
		}
	}
	var what []string
	for _, s := range picked {
		slot := p.rng.IntN(pl.valid)
		block := p.blockOf(s.c.Dump, pl.id, pl.g, pl.pos)
		b := p.cell(s.c, block, slot, s.lh)
		piece := p.rng.IntN(len(b) / 8)
		b[8*piece+7] ^= 0x80
		p.write(s.c, block, slot, s.lh, b)
		p.cellChanged(s.c, block, slot, s.lh, hintBits(1))
		what = append(what, fmt.Sprintf("layer %d (%s) global head %d token %d piece %d on rank %s",
			s.c.View.Number, s.c.View.Layer.Name, s.c.View.HeadBase+s.lh, pl.pos*pl.S()+slot, piece, p.ranks.rankOf(s.c.Dump)))
	}
	key := picked[0].c.View.Key()
	p.f.Request = pl.id
	p.f.Description = fmt.Sprintf("flipped bit 63 of %d pieces of request %q group %d position %d, replica %d of %d (vLLM's checksum cancels them): %s",
		n, pl.id, pl.g.ID, pl.pos, key.Index, key.Replicas, strings.Join(what, "; "))
	return nil
}
