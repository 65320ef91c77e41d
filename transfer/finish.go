package transfer

// This file checks what needs every log: coverage, zeroes, bytes written
// twice, failed transfers; and sums up.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
)

// finish checks what needs every log: coverage, zeroes, bytes written
// twice, failed transfers; and sums up.
func (a *auditor) finish(ctx context.Context) error {
	for _, x := range a.xfers {
		if x.skip || x.req == nil {
			continue
		}
		if x.state == "" {
			a.note("log %q: transfer %d (line %d) never reached DONE or ERR in the log: its bytes count as not delivered", x.log.path, x.id, x.line)
		}
		if end := x.req.pullEnd(a); x.state == nixl.Err && end > x.req.req.NumLocalComputedTokens {
			f := Finding{Invariant: Failed, Descriptor: -1, Group: -1, Position: -1, Block: -1, Heads: [2]int{-1, -1}, Tokens: [2]int{-1, -1}}
			f.Message = fmt.Sprintf("transfer %d ended in ERR, but request %s was loaded anyway (its dump on rank %s holds tokens %d-%d as loaded)",
				x.id, x.req.req.ID, x.dst.r, x.req.req.NumLocalComputedTokens, end-1)
			a.add(x, f)
		}
	}
	a.lease.audit()
	audited := 0
	for _, x := range a.xfers {
		if !x.skip && x.req != nil {
			audited++
		}
	}
	a.pairingOfAudit(audited)
	for _, rk := range a.cons.ranks {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !rk.logged {
			msg := fmt.Sprintf("the consumer's %s has no log (no log of its agent, no push into it): its requests' transfers were not audited", rk.name())
			if a.opts.AllowUnverified {
				a.note("%s (--allow-unverified)", msg)
			} else {
				a.unresolve("%s", msg)
			}
			continue
		}
		a.finishRank(rk)
	}
	if a.dropped > 0 {
		a.note("%d more finding(s) left out (--max-findings)", a.dropped)
	}
	a.summarize()
	return nil
}

// pullEnd is the request's first token its consumer does not pull
// (PullTokens): the tokens from num_local_computed_tokens up to it are
// the pull's to deliver, those from it up to num_tokens the consumer
// recomputes (neither pulled nor required).
func (r *request) pullEnd(a *auditor) int {
	return nixl.PullTokens(r.req.NumTokens, r.rank.hybrid, a.opts.Lookahead)
}

type ival struct{ lo, hi uint64 }

// finishRank checks a consumer rank's requests.
func (a *auditor) finishRank(rk *rank) {
	done := rk.deliveries[:0] // filtered in place
	var undone []delivery
	for _, d := range rk.deliveries {
		if a.xfers[d.x].state == nixl.Done {
			done = append(done, d)
		} else {
			undone = append(undone, d)
		}
	}
	rk.deliveries = nil
	byAddress := func(p, q delivery) int {
		return cmp.Or(cmp.Compare(p.lo, q.lo), cmp.Compare(p.x, q.x), cmp.Compare(p.desc, q.desc))
	}
	slices.SortFunc(done, byAddress)
	slices.SortFunc(undone, byAddress)
	rc := &rankCover{rk: rk, done: done, undone: undone, twice: a.twice(rk, done)}
	rc.segs, rc.usegs = segments(done), segments(undone)
	var covered []ival
	for _, d := range done {
		if n := len(covered); n > 0 && d.lo <= covered[n-1].hi {
			covered[n-1].hi = max(covered[n-1].hi, d.hi)
			continue
		}
		covered = append(covered, ival{d.lo, d.hi})
	}
	// Every request the rank's dump holds is accounted for: those the
	// logs' transfers served are checked block by block, the others are
	// a finding (or a note, with nothing to pull).
	for i := range rk.dump.Manifest.Requests {
		m := &rk.dump.Manifest.Requests[i]
		r := rk.request(m.ID)
		if r == nil || r.req != m || !a.wanted(r) {
			continue
		}
		if len(r.xfers) > 0 {
			a.finishRequest(rk, r, covered)
		} else {
			a.unserved(rk, r)
		}
		a.mapRequest(rc, r, len(r.xfers) > 0)
	}
}

// unserved accounts for a request of a consumer rank no audited transfer
// served: a covered finding when it had tokens to pull, else a note.
func (a *auditor) unserved(rk *rank, r *request) {
	rk.unserved = append(rk.unserved, r)
	lo, hi := r.req.NumLocalComputedTokens, r.pullEnd(a)
	if hi <= lo {
		why := "its dump holds every token as computed locally (a full prefix hit)"
		if hi < r.req.NumTokens {
			why = fmt.Sprintf("the consumer recomputes its last %d token(s), and holds the rest as computed locally", r.req.NumTokens-hi)
		}
		a.note("request %s on the consumer's rank %s had nothing to pull: %s", r.req.ID, rk.r, why)
		return
	}
	f := Finding{Invariant: Covered, Request: r.req.ID, Transfer: NoTransfer, Descriptor: -1, Group: -1, Position: -1, Block: -1, Rank: rk.r,
		Heads: [2]int{-1, -1}, Tokens: [2]int{lo, hi - 1}}
	f.Message = fmt.Sprintf("request %s (rank %s, producer request %s): tokens %d-%d were delivered by no transfer in the logs", r.req.ID, rk.r, r.pairID(), lo, hi-1)
	a.keep(f)
}

// twice reports bytes delivered by transfers from different sources,
// and returns them (sorted, disjoint). A pair's overlap with another
// pair is one finding however many intervals it takes: a chunk the
// consumer converts is delivered as one interval a head (hnd), and its
// finding covers the heads, tokens and bytes of them all, as a finding of
// a pair moving bytes as they lie does.
func (a *auditor) twice(rk *rank, done []delivery) []ival {
	type key struct{ x, desc, px, pdesc uint32 }
	var (
		prev  *delivery
		out   []ival
		order []key
		spans map[key][]ival
	)
	for i := range done {
		d := &done[i]
		if prev != nil && d.lo < prev.hi && d.source != prev.source {
			lo, hi := d.lo, min(d.hi, prev.hi)
			if len(out) > 0 && lo <= out[len(out)-1].hi {
				out[len(out)-1].hi = max(out[len(out)-1].hi, hi)
			} else {
				out = append(out, ival{lo, hi})
			}
			if spans == nil {
				spans = map[key][]ival{}
			}
			k := key{d.x, d.desc, prev.x, prev.desc}
			if _, ok := spans[k]; !ok {
				order = append(order, k)
			}
			spans[k] = append(spans[k], ival{lo, hi})
		}
		if prev == nil || d.hi > prev.hi {
			prev = d
		}
	}
	for _, k := range order {
		a.twiceFinding(rk, a.xfers[k.x], int(k.desc), a.xfers[k.px], int(k.pdesc), spans[k])
	}
	return out
}

// twiceFinding reports the bytes (spans, by address) pair desc of x
// delivered that pair pdesc of px had delivered from another source.
func (a *auditor) twiceFinding(rk *rank, x *xfer, desc int, px *xfer, pdesc int, spans []ival) {
	f := Finding{Invariant: Twice, Descriptor: desc, Group: -1, Position: -1, Block: -1,
		Heads: [2]int{-1, -1}, Tokens: [2]int{-1, -1}, Other: &Ref{Log: px.log.path, Transfer: px.id, Descriptor: pdesc}}
	var cells []addrmap.Cells
	for _, s := range spans {
		f.Bytes += s.hi - s.lo
		rk.am.Resolve(s.lo, s.hi-s.lo, func(c addrmap.Cells) error { cells = append(cells, c); return nil })
	}
	// The finding is the request's whose block the bytes are in (the
	// writer's, unless it wrote into another's).
	owner, wrote := x.req, fmt.Sprintf("%d bytes at 0x%x.. outside every cache", f.Bytes, spans[0].lo)
	if len(cells) > 0 {
		c := cells[0]
		if rg := x.req.groups[c.Region.Group.Group.ID]; rg == nil || !hasBlock(rg, c.Block) {
			if own := rk.ownersOf(c.Region.Group.Group.ID, c.Block); len(own) > 0 {
				if r := rk.request(own[0].req); r != nil {
					owner = r
				}
			}
		}
		a.place(&f, &xfer{req: owner}, cells)
		wrote = what(&f)
	}
	f.Request = owner.req.ID
	into := ""
	if owner != x.req {
		into = fmt.Sprintf(" (request %s's block, written by request %s's transfer)", owner.req.ID, x.req.req.ID)
	}
	f.Message = fmt.Sprintf("transfer %d descriptor %d wrote %s%s, which transfer %d descriptor %d (log %q) also wrote, from another source", x.id, desc, wrote, into, px.id, pdesc, px.log.path)
	a.add(x, f)
}

func hasBlock(rg *reqGroup, block int) bool {
	_, ok := rg.all[block]
	return ok
}

// subtract calls fn with the parts of [lo, hi) no interval of covered
// (sorted, disjoint) holds.
func subtract(lo, hi uint64, covered []ival, fn func(lo, hi uint64)) {
	i := sort.Search(len(covered), func(i int) bool { return covered[i].hi > lo })
	for ; lo < hi && i < len(covered) && covered[i].lo < hi; i++ {
		if covered[i].lo > lo {
			fn(lo, covered[i].lo)
		}
		lo = max(lo, covered[i].hi)
	}
	if lo < hi {
		fn(lo, hi)
	}
}

// finishRequest checks that a request's loaded tokens were delivered and
// that the bytes of its loaded blocks nothing delivered are zero.
func (a *auditor) finishRequest(rk *rank, r *request, covered []ival) {
	for _, gv := range rk.dump.Groups {
		if gv.Skip != "" {
			continue
		}
		span, st, err := blockspan.Of(r.req, gv.Group)
		if err != nil || st != blockspan.OK {
			continue
		}
		var regions []*addrmap.Region
		for _, reg := range rk.am.Regions {
			if reg.Group == gv {
				regions = append(regions, reg)
			}
		}
		S := gv.Group.BlockSize
		end := r.pullEnd(a)
		for bi, blk := range span.Blocks {
			pos := span.Start + bi
			lo := max(0, r.req.NumLocalComputedTokens-pos*S)
			hi := blockspan.ValidTokens(end, pos, S)
			// Tokens [hi, rec) the consumer recomputes: not pulled, not
			// required, and not a hole either.
			rec := blockspan.ValidTokens(r.req.NumTokens, pos, S)
			if gv.Group.Kind == layout.KindMamba {
				lo, hi, rec = 0, 1, 1
			}
			for _, reg := range regions {
				var missing, holes []ival
				expect := func(tokens [2]int, into *[]ival) {
					add := func(l, h uint64) {
						subtract(l, h, covered, func(l, h uint64) { *into = append(*into, ival{l, h}) })
					}
					if reg.State {
						if l, h, ok := reg.StateInterval(blk); ok {
							add(l, h)
						}
						return
					}
					KT := reg.KernelTokens
					for k := range reg.KernelBlocks {
						t0, t1 := max(tokens[0], k*KT), min(tokens[1], (k+1)*KT)
						if t0 < t1 {
							reg.Intervals(blk, k, [2]int{t0 - k*KT, t1 - k*KT}, add)
						}
					}
				}
				if lo < hi {
					expect([2]int{lo, hi}, &missing)
				}
				if reg.State || rec <= hi {
					expect([2]int{0, reg.KernelBlocks * reg.KernelTokens}, &holes)
				} else {
					expect([2]int{0, hi}, &holes)
					expect([2]int{rec, reg.KernelBlocks * reg.KernelTokens}, &holes)
				}
				if len(missing) > 0 {
					a.gap(r, reg, gv, pos, blk, missing, rk)
				}
				if len(holes) > 0 {
					a.stale(r, reg, gv, pos, blk, holes, rk)
				}
			}
		}
	}
}

// blame is the transfer a request's gap is laid to: the request's
// transfer from the producer rank that holds the gap's layer and heads,
// else its first (nil: none).
func blame(r *request, reg *addrmap.Region, heads [2]int) *xfer {
	for _, x := range r.xfers {
		if x.src == nil || x.src.am == nil {
			continue
		}
		for _, sr := range x.src.am.Regions {
			v := sr.Views[0]
			if sr.Layer.Name == reg.Layer.Name && (heads[0] < 0 || (heads[0] < v.HeadBase+v.Heads && v.HeadBase <= heads[1])) {
				return x
			}
		}
	}
	if len(r.xfers) > 0 {
		return r.xfers[0]
	}
	return nil
}

// gap reports tokens of a request's block no transfer delivered.
func (a *auditor) gap(r *request, reg *addrmap.Region, gv *layout.GroupView, pos, blk int, missing []ival, rk *rank) {
	f := Finding{Invariant: Covered, Request: r.req.ID, Descriptor: -1, Group: gv.Group.ID, Position: pos, Block: blk,
		Layer: reg.Views[0].Number, LayerName: reg.Layer.Name, Rank: rk.r}
	var cells []addrmap.Cells
	for _, m := range missing {
		f.Bytes += m.hi - m.lo
		rk.am.Resolve(m.lo, m.hi-m.lo, func(c addrmap.Cells) error { cells = append(cells, c); return nil })
	}
	a.describeCells(&f, cells, r, true)
	x := blame(r, reg, f.Heads)
	by := "by no transfer that reached DONE"
	if x == nil {
		by = "by no transfer in the logs"
	}
	f.Message = fmt.Sprintf("request %s %s (position %d, block %d, rank %s): %d bytes delivered %s", r.req.ID, what(&f), pos, blk, rk.r, f.Bytes, by)
	a.addRequest(x, f)
}

// stale reports non-zero bytes of a request's block that nothing
// delivered.
func (a *auditor) stale(r *request, reg *addrmap.Region, gv *layout.GroupView, pos, blk int, holes []ival, rk *rank) {
	var nonZero, first uint64
	for _, h := range holes {
		n, at := reg.NonZero(h.lo, h.hi)
		if n > 0 && nonZero == 0 {
			first = at
		}
		nonZero += n
	}
	if nonZero == 0 {
		return
	}
	f := Finding{Invariant: Zeroed, Request: r.req.ID, Descriptor: -1, Group: gv.Group.ID, Position: pos, Block: blk,
		Layer: reg.Views[0].Number, LayerName: reg.Layer.Name, Rank: rk.r, Bytes: nonZero}
	// Describe the cells that hold the non-zero bytes, token by token.
	var cells []addrmap.Cells
	var cell []byte
	for _, h := range holes {
		rk.am.Resolve(h.lo, h.hi-h.lo, func(c addrmap.Cells) error {
			if c.Block == layout.NoBlock || c.View == nil || c.View.Cells.Data == nil {
				return nil
			}
			if reg.State {
				cells = append(cells, c)
				return nil
			}
			v := &c.View.Cells
			for k := c.Kernels[0]; k < c.Kernels[1]; k++ {
				for t := c.Tokens[0]; t < c.Tokens[1]; t++ {
					for hd := c.Heads[0]; hd < c.Heads[1]; hd++ {
						cell = v.ReadCell(cell[:0], c.Block, k*reg.KernelTokens+t, hd)
						if slices.ContainsFunc(cell[c.Bytes[0]:c.Bytes[1]], func(b byte) bool { return b != 0 }) {
							x := c
							x.Kernels, x.Tokens, x.Heads = [2]int{k, k + 1}, [2]int{t, t + 1}, [2]int{hd, hd + 1}
							cells = append(cells, x)
						}
					}
				}
			}
			return nil
		})
	}
	a.describeCells(&f, cells, r, true)
	x := blame(r, reg, f.Heads)
	var at []addrmap.Cells
	rk.am.Resolve(first, 1, func(c addrmap.Cells) error { at = append(at, c); return nil })
	from := ""
	if len(at) > 0 && !reg.State {
		from = fmt.Sprintf(", the first at token %d", pos*gv.Group.BlockSize+at[0].FirstToken())
	}
	f.Message = fmt.Sprintf("request %s %s (position %d, block %d, rank %s): %d bytes no transfer delivered are not zero%s", r.req.ID, what(&f), pos, blk, rk.r, nonZero, from)
	a.addRequest(x, f)
}

// addRequest records a finding of a request, laid to a transfer (its
// descriptor unknown) when one is known.
func (a *auditor) addRequest(x *xfer, f Finding) {
	f.Transfer = NoTransfer
	if x != nil {
		f.Transfer, f.Log, f.Line = x.id, x.log.path, x.line
	}
	a.keep(f)
}

// summarize fills the requests' summaries and the verdict.
func (a *auditor) summarize() {
	type key struct {
		rank layout.Rank
		id   string
	}
	index := map[key]int{}
	for _, x := range a.xfers {
		if x.skip || x.req == nil {
			continue
		}
		k := key{x.dst.r, x.req.req.ID}
		i, ok := index[k]
		if !ok {
			i = len(a.res.Requests)
			index[k] = i
			a.res.Requests = append(a.res.Requests, RequestSummary{ID: x.req.req.ID, ProducerID: x.req.pairID(), Rank: x.dst.r, Transfers: []int{}, Findings: map[string]int{}})
		}
		s := &a.res.Requests[i]
		s.Transfers = append(s.Transfers, x.id)
		s.Pairs += x.pairs
		s.Bytes += x.bytes
	}
	for _, rk := range a.cons.ranks {
		for _, r := range rk.unserved {
			k := key{rk.r, r.req.ID}
			if _, ok := index[k]; !ok {
				index[k] = len(a.res.Requests)
				a.res.Requests = append(a.res.Requests, RequestSummary{ID: r.req.ID, ProducerID: r.pairID(), Rank: rk.r, Transfers: []int{}, Findings: map[string]int{}})
			}
		}
	}
	for _, f := range a.res.Findings {
		if i, ok := index[key{f.Rank, f.Request}]; ok {
			a.res.Requests[i].Findings[f.Invariant]++
		}
	}
	slices.SortStableFunc(a.res.Findings, func(p, q Finding) int {
		return cmp.Or(cmp.Compare(p.Rank.PP, q.Rank.PP), cmp.Compare(p.Rank.TP, q.Rank.TP), cmp.Compare(p.Request, q.Request),
			cmp.Compare(p.Transfer, q.Transfer), cmp.Compare(p.Descriptor, q.Descriptor))
	})
	if len(a.res.Requests) == 0 && len(a.res.Findings) == 0 {
		a.unresolve("nothing could be audited: no request of the consumer's dumps was accounted for by the logs")
	}
	switch {
	case len(a.res.Findings) > 0:
		a.res.Verdict = Violated
	case len(a.res.Unresolved) > 0:
		a.res.Verdict = Unresolved
	default:
		a.res.Verdict = Clean
	}
}
