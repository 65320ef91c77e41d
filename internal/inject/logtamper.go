package inject

// This file is the machinery of the transfer-log faults (kinds_transfer.go
// holds the kinds): a log and the consumer's dumps read, each transfer
// resolved to the cells its pairs move, the cells a changed transfer
// leaves written, stale or touched, the fault's expectations, and the
// logs written back.

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
)

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
	cmaps []*addrmap.Map
	prod  map[string]*prodRank // by agent
	logs  []*faultLog
	edits []edit
	abs   map[string]string
	// affected: the consumer places whose bytes the fault changed.
	affected []Place
	// checks by place: the consumer checks a change there shows in (nil:
	// every check).
	checks map[Place][]int
	// resolved: xfers' list, resolved once (nil: not yet).
	resolved []*xref
}

type prodRank struct {
	dump *layout.Dump
	am   *addrmap.Map
}

// faultLog is one log of the input, read whole.
type faultLog struct {
	path    string
	header  nixl.Header
	recs    []nixl.Record
	cons    int // the consumer dump it records, -1: another agent's
	changed bool
	// dlists: the record of each handle's prepared list (the first);
	// doneIDs: the transfers that reached DONE. The faults change
	// neither, so they are indexed once, not looked up by a scan of
	// the log per transfer.
	dlists  map[int]int
	doneIDs map[int]bool
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
	region *addrmap.Region
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
		am, err := addrmap.New(d)
		if err != nil {
			return nil, err
		}
		t.cmaps = append(t.cmaps, am)
	}
	for _, d := range opts.Producer {
		if d.Manifest.Parallel.Agent == nil {
			continue
		}
		am, err := addrmap.New(d)
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
	l := &faultLog{path: path, header: r.Header(), dlists: map[int]int{}, doneIDs: map[int]bool{}}
	for {
		var rec nixl.Record
		if err := r.Next(&rec); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		switch {
		case rec.Op == nixl.OpDList:
			if _, ok := l.dlists[rec.Handle]; !ok {
				l.dlists[rec.Handle] = len(l.recs)
			}
		case rec.Op == nixl.OpState && rec.State == nixl.Done:
			l.doneIDs[rec.ID] = true
		}
		l.recs = append(l.recs, rec)
	}
	return l, nil
}

// dlist returns a log's prepared list of a handle.
func (l *faultLog) dlist(handle int) *nixl.Record {
	if i, ok := l.dlists[handle]; ok {
		return &l.recs[i]
	}
	return nil
}

// done says whether a transfer of the log reached DONE.
func (l *faultLog) done(id int) bool { return l.doneIDs[id] }

// xfers lists the transfers faults may go into: READs of a consumer's log,
// made of prepared lists, DONE, for a request of the consumer's dumps, with
// their pairs resolved, as the logs were read. The list is resolved once:
// pick and the searches of other pairs call xfers for each candidate, and
// a fault changes a transfer's ids only after those searches (lateRead,
// which lists them after, changes times, which the list does not hold).
func (t *logTamper) xfers() []*xref {
	if t.resolved == nil {
		t.resolved = t.resolveXfers()
	}
	return t.resolved
}

func (t *logTamper) resolveXfers() []*xref {
	out := []*xref{}
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
	pr.am.Resolve(s.Addr, s.Len, func(c addrmap.Cells) error {
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
