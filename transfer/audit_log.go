package transfer

// This file reads an audit's logs: a record at a time, each prepared list
// kept as runs of descriptors, each transfer resolved to its descriptor
// pairs, which pair.go checks.

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
)

// readLog streams one log.
func (a *auditor) readLog(ctx context.Context, path string) error {
	f, _, err := mapped.OpenRegular(nil, path, path)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	if a.opts.Progress != nil {
		r = &countingReader{r: f, progress: a.opts.Progress}
	}
	return a.readFrom(ctx, r, path)
}

// countingReader tells progress the bytes read through it.
type countingReader struct {
	r        io.Reader
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.progress(int64(n))
	}
	return n, err
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
			a.register(lf, d)
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
	sum := lf.summary
	switch rec.Op {
	case nixl.OpXfer:
		sum.Xfers++
		a.lease.seen(rec.Notif, rec.Time)
		return a.xfer(lf, rec)
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
func (a *auditor) xfer(lf *logFile, rec *nixl.Record) error {
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
	err := a.resolveXfer(lf, rec, x)
	if x.skip && a.xfers[len(a.xfers)-1] == x {
		// Not audited: nothing of it is kept but its id.
		a.xfers = a.xfers[:len(a.xfers)-1]
	}
	return err
}

// resolveXfer resolves a transfer's pairs and checks each.
func (a *auditor) resolveXfer(lf *logFile, rec *nixl.Record, x *xfer) error {
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
	lf.summary.Pairs += min(ps.nl, ps.nr)
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
	for i := range min(ps.nl, ps.nr) {
		l, r := ps.local(i), ps.remote(i)
		d, s := l, r
		if rec.Kind == nixl.Write {
			d, s = r, l
		}
		// pair refuses only the first pair (x.req is known from then
		// on, and wanted reads nothing else), so a transfer skipped here
		// has recorded no delivery, flag or finding.
		if !a.pair(x, i, d, s) {
			x.skip = true
			return nil
		}
	}
	// After the pairs: a transfer of a request not audited (one the
	// dumps do not hold, or not among Options.Requests) is no finding.
	if ps.nl != ps.nr {
		a.add(x, Finding{Invariant: Aligned, Descriptor: -1, Position: -1, Block: -1, Group: -1,
			Message: fmt.Sprintf("transfer %d pairs %d local descriptors with %d remote", x.id, ps.nl, ps.nr)})
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
