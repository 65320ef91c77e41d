package transfer

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/layout"
)

// Options control Audit.
type Options struct {
	// Requests restricts the audit to these consumer request ids (or the
	// producer's ids they pair with); all when empty.
	Requests []string
	// MaxFindings caps the findings kept (0: DefaultMaxFindings, negative:
	// no cap); a note says how many were left out.
	MaxFindings int
}

// DefaultMaxFindings is the findings an audit keeps by default.
const DefaultMaxFindings = 10000

// MaxHeld bounds the descriptors of prepared lists an audit holds at once
// (over every log): a log preparing more is refused.
const MaxHeld = 1 << 24

// LogExt is the extension of a log file in a directory of logs.
const LogExt = ".jsonl"

// FindLogs expands the logs given as paths: a file is a log; a directory
// holds logs (its *.jsonl files, in name order; a .jsonl.partial file, a
// log the recorder has not closed, is refused).
func FindLogs(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		n := len(out)
		for _, e := range entries {
			switch {
			case e.IsDir():
			case strings.HasSuffix(e.Name(), LogExt):
				out = append(out, filepath.Join(p, e.Name()))
			case strings.HasSuffix(e.Name(), LogExt+".partial"):
				return nil, &layout.ReadError{Path: filepath.Join(p, e.Name()), Msg: "a log the recorder has not closed (still named .partial): incomplete, not audited"}
			}
		}
		if len(out) == n {
			return nil, &layout.ReadError{Path: p, Msg: "holds no NIXL log (*" + LogExt + ")"}
		}
	}
	return out, nil
}

// Audit reads the logs (files; see FindLogs) and checks every transfer
// they record against the producer's and the consumer's dumps: the logs
// of the consumer's ranks for a pull (READ), of the producer's for a push
// (WRITE). A log that cannot be read is a *LogError (or the file's
// error); what cannot be resolved to the dumps (an agent no dump names, a
// dump without addresses) is listed in Result.Unresolved, and the rest is
// audited.
func Audit(ctx context.Context, logs []string, producer, consumer []*layout.Dump, opts Options) (*Result, error) {
	a := newAuditor(producer, consumer, opts)
	err := layout.Guard("dump data while auditing transfers", func() error {
		for _, path := range logs {
			if err := a.readLog(ctx, path); err != nil {
				return err
			}
		}
		return a.finish(ctx)
	})
	if err != nil {
		return nil, err
	}
	return a.res, nil
}

// auditor is an audit's state.
type auditor struct {
	opts       Options
	res        *Result
	prod, cons *side
	xfers      []*xfer
	held       int
	unresolved map[string]bool
	dropped    int
	dcells     []layout.Cells
	scells     []layout.Cells
	// ch is the current pair's destination read as a chunk of a page,
	// where the consumer converts what it receives (nil otherwise).
	ch *chunk
	summaries  map[*request]int
}

// side is the dumps of a producer or a consumer, by agent name.
type side struct {
	role    string
	ranks   []*rank
	byAgent map[string]*rank
}

// rank is one dump of a side, with what the audit needs of it.
type rank struct {
	side  *side
	idx   int
	dump  *layout.Dump
	agent string
	r     layout.Rank
	am    *layout.AddressMap
	amErr error
	// owners: group id -> block id -> the requests holding it.
	owners     map[int]map[int][]owner
	reqs       map[string]*request
	deliveries []delivery
}

type owner struct {
	req string
	pos int
}

// request is a request of one rank's dump and its blocks per group.
type request struct {
	req    *layout.Request
	rank   *rank
	groups map[int]*reqGroup
	xfers  []*xfer
}

type reqGroup struct {
	gv     *layout.GroupView
	loaded map[int]int // block -> position, loaded positions
	all    map[int]int // block -> position, any position
}

// xfer is one transfer of a log.
type xfer struct {
	log      *logFile
	id, line int
	kind     string
	dst, src *rank
	req      *request
	prodReq  string
	state    string
	pairs    int
	bytes    uint64
	skip     bool
}

// delivery is one descriptor's bytes delivered into the consumer (in
// the order of address ranges of its cells).
type delivery struct {
	lo, hi uint64
	key    uint64 // source - destination address: the same source moves bytes alike
	src    int32
	x      int32
	desc   int32
}

type logFile struct {
	path    string
	header  Header
	dlists  map[int]*dlist
	summary *LogSummary
	side    string
}

type dlist struct {
	agent string
	descs []Desc
}

func newAuditor(producer, consumer []*layout.Dump, opts Options) *auditor {
	a := &auditor{opts: opts, unresolved: map[string]bool{}, summaries: map[*request]int{},
		res: &Result{Format: ResultFormat, Logs: []LogSummary{}, Requests: []RequestSummary{}, Findings: []Finding{}, Unresolved: []string{}, Notes: []string{}}}
	if a.opts.MaxFindings == 0 {
		a.opts.MaxFindings = DefaultMaxFindings
	}
	a.prod = a.newSide("producer", producer)
	a.cons = a.newSide("consumer", consumer)
	return a
}

func (a *auditor) newSide(role string, dumps []*layout.Dump) *side {
	s := &side{role: role, byAgent: map[string]*rank{}}
	for i, d := range dumps {
		pp, tp := d.Rank()
		rk := &rank{side: s, idx: i, dump: d, r: layout.Rank{PP: pp, TP: tp}, reqs: map[string]*request{}}
		if ag := d.Manifest.Parallel.Agent; ag != nil {
			rk.agent = *ag
			if other, dup := s.byAgent[rk.agent]; dup {
				a.unresolve("the %s's dumps %q and %q name one agent %q", role, other.dump.Path, d.Path, rk.agent)
			}
			s.byAgent[rk.agent] = rk
		}
		s.ranks = append(s.ranks, rk)
	}
	return s
}

// unresolve notes what of the logs cannot be resolved (once per text).
func (a *auditor) unresolve(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !a.unresolved[msg] {
		a.unresolved[msg] = true
		a.res.Unresolved = append(a.res.Unresolved, msg)
	}
}

func (a *auditor) note(format string, args ...any) {
	a.res.Notes = append(a.res.Notes, fmt.Sprintf(format, args...))
}

// addressMap returns a rank's address map, or nil (unresolved).
func (rk *rank) addressMap(a *auditor) *layout.AddressMap {
	if rk.am == nil && rk.amErr == nil {
		rk.am, rk.amErr = rk.dump.AddressMap()
		if rk.amErr != nil {
			a.unresolve("%v", rk.amErr)
		}
	}
	return rk.am
}

// ownersOf returns the requests holding a block of a group on the rank.
func (rk *rank) ownersOf(group, block int) []owner {
	if rk.owners == nil {
		rk.owners = map[int]map[int][]owner{}
		for _, r := range rk.dump.Manifest.Requests {
			for key, table := range r.BlockTable {
				g, _ := strconv.Atoi(key)
				m := rk.owners[g]
				if m == nil {
					m = map[int][]owner{}
					rk.owners[g] = m
				}
				for pos, b := range table {
					if b != layout.NoBlock {
						m[b] = append(m[b], owner{r.ID, pos})
					}
				}
			}
			for key, b := range r.StateBlock {
				g, _ := strconv.Atoi(key)
				m := rk.owners[g]
				if m == nil {
					m = map[int][]owner{}
					rk.owners[g] = m
				}
				m[b] = append(m[b], owner{r.ID, 0})
			}
		}
	}
	return rk.owners[group][block]
}

// request returns the rank's request of a consumer id, or of a producer
// id it pairs with (producer_id), or nil.
func (rk *rank) request(id string) *request {
	if r := rk.reqs[id]; r != nil {
		return r
	}
	m := rk.dump.Manifest.Request(id)
	if m == nil {
		for i := range rk.dump.Manifest.Requests {
			if rk.dump.Manifest.Requests[i].ProducerID == id {
				m = &rk.dump.Manifest.Requests[i]
				break
			}
		}
	}
	if m == nil {
		return nil
	}
	if r := rk.reqs[m.ID]; r != nil {
		rk.reqs[id] = r
		return r
	}
	r := &request{req: m, rank: rk, groups: map[int]*reqGroup{}}
	for _, gv := range rk.dump.Groups {
		rg := &reqGroup{gv: gv, loaded: map[int]int{}, all: map[int]int{}}
		key := strconv.Itoa(gv.Group.ID)
		if gv.Group.Kind == layout.KindMamba {
			if b, ok := m.StateBlock[key]; ok {
				rg.loaded[b], rg.all[b] = 0, 0
			}
		} else {
			for pos, b := range m.BlockTable[key] {
				if b != layout.NoBlock {
					if _, dup := rg.all[b]; !dup {
						rg.all[b] = pos
					}
				}
			}
			if span, st, err := layout.RequestSpan(m, gv.Group); err == nil && st == layout.SpanOK {
				for i, b := range span.Blocks {
					if _, dup := rg.loaded[b]; !dup {
						rg.loaded[b] = span.Start + i
					}
				}
			}
		}
		r.groups[gv.Group.ID] = rg
	}
	rk.reqs[m.ID], rk.reqs[id] = r, r
	return r
}

// pairID is the producer's id of a consumer request.
func (r *request) pairID() string {
	if r.req.ProducerID != "" {
		return r.req.ProducerID
	}
	return r.req.ID
}

// wanted says whether a request is audited (Options.Requests).
func (a *auditor) wanted(r *request) bool {
	if len(a.opts.Requests) == 0 {
		return true
	}
	return slices.Contains(a.opts.Requests, r.req.ID) || slices.Contains(a.opts.Requests, r.pairID())
}

// readLog streams one log.
func (a *auditor) readLog(ctx context.Context, path string) error {
	f, _, err := layout.OpenRegular(path)
	if err != nil {
		return err
	}
	defer f.Close()
	lr, err := NewReader(f, path)
	if err != nil {
		return err
	}
	h := lr.Header()
	lf := &logFile{path: path, header: h, dlists: map[int]*dlist{}}
	a.res.Logs = append(a.res.Logs, LogSummary{File: path, Agent: h.Agent, Rank: layout.Rank{PP: h.PPRank, TP: h.TPRank}})
	lf.summary = &a.res.Logs[len(a.res.Logs)-1]
	switch {
	case a.cons.byAgent[h.Agent] != nil:
		lf.side = "consumer"
	case a.prod.byAgent[h.Agent] != nil:
		lf.side = "producer"
	default:
		a.unresolve("log %q: agent %q names no dump of the consumer or the producer (their manifests' parallel.agent)", path, h.Agent)
	}
	lf.summary.Side = lf.side
	var rec Record
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		err := lr.Next(&rec)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := a.record(lf, &rec); err != nil {
			return err
		}
	}
	lf.summary = nil
	return nil
}

// record handles one record of a log.
func (a *auditor) record(lf *logFile, rec *Record) error {
	sum := &a.res.Logs[len(a.res.Logs)-1]
	switch rec.Op {
	case OpDList:
		if _, dup := lf.dlists[rec.Handle]; dup {
			return &LogError{File: lf.path, Line: rec.Line, Field: "handle", Msg: fmt.Sprintf("list %d is prepared twice", rec.Handle)}
		}
		a.held += len(rec.Descs)
		if a.held > MaxHeld {
			return &LogError{File: lf.path, Line: rec.Line, Field: "descs", Msg: fmt.Sprintf("the logs prepare more than %d descriptors", MaxHeld)}
		}
		lf.dlists[rec.Handle] = &dlist{agent: rec.Agent, descs: slices.Clone(rec.Descs)}
		sum.Lists++
	case OpXfer:
		sum.Xfers++
		return a.xfer(lf, rec, sum)
	case OpState:
		x := a.findXfer(lf, rec.ID)
		if x == nil {
			return &LogError{File: lf.path, Line: rec.Line, Field: "id", Msg: fmt.Sprintf("a state of transfer %d, which the log has not made", rec.ID)}
		}
		if x.state != "" {
			return &LogError{File: lf.path, Line: rec.Line, Field: "id", Msg: fmt.Sprintf("transfer %d already ended in %s", rec.ID, x.state)}
		}
		x.state = rec.State
		if rec.State == Done {
			sum.Done++
		} else {
			sum.Failed++
		}
	}
	return nil
}

func (a *auditor) findXfer(lf *logFile, id int) *xfer {
	for i := len(a.xfers) - 1; i >= 0; i-- {
		if x := a.xfers[i]; x.log == lf && x.id == id {
			return x
		}
	}
	return nil
}

// isLocal says whether a dlist's agent names the log's own memory.
func isLocal(agent string, h Header) bool {
	return agent == "" || agent == LocalAgent
}

// xfer resolves a transfer's descriptor pairs and checks each.
func (a *auditor) xfer(lf *logFile, rec *Record, sum *LogSummary) error {
	if prev := a.findXfer(lf, rec.ID); prev != nil {
		return &LogError{File: lf.path, Line: rec.Line, Field: "id", Msg: fmt.Sprintf("transfer %d is made twice (first on line %d)", rec.ID, prev.line)}
	}
	x := &xfer{log: lf, id: rec.ID, line: rec.Line, kind: rec.Kind}
	a.xfers = append(a.xfers, x)
	local, remote, remoteAgent, err := a.descriptors(lf, rec)
	if err != nil {
		return err
	}
	if local == nil {
		x.skip = true
		return nil
	}
	sum.Pairs += min(len(local), len(remote))
	dstAgent, srcAgent := lf.header.Agent, remoteAgent
	dst, src := local, remote
	if rec.Kind == Write {
		dstAgent, srcAgent = remoteAgent, lf.header.Agent
		dst, src = remote, local
	}
	x.dst, x.src = a.cons.byAgent[dstAgent], a.prod.byAgent[srcAgent]
	switch {
	case x.dst == nil && a.prod.byAgent[dstAgent] != nil:
		a.note("log %q line %d: transfer %d writes into the producer's agent %q (a readback): not audited", lf.path, rec.Line, rec.ID, dstAgent)
		x.skip = true
		return nil
	case x.dst == nil:
		a.unresolve("log %q line %d: transfer %d writes into agent %q, which no consumer dump names", lf.path, rec.Line, rec.ID, dstAgent)
		x.skip = true
		return nil
	case x.src == nil:
		a.unresolve("log %q line %d: transfer %d reads agent %q, which no producer dump names", lf.path, rec.Line, rec.ID, srcAgent)
		x.skip = true
		return nil
	}
	if x.dst.addressMap(a) == nil || x.src.addressMap(a) == nil {
		x.skip = true
		return nil
	}
	if rec.HasRequest {
		if x.req = x.dst.request(rec.Request); x.req == nil {
			a.note("log %q line %d: transfer %d names request %q, which the consumer's dump %q does not hold: its request is the owner of the first block it writes", lf.path, rec.Line, rec.ID, rec.Request, x.dst.dump.Path)
		}
	}
	if len(local) != len(remote) {
		a.add(x, Finding{Invariant: Aligned, Descriptor: -1, Position: -1, Block: -1, Group: -1,
			Message: fmt.Sprintf("transfer %d pairs %d local descriptors with %d remote", x.id, len(local), len(remote))})
	}
	for i := range min(len(local), len(remote)) {
		if !a.pair(x, i, dst[i], src[i]) {
			x.skip = true
			return nil
		}
	}
	x.pairs = min(len(local), len(remote))
	if x.req != nil {
		x.req.xfers = append(x.req.xfers, x)
	}
	return nil
}

// descriptors returns a transfer's local and remote descriptors and the
// remote agent; nil local for a transfer that cannot be resolved.
func (a *auditor) descriptors(lf *logFile, rec *Record) (local, remote []Desc, remoteAgent string, err error) {
	if !rec.Prepped {
		return slices.Clone(rec.LocalDescs), slices.Clone(rec.RemoteDescs), rec.RemoteAgent, nil
	}
	pick := func(field string, handle int, ids []int) ([]Desc, *dlist, error) {
		dl := lf.dlists[handle]
		if handle == 0 || dl == nil {
			a.unresolve("log %q line %d: transfer %d names a prepared list the log does not hold (%s %d: prepared before the recorder was installed?)", lf.path, rec.Line, rec.ID, field, handle)
			return nil, nil, nil
		}
		out := make([]Desc, len(ids))
		for i, id := range ids {
			if id >= len(dl.descs) {
				return nil, nil, &LogError{File: lf.path, Line: rec.Line, Field: fmt.Sprintf("%s_ids[%d]", field, i), Msg: fmt.Sprintf("index %d past the %d descriptors of list %d", id, len(dl.descs), handle)}
			}
			out[i] = dl.descs[id]
		}
		return out, dl, nil
	}
	local, ldl, err := pick("local", rec.Local, rec.LocalIDs)
	if err != nil || local == nil && ldl == nil {
		return nil, nil, "", err
	}
	remote, rdl, err := pick("remote", rec.Remote, rec.RemoteIDs)
	if err != nil || rdl == nil {
		return nil, nil, "", err
	}
	if !isLocal(ldl.agent, lf.header) && ldl.agent != lf.header.Agent {
		a.unresolve("log %q line %d: transfer %d's local list %d was prepared for agent %q", lf.path, rec.Line, rec.ID, rec.Local, ldl.agent)
		return nil, nil, "", nil
	}
	if isLocal(rdl.agent, lf.header) {
		a.unresolve("log %q line %d: transfer %d's remote list %d was prepared for the local agent", lf.path, rec.Line, rec.ID, rec.Remote)
		return nil, nil, "", nil
	}
	return local, remote, rdl.agent, nil
}

// add records a finding of a transfer (or of a request, x nil).
func (a *auditor) add(x *xfer, f Finding) {
	if x != nil {
		f.Transfer, f.Log, f.Line = x.id, x.log.path, x.line
		if f.Request == "" && x.req != nil {
			f.Request = x.req.req.ID
		}
		if x.dst != nil {
			f.Rank = x.dst.r
		}
	}
	if a.opts.MaxFindings > 0 && len(a.res.Findings) >= a.opts.MaxFindings {
		a.dropped++
		return
	}
	a.res.Findings = append(a.res.Findings, f)
}

// sideNames are the log's names of the destination and source sides.
func sideNames(kind string) (dst, src string) {
	if kind == Write {
		return "remote", "local"
	}
	return "local", "remote"
}

// pair checks one descriptor pair and records what it delivers; false
// when the transfer cannot be resolved further.
func (a *auditor) pair(x *xfer, i int, d, s Desc) bool {
	collect := func(dst *[]layout.Cells) func(layout.Cells) error {
		return func(c layout.Cells) error { *dst = append(*dst, c); return nil }
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
			a.unresolve("log %q line %d: transfer %d names no request and writes into no request's block", x.log.path, x.line, x.id)
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
	if len(a.dcells) > 0 && len(a.scells) > 0 && !a.dcells[0].Region.State && converted(a.dcells[0].Region, a.scells[0].Region) {
		if ch, ok := chunkOf(a.dcells[0].Region, d); ok {
			a.ch = &ch
		}
	}
	dside, sside := sideNames(x.kind)
	base := Finding{Descriptor: i, Group: -1, Position: -1, Block: -1}
	if d.Len != s.Len {
		f := base
		f.Invariant, f.Bytes = Aligned, d.Len
		f.Message = fmt.Sprintf("transfer %d descriptor %d: the %s descriptor has %d bytes, the %s %d", x.id, i, dside, d.Len, sside, s.Len)
		a.placeDst(&f, x)
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
func (a *auditor) place(f *Finding, x *xfer, cells []layout.Cells) {
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
func (a *auditor) describeCells(f *Finding, cells []layout.Cells, r *request, consumer bool) {
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
		var bytes uint64
		for _, o := range a.dcells[ci:] {
			if o.Block == c.Block {
				bytes += o.Len
			}
		}
		f.Bytes = bytes
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
			Layer: c.Region.Views[0].Number, LayerName: c.Region.Layer.Name}
		if len(a.dcells) > 0 {
			a.placeDst(&f, x)
		}
		f.Invariant, f.Side = Confined, sside
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
		return false
	}
	return true
}

// logical is a box of cells in the terms both sides share: layer, state,
// global head (row), request token, cell byte, and the box's shape.
type logical struct {
	layer, state      int
	head, token, byte int
	dims              []layout.Dim
	len               uint64
}

func logicalOf(c *layout.Cells, pos int) logical {
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

// converted says whether the destination converts what it receives (a
// kernel block of other tokens, or pages of another order: vLLM permutes
// them on receive), so that a pair is compared per chunk of tokens.
func converted(d, s *layout.Region) bool {
	return d.KernelTokens != s.KernelTokens || d.PageOrder() != s.PageOrder()
}

// aligned checks that a pair's two sides hold the same KV.
func (a *auditor) aligned(x *xfer, i int, d, s Desc) {
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
	}
	if !dr.State && converted(dr, sr) {
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
func (a *auditor) source(x *xfer, c *layout.Cells, preq *request) *Source {
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
	region   *layout.Region
	block, k int
	tokens   [2]int
	part     int
}

// chunkOf reads a destination descriptor as a chunk of a page.
func chunkOf(r *layout.Region, d Desc) (chunk, bool) {
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
func (a *auditor) deliver(x *xfer, i int, d, s Desc) {
	dl := delivery{key: s.Addr - d.Addr, src: int32(x.src.idx), x: int32(len(a.xfers) - 1), desc: int32(i)}
	if len(a.dcells) > 0 && len(a.scells) > 0 && !a.dcells[0].Region.State && converted(a.dcells[0].Region, a.scells[0].Region) {
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
		if x.state == Err && x.req.loadedTokens() > 0 {
			f := Finding{Invariant: Failed, Descriptor: -1, Group: -1, Position: -1, Block: -1, Heads: [2]int{-1, -1}, Tokens: [2]int{-1, -1}}
			f.Message = fmt.Sprintf("transfer %d ended in ERR, but request %s was loaded anyway (its dump on rank %s holds tokens %d-%d as loaded)",
				x.id, x.req.req.ID, x.dst.r, x.req.req.NumLocalComputedTokens, x.req.req.NumTokens-1)
			a.add(x, f)
		}
	}
	for _, rk := range a.cons.ranks {
		if err := ctx.Err(); err != nil {
			return err
		}
		a.finishRank(rk)
	}
	if a.dropped > 0 {
		a.note("%d more finding(s) left out (--max-findings)", a.dropped)
	}
	a.summarize()
	return nil
}

func (r *request) loadedTokens() int { return r.req.NumTokens - r.req.NumLocalComputedTokens }

type ival struct{ lo, hi uint64 }

// finishRank checks a consumer rank's requests.
func (a *auditor) finishRank(rk *rank) {
	var done []delivery
	for _, d := range rk.deliveries {
		if a.xfers[d.x].state == Done {
			done = append(done, d)
		}
	}
	rk.deliveries = nil
	slices.SortFunc(done, func(p, q delivery) int { return cmp.Or(cmp.Compare(p.lo, q.lo), cmp.Compare(p.x, q.x)) })
	a.twice(rk, done)
	var covered []ival
	for _, d := range done {
		if n := len(covered); n > 0 && d.lo <= covered[n-1].hi {
			covered[n-1].hi = max(covered[n-1].hi, d.hi)
			continue
		}
		covered = append(covered, ival{d.lo, d.hi})
	}
	var ids []string
	seen := map[*request]bool{}
	for _, r := range rk.reqs {
		if !seen[r] && len(r.xfers) > 0 {
			seen[r] = true
			ids = append(ids, r.req.ID)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		a.finishRequest(rk, rk.reqs[id], covered)
	}
}

// twice reports bytes delivered by transfers from different sources.
func (a *auditor) twice(rk *rank, done []delivery) {
	var prev *delivery
	for i := range done {
		d := &done[i]
		if prev != nil && d.lo < prev.hi && (d.key != prev.key || d.src != prev.src) {
			x, px := a.xfers[d.x], a.xfers[prev.x]
			f := Finding{Invariant: Twice, Descriptor: int(d.desc), Group: -1, Position: -1, Block: -1, Bytes: min(d.hi, prev.hi) - d.lo,
				Other: &Ref{Log: px.log.path, Transfer: px.id, Descriptor: int(prev.desc)}}
			var cells []layout.Cells
			rk.am.Resolve(d.lo, f.Bytes, func(c layout.Cells) error { cells = append(cells, c); return nil })
			if len(cells) > 0 {
				a.place(&f, x, cells)
			}
			f.Message = fmt.Sprintf("transfer %d descriptor %d wrote %s, which transfer %d descriptor %d (log %q) also wrote, from another source", x.id, d.desc, what(&f), px.id, prev.desc, px.log.path)
			a.add(x, f)
		}
		if prev == nil || d.hi > prev.hi {
			prev = d
		}
	}
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
		span, st, err := layout.RequestSpan(r.req, gv.Group)
		if err != nil || st != layout.SpanOK {
			continue
		}
		var regions []*layout.Region
		for _, reg := range rk.am.Regions {
			if reg.Group == gv {
				regions = append(regions, reg)
			}
		}
		S := gv.Group.BlockSize
		for bi, blk := range span.Blocks {
			pos := span.Start + bi
			lo := max(0, r.req.NumLocalComputedTokens-pos*S)
			hi := layout.ValidTokens(r.req.NumTokens, pos, S)
			if gv.Group.Kind == layout.KindMamba {
				lo, hi = 0, 1
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
				expect([2]int{0, reg.KernelBlocks * reg.KernelTokens}, &holes)
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
func blame(r *request, reg *layout.Region, heads [2]int) *xfer {
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
func (a *auditor) gap(r *request, reg *layout.Region, gv *layout.GroupView, pos, blk int, missing []ival, rk *rank) {
	f := Finding{Invariant: Covered, Request: r.req.ID, Descriptor: -1, Group: gv.Group.ID, Position: pos, Block: blk,
		Layer: reg.Views[0].Number, LayerName: reg.Layer.Name, Rank: rk.r}
	var cells []layout.Cells
	for _, m := range missing {
		f.Bytes += m.hi - m.lo
		rk.am.Resolve(m.lo, m.hi-m.lo, func(c layout.Cells) error { cells = append(cells, c); return nil })
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
func (a *auditor) stale(r *request, reg *layout.Region, gv *layout.GroupView, pos, blk int, holes []ival, rk *rank) {
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
	var cells []layout.Cells
	for _, h := range holes {
		rk.am.Resolve(h.lo, h.hi-h.lo, func(c layout.Cells) error { cells = append(cells, c); return nil })
	}
	a.describeCells(&f, cells, r, true)
	x := blame(r, reg, f.Heads)
	var at []layout.Cells
	rk.am.Resolve(first, 1, func(c layout.Cells) error { at = append(at, c); return nil })
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
	if x != nil {
		f.Transfer, f.Log, f.Line = x.id, x.log.path, x.line
	}
	if a.opts.MaxFindings > 0 && len(a.res.Findings) >= a.opts.MaxFindings {
		a.dropped++
		return
	}
	a.res.Findings = append(a.res.Findings, f)
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
	for _, f := range a.res.Findings {
		if i, ok := index[key{f.Rank, f.Request}]; ok {
			a.res.Requests[i].Findings[f.Invariant]++
		}
	}
	slices.SortStableFunc(a.res.Findings, func(p, q Finding) int {
		return cmp.Or(cmp.Compare(p.Rank.PP, q.Rank.PP), cmp.Compare(p.Rank.TP, q.Rank.TP), cmp.Compare(p.Request, q.Request),
			cmp.Compare(p.Transfer, q.Transfer), cmp.Compare(p.Descriptor, q.Descriptor))
	})
	switch {
	case len(a.res.Findings) > 0:
		a.res.Verdict = Violated
	case len(a.res.Unresolved) > 0:
		a.res.Verdict = Unresolved
	default:
		a.res.Verdict = Clean
	}
}

// AuditPaths opens the producer's and the consumer's dumps (dumps or
// directories of dumps, as layout.OpenPaths reads them) and the logs
// (FindLogs), and audits them (Audit).
func AuditPaths(ctx context.Context, logs, producer, consumer []string, opts Options) (*Result, error) {
	files, err := FindLogs(logs)
	if err != nil {
		return nil, err
	}
	prod, err := layout.OpenPaths(producer)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	defer layout.CloseAll(prod)
	cons, err := layout.OpenPaths(consumer)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer layout.CloseAll(cons)
	return Audit(ctx, files, prod, cons, opts)
}
