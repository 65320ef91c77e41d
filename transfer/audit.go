package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
)

// Options control Audit.
type Options struct {
	// Requests restricts the audit to these consumer request ids (or the
	// producer's ids they pair with); all when empty.
	Requests []string
	// MaxFindings caps the findings kept (0: DefaultMaxFindings, negative:
	// no cap); a note says how many were left out.
	MaxFindings int
	// Lookahead is the consumer's num_prefill_lookahead_tokens (vLLM's
	// multi-token-prediction window): its last Lookahead-1 prompt tokens
	// are recomputed by the consumer, not pulled (PullTokens).
	Lookahead int
	// AllowUnverified audits what the logs hold when a consumer rank has
	// no log, with a note, instead of leaving the audit unresolved.
	AllowUnverified bool
	// LeaseS is the producer's lease on a request's blocks in seconds (0:
	// the producer's logs' lease_s, else the consumer's).
	LeaseS int
}

// DefaultMaxFindings is the findings an audit keeps by default.
const DefaultMaxFindings = 10000

// maxHeld bounds the runs of descriptors (descriptors whose addresses step
// by one stride) of the prepared lists an audit holds (over every log): a
// log preparing more is refused.
const maxHeld = 1 << 24

// FindLogs expands the logs given as paths: a file is a log; a directory
// holds logs (its *.jsonl files, in name order; a .jsonl.partial file, a
// log the recorder has not closed, is refused). A path that does not
// exist and holds a glob metacharacter is a pattern, as a side's path is
// (layout.FindDumps): the paths it matches, in name order. A path that
// does not exist, or a pattern that matches nothing, is a
// *layout.ReadError naming it.
func FindLogs(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && layout.IsPattern(p) {
			matches, gerr := filepath.Glob(p)
			if gerr != nil || len(matches) == 0 {
				return nil, &layout.ReadError{Path: p, Msg: "no file matches: want NIXL logs (kvaudit-nixl-log/1 files) or directories of them"}
			}
			logs, err := FindLogs(matches)
			if err != nil {
				return nil, err
			}
			out = append(out, logs...)
			continue
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &layout.ReadError{Path: p, Msg: "does not exist: want a NIXL log (a kvaudit-nixl-log/1 file) or a directory of them"}
		}
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
			case strings.HasSuffix(e.Name(), nixl.LogExt):
				out = append(out, filepath.Join(p, e.Name()))
			case strings.HasSuffix(e.Name(), nixl.LogExt+".partial"):
				return nil, &layout.ReadError{Path: filepath.Join(p, e.Name()), Msg: "a log the recorder has not closed (still named .partial): incomplete, not audited"}
			}
		}
		if len(out) == n {
			return nil, &layout.ReadError{Path: p, Msg: "holds no NIXL log (*" + nixl.LogExt + ")"}
		}
	}
	return out, nil
}

// Audit reads the logs (files; see FindLogs) and checks every transfer
// they record against the producer's and the consumer's dumps: the logs
// of the consumer's ranks for a pull (READ), of the producer's for a push
// (WRITE). A log that cannot be read is a *parse.Error (parse.NIXLLog) (or the file's
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
	// swapped counts transfers that read a consumer's agent into a
	// producer's; lease is the lease audit's state.
	swapped int
	lease   *leases
	dcells  []layout.Cells
	scells  []layout.Cells
	// ch is the current pair's destination read as a chunk of a page,
	// where the consumer converts what it receives (nil otherwise).
	ch *chunk
	// flagged marks descriptors with a fault a picture shows
	// (transfer index << 32 | descriptor); counts counts findings by
	// consumer rank and request.
	flagged map[uint64]uint8
	counts  map[reqKey]int
}

// reqKey is a consumer request on a rank.
type reqKey struct {
	rank layout.Rank
	id   string
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
	// byID and byProducer index the dump's requests (built once).
	byID, byProducer map[string]*layout.Request
	// logged: a log of the rank's agent was read, or a push wrote into
	// the rank; hybrid: the model has state groups (PullTokens).
	logged bool
	hybrid bool
	// unserved are the dump's requests no audited transfer served.
	unserved []*request
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
	// at is when the transfer was posted (its post record, else its xfer
	// record), if the log says.
	at nixl.Stamp
	// late: a READ posted after its request's lease lapsed.
	late bool
}

// delivery is one descriptor's bytes delivered into the consumer (in
// the order of address ranges of its cells).
type delivery struct {
	lo, hi uint64
	// source identifies where the bytes came from: the source rank and
	// the source address minus the destination's (two deliveries of one
	// source move the same bytes to the same place).
	source uint64
	x      uint32
	desc   uint32
}

// sourceKey identifies a pair's source (delivery.source).
func sourceKey(rank int, s, d uint64) uint64 {
	return (s - d) ^ uint64(rank+1)*0x9e3779b97f4a7c15
}

type logFile struct {
	// notDumped counts the transfers of requests the consumer's dumps do
	// not hold.
	notDumped int
	path      string
	header    nixl.Header
	dlists    map[int]*dlist
	summary   *LogSummary
	side      string
	// live indexes the log's transfers by id: those still without a
	// state, and those audited; ended holds the ids of the others, whose
	// state was read (runs of ids: a recorder numbers them in order).
	live  map[int]*xfer
	ended idSet
	// remotes are the remote agents the log's lists and transfers name
	// (at most maxNamed); registered its first registered ranges.
	remotes    []string
	registered []nixl.Desc
	// foreign: the log's registered memory lies in no cache of the dump
	// its agent names (a log of another run): its transfers are not
	// audited. outside counts its pairs whose both sides lie outside
	// every cache, pairs all its pairs.
	foreign, checked bool
	outside, pairs   int
	readbacks        int
}

// maxNamed bounds the names and ranges a log's summary keeps for the
// pairing notes.
const maxNamed = 64

// idSet is a set of transfer ids held as sorted disjoint runs [lo, hi).
type idSet struct{ runs [][2]int }

func (s *idSet) has(id int) bool {
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i][1] > id })
	return i < len(s.runs) && s.runs[i][0] <= id
}

// add adds id (not in the set); ids added in order cost one run.
func (s *idSet) add(id int) {
	i := sort.Search(len(s.runs), func(i int) bool { return s.runs[i][1] > id })
	joinLeft := i > 0 && s.runs[i-1][1] == id
	joinRight := i < len(s.runs) && s.runs[i][0] == id+1
	switch {
	case joinLeft && joinRight:
		s.runs[i-1][1] = s.runs[i][1]
		s.runs = slices.Delete(s.runs, i, i+1)
	case joinLeft:
		s.runs[i-1][1] = id + 1
	case joinRight:
		s.runs[i][0] = id
	default:
		s.runs = slices.Insert(s.runs, i, [2]int{id, id + 1})
	}
}

// dlist is a prepared list, held as runs of descriptors whose addresses
// step by one stride at one length (vLLM's lists are a few runs: a
// region's blocks), so that a list of millions costs a few runs.
type dlist struct {
	agent string
	n     int
	runs  []descRun
}

// descRun is descriptors first..first+count-1: addr + k*stride, len each.
type descRun struct {
	first, count int
	addr         uint64
	stride       int64
	len          uint64
}

// add appends a descriptor to the list.
func (d *dlist) add(x nixl.Desc) {
	if k := len(d.runs); k > 0 {
		r := &d.runs[k-1]
		switch {
		case r.count == 1 && x.Len == r.len:
			r.stride, r.count = int64(x.Addr-r.addr), 2
			d.n++
			return
		case x.Len == r.len && x.Addr == uint64(int64(r.addr)+int64(r.count)*r.stride):
			r.count++
			d.n++
			return
		}
	}
	d.runs = append(d.runs, descRun{first: d.n, count: 1, addr: x.Addr, len: x.Len})
	d.n++
}

// at returns descriptor i (i < d.n).
func (d *dlist) at(i int) nixl.Desc {
	k := sort.Search(len(d.runs), func(k int) bool { return d.runs[k].first > i }) - 1
	r := &d.runs[k]
	return nixl.Desc{Addr: uint64(int64(r.addr) + int64(i-r.first)*r.stride), Len: r.len}
}

func newAuditor(producer, consumer []*layout.Dump, opts Options) *auditor {
	a := &auditor{opts: opts, unresolved: map[string]bool{},
		res: &Result{Format: ResultFormat, Logs: []LogSummary{}, Requests: []RequestSummary{}, Findings: []Finding{}, Unresolved: []string{}, Notes: []string{}, Pairing: []string{}}}
	if a.opts.MaxFindings == 0 {
		a.opts.MaxFindings = DefaultMaxFindings
	}
	a.prod = a.newSide("producer", producer)
	a.cons = a.newSide("consumer", consumer)
	a.lease = newLeases(a)
	a.pairingOfDumps()
	return a
}

func (a *auditor) newSide(role string, dumps []*layout.Dump) *side {
	s := &side{role: role, byAgent: map[string]*rank{}}
	for i, d := range dumps {
		pp, tp := d.Rank()
		rk := &rank{side: s, idx: i, dump: d, r: layout.Rank{PP: pp, TP: tp}, reqs: map[string]*request{}, hybrid: nixl.Hybrid(d)}
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
		groupOf := func(key string) map[int][]owner {
			g, _ := strconv.Atoi(key)
			m := rk.owners[g]
			if m == nil {
				m = map[int][]owner{}
				rk.owners[g] = m
			}
			return m
		}
		for _, r := range rk.dump.Manifest.Requests {
			for key, table := range r.BlockTable {
				m := groupOf(key)
				for pos, b := range table {
					if b != layout.NoBlock {
						m[b] = append(m[b], owner{r.ID, pos})
					}
				}
			}
			for key, b := range r.StateBlock {
				m := groupOf(key)
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
	if rk.byID == nil {
		rk.byID, rk.byProducer = map[string]*layout.Request{}, map[string]*layout.Request{}
		for i := range rk.dump.Manifest.Requests {
			m := &rk.dump.Manifest.Requests[i]
			if _, dup := rk.byID[m.ID]; !dup {
				rk.byID[m.ID] = m
			}
			if _, dup := rk.byProducer[m.ProducerID]; m.ProducerID != "" && !dup {
				rk.byProducer[m.ProducerID] = m
			}
		}
	}
	m := rk.byID[id]
	if m == nil {
		m = rk.byProducer[id]
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
func (r *request) pairID() string { return r.req.PairID() }

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
	return a.readFrom(ctx, f, path)
}

// readFrom streams one log from r (path names it).
func (a *auditor) readFrom(ctx context.Context, r io.Reader, path string) error {
	lr, err := nixl.NewReader(r, path)
	if err != nil {
		return err
	}
	h := lr.Header()
	lf := &logFile{path: path, header: h, dlists: map[int]*dlist{}, live: map[int]*xfer{}}
	a.res.Logs = append(a.res.Logs, LogSummary{File: path, Agent: h.Agent, Rank: layout.Rank{PP: h.PPRank, TP: h.TPRank}})
	lf.summary = &a.res.Logs[len(a.res.Logs)-1]
	switch {
	case a.cons.byAgent[h.Agent] != nil:
		lf.side = "consumer"
		a.cons.byAgent[h.Agent].logged = true
	case a.prod.byAgent[h.Agent] != nil:
		lf.side = "producer"
	default:
		a.unresolve("log %q: agent %q names no dump of the consumer or the producer (their manifests' parallel.agent)", path, h.Agent)
	}
	lf.summary.Side = lf.side
	a.lease.header(lf)
	// A prepared list's descriptors go straight into its runs.
	var building *dlist
	lr.SetDescSink(func(op nixl.Op, d nixl.Desc) {
		switch op {
		case nixl.OpDList:
			if building == nil {
				building = &dlist{}
			}
			building.add(d)
		case nixl.OpRegister:
			if len(lf.registered) < maxNamed {
				lf.registered = append(lf.registered, d)
			}
		}
	})
	var rec nixl.Record
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
		if rec.Time.Ok {
			a.lease.timed = true
		}
		if rec.Op == nixl.OpDList {
			dl := building
			if dl == nil {
				dl = &dlist{}
			}
			building = nil
			if err := a.dlist(lf, &rec, dl); err != nil {
				return err
			}
			continue
		}
		if err := a.record(lf, &rec); err != nil {
			return err
		}
	}
	if lf.notDumped > 0 {
		a.note("log %q: %d transfer(s) of requests the consumer's dumps do not hold were not audited", path, lf.notDumped)
	}
	if lf.readbacks > 0 {
		a.note("log %q: %d transfer(s) write into the producer's agents (readbacks): not audited", path, lf.readbacks)
	}
	a.checkForeign(lf)
	a.pairingOfLog(lf)
	lf.summary = nil
	return nil
}

// dlist keeps a prepared list.
func (a *auditor) dlist(lf *logFile, rec *nixl.Record, dl *dlist) error {
	if _, dup := lf.dlists[rec.Handle]; dup {
		return &parse.Error{Format: parse.NIXLLog, File: lf.path, Line: rec.Line, Field: "handle", Msg: fmt.Sprintf("list %d is prepared twice", rec.Handle)}
	}
	a.held += len(dl.runs)
	if a.held > maxHeld {
		return &parse.Error{Format: parse.NIXLLog, File: lf.path, Line: rec.Line, Field: "descs", Msg: fmt.Sprintf("the logs' prepared lists hold more than %d runs of descriptors", maxHeld)}
	}
	dl.agent = rec.Agent
	lf.dlists[rec.Handle] = dl
	lf.summary.Lists++
	if !isLocal(rec.Agent, lf.header) {
		lf.remote(rec.Agent)
	}
	return nil
}

// remote notes a remote agent the log names.
func (lf *logFile) remote(agent string) {
	if len(lf.remotes) < maxNamed && !slices.Contains(lf.remotes, agent) {
		lf.remotes = append(lf.remotes, agent)
	}
}

// record handles one record of a log.
func (a *auditor) record(lf *logFile, rec *nixl.Record) error {
	sum := &a.res.Logs[len(a.res.Logs)-1]
	switch rec.Op {
	case nixl.OpXfer:
		sum.Xfers++
		a.lease.seen(rec.Notif, rec.Time)
		return a.xfer(lf, rec, sum)
	case nixl.OpPost:
		x := lf.live[rec.ID]
		if x == nil && !lf.ended.has(rec.ID) {
			return &parse.Error{Format: parse.NIXLLog, File: lf.path, Line: rec.Line, Field: "id", Msg: fmt.Sprintf("a post of transfer %d, which the log has not made", rec.ID)}
		}
		if x != nil && rec.Time.Ok {
			x.at = rec.Time
		}
		a.lease.seen(rec.Notif, rec.Time)
	case nixl.OpNotif, nixl.OpRemoteDone:
		a.lease.seen(rec.Msg, rec.Time)
		if rec.Op == nixl.OpNotif && !isLocal(rec.Agent, lf.header) {
			lf.remote(rec.Agent)
		}
	case nixl.OpNotifs:
		for _, n := range rec.Notifs {
			a.lease.seen(n.Msg, rec.Time)
		}
	case nixl.OpError:
		if rec.HasID {
			if x := lf.live[rec.ID]; x != nil && !x.skip {
				a.note("log %q line %d: %s raised for transfer %d: %s", lf.path, rec.Line, rec.Call, rec.ID, rec.Msg)
			}
		}
	case nixl.OpState:
		x := lf.live[rec.ID]
		if x == nil {
			if lf.ended.has(rec.ID) {
				return &parse.Error{Format: parse.NIXLLog, File: lf.path, Line: rec.Line, Field: "id", Msg: fmt.Sprintf("transfer %d already ended", rec.ID)}
			}
			return &parse.Error{Format: parse.NIXLLog, File: lf.path, Line: rec.Line, Field: "id", Msg: fmt.Sprintf("a state of transfer %d, which the log has not made", rec.ID)}
		}
		if x.state != "" {
			return &parse.Error{Format: parse.NIXLLog, File: lf.path, Line: rec.Line, Field: "id", Msg: fmt.Sprintf("transfer %d already ended in %s", rec.ID, x.state)}
		}
		x.state = rec.State
		if rec.State == nixl.Done {
			sum.Done++
		} else {
			sum.Failed++
		}
		if x.skip {
			// Not audited: only its id is kept, to refuse it made again.
			delete(lf.live, rec.ID)
			lf.ended.add(rec.ID)
		}
	}
	return nil
}

// isLocal says whether a dlist's agent names the log's own memory.
func isLocal(agent string, h nixl.Header) bool {
	return agent == "" || agent == nixl.LocalAgent
}

// xfer resolves a transfer's descriptor pairs and checks each.
func (a *auditor) xfer(lf *logFile, rec *nixl.Record, sum *LogSummary) error {
	if prev := lf.live[rec.ID]; prev != nil {
		return &parse.Error{Format: parse.NIXLLog, File: lf.path, Line: rec.Line, Field: "id", Msg: fmt.Sprintf("transfer %d is made twice (first on line %d)", rec.ID, prev.line)}
	}
	if lf.ended.has(rec.ID) {
		return &parse.Error{Format: parse.NIXLLog, File: lf.path, Line: rec.Line, Field: "id", Msg: fmt.Sprintf("transfer %d is made twice (it already ended)", rec.ID)}
	}
	if !rec.Prepped {
		lf.remote(rec.RemoteAgent)
	}
	x := &xfer{log: lf, id: rec.ID, line: rec.Line, kind: rec.Kind, at: rec.Time}
	lf.live[rec.ID] = x
	a.xfers = append(a.xfers, x)
	err := a.resolveXfer(lf, rec, sum, x)
	if x.skip && a.xfers[len(a.xfers)-1] == x {
		// Not audited: nothing of it is kept but its id.
		a.xfers = a.xfers[:len(a.xfers)-1]
	}
	return err
}

// resolveXfer resolves a transfer's pairs and checks each.
func (a *auditor) resolveXfer(lf *logFile, rec *nixl.Record, sum *LogSummary, x *xfer) error {
	if a.checkForeign(lf); lf.foreign {
		x.skip = true
		return nil
	}
	ps, err := a.descriptors(lf, rec)
	if err != nil {
		return err
	}
	if ps == nil {
		x.skip = true
		return nil
	}
	sum.Pairs += min(ps.nl, ps.nr)
	dstAgent, srcAgent := lf.header.Agent, ps.remoteAgent
	if rec.Kind == nixl.Write {
		dstAgent, srcAgent = ps.remoteAgent, lf.header.Agent
	}
	x.dst, x.src = a.cons.byAgent[dstAgent], a.prod.byAgent[srcAgent]
	switch {
	case x.dst == nil && a.prod.byAgent[dstAgent] != nil:
		lf.readbacks++
		if a.cons.byAgent[srcAgent] != nil {
			a.swapped++
		}
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
	if rec.Kind == nixl.Write {
		x.dst.logged = true
	}
	if x.dst.addressMap(a) == nil || x.src.addressMap(a) == nil {
		x.skip = true
		return nil
	}
	if rec.HasRequest {
		if x.req = x.dst.request(rec.Request); x.req == nil {
			// The dumps hold a sample of the requests (a capture
			// connector's): a transfer of another is not audited.
			lf.notDumped++
			x.skip = true
			return nil
		}
	}
	if ps.nl != ps.nr {
		a.add(x, Finding{Invariant: Aligned, Descriptor: -1, Position: -1, Block: -1, Group: -1,
			Message: fmt.Sprintf("transfer %d pairs %d local descriptors with %d remote", x.id, ps.nl, ps.nr)})
	}
	for i := range min(ps.nl, ps.nr) {
		l, r := ps.local(i), ps.remote(i)
		d, s := l, r
		if rec.Kind == nixl.Write {
			d, s = r, l
		}
		if !a.pair(x, i, d, s) {
			x.skip = true
			return nil
		}
	}
	x.pairs = min(ps.nl, ps.nr)
	if x.req != nil {
		x.req.xfers = append(x.req.xfers, x)
	}
	return nil
}

// pairs are a transfer's descriptors: by index into its prepared lists,
// or as the record gives them.
type pairs struct {
	nl, nr        int
	local, remote func(i int) nixl.Desc
	remoteAgent   string
}

// descriptors returns a transfer's descriptors and the remote agent; nil
// for a transfer that cannot be resolved. Indices past a list are bad
// input.
func (a *auditor) descriptors(lf *logFile, rec *nixl.Record) (*pairs, error) {
	if !rec.Prepped {
		ld, rd := rec.LocalDescs, rec.RemoteDescs
		return &pairs{nl: len(ld), nr: len(rd), local: func(i int) nixl.Desc { return ld[i] }, remote: func(i int) nixl.Desc { return rd[i] }, remoteAgent: rec.RemoteAgent}, nil
	}
	list := func(field string, handle int, ids []int) (*dlist, error) {
		dl := lf.dlists[handle]
		if handle == 0 || dl == nil {
			a.unresolve("log %q line %d: transfer %d names a prepared list the log does not hold (%s %d: prepared before the recorder was installed?)", lf.path, rec.Line, rec.ID, field, handle)
			return nil, nil
		}
		for i, id := range ids {
			if id >= dl.n {
				return nil, &parse.Error{Format: parse.NIXLLog, File: lf.path, Line: rec.Line, Field: fmt.Sprintf("%s_ids[%d]", field, i), Msg: fmt.Sprintf("index %d past the %d descriptors of list %d", id, dl.n, handle)}
			}
		}
		return dl, nil
	}
	ldl, err := list("local", rec.Local, rec.LocalIDs)
	if err != nil || ldl == nil {
		return nil, err
	}
	rdl, err := list("remote", rec.Remote, rec.RemoteIDs)
	if err != nil || rdl == nil {
		return nil, err
	}
	if !isLocal(ldl.agent, lf.header) && ldl.agent != lf.header.Agent {
		a.unresolve("log %q line %d: transfer %d's local list %d was prepared for agent %q", lf.path, rec.Line, rec.ID, rec.Local, ldl.agent)
		return nil, nil
	}
	if isLocal(rdl.agent, lf.header) {
		a.unresolve("log %q line %d: transfer %d's remote list %d was prepared for the local agent", lf.path, rec.Line, rec.ID, rec.Remote)
		return nil, nil
	}
	lids, rids := rec.LocalIDs, rec.RemoteIDs
	return &pairs{nl: len(lids), nr: len(rids), remoteAgent: rdl.agent,
		local: func(i int) nixl.Desc { return ldl.at(lids[i]) }, remote: func(i int) nixl.Desc { return rdl.at(rids[i]) }}, nil
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
	a.keep(f)
}

// keep records a finding, or counts it dropped past MaxFindings.
func (a *auditor) keep(f Finding) {
	if a.opts.MaxFindings > 0 && len(a.res.Findings) >= a.opts.MaxFindings {
		a.dropped++
		return
	}
	if a.counts == nil {
		a.counts = map[reqKey]int{}
	}
	a.counts[reqKey{f.Rank, f.Request}]++
	a.res.Findings = append(a.res.Findings, f)
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
