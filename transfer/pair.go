package transfer

// This file checks one descriptor pair as a transfer record is read:
// confined, aligned, and what it delivers.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
)

// sideNames are the log's names of the destination and source sides.
func sideNames(kind string) (dst, src string) {
	if kind == nixl.Write {
		return "remote", "local"
	}
	return "local", "remote"
}

// pair checks one descriptor pair and records what it delivers; false
// when the transfer cannot be resolved further.
func (a *auditor) pair(x *xfer, i int, d, s nixl.Desc) bool {
	collect := func(dst *[]addrmap.Cells) func(addrmap.Cells) error {
		return func(c addrmap.Cells) error { *dst = append(*dst, c); return nil }
	}
	a.dcells, a.scells = a.dcells[:0], a.scells[:0]
	dOut, _, _ := x.dst.am.Resolve(d.Addr, d.Len, collect(&a.dcells))
	sOut, _, _ := x.src.am.Resolve(s.Addr, s.Len, collect(&a.scells))
	if x.req == nil {
		for _, c := range a.dcells {
			if c.Block == layout.NoBlock {
				continue
			}
			if own := x.dst.ownersOf(c.Region.Group.Group.ID, c.Block); len(own) > 0 {
				x.req = x.dst.request(own[0].req)
				break
			}
		}
		if x.req == nil {
			// Another request's, which the dumps do not hold.
			x.log.notDumped++
			return false
		}
	}
	if !a.wanted(x.req) {
		return false
	}
	if x.prodReq == "" {
		x.prodReq = x.req.pairID()
	}
	a.ch = nil
	if len(a.dcells) > 0 && len(a.scells) > 0 && !a.dcells[0].Region.State && nixl.Converted(a.dcells[0].Region, a.scells[0].Region) {
		if ch, ok := chunkOf(a.dcells[0].Region, d); ok {
			a.ch = &ch
		}
	}
	dside, sside := sideNames(x.kind)
	// Placed at its destination cells; with none (every destination
	// byte outside the caches), in no block, at no head or token.
	base := Finding{Descriptor: i, Group: -1, Position: -1, Block: -1, Heads: [2]int{-1, -1}, Tokens: [2]int{-1, -1}}
	if d.Len != s.Len {
		f := base
		f.Invariant, f.Bytes = Aligned, d.Len
		f.Message = fmt.Sprintf("transfer %d descriptor %d: the %s descriptor has %d bytes, the %s %d", x.id, i, dside, d.Len, sside, s.Len)
		a.placeDst(&f, x)
		a.flag(i, flagMisaligned)
		a.add(x, f)
	}
	if dOut > 0 {
		f := base
		f.Invariant, f.Side, f.Bytes = Confined, dside, dOut
		f.Message = fmt.Sprintf("transfer %d descriptor %d writes %d bytes at 0x%x.. outside every cache of the consumer's rank %s", x.id, i, dOut, d.Addr, x.dst.r)
		a.placeDst(&f, x)
		a.add(x, f)
	}
	if sOut > 0 {
		f := base
		f.Invariant, f.Side, f.Bytes = Confined, sside, sOut
		f.Message = fmt.Sprintf("transfer %d descriptor %d reads %d bytes at 0x%x.. outside every cache of the producer's rank %s", x.id, i, sOut, s.Addr, x.src.r)
		a.placeDst(&f, x)
		a.add(x, f)
	}
	x.log.pairs++
	if dOut == d.Len && sOut == s.Len {
		x.log.outside++
	}
	x.bytes += d.Len
	dOK := a.confinedDst(x, i, dside)
	sOK := a.confinedSrc(x, i, sside)
	if dOK && sOK && d.Len == s.Len && dOut == 0 && sOut == 0 {
		a.aligned(x, i, d, s)
	}
	a.deliver(x, i, d, s)
	return true
}

// placeDst places a finding of the current pair at its destination: the
// chunk's cells where the consumer converts, else the bytes' cells.
func (a *auditor) placeDst(f *Finding, x *xfer) {
	ch := a.ch
	if ch == nil {
		a.place(f, x, a.dcells)
		return
	}
	v := ch.region.Views[0]
	f.Group, f.Block = ch.region.Group.Group.ID, ch.block
	f.Layer, f.LayerName = v.Number, ch.region.Layer.Name
	f.Heads = [2]int{v.HeadBase, v.HeadBase + v.Heads - 1}
	switch {
	case ch.region.Parts == 1:
		f.Part = ""
	case ch.part == 0:
		f.Part = "K"
	case ch.part == 1:
		f.Part = "V"
	default:
		f.Part = "K+V"
	}
	f.Tokens = [2]int{-1, -1}
	if pos, ok := x.req.groups[f.Group].all[ch.block]; ok {
		f.Position = pos
		t0 := pos*ch.region.Group.Group.BlockSize + ch.k*ch.region.KernelTokens
		f.Tokens = [2]int{t0 + ch.tokens[0], t0 + ch.tokens[1] - 1}
	}
}

// place fills a finding's place in the consumer request from the first
// destination cells.
func (a *auditor) place(f *Finding, x *xfer, cells []addrmap.Cells) {
	if len(cells) == 0 {
		return
	}
	c := &cells[0]
	f.Group, f.Block = c.Region.Group.Group.ID, c.Block
	f.Layer, f.LayerName = c.Region.Views[0].Number, c.Region.Layer.Name
	if rg := x.req.groups[f.Group]; rg != nil {
		if pos, ok := rg.all[c.Block]; ok {
			f.Position = pos
		}
	}
	a.describeCells(f, cells, x.req, true)
}

// describeCells sets a finding's part, heads and tokens from cells of a
// request's blocks (tokens unknown, -1, where a block is not the
// request's).
func (a *auditor) describeCells(f *Finding, cells []addrmap.Cells, r *request, consumer bool) {
	heads, tokens := [2]int{1 << 30, -1}, [2]int{1 << 30, -1}
	parts := map[string]bool{}
	for _, c := range cells {
		if c.View != nil {
			heads[0] = min(heads[0], c.View.HeadBase+c.Heads[0])
			heads[1] = max(heads[1], c.View.HeadBase+c.Heads[1]-1)
		}
		parts[partName(c.Region.Parts, c.Region.PartBytes, c.Bytes)] = true
		pos := -1
		if r != nil {
			if rg := r.groups[c.Region.Group.Group.ID]; rg != nil {
				if p, ok := rg.all[c.Block]; ok {
					pos = p
				}
			}
		}
		if pos >= 0 && !c.Region.State {
			S := c.Region.Group.Group.BlockSize
			tokens[0] = min(tokens[0], pos*S+c.FirstToken())
			tokens[1] = max(tokens[1], pos*S+c.LastToken())
		}
	}
	if heads[1] < 0 {
		heads = [2]int{-1, -1}
	}
	if tokens[1] < 0 {
		tokens = [2]int{-1, -1}
	}
	f.Heads, f.Tokens = heads, tokens
	switch {
	case parts["K+V"] || (parts["K"] && parts["V"]):
		f.Part = "K+V"
	case parts["K"]:
		f.Part = "K"
	case parts["V"]:
		f.Part = "V"
	}
}

// what says what cells hold, for messages: layer, part, heads, tokens.
func what(f *Finding) string {
	var b strings.Builder
	fmt.Fprintf(&b, "layer %d", f.Layer)
	if f.Part != "" {
		b.WriteString(" " + f.Part)
	}
	if f.Heads[0] >= 0 {
		if f.Heads[0] == f.Heads[1] {
			fmt.Fprintf(&b, " head %d", f.Heads[0])
		} else {
			fmt.Fprintf(&b, " heads %d-%d", f.Heads[0], f.Heads[1])
		}
	}
	if f.Tokens[0] >= 0 {
		if f.Tokens[0] == f.Tokens[1] {
			fmt.Fprintf(&b, " token %d", f.Tokens[0])
		} else {
			fmt.Fprintf(&b, " tokens %d-%d", f.Tokens[0], f.Tokens[1])
		}
	}
	return b.String()
}

// confinedDst checks that every destination byte lies in a block the
// request loads; false when one does not.
func (a *auditor) confinedDst(x *xfer, i int, dside string) bool {
	for ci := range a.dcells {
		c := &a.dcells[ci]
		g := c.Region.Group.Group.ID
		rg := x.req.groups[g]
		if rg == nil {
			continue
		}
		if _, ok := rg.loaded[c.Block]; ok {
			continue
		}
		f := Finding{Invariant: Confined, Side: dside, Descriptor: i, Group: g, Position: -1, Block: c.Block,
			Layer: c.Region.Views[0].Number, LayerName: c.Region.Layer.Name}
		for _, o := range a.dcells[ci:] {
			if o.Block == c.Block {
				f.Bytes += o.Len
			}
		}
		a.describeCells(&f, a.dcells[ci:ci+1], x.req, true)
		if a.ch != nil {
			a.placeDst(&f, x)
		}
		// The tokens the bytes carry: the producer request's, read.
		if preq := x.src.request(x.prodReq); preq != nil && len(a.scells) > 0 {
			var sf Finding
			a.describeCells(&sf, a.scells, preq, false)
			f.Tokens = sf.Tokens
		}
		into := fmt.Sprintf("block %d", c.Block)
		switch pos, own := rg.all[c.Block]; {
		case c.Block == layout.NoBlock:
			f.Owner = &Owner{Position: -1, Block: -1}
			into = fmt.Sprintf("engine block %d, which the consumer's dump does not hold (no dumped request's block)", c.EngineBlock)
		case own:
			f.Position = pos
			f.Owner = &Owner{Request: x.req.req.ID, Position: pos, Block: c.Block}
			into += fmt.Sprintf(", the request's own block at position %d, which it does not load (a local prefix hit)", pos)
		default:
			f.Owner = &Owner{Position: -1, Block: c.Block}
			into += ", which no request of the consumer holds"
			for _, o := range x.dst.ownersOf(g, c.Block) {
				if o.req != x.req.req.ID {
					f.Owner = &Owner{Request: o.req, Position: o.pos, Block: c.Block}
					into = fmt.Sprintf("block %d, which request %s holds at position %d", c.Block, o.req, o.pos)
					break
				}
			}
		}
		f.Message = fmt.Sprintf("transfer %d descriptor %d wrote %s into %s, not a block request %s loads", x.id, i, what(&f), into, x.req.req.ID)
		a.add(x, f)
		a.flag(i, flagIntrude)
		return false
	}
	return true
}

// confinedSrc checks that every source byte lies in a block of the
// producer's request; false when one does not.
func (a *auditor) confinedSrc(x *xfer, i int, sside string) bool {
	preq := x.src.request(x.prodReq)
	for ci := range a.scells {
		c := &a.scells[ci]
		g := c.Region.Group.Group.ID
		if preq != nil {
			if rg := preq.groups[g]; rg != nil {
				if _, ok := rg.all[c.Block]; ok {
					continue
				}
			}
		}
		f := Finding{Invariant: Confined, Side: sside, Descriptor: i, Group: -1, Position: -1, Block: -1,
			Layer: c.Region.Views[0].Number, LayerName: c.Region.Layer.Name, Heads: [2]int{-1, -1}, Tokens: [2]int{-1, -1}}
		if len(a.dcells) > 0 {
			a.placeDst(&f, x)
		}
		for _, o := range a.scells[ci:] {
			if o.Block == c.Block {
				f.Bytes += o.Len
			}
		}
		src := &Source{Agent: x.src.agent, Rank: x.src.r, Block: c.Block, Position: -1, Expected: x.prodReq}
		holds := "which no request of the producer holds (a released block)"
		for _, o := range x.src.ownersOf(g, c.Block) {
			if o.req != x.prodReq {
				src.Request, src.Position = o.req, o.pos
				holds = fmt.Sprintf("which holds request %s's KV (position %d)", o.req, o.pos)
				break
			}
		}
		if c.Block == layout.NoBlock {
			holds = fmt.Sprintf("engine block %d, which the producer's dump does not hold", c.EngineBlock)
		}
		if preq == nil {
			holds += fmt.Sprintf("; the producer's dump holds no request %s", x.prodReq)
		}
		f.Source = src
		f.Message = fmt.Sprintf("transfer %d read producer block %d (rank %s), %s, not request %s's", x.id, c.Block, x.src.r, holds, x.prodReq)
		a.add(x, f)
		a.flag(i, flagForeign)
		return false
	}
	return true
}

// logical is a box of cells in the terms both sides share: layer, state,
// global head (row), request token, cell byte, and the box's shape.
type logical struct {
	layer, state      int
	head, token, byte int
	dims              []addrmap.Dim
	len               uint64
}

func logicalOf(c *addrmap.Cells, pos int) logical {
	l := logical{layer: c.Region.Views[0].Number, state: -1, byte: c.Bytes[0], dims: c.Shape(), len: c.Len, head: -1}
	if c.View != nil {
		l.head = c.View.HeadBase + c.Heads[0]
	}
	if c.Region.State {
		l.state = c.State
		return l
	}
	l.token = pos*c.Region.Group.Group.BlockSize + c.FirstToken()
	return l
}

func (l logical) equal(m logical) bool {
	return l.layer == m.layer && l.state == m.state && l.head == m.head && l.token == m.token && l.byte == m.byte &&
		l.len == m.len && slices.Equal(l.dims, m.dims)
}

// aligned checks that a pair's two sides hold the same KV.
func (a *auditor) aligned(x *xfer, i int, d, s nixl.Desc) {
	if len(a.dcells) == 0 || len(a.scells) == 0 {
		return
	}
	preq := x.src.request(x.prodReq)
	if preq == nil {
		return
	}
	dr, sr := a.dcells[0].Region, a.scells[0].Region
	dside, sside := sideNames(x.kind)
	mismatch := func(detail string) {
		f := Finding{Invariant: Aligned, Descriptor: i, Bytes: d.Len}
		a.placeDst(&f, x)
		sf := Finding{Layer: sr.Views[0].Number}
		a.describeCells(&sf, a.scells, preq, false)
		f.Source = a.source(x, &a.scells[0], preq)
		f.Message = fmt.Sprintf("transfer %d descriptor %d: the %s bytes hold %s, the %s bytes %s%s", x.id, i, dside, what(&f), sside, what(&sf), detail)
		a.add(x, f)
		if f.Source.Request != f.Source.Expected {
			a.flag(i, flagForeign)
		} else {
			a.flag(i, flagMisaligned)
		}
	}
	if !dr.State && nixl.Converted(dr, sr) {
		ch, ok := chunkOf(dr, d)
		if !ok {
			mismatch(fmt.Sprintf(" (the consumer converts pages of %d tokens from %d, but the %s descriptor is not a whole chunk of one page)", dr.KernelTokens, sr.KernelTokens, dside))
			return
		}
		if !a.chunkMatches(x, ch, preq) {
			mismatch(" (compared per chunk of tokens: the consumer converts what it receives)")
		}
		return
	}
	if len(a.dcells) != len(a.scells) {
		mismatch("")
		return
	}
	for k := range a.dcells {
		dc, sc := &a.dcells[k], &a.scells[k]
		dpos := x.req.groups[dc.Region.Group.Group.ID].loaded[dc.Block]
		sg := preq.groups[sc.Region.Group.Group.ID]
		if sg == nil {
			mismatch("")
			return
		}
		spos := sg.all[sc.Block]
		if !logicalOf(dc, dpos).equal(logicalOf(sc, spos)) {
			mismatch("")
			return
		}
	}
}

// source names a producer block read.
func (a *auditor) source(x *xfer, c *addrmap.Cells, preq *request) *Source {
	src := &Source{Agent: x.src.agent, Rank: x.src.r, Block: c.Block, Position: -1, Expected: x.prodReq}
	if own := x.src.ownersOf(c.Region.Group.Group.ID, c.Block); len(own) > 0 {
		src.Request, src.Position = own[0].req, own[0].pos
		for _, o := range own {
			if o.req == x.prodReq {
				src.Request, src.Position = o.req, o.pos
			}
		}
	}
	return src
}

// chunk is a destination descriptor read as vLLM's receive path reads it:
// tokens [t0, t1) of one kernel row of one block, one part (or all), every
// head of the rank.
type chunk struct {
	region   *addrmap.Region
	block, k int
	tokens   [2]int
	part     int
}

// chunkOf reads a destination descriptor as a chunk of a page.
func chunkOf(r *addrmap.Region, d nixl.Desc) (chunk, bool) {
	for _, p := range r.Pages() {
		if d.Addr < p.Base || d.Len == 0 {
			continue
		}
		off := d.Addr - p.Base
		row, in := off/p.Stride, off%p.Stride
		if in+d.Len > p.Len || p.Len%d.Len != 0 || in%d.Len != 0 {
			continue
		}
		n := int(p.Len / d.Len)
		if r.KernelTokens%n != 0 {
			return chunk{}, false
		}
		j := int(in / d.Len)
		per := r.KernelTokens / n
		blk := r.DumpBlock(int(row) / r.KernelBlocks)
		return chunk{region: r, block: blk, k: int(row) % r.KernelBlocks, tokens: [2]int{j * per, (j + 1) * per}, part: p.Part}, true
	}
	return chunk{}, false
}

// chunkMatches says whether the source cells are exactly the chunk's
// cells: one layer, the same part, the rank's heads, the same tokens.
func (a *auditor) chunkMatches(x *xfer, ch chunk, preq *request) bool {
	dv := ch.region.Views[0]
	pos, ok := x.req.groups[ch.region.Group.Group.ID].loaded[ch.block]
	if !ok {
		return false
	}
	S := ch.region.Group.Group.BlockSize
	wantTok := [2]int{pos*S + ch.k*ch.region.KernelTokens + ch.tokens[0], pos*S + ch.k*ch.region.KernelTokens + ch.tokens[1]}
	wantHeads := [2]int{dv.HeadBase, dv.HeadBase + dv.Heads}
	wantBytes := [2]int{0, dv.Cells.CellBytes}
	if ch.part >= 0 {
		wantBytes = [2]int{ch.part * ch.region.PartBytes, (ch.part + 1) * ch.region.PartBytes}
	}
	var total uint64
	for _, c := range a.scells {
		sg := preq.groups[c.Region.Group.Group.ID]
		if sg == nil || c.View == nil || c.Region.Views[0].Number != dv.Number {
			return false
		}
		spos := sg.all[c.Block]
		S := c.Region.Group.Group.BlockSize
		t0, t1 := spos*S+c.FirstToken(), spos*S+c.LastToken()+1
		h0, h1 := c.View.HeadBase+c.Heads[0], c.View.HeadBase+c.Heads[1]
		if t0 < wantTok[0] || t1 > wantTok[1] || h0 < wantHeads[0] || h1 > wantHeads[1] || c.Bytes[0] < wantBytes[0] || c.Bytes[1] > wantBytes[1] {
			return false
		}
		total += c.Len
	}
	return total == uint64(wantTok[1]-wantTok[0])*uint64(wantHeads[1]-wantHeads[0])*uint64(wantBytes[1]-wantBytes[0])
}

// deliver records what a pair delivers into the consumer: its bytes, or,
// where the consumer converts what it receives, the chunk's cells.
func (a *auditor) deliver(x *xfer, i int, d, s nixl.Desc) {
	dl := delivery{source: sourceKey(x.src.idx, s.Addr, d.Addr), x: uint32(len(a.xfers) - 1), desc: uint32(i)}
	if len(a.dcells) > 0 && len(a.scells) > 0 && !a.dcells[0].Region.State && nixl.Converted(a.dcells[0].Region, a.scells[0].Region) {
		if ch, ok := chunkOf(a.dcells[0].Region, d); ok {
			ch.region.PartIntervals(ch.block, ch.k, ch.tokens, ch.part, func(lo, hi uint64) {
				dl.lo, dl.hi = lo, hi
				x.dst.deliveries = append(x.dst.deliveries, dl)
			})
			return
		}
	}
	if d.Len == 0 {
		return
	}
	dl.lo, dl.hi = d.Addr, d.Addr+d.Len
	x.dst.deliveries = append(x.dst.deliveries, dl)
}
