package transfer

// This file is the lease audit (docs/spec.md §13): a READ posted after
// the producer's lease on its request's blocks lapsed is a finding, even
// when the blocks still hold the request's KV.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvaudit/kvaudit/internal/nixl"
)

// leases is the lease audit's state: when records name each producer
// request the consumer's dumps pair with.
type leases struct {
	a     *auditor
	timed bool
	want  map[string]bool
	// engine maps an engine_request_id of the producer's dumps to the
	// request's id.
	engine map[string]string
	// events are the timed records naming a request (by producer id):
	// any record (the lease has started by then), and heartbeats.
	events map[string][]leaseEvent
	// lease_s of the producer's logs and of the others, and the log
	// that gave each.
	prodLease, consLease int
	prodFrom, consFrom   string
}

type leaseEvent struct {
	wall int64
	hb   bool
	x    *xfer // a READ posted at wall
}

func newLeases(a *auditor) *leases {
	l := &leases{a: a, want: map[string]bool{}, engine: map[string]string{}, events: map[string][]leaseEvent{}}
	for _, rk := range a.cons.ranks {
		for i := range rk.dump.Manifest.Requests {
			r := &rk.dump.Manifest.Requests[i]
			l.want[r.PairID()] = true
		}
	}
	for _, rk := range a.prod.ranks {
		for i := range rk.dump.Manifest.Requests {
			if r := &rk.dump.Manifest.Requests[i]; r.EngineRequestID != "" && l.want[r.ID] {
				l.engine[r.EngineRequestID] = r.ID
			}
		}
	}
	return l
}

// key is the producer request (as the dumps name it) an id in a message
// names: the id, the engine's id of a dumped request
// (engine_request_id), or vLLM's id with its random "-xxxxxxxx" suffix
// (8 lower-case hex digits, which the recorder keeps in messages and the
// dumps strip); "" when it names none of the dumps' requests.
func (l *leases) key(id string) string {
	if l.want[id] {
		return id
	}
	if k, ok := l.engine[id]; ok {
		return k
	}
	if i := len(id) - 9; i > 0 && id[i] == '-' && strings.Trim(id[i+1:], "0123456789abcdef") == "" && l.want[id[:i]] {
		return id[:i]
	}
	return ""
}

// header takes a log's lease_s.
func (l *leases) header(lf *logFile) {
	h := lf.header
	if h.Time.Ok {
		l.timed = true
	}
	if !h.HasLease {
		return
	}
	if lf.side == "producer" && l.prodFrom == "" {
		l.prodLease, l.prodFrom = h.LeaseS, lf.path
	} else if lf.side != "producer" && l.consFrom == "" {
		l.consLease, l.consFrom = h.LeaseS, lf.path
	}
}

// seen takes a timed record's message: "REQ:N" (a read notification, a
// transfer's notif) or "HB:REQ,REQ,..." (vLLM's heartbeat, which extends
// the lease).
func (l *leases) seen(msg string, t nixl.Stamp) {
	if !t.Ok || msg == "" {
		return
	}
	if ids, ok := strings.CutPrefix(msg, "HB:"); ok {
		for id := range strings.SplitSeq(ids, ",") {
			if k := l.key(id); k != "" {
				l.events[k] = append(l.events[k], leaseEvent{wall: t.Wall, hb: true})
			}
		}
		return
	}
	if i := strings.LastIndexByte(msg, ':'); i > 0 {
		if k := l.key(msg[:i]); k != "" {
			l.events[k] = append(l.events[k], leaseEvent{wall: t.Wall})
		}
	}
}

// wallTime formats a t_wall_ns for a message.
func wallTime(ns int64) string {
	return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// audit checks every audited READ against its request's lease.
func (l *leases) audit() {
	a := l.a
	L, from := a.opts.LeaseS, "--lease"
	switch {
	case L > 0:
	case l.prodFrom != "":
		L, from = l.prodLease, fmt.Sprintf("lease_s of the producer's log %q", l.prodFrom)
	case l.consFrom != "":
		L, from = l.consLease, fmt.Sprintf("lease_s of log %q", l.consFrom)
	}
	reads := map[string][]leaseEvent{}
	n := 0
	for _, x := range a.xfers {
		if x.skip || x.req == nil || x.kind != nixl.Read || !x.at.Ok {
			continue
		}
		reads[x.prodReq] = append(reads[x.prodReq], leaseEvent{wall: x.at.Wall, x: x})
		n++
	}
	switch {
	case !l.timed:
		a.note("the lease was not audited: the logs carry no timestamps (t_mono_ns, t_wall_ns)")
		return
	case L <= 0:
		a.note("the lease was not audited: no log's header gives lease_s, and no --lease was given")
		return
	case n == 0:
		a.note("the lease was not audited: no audited READ has a timestamp")
		return
	}
	lease, ext := int64(L)*1e9, int64(L*2/3)*1e9
	ids := make([]string, 0, len(reads))
	for id := range reads {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	late := 0
	for _, id := range ids {
		ev := append(slices.Clone(l.events[id]), reads[id]...)
		// In time order; at one time, what the producer saw before the READ.
		slices.SortStableFunc(ev, func(p, q leaseEvent) int {
			return cmp.Or(cmp.Compare(p.wall, q.wall), cmp.Compare(boolInt(p.x != nil), boolInt(q.x != nil)))
		})
		start := ev[0].wall
		expiry, hb := start+lease, int64(-1)
		for _, e := range ev {
			switch {
			case e.hb && e.wall <= expiry:
				expiry, hb = max(expiry, e.wall+ext), e.wall
			case e.x != nil && e.wall > expiry:
				late++
				x := e.x
				x.late = true
				f := Finding{Invariant: Lease, Descriptor: -1, Group: -1, Position: -1, Block: -1, Heads: [2]int{-1, -1}, Tokens: [2]int{-1, -1}}
				last := ""
				if hb >= 0 {
					last = fmt.Sprintf(", extended by a heartbeat at %s", wallTime(hb))
				}
				f.Message = fmt.Sprintf("transfer %d (a READ of request %s) was posted at %s, %.3f s after the producer's lease on request %s lapsed (%d s from %s, the first record naming it%s; lease from %s): the producer may have released and reused its blocks, even if they still hold the request's KV",
					x.id, x.req.req.ID, wallTime(e.wall), float64(e.wall-expiry)/1e9, id, L, wallTime(start), last, from)
				a.add(x, f)
			}
		}
	}
	if late > 0 {
		a.note("lease: %d of %d READ(s) posted after the lease lapsed (%d s, %s); the lease starts at the first record naming the request, heartbeats extend it by %d s (vLLM 9aaf83ef5), and the wall clocks of different hosts are compared as they are",
			late, n, L, from, L*2/3)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
