package transfer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kvaudit/kvaudit/internal/addrmap"
	"github.com/kvaudit/kvaudit/internal/nixl"
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
	// Progress, when set, is told the bytes of the logs as they are read
	// (they add up to the logs' sizes once every log is read).
	Progress func(n int64)
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
	dcells  []addrmap.Cells
	scells  []addrmap.Cells
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
	am    *addrmap.Map
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
	// summary is the log's entry of Result.Logs while it is read.
	summary *LogSummary
	side    string
	// live indexes the log's transfers by id: those still without a
	// state, and those audited; ended holds the ids of the others, whose
	// state was read (runs of ids: a recorder numbers them in order).
	live  map[int]*xfer
	ended idSet
	// remotes are the remote agents the log's lists and transfers name
	// (at most maxNamed). registered counts the ranges the log registered,
	// every one of them; regInCaches says whether one lies in a cache of
	// the dump its agent names, or, naming none, of any dump (register).
	remotes     []string
	registered  int
	regInCaches bool
	// foreign: the log's registered memory lies in no cache of the dump
	// its agent names (a log of another run): its transfers are not
	// audited. outside counts its pairs whose both sides lie outside
	// every cache, pairs all its pairs.
	foreign, checked bool
	outside, pairs   int
	readbacks        int
}

// maxNamed bounds the remote agents a log's summary keeps for the pairing
// notes.
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
