package transfer

// This file says what about the logs and dumps given looks like a mistake
// rather than a transfer fault: one dump given as both sides, the sides
// swapped, logs that belong to neither dump (Result.Pairing).

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kvaudit/kvaudit/internal/nixl"
	"github.com/kvaudit/kvaudit/layout"
)

// pairing notes a pairing problem (once per text).
func (a *auditor) pairing(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	for _, p := range a.res.Pairing {
		if p == msg {
			return
		}
	}
	a.res.Pairing = append(a.res.Pairing, msg)
}

// pairingOfDumps notes a dump given as both sides, or two dumps of the
// two sides that name one agent.
func (a *auditor) pairingOfDumps() {
	abs := func(p string) string {
		if q, err := filepath.Abs(p); err == nil {
			return filepath.Clean(q)
		}
		return filepath.Clean(p)
	}
	for _, pr := range a.prod.ranks {
		for _, cr := range a.cons.ranks {
			switch {
			case abs(pr.dump.Path) == abs(cr.dump.Path):
				a.pairing("one dump given twice: %q is both the producer's and the consumer's", cr.dump.Path)
			case pr.agent != "" && pr.agent == cr.agent:
				a.pairing("the producer's dump %q and the consumer's %q name one agent %q: one dump given twice?", pr.dump.Path, cr.dump.Path, pr.agent)
			}
		}
	}
}

// inCaches says whether any byte of d lies in a cache of a dump of the
// ranks (the dumps whose address map can be read).
func (a *auditor) inCaches(d nixl.Desc, ranks []*rank) bool {
	for _, rk := range ranks {
		am := rk.addressMap(a)
		if am == nil {
			continue
		}
		// The caches by start address do not overlap: the first ending
		// past d's start is the only one d can reach first.
		i := sort.Search(len(am.Regions), func(i int) bool { return am.Regions[i].End > d.Addr })
		if i < len(am.Regions) && am.Regions[i].Start < d.Addr+d.Len {
			return true
		}
	}
	return false
}

// register counts a range the log registered and decides, as it comes,
// what checkForeign and pairingOfLog ask of all of them: whether one lies
// in a cache of the dump the log's agent names (of any dump, for a log
// whose agent names none). A worker registers a range per layer (and per
// K/V), and other buffers before them: every range counts, and none is
// kept.
func (a *auditor) register(lf *logFile, d nixl.Desc) {
	lf.registered++
	if lf.regInCaches {
		return
	}
	switch lf.side {
	case "consumer":
		lf.regInCaches = a.inCaches(d, []*rank{a.cons.byAgent[lf.header.Agent]})
	case "producer":
		lf.regInCaches = a.inCaches(d, []*rank{a.prod.byAgent[lf.header.Agent]})
	default:
		lf.regInCaches = a.inCaches(d, a.prod.ranks) || a.inCaches(d, a.cons.ranks)
	}
}

// checkForeign decides, once the log has registered memory, whether it
// was recorded by another run: its agent names a dump, but none of the
// memory it registered lies in that dump's caches. Its transfers are then
// not audited (they would be findings on bytes outside every cache).
func (a *auditor) checkForeign(lf *logFile) {
	if lf.checked || lf.side == "" || lf.registered == 0 {
		return
	}
	lf.checked = true
	rk := a.cons.byAgent[lf.header.Agent]
	if lf.side == "producer" {
		rk = a.prod.byAgent[lf.header.Agent]
	}
	if rk.addressMap(a) == nil {
		return
	}
	if lf.regInCaches {
		return
	}
	lf.foreign = true
	if lf.side == "consumer" {
		rk.logged = false
		for _, other := range a.res.Logs {
			if other.File != lf.path && other.Agent == lf.header.Agent {
				rk.logged = true
			}
		}
	}
	a.pairing("log %q: its agent %q names the %s's dump %q, but none of the %d memory range(s) it registered lies in that dump's caches: the log was recorded by another run, and its transfers were not audited",
		lf.path, lf.header.Agent, lf.side, rk.dump.Path, lf.registered)
	a.unresolve("log %q belongs to another run than the dumps (its registered memory lies in none of their caches)", lf.path)
}

// pairingOfLog notes, after a log, a log that matches neither dump and a
// log none of whose descriptors lies in a cache.
func (a *auditor) pairingOfLog(lf *logFile) {
	if lf.side == "" {
		known := false
		for _, ag := range lf.remotes {
			if a.prod.byAgent[ag] != nil || a.cons.byAgent[ag] != nil {
				known = true
			}
		}
		inDump := lf.regInCaches
		names := fmt.Sprintf("agent %q", lf.header.Agent)
		if len(lf.remotes) > 0 {
			names += fmt.Sprintf(", remote agents %s", quoteList(lf.remotes))
		}
		switch {
		case !known && !inDump:
			regs := "it registered no memory"
			if lf.registered > 0 {
				regs = fmt.Sprintf("none of the %d memory range(s) it registered lies in a dump's caches", lf.registered)
			}
			a.pairing("log %q (%s) matches neither dump: no dump names its agents, and %s: the logs and the dumps do not belong together", lf.path, names, regs)
		case inDump:
			a.pairing("log %q: no dump names its agent %q, but memory it registered lies in the dumps' caches (renamed agents? the manifests' parallel.agent)", lf.path, lf.header.Agent)
		}
	}
	if lf.pairs > 0 && lf.outside == lf.pairs {
		a.pairing("log %q: none of its %d descriptor pair(s) lies in a cache of the dumps (every byte outside both sides' caches): the log and the dumps do not belong together", lf.path, lf.pairs)
	}
}

// pairingOfAudit notes, after every log, sides that look swapped.
func (a *auditor) pairingOfAudit(audited int) {
	if a.swapped > 0 && audited == 0 {
		a.pairing("--producer and --consumer look swapped: %d transfer(s) read the consumer's dumps' agents into the producer's, and none reads the producer's into the consumer's", a.swapped)
	}
	if audited == 0 && len(a.res.Logs) > 0 {
		prodLogs := 0
		for _, l := range a.res.Logs {
			if l.Side == "producer" {
				prodLogs++
			}
		}
		if prodLogs == len(a.res.Logs) && a.swapped == 0 {
			a.pairing("every log is a producer's (%d), and none of their transfers writes into the consumer's dumps: a pull is audited from the consumer's logs (or --producer and --consumer are swapped)", prodLogs)
		}
	}
}

func quoteList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// rankName names a rank of a side for a note: its rank, agent and dump.
func (rk *rank) name() string {
	return fmt.Sprintf("rank %s (agent %q, dump %q)", rk.r, rk.agent, rk.dump.Path)
}

var _ = layout.NoBlock
