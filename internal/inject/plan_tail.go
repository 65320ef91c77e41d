package inject

import (
	"fmt"
	"strconv"

	"github.com/kvaudit/kvaudit/layout"
)

// This file holds the planner's machinery for writes past a request's
// tokens (stale-tail, past-num-tokens): the regions past num_tokens and
// the noise written there.

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
	for _, id := range p.ranks.ids {
		if t.Request != "" && id != t.Request {
			continue
		}
		r := p.ranks.Request(id)
		for _, gid := range p.ranks.GroupIDs() {
			g := p.ranks.Group(gid)
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

// pastWrite is what writePastTokens wrote: noise in the slots lo..hi-1 of
// region rg, block id block, in the caches cs of rank di.
type pastWrite struct {
	rg    tailRegion
	cs    []cache
	di    int
	block int
	// tail are the tail audit's findings the write makes.
	tail []AuditPlace
}

// writePastTokens writes non-zero bytes into slots past num_tokens on one
// rank: a whole region (the tail of a last block, or a block past the
// last token), or, for a decode, the slots its next tokens fill from the
// first free slot on. The checksum excludes them: it expects no mismatch,
// no drill-down detail and no stored-checksum failure.
func (p *planner) writePastTokens(decode bool) (*pastWrite, error) {
	regions := p.tailRegions()
	if len(regions) == 0 {
		return nil, p.na("no request has slots past num_tokens in its blocks (num_tokens is a multiple of the block size and the table ends at the last token)")
	}
	rg := pick(p.rng, regions)
	if decode {
		rg.hi = rg.lo + 1 + p.rng.IntN(rg.hi-rg.lo)
	}
	cs, di, err := p.rankCaches(rg.g, func(di int) bool { return p.hasBlocks(di, rg.id, rg.g, rg.pos) })
	if err != nil {
		return nil, err
	}
	w := &pastWrite{rg: rg, cs: cs, di: di, block: p.blockOf(di, rg.id, rg.g, rg.pos), tail: []AuditPlace{}}
	for _, c := range cs {
		for slot := rg.lo; slot < rg.hi; slot++ {
			for _, lh := range p.heads(c.View) {
				b := make([]byte, c.View.Cells.CellBytes)
				for i := range b {
					b[i] = byte(1 + p.rng.IntN(255)) // never zero
				}
				p.write(c, w.block, slot, lh, b)
			}
		}
		w.tail = append(w.tail, AuditPlace{Request: rg.id, Group: rg.g.ID, Position: rg.pos, Rank: p.ranks.rankOf(di), Layer: c.View.Layer.Name})
	}
	p.affect(rg.id, rg.g.ID, rg.pos)
	e := &p.f.Expect
	e.Details, e.Stored = []DetailExpect{}, []AuditPlace{}
	p.f.Request = rg.id
	return w, nil
}

// where says which slots of the block the write filled.
func (w *pastWrite) where() string {
	if w.rg.whole {
		return "every slot of a block past the last token"
	}
	return fmt.Sprintf("slots %d..%d of the last block", w.rg.lo, w.rg.hi-1)
}
