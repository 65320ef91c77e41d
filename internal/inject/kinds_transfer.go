package inject

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
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

// logPlan changes a transfer log and fills the fault's expectations
// (positions are the consumer's).
type logPlan func(t *logTamper) error

func (logPlan) input() string { return InputLogs }

// logTamper is a transfer-log fault being planned: the logs, both sides
// with their address maps, and the edits of the consumer's dumps.
type logTamper struct {
	rng   *rand.Rand
	opts  Options
	f     *Fault
	cons  []*layout.Dump
	cmaps []*layout.AddressMap
	prod  map[string]*prodRank // by agent
	logs  []*faultLog
	edits []edit
	abs   map[string]string
	// affected: the consumer places whose bytes the fault changed.
	affected []Place
	// checks by place: the consumer checks a change there shows in (nil:
	// every check).
	checks map[Place][]int
}

type prodRank struct {
	dump *layout.Dump
	am   *layout.AddressMap
}

// faultLog is one log of the input, read whole.
type faultLog struct {
	path    string
	header  nixl.Header
	recs    []nixl.Record
	cons    int // the consumer dump it records, -1: another agent's
	changed bool
}

// xpair is one descriptor pair of a transfer, resolved on both sides.
type xpair struct {
	i        int
	lid, rid int
	d, s     nixl.Desc
	dst, src box
	state    bool
}

// box is the cells a descriptor moves on one side: tokens [t0, t1) of a
// block (block-relative), global heads [h0, h1), cell bytes [b0, b1).
type box struct {
	dump   int
	region *layout.Region
	block  int
	pos    int
	t0, t1 int
	h0, h1 int
	b0, b1 int
}

// tokens are the box's request tokens, first and last.
func (b box) tokens() [2]int {
	S := b.region.Group.Group.BlockSize
	return [2]int{b.pos*S + b.t0, b.pos*S + b.t1 - 1}
}

// xref is a transfer of a log: the log, the record and its pairs.
type xref struct {
	log   *faultLog
	rec   int
	req   *layout.Request
	pairs []xpair
}

// newLogTamper reads the logs and places both sides.
func newLogTamper(cons []*layout.Dump, opts Options, f *Fault, rng *rand.Rand) (*logTamper, error) {
	if len(opts.Transfers) == 0 || len(opts.Producer) == 0 {
		return nil, &NotApplicableError{Kind: opts.Kind, Msg: "a transfer-log fault needs the transfer's NIXL logs (--transfers) and the producer's dumps (--producer)"}
	}
	t := &logTamper{rng: rng, opts: opts, f: f, cons: cons, prod: map[string]*prodRank{}, checks: map[Place][]int{}}
	for _, d := range cons {
		am, err := d.AddressMap()
		if err != nil {
			return nil, err
		}
		t.cmaps = append(t.cmaps, am)
	}
	for _, d := range opts.Producer {
		if d.Manifest.Parallel.Agent == nil {
			continue
		}
		am, err := d.AddressMap()
		if err != nil {
			return nil, err
		}
		t.prod[*d.Manifest.Parallel.Agent] = &prodRank{dump: d, am: am}
	}
	files, err := transfer.FindLogs(opts.Transfers)
	if err != nil {
		return nil, err
	}
	for _, path := range files {
		l, err := readFaultLog(path)
		if err != nil {
			return nil, err
		}
		l.cons = slices.IndexFunc(cons, func(d *layout.Dump) bool {
			return d.Manifest.Parallel.Agent != nil && *d.Manifest.Parallel.Agent == l.header.Agent
		})
		t.logs = append(t.logs, l)
	}
	return t, nil
}

func readFaultLog(path string) (*faultLog, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	r, err := nixl.NewReader(file, path)
	if err != nil {
		return nil, err
	}
	l := &faultLog{path: path, header: r.Header()}
	for {
		var rec nixl.Record
		if err := r.Next(&rec); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		l.recs = append(l.recs, rec)
	}
	return l, nil
}

// dlist returns a log's prepared list of a handle.
func (l *faultLog) dlist(handle int) *nixl.Record {
	for i := range l.recs {
		if r := &l.recs[i]; r.Op == nixl.OpDList && r.Handle == handle {
			return r
		}
	}
	return nil
}

// done says whether a transfer of the log reached DONE.
func (l *faultLog) done(id int) bool {
	return slices.ContainsFunc(l.recs, func(r nixl.Record) bool {
		return r.Op == nixl.OpState && r.ID == id && r.State == nixl.Done
	})
}

// xfers lists the transfers faults may go into: READs of a consumer's log,
// made of prepared lists, DONE, for a request of the consumer's dump, with
// their pairs resolved.
func (t *logTamper) xfers() []*xref {
	var out []*xref
	for _, l := range t.logs {
		if l.cons < 0 {
			continue
		}
		d := t.cons[l.cons]
		for ri := range l.recs {
			rec := &l.recs[ri]
			if rec.Op != nixl.OpXfer || !rec.Prepped || rec.Kind != nixl.Read || !l.done(rec.ID) {
				continue
			}
			req := d.Manifest.Paired(rec.Request)
			if req == nil || (t.opts.Target.Request != "" && req.ID != t.opts.Target.Request) {
				continue
			}
			x := &xref{log: l, rec: ri, req: req}
			if t.resolve(x) {
				out = append(out, x)
			}
		}
	}
	return out
}

// resolve resolves a transfer's pairs; false when some cannot be.
func (t *logTamper) resolve(x *xref) bool {
	rec := &x.log.recs[x.rec]
	ldl, rdl := x.log.dlist(rec.Local), x.log.dlist(rec.Remote)
	if ldl == nil || rdl == nil || len(rec.LocalIDs) != len(rec.RemoteIDs) {
		return false
	}
	pr := t.prod[rdl.Agent]
	if pr == nil {
		return false
	}
	pairID := x.req.PairID()
	preq := pr.dump.Manifest.Request(pairID)
	if preq == nil {
		return false
	}
	for i := range rec.LocalIDs {
		lid, rid := rec.LocalIDs[i], rec.RemoteIDs[i]
		if lid >= len(ldl.Descs) || rid >= len(rdl.Descs) {
			return false
		}
		p := xpair{i: i, lid: lid, rid: rid, d: ldl.Descs[lid], s: rdl.Descs[rid]}
		src, ok := t.srcBox(pr, preq, p.s)
		if !ok {
			return false
		}
		p.src, p.state = src, src.region.State
		if !p.state {
			if p.dst, ok = t.dstBox(x.log.cons, x.req, p.d, src); !ok {
				return false
			}
		}
		x.pairs = append(x.pairs, p)
	}
	return true
}

// srcBox is the producer cells a descriptor reads, in its request's
// table (pos -1 where the block is not the request's).
func (t *logTamper) srcBox(pr *prodRank, preq *layout.Request, s nixl.Desc) (box, bool) {
	b := box{pos: -1, t0: 1 << 30, h0: 1 << 30, b0: 1 << 30}
	n := 0
	pr.am.Resolve(s.Addr, s.Len, func(c layout.Cells) error {
		if n == 0 {
			b.region, b.block = c.Region, c.Block
		}
		n++
		if c.Region != b.region || c.Block != b.block || c.View == nil {
			b.region = nil
			return nil
		}
		b.t0, b.t1 = min(b.t0, c.FirstToken()), max(b.t1, c.LastToken()+1)
		b.h0, b.h1 = min(b.h0, c.View.HeadBase+c.Heads[0]), max(b.h1, c.View.HeadBase+c.Heads[1])
		b.b0, b.b1 = min(b.b0, c.Bytes[0]), max(b.b1, c.Bytes[1])
		return nil
	})
	if n == 0 || b.region == nil {
		return box{}, false
	}
	b.pos = positionOf(preq, b.region.Group.Group, b.block)
	return b, true
}

// positionOf is a block's position in a request's table of a group, -1
// when it holds none.
func positionOf(r *layout.Request, g *layout.Group, block int) int {
	key := fmt.Sprint(g.ID)
	if g.Kind == layout.KindMamba {
		if b, ok := r.StateBlock[key]; ok && b == block {
			return 0
		}
		return -1
	}
	return slices.Index(r.BlockTable[key], block)
}

// dstBox is the consumer cells a correct pair fills: the source's KV at
// the request's block the destination descriptor lies in (a chunk of its
// page where the consumer converts what it receives).
func (t *logTamper) dstBox(ci int, req *layout.Request, d nixl.Desc, src box) (box, bool) {
	r := t.cmaps[ci].Find(d.Addr)
	if r == nil || r.State || src.pos < 0 {
		return box{}, false
	}
	for _, p := range r.Pages() {
		if d.Addr < p.Base {
			continue
		}
		off := d.Addr - p.Base
		row, in := off/p.Stride, off%p.Stride
		if in+d.Len > p.Len {
			continue
		}
		blk := r.DumpBlock(int(row) / r.KernelBlocks)
		if blk == layout.NoBlock {
			return box{}, false
		}
		k := int(row) % r.KernelBlocks
		b := box{dump: ci, region: r, block: blk, pos: positionOf(req, r.Group.Group, blk), h0: src.h0, h1: src.h1, b0: src.b0, b1: src.b1}
		if b.pos < 0 {
			return box{}, false
		}
		S := r.Group.Group.BlockSize
		first := src.pos*src.region.Group.Group.BlockSize + src.t0 - b.pos*S
		b.t0, b.t1 = first, first+src.t1-src.t0
		if b.t0 < k*r.KernelTokens || b.t1 > (k+1)*r.KernelTokens {
			return box{}, false
		}
		return b, true
	}
	return box{}, false
}

// allowed says whether a fault may change a pair's place.
func (t *logTamper) allowed(x *xref, p xpair) bool {
	return !p.state && t.opts.allows(x.req.ID, p.dst.region.Group.Group.ID, p.dst.pos)
}

// view returns a box's cache view and the local head of global head h.
func (b box) view() *layout.LayerView { return b.region.Views[0] }

// readCell returns a copy of the logical bytes of a box's cell.
func readCell(b box, tok, h int) []byte {
	v := b.view()
	return v.Cells.ReadCell(nil, b.block, tok, h-v.HeadBase)
}

// writeCell replaces the logical bytes [b.b0, b.b1) of a consumer cell in
// the copy (only those: another pair may write the cell's other part).
func (t *logTamper) writeCell(b box, tok, h int, data []byte) {
	v := b.view()
	cv := &v.Cells
	a := cv.CellAddr(b.block, tok, h-v.HeadBase)
	file := cv.File
	if abs, ok := t.abs[file]; ok {
		file = abs
	} else if abs, err := filepath.Abs(file); err == nil {
		if t.abs == nil {
			t.abs = map[string]string{}
		}
		t.abs[file] = abs
		file = abs
	}
	i := 0
	for _, r := range cv.Runs {
		lo, hi := max(i, b.b0), min(i+r.Len, b.b1)
		if lo < hi {
			t.edits = append(t.edits, edit{file: file, off: cv.FileOffset + a + r.Offset + int64(lo-i), data: slices.Clone(data[lo:hi]), tensor: v.Layer.Name})
		}
		i += r.Len
	}
}

// stale fills a consumer box with random bytes: what the block held
// before a transfer that never came.
func (t *logTamper) stale(b box) {
	for tok := b.t0; tok < b.t1; tok++ {
		for h := b.h0; h < b.h1; h++ {
			cell := readCell(b, tok, h)
			for i := b.b0; i < b.b1; i++ {
				cell[i] = byte(t.rng.Uint32() | 1)
			}
			t.writeCell(b, tok, h, cell)
		}
	}
	t.touch(b)
}

// deliver writes into a consumer box what a READ of a producer box of the
// same shape delivers (the consumer converts it into its own layout).
func (t *logTamper) deliver(dst, src box) {
	for i := range dst.t1 - dst.t0 {
		for j := range dst.h1 - dst.h0 {
			from := readCell(src, src.t0+i, src.h0+j)
			cell := readCell(dst, dst.t0+i, dst.h0+j)
			copy(cell[dst.b0:dst.b1], from[src.b0:src.b0+dst.b1-dst.b0])
			t.writeCell(dst, dst.t0+i, dst.h0+j, cell)
		}
	}
	t.touch(dst)
}

// touch records a consumer place the fault changed, with the checks it
// shows in: every check, or, for a cache replicated over ranks, the
// checks of its copy.
func (t *logTamper) touch(b box) {
	req := ""
	for _, r := range t.cons[b.dump].Manifest.Requests {
		if positionOf(&r, b.region.Group.Group, b.block) == b.pos {
			req = r.ID
			break
		}
	}
	p := Place{Request: req, Group: b.region.Group.Group.ID, Position: b.pos}
	if slices.Contains(t.affected, p) {
		return
	}
	t.affected = append(t.affected, p)
	v := b.view()
	if v.Replicas > 1 {
		most := 1
		for _, d := range t.cons {
			if gv := d.GroupView(p.Group); gv != nil {
				for _, c := range gv.Caches {
					most = max(most, c.Replicas)
				}
			}
		}
		var checks []int
		for k := range most {
			if k%v.Replicas == v.ReplicaIndex {
				checks = append(checks, k)
			}
		}
		t.checks[p] = checks
	}
}

// expect adds an expected transfer-audit finding at a pair.
func (t *logTamper) expect(inv string, x *xref, desc int, b box, tokens [2]int) {
	t.f.Expect.Transfers = append(t.f.Expect.Transfers, TransferExpect{
		Invariant: inv, Request: x.req.ID, Transfer: x.log.recs[x.rec].ID, Descriptor: desc,
		Log: filepath.Base(x.log.path), Layer: b.view().Number, Tokens: tokens,
	})
}

// describe records the change of the log in the fault.
func (t *logTamper) describe(x *xref, descs []int, format string, args ...any) {
	x.log.changed = true
	rec := &x.log.recs[x.rec]
	t.f.Request = x.req.ID
	t.f.Transfer = &TransferChange{Log: transferDir + "/" + filepath.Base(x.log.path), Agent: x.log.header.Agent, Transfer: rec.ID, Line: rec.Line, Descriptors: descs}
	t.f.Description = fmt.Sprintf(format, args...)
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
func (t *logTamper) samePage(a, b nixl.Desc, r *layout.Region) bool {
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

// finish fills the fault's places and the comparison's expectations: a
// mismatch at every place the fault changed.
func (t *logTamper) finish() {
	f := t.f
	f.Affected = t.affected
	if len(t.affected) == 0 {
		return
	}
	f.Expect.Verdict = string(verify.Mismatch)
	for _, p := range t.affected {
		i := slices.IndexFunc(f.Expect.Requests, func(r RequestExpect) bool { return r.ID == p.Request })
		if i < 0 {
			f.Expect.Requests = append(f.Expect.Requests, RequestExpect{ID: p.Request, Verdict: string(verify.Mismatch)})
			i = len(f.Expect.Requests) - 1
		}
		r := &f.Expect.Requests[i]
		j := slices.IndexFunc(r.Groups, func(g GroupExpect) bool { return g.ID == p.Group })
		if j < 0 {
			r.Groups = append(r.Groups, GroupExpect{ID: p.Group, Positions: []int{}, Checks: t.checks[p]})
			j = len(r.Groups) - 1
		}
		if !slices.Contains(r.Groups[j].Positions, p.Position) {
			r.Groups[j].Positions = append(r.Groups[j].Positions, p.Position)
			slices.Sort(r.Groups[j].Positions)
		}
	}
}

// transferDir is where a transfer-log fault writes the logs, in its
// output.
const transferDir = "nixl"

// writeLogs writes every log (as changed) into dir.
func (t *logTamper) writeLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, l := range t.logs {
		pl := &nixl.PlannedLog{Header: l.header, Records: l.recs}
		var b bytes.Buffer
		if err := pl.Write(&b); err != nil {
			return err
		}
		if err := writeNew(filepath.Join(dir, filepath.Base(l.path)), b.Bytes()); err != nil {
			return err
		}
	}
	return nil
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
