package inject

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
)

// Transfer-log faults: a NIXL log of a pull (kvaudit-nixl-log/1) changed
// as a connector's bug changes the transfer it records, and the
// consumer's dumps as that transfer leaves them. The input is the
// consumer's dumps with the logs (Options.Transfers) and the producer's
// dumps (Options.Producer); the output holds a copy of the consumer's
// dumps, the logs under nixl/ and fault.json. Faults go into the
// descriptors of attention layers (a state block's descriptors are left
// alone).

// Transfer-log fault kinds.
const (
	XferLocalOther  Kind = "xfer-local-other"
	XferRemoteShift Kind = "xfer-remote-shift"
	XferDrop        Kind = "xfer-drop"
	XferLapsedLease Kind = "xfer-lapsed-lease"
	XferDuplicate   Kind = "xfer-duplicate"
	XferLateRead    Kind = "xfer-late-read"
)

var xferLocalOther = kindDef{
	kind:     XferLocalOther,
	models:   "a local descriptor id moved into another request's block: the READ writes a co-resident request's block and leaves its own stale",
	detector: DetectTransfers,
	plan:     logPlan((*logTamper).localOther),
}

var xferRemoteShift = kindDef{
	kind:     XferRemoteShift,
	models:   "the remote ids of a layer's descriptors shifted by one kernel block",
	detector: DetectTransfers,
	plan:     logPlan((*logTamper).remoteShift),
}

var xferDrop = kindDef{
	kind:     XferDrop,
	models:   "a descriptor pair dropped from a READ: the consumer keeps stale bytes there",
	detector: DetectTransfers,
	plan:     logPlan((*logTamper).drop),
}

var xferLapsedLease = kindDef{
	kind:     XferLapsedLease,
	models:   "a remote id of another producer request's block (a lapsed lease: the block was freed and reused)",
	detector: DetectTransfers,
	plan:     logPlan((*logTamper).lapsedLease),
}

var xferDuplicate = kindDef{
	kind:     XferDuplicate,
	models:   "a local block written twice in a READ, the second time from another position's remote block",
	detector: DetectTransfers,
	plan:     logPlan((*logTamper).duplicate),
}

var xferLateRead = kindDef{
	kind:     XferLateRead,
	models:   "a READ posted after the producer's lease on its request lapsed, its blocks still holding the request's KV (a retry under the same id): only the log's times change",
	detector: DetectTransfers,
	plan:     logPlan((*logTamper).lateRead),
}

// pick returns a random transfer with a pair ok accepts, and that pair.
func (t *logTamper) pick(ok func(x *xref, p xpair) bool) (*xref, xpair, error) {
	type cand struct {
		x *xref
		p xpair
	}
	var cands []cand
	for _, x := range t.xfers() {
		for _, p := range x.pairs {
			if t.allowed(x, p) && ok(x, p) {
				cands = append(cands, cand{x, p})
			}
		}
	}
	if len(cands) == 0 {
		return nil, xpair{}, &NotApplicableError{Kind: t.opts.Kind, Msg: "no transfer of the logs takes it (a READ, DONE, of an attention layer's descriptors of a request the consumer holds, at a position the fault may change)"}
	}
	c := cands[t.rng.IntN(len(cands))]
	return c.x, c.p, nil
}

// valid clips a box's request tokens to those the pull delivers: from
// the request's first token not computed locally to its last one pulled
// (a hybrid's consumer recomputes its last prompt token:
// nixl.PullTokens).
func (t *logTamper) valid(r *layout.Request, tokens [2]int) [2]int {
	end := nixl.PullTokens(r.NumTokens, len(t.cons) > 0 && nixl.Hybrid(t.cons[0]), 0)
	return [2]int{max(tokens[0], r.NumLocalComputedTokens), min(tokens[1], end-1)}
}

// drop removes a pair from a READ; the consumer keeps stale bytes there.
func (t *logTamper) drop() error {
	x, p, err := t.pick(func(x *xref, p xpair) bool {
		v := t.valid(x.req, p.dst.tokens())
		return v[0] <= v[1]
	})
	if err != nil {
		return err
	}
	rec := &x.log.recs[x.rec]
	rec.LocalIDs = slices.Delete(slices.Clone(rec.LocalIDs), p.i, p.i+1)
	rec.RemoteIDs = slices.Delete(slices.Clone(rec.RemoteIDs), p.i, p.i+1)
	t.stale(p.dst)
	tok := p.dst.tokens()
	t.expect(transfer.Covered, x, -1, p.dst, t.valid(x.req, tok))
	t.expect(transfer.Zeroed, x, -1, p.dst, tok)
	t.describe(x, []int{p.i}, "dropped descriptor pair %d (layer %d, tokens %d-%d) from transfer %d of request %q; the consumer keeps stale bytes there",
		p.i, p.dst.view().Number, tok[0], tok[1], x.log.recs[x.rec].ID, x.req.ID)
	return nil
}

// lapsedLease makes the pairs reading one producer block read the block
// another producer request holds at the same position: a lease that
// lapsed, the block freed and reused by that request.
func (t *logTamper) lapsedLease() error {
	x, p, err := t.pick(func(x *xref, p xpair) bool {
		_, _, ok := t.otherRequests(x, p)
		return ok
	})
	if err != nil {
		return err
	}
	other, _, _ := t.otherRequests(x, p)
	rec := &x.log.recs[x.rec]
	rec.RemoteIDs = slices.Clone(rec.RemoteIDs)
	var descs []int
	for _, q := range x.pairs {
		if q.state || q.src.region.Group != p.src.region.Group || q.src.block != p.src.block || !t.allowed(x, q) {
			continue
		}
		b, rid, ok := t.otherRequests(x, q)
		if !ok || b.block != other.block {
			continue
		}
		rec.RemoteIDs[q.i] = rid
		descs = append(descs, q.i)
		t.deliver(q.dst, b)
		t.expect(transfer.Confined, x, q.i, q.dst, q.dst.tokens())
	}
	t.describe(x, descs, "%d descriptor pair(s) of transfer %d of request %q read producer block %d, which holds request %q's KV (a lapsed lease), instead of block %d",
		len(descs), rec.ID, x.req.ID, other.block, t.ownerOf(other), p.src.block)
	return nil
}

// ownerOf names the producer request holding a box's block.
func (t *logTamper) ownerOf(b box) string {
	for _, pr := range t.prod {
		if pr.am.Find(b.region.Start) == b.region {
			for _, r := range pr.dump.Manifest.Requests {
				if positionOf(&r, b.region.Group.Group, b.block) >= 0 {
					return r.ID
				}
			}
		}
	}
	return ""
}

// otherRequests finds, for a pair, the block another producer request
// holds at the same position and the remote id of the same unit there.
func (t *logTamper) otherRequests(x *xref, p xpair) (box, int, bool) {
	rec := &x.log.recs[x.rec]
	rdl := x.log.dlist(rec.Remote)
	pr := t.prod[rdl.Agent]
	own := x.req.PairID()
	g := p.src.region.Group.Group
	for _, r := range pr.dump.Manifest.Requests {
		if r.ID == own {
			continue
		}
		table := r.BlockTable[fmt.Sprint(g.ID)]
		if p.src.pos >= len(table) || table[p.src.pos] == layout.NoBlock {
			continue
		}
		nb := table[p.src.pos]
		reg := p.src.region
		delta := int64(reg.EngineBlockOf(nb)-reg.EngineBlockOf(p.src.block)) * int64(reg.KernelBlocks)
		for _, pg := range reg.Pages() {
			if p.s.Addr < pg.Base || (p.s.Addr-pg.Base)%pg.Stride+p.s.Len > pg.Len {
				continue
			}
			addr := uint64(int64(p.s.Addr) + delta*int64(pg.Stride))
			i := slices.IndexFunc(rdl.Descs, func(d nixl.Desc) bool { return d.Addr == addr && d.Len == p.s.Len })
			if i < 0 {
				break
			}
			b := p.src
			b.block, b.pos = nb, p.src.pos
			return b, i, true
		}
	}
	return box{}, 0, false
}

// remoteShift shifts the remote ids of one layer's (one page kind's)
// descriptors of a READ by one: each reads the next kernel block of the
// producer's list.
func (t *logTamper) remoteShift() error {
	x, p, err := t.pick(func(x *xref, p xpair) bool {
		_, ok := t.shifted(x, p)
		return ok
	})
	if err != nil {
		return err
	}
	rec := &x.log.recs[x.rec]
	rec.RemoteIDs = slices.Clone(rec.RemoteIDs)
	var descs []int
	for _, q := range x.pairs {
		if q.state || q.src.region != p.src.region || !t.samePage(q.s, p.s, q.src.region) || !t.opts.allows(x.req.ID, q.dst.region.Group.Group.ID, q.dst.pos) {
			continue
		}
		nb, ok := t.shifted(x, q)
		if !ok {
			continue
		}
		rec.RemoteIDs[q.i] = q.rid + 1
		descs = append(descs, q.i)
		t.deliver(q.dst, nb)
		inv := transfer.Aligned
		if nb.pos < 0 {
			inv = transfer.Confined
		}
		t.expect(inv, x, q.i, q.dst, q.dst.tokens())
	}
	t.describe(x, descs, "shifted the remote ids of %d descriptor pair(s) of layer %d of transfer %d of request %q by one kernel block",
		len(descs), p.dst.view().Number, rec.ID, x.req.ID)
	return nil
}

// samePage says whether two descriptors lie in the same page kind (part)
// of a region.
func (t *logTamper) samePage(a, b nixl.Desc, r *addrmap.Region) bool {
	part := func(d nixl.Desc) int {
		for i, pg := range r.Pages() {
			if d.Addr >= pg.Base && (d.Addr-pg.Base)%pg.Stride+d.Len <= pg.Len {
				return i
			}
		}
		return -1
	}
	return a.Len == b.Len && part(a) == part(b) && part(a) >= 0
}

// shifted is the producer box a pair reads with its remote id plus one:
// the next descriptor of the list, of the same page kind and length.
func (t *logTamper) shifted(x *xref, p xpair) (box, bool) {
	rec := &x.log.recs[x.rec]
	rdl := x.log.dlist(rec.Remote)
	if p.state || p.rid+1 >= len(rdl.Descs) {
		return box{}, false
	}
	next := rdl.Descs[p.rid+1]
	if !t.samePage(next, p.s, p.src.region) {
		return box{}, false
	}
	pr := t.prod[rdl.Agent]
	own := x.req.PairID()
	b, ok := t.srcBox(pr, pr.dump.Manifest.Request(own), next)
	if !ok || b.region != p.src.region || b.t1-b.t0 != p.src.t1-p.src.t0 || b.h1-b.h0 != p.src.h1-p.src.h0 {
		return box{}, false
	}
	return b, true
}

// localOther moves a pair's local id into the block another request holds
// (loaded by that request's own, earlier, transfer): the READ writes the
// co-resident request's block and leaves its own stale.
func (t *logTamper) localOther() error {
	x, p, err := t.pick(func(x *xref, p xpair) bool {
		_, _, ok := t.coResident(x, p)
		return ok
	})
	if err != nil {
		return err
	}
	victim, vx, _ := t.coResident(x, p)
	rec := &x.log.recs[x.rec]
	rec.LocalIDs = slices.Clone(rec.LocalIDs)
	rec.LocalIDs[p.i] = victim.lid
	t.stale(p.dst)
	moved := victim.dst
	t.deliver(moved, p.src) // the later READ lands last
	tok := p.dst.tokens()
	t.expect(transfer.Confined, x, p.i, p.dst, tok)
	t.describe(x, []int{p.i}, "moved the local id of descriptor pair %d of transfer %d of request %q (layer %d, tokens %d-%d) into block %d of request %q (position %d)",
		p.i, rec.ID, x.req.ID, p.dst.view().Number, tok[0], tok[1], victim.dst.block, vx.req.ID, victim.dst.pos)
	return nil
}

// coResident finds a pair of an earlier transfer of the same log, for
// another request, into the same page kind and kernel row of its block.
func (t *logTamper) coResident(x *xref, p xpair) (xpair, *xref, bool) {
	for _, y := range t.xfers() {
		if y.log != x.log || y.rec >= x.rec || y.req.ID == x.req.ID {
			continue
		}
		ldl := y.log.dlist(y.log.recs[y.rec].Local)
		if ldl == nil || y.log.recs[y.rec].Local != x.log.recs[x.rec].Local {
			continue
		}
		for _, q := range y.pairs {
			if q.state || q.dst.region != p.dst.region || q.d.Len != p.d.Len || !t.samePage(q.d, p.d, p.dst.region) ||
				q.dst.t0 != p.dst.t0 || q.dst.t1 != p.dst.t1 || q.dst.h0 != p.dst.h0 || q.dst.h1 != p.dst.h1 ||
				!t.opts.allows(y.req.ID, q.dst.region.Group.Group.ID, q.dst.pos) {
				continue
			}
			return q, y, true
		}
	}
	return xpair{}, nil, false
}

// duplicate adds to a READ a second write of a pair's local block, from
// the remote block of another pair of the same page kind.
func (t *logTamper) duplicate() error {
	x, p, err := t.pick(func(x *xref, p xpair) bool {
		_, ok := t.otherPair(x, p)
		return ok
	})
	if err != nil {
		return err
	}
	other, _ := t.otherPair(x, p)
	rec := &x.log.recs[x.rec]
	n := len(rec.LocalIDs)
	rec.LocalIDs = append(slices.Clone(rec.LocalIDs), p.lid)
	rec.RemoteIDs = append(slices.Clone(rec.RemoteIDs), other.rid)
	t.deliver(p.dst, other.src)
	tok := p.dst.tokens()
	t.expect(transfer.Aligned, x, n, p.dst, tok)
	t.expect(transfer.Twice, x, n, p.dst, tok)
	t.describe(x, []int{n}, "added descriptor pair %d to transfer %d of request %q: local block %d (layer %d, tokens %d-%d) written again from the remote block of pair %d",
		n, rec.ID, x.req.ID, p.dst.block, p.dst.view().Number, tok[0], tok[1], other.i)
	return nil
}

// otherPair finds another pair of the transfer of the same page kind and
// shape at another position.
func (t *logTamper) otherPair(x *xref, p xpair) (xpair, bool) {
	for _, q := range x.pairs {
		if q.i == p.i || q.state || q.dst.region != p.dst.region || q.src.region != p.src.region || q.d.Len != p.d.Len || q.s.Len != p.s.Len ||
			!t.samePage(q.d, p.d, p.dst.region) || q.dst.pos == p.dst.pos ||
			q.src.t1-q.src.t0 != p.src.t1-p.src.t0 || q.src.h0 != p.src.h0 || q.src.h1 != p.src.h1 {
			continue
		}
		return q, true
	}
	return xpair{}, false
}

// lateRead posts a READ after the producer's lease on its request lapsed:
// the log's records from the READ (of the log's last request) on move
// later, so that the READ comes
// a second after the lease (the log header's lease_s) that started at
// the log's first record naming the request. No byte changes: the blocks
// still hold the request's KV, and only the lease audit sees the fault.
func (t *logTamper) lateRead() error {
	// A READ of the log's last request: the records that move later
	// name no other request.
	var cands []*xref
	for _, x := range t.xfers() {
		l, rec := x.log, &x.log.recs[x.rec]
		last := !slices.ContainsFunc(l.recs[x.rec:], func(r nixl.Record) bool { return r.Op == nixl.OpXfer && r.Request != rec.Request })
		if l.header.HasLease && l.header.LeaseS > 0 && rec.Time.Ok && last {
			cands = append(cands, x)
		}
	}
	if len(cands) == 0 {
		return &NotApplicableError{Kind: t.opts.Kind, Msg: "no READ of the logs has a timestamp in a log whose header gives lease_s"}
	}
	x := cands[t.rng.IntN(len(cands))]
	l, rec := x.log, &x.log.recs[x.rec]
	pairID := x.req.ProducerID
	if pairID == "" {
		pairID = x.req.ID
	}
	names := func(r *nixl.Record) bool {
		msgs := []string{r.Notif, r.Msg}
		for _, n := range r.Notifs {
			msgs = append(msgs, n.Msg)
		}
		for _, m := range msgs {
			if id, ok := strings.CutPrefix(m, "HB:"); ok {
				if slices.Contains(strings.Split(id, ","), pairID) {
					return true
				}
			} else if i := strings.LastIndexByte(m, ':'); i > 0 && m[:i] == pairID {
				return true
			}
		}
		return false
	}
	first := slices.IndexFunc(l.recs, func(r nixl.Record) bool { return r.Time.Ok && names(&r) })
	if first < 0 || first > x.rec {
		first = x.rec
	}
	delta := l.recs[first].Time.Wall + int64(l.header.LeaseS+1)*1e9 - rec.Time.Wall
	if delta <= 0 {
		return &NotApplicableError{Kind: t.opts.Kind, Msg: "the READ is already posted after the lease"}
	}
	for i := x.rec; i < len(l.recs); i++ {
		if r := &l.recs[i]; r.Time.Ok {
			r.Time.Wall += delta
			r.Time.Mono += delta
		}
	}
	// Every READ of the request from this one on is late.
	for _, y := range t.xfers() {
		r := &y.log.recs[y.rec]
		if y.log != l || y.rec < x.rec || y.req.ID != x.req.ID {
			continue
		}
		t.f.Expect.Transfers = append(t.f.Expect.Transfers, TransferExpect{Invariant: transfer.Lease, Request: y.req.ID, Transfer: r.ID,
			Descriptor: -1, Log: filepath.Base(l.path), Tokens: [2]int{-1, -1}})
	}
	t.describe(x, nil, "transfer %d of request %q posted %.3f s later, a second after the producer's %d s lease on request %q lapsed; its blocks still hold the request's KV",
		rec.ID, x.req.ID, float64(delta)/1e9, l.header.LeaseS, pairID)
	return nil
}
