package checksum

import (
	"slices"

	"github.com/kvaudit/kvaudit/layout"
)

// Verdict is the outcome of comparing a consumer with its producer (docs/spec.md
// §9).
type Verdict string

// Verdicts. LeftOut applies to groups only.
const (
	Verified   Verdict = "verified"
	Mismatch   Verdict = "mismatch"
	Unverified Verdict = "unverified"
	LeftOut    Verdict = "left out"
)

// PositionState is what the comparison made of one consumer block
// position, for the block map.
type PositionState byte

// Position states.
const (
	// PosNotLoaded: before the consumer's checksummed run (its local
	// prefix hit, or blocks out of a sliding window).
	PosNotLoaded PositionState = iota
	// PosNotCompared: checksummed by the consumer but not compared (the
	// producer did not cover it, the token counts differ, or the group is
	// not comparable).
	PosNotCompared
	// PosVerified: compared equal in every check.
	PosVerified
	// PosMismatch: differs in some check.
	PosMismatch
)

// DiffResult is the verdict of every consumer request.
type DiffResult struct {
	// Verdict is mismatch if any request mismatches, else unverified if
	// any request is unverified (or there is no request), else verified.
	Verdict  Verdict
	Requests []*RequestVerdict
}

// RequestVerdict is the verdict of one load (a consumer request).
type RequestVerdict struct {
	// ID is the consumer's request id; ProducerID the producer request it
	// was compared with (the consumer's producer_id, else its id).
	ID, ProducerID string
	Verdict        Verdict
	// Reasons are load-level unverified reasons (ReasonNoChecksums,
	// ReasonInvalidChecksums, ReasonNotEveryWorker, ReasonNoLoadedGroup).
	// A load with any reason but ReasonNoLoadedGroup has no groups
	// compared.
	Reasons []string
	Groups  []*GroupVerdict
	// Details localise mismatches to layers, heads and tokens; filled by
	// the drill-down (package drill) when both sides are dumps.
	Details []Detail
	// Notes say what the drill-down left out (caps, unreadable data).
	Notes []string
}

// GroupVerdict is the verdict of one KV cache group of a load.
type GroupVerdict struct {
	ID int
	// Kind is the consumer's group kind (the producer's when only it has
	// the group).
	Kind    string
	Verdict Verdict
	// Reason is the fixed unverified or left-out reason, "" otherwise.
	Reason string
	// Positions are the consumer block positions that differ, ascending.
	Positions []int
	// Checks are the consumer checks (replica copies, docs/spec.md §2)
	// that differ from the producer's check 0, ascending.
	Checks []int
	// BlockSize and ProducerBlockSize are the two sides' block sizes (0
	// when a side does not have the group or does not say).
	BlockSize, ProducerBlockSize int
	// Map holds the state of each consumer block position from 0 to the
	// end of the consumer's checksummed run (empty when the consumer does
	// not checksum the group).
	Map []PositionState
}

// Detail is one (group, consumer block position, layer, global head,
// replica) whose cells differ from the producer's, from the drill-down.
type Detail struct {
	Group    int
	Position int
	// Layer is the layer number; LayerName the consumer's cache name.
	Layer     int
	LayerName string
	Head      int
	// Replica is the consumer copy (replica index) that differs.
	Replica int
	// FirstToken and LastToken are the request token positions of the
	// first and last differing cells.
	FirstToken, LastToken int
	// Bytes and Bits count the differing bytes and bits.
	Bytes, Bits int
	// Hint says what the difference looks like: "1 bit flipped",
	// "zeroed", "heads 1<->2 swapped", "holds the block of position 3",
	// "holds KV of request req-4", "random bytes", ...
	Hint string
	// State is set for a state group (docs/spec.md §6): Head and LastHead
	// are then the first and last differing global rows, StateIndex the
	// state (in the layer's states) they belong to, and there are no
	// tokens. For attention LastHead equals Head.
	State      bool
	StateIndex int
	LastHead   int
}

// Diff compares each consumer request with its producer request (the
// consumer's ProducerID, else its ID) as docs/spec.md §9 says. Every check
// of the consumer is compared with the producer's check 0; positions are
// compared where both sides checksummed them and hold the same number of
// tokens, in chunks of the larger block size when the sizes differ.
// Fingerprints are compared in the producer's form (FingerprintFlat for
// checks with FlatOnly, else Fingerprint). A nil producer sent no
// checksums. Diff never fails: whatever cannot be compared is unverified,
// with a fixed reason.
func Diff(producer, consumer *Checks) *DiffResult {
	res := &DiffResult{}
	for _, cr := range consumer.Requests {
		res.Requests = append(res.Requests, diffRequest(producer, consumer, cr))
	}
	res.Verdict = combine(len(res.Requests) == 0, func(yield func(Verdict) bool) {
		for _, r := range res.Requests {
			if !yield(r.Verdict) {
				return
			}
		}
	})
	return res
}

// combine folds verdicts: mismatch wins, then unverified; left-out
// verdicts do not count. none makes an empty fold unverified.
func combine(none bool, verdicts func(func(Verdict) bool)) Verdict {
	v := Verified
	if none {
		v = Unverified
	}
	for x := range verdicts {
		switch x {
		case Mismatch:
			return Mismatch
		case Unverified:
			v = Unverified
		}
	}
	return v
}

// PairID returns the producer request id a consumer request pairs with.
func (r *RequestChecks) PairID() string {
	if r.ProducerID != "" {
		return r.ProducerID
	}
	return r.ID
}

func addReason(reasons []string, r string) []string {
	if slices.Contains(reasons, r) {
		return reasons
	}
	return append(reasons, r)
}

func diffRequest(producer, consumer *Checks, cr *RequestChecks) *RequestVerdict {
	rv := &RequestVerdict{ID: cr.ID, ProducerID: cr.PairID(), Reasons: []string{}}
	var pr *RequestChecks
	if producer != nil {
		for _, r := range producer.Requests {
			if r.ID == rv.ProducerID {
				pr = r
				break
			}
		}
	}
	if pr == nil {
		rv.Reasons = addReason(rv.Reasons, ReasonNoChecksums)
	} else {
		for _, r := range pr.Unverified {
			rv.Reasons = addReason(rv.Reasons, r)
		}
	}
	for _, r := range cr.Unverified {
		rv.Reasons = addReason(rv.Reasons, r)
	}
	if len(rv.Reasons) > 0 {
		// Partial sums or no reference: nothing can be compared.
		rv.Verdict = Unverified
		return rv
	}
	// Every group either side mentions for this load.
	var ids []int
	seen := map[int]bool{}
	note := func(id int) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, g := range pr.Groups {
		note(g.ID)
	}
	for _, g := range cr.Groups {
		note(g.ID)
	}
	for id := range producer.Skipped {
		note(id)
	}
	for id := range consumer.Skipped {
		note(id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		rv.Groups = append(rv.Groups, diffGroup(pr, cr, pr.Group(id), cr.Group(id), id, consumer))
	}
	// Nothing to verify the load by: the consumer checksummed no group,
	// or every group is left out (a pure state model without a TP split
	// across TP sizes, or groups skipped on both sides).
	if len(cr.Groups) == 0 || !slices.ContainsFunc(rv.Groups, func(g *GroupVerdict) bool { return g.Verdict != LeftOut }) {
		rv.Reasons = addReason(rv.Reasons, ReasonNoLoadedGroup)
	}
	rv.Verdict = combine(false, func(yield func(Verdict) bool) {
		if len(rv.Reasons) > 0 && !yield(Unverified) {
			return
		}
		for _, g := range rv.Groups {
			if !yield(g.Verdict) {
				return
			}
		}
	})
	return rv
}

// diffGroup compares one group of a load; pg or cg is nil where a side
// does not checksum it.
func diffGroup(pr, cr *RequestChecks, pg, cg *GroupChecks, id int, consumer *Checks) *GroupVerdict {
	gv := &GroupVerdict{ID: id, Positions: []int{}, Checks: []int{}}
	if cg != nil {
		gv.Kind, gv.BlockSize = cg.Kind, cg.BlockSize
		gv.Map = make([]PositionState, cg.Start+cg.Positions())
		for i := cg.Start; i < len(gv.Map); i++ {
			gv.Map[i] = PosNotCompared
		}
	} else if pg != nil {
		gv.Kind = pg.Kind
	}
	if gv.Kind == "" {
		for _, gi := range consumer.Groups {
			if gi.ID == id {
				gv.Kind = gi.Kind
			}
		}
	}
	if pg != nil {
		gv.ProducerBlockSize = pg.BlockSize
	}
	unverified := func(reason string) *GroupVerdict {
		gv.Verdict, gv.Reason = Unverified, reason
		return gv
	}
	switch {
	case pg == nil && cg == nil:
		gv.Verdict, gv.Reason = LeftOut, LeftOutSkipped
		return gv
	case pg == nil || cg == nil:
		return unverified(ReasonOneSide)
	}
	if (pg.SplitLess || cg.SplitLess) && pr.TPSize != 0 && cr.TPSize != 0 && pr.TPSize != cr.TPSize {
		gv.Verdict, gv.Reason = LeftOut, LeftOutSplitLess
		return gv
	}
	if pg.FlatOnly {
		if !cg.HasFlat || cg.FingerprintFlat != pg.FingerprintFlat {
			return unverified(ReasonFingerprint)
		}
	} else if cg.Fingerprint != pg.Fingerprint {
		return unverified(ReasonFingerprint)
	}
	if pg.MissingReplica || cg.MissingReplica || len(pg.Checks) == 0 || len(cg.Checks) == 0 {
		return unverified(ReasonMissingReplica)
	}
	if gv.Kind == layout.KindMamba || pg.Kind == layout.KindMamba {
		// A state group: its running state at position 0, no token count.
		if pg.Start != 0 || pg.Positions() == 0 || cg.Start != 0 || cg.Positions() == 0 {
			return unverified(ReasonNoBlockInCommon)
		}
		gv.record([]int{0}, pg.Checks[0][0], func(k int) uint64 { return cg.Checks[k][0] }, len(cg.Checks))
		return gv.finish("")
	}
	ps, cs := pg.BlockSize, cg.BlockSize
	if pg.FlatOnly || ps == 0 {
		ps = cs // a flat payload: the fingerprint vouches for the block size
	}
	if ps <= 0 || cs <= 0 || (ps%cs != 0 && cs%ps != 0) {
		return unverified(ReasonBlockSizes)
	}
	L := max(ps, cs)
	pside := side{g: pg, S: ps, tokens: pr.NumTokens, r: L / ps}
	cside := side{g: cg, S: cs, tokens: cr.NumTokens, r: L / cs}
	// The consumer's loaded run starts inside a producer block: its first
	// chunk cannot be compared, so the group cannot be verified.
	inside := cs < L && cg.Start == cr.NumLocalComputedTokens/cs && (cg.Start*cs)%L != 0
	lo := max(pside.firstUnit(), cside.firstUnit())
	hi := min(pside.endUnit(), cside.endUnit())
	pv := make([]uint64, 1)
	cv := make([]uint64, len(cg.Checks))
	for u := lo; u < hi; u++ {
		pt, ok := pside.chunk(u, pv)
		if !ok || pt == 0 {
			continue
		}
		ct, ok := cside.chunk(u, cv)
		if !ok || ct != pt {
			continue
		}
		gv.record(cside.positions(u), pv[0], func(k int) uint64 { return cv[k] }, len(cv))
	}
	reason := ""
	if inside {
		reason = ReasonInsideProducerBlock
	}
	return gv.finish(reason)
}

// record marks the consumer positions of one compared unit.
func (gv *GroupVerdict) record(positions []int, want uint64, got func(k int) uint64, checks int) {
	state := PosVerified
	for k := range checks {
		if got(k) != want {
			state = PosMismatch
			if !slices.Contains(gv.Checks, k) {
				gv.Checks = append(gv.Checks, k)
			}
		}
	}
	for _, p := range positions {
		if p < len(gv.Map) {
			gv.Map[p] = state
		}
		if state == PosMismatch {
			gv.Positions = append(gv.Positions, p)
		}
	}
}

// finish sets the group's verdict from what was compared: mismatch if
// anything differs, else unverified with reason (when given) or because
// nothing was in common, else verified.
func (gv *GroupVerdict) finish(reason string) *GroupVerdict {
	slices.Sort(gv.Checks)
	slices.Sort(gv.Positions)
	gv.Positions = slices.Compact(gv.Positions)
	compared := slices.ContainsFunc(gv.Map, func(s PositionState) bool { return s == PosVerified || s == PosMismatch })
	switch {
	case len(gv.Positions) > 0:
		gv.Verdict = Mismatch
	case reason != "":
		gv.Verdict, gv.Reason = Unverified, reason
	case !compared:
		gv.Verdict, gv.Reason = Unverified, ReasonNoBlockInCommon
	default:
		gv.Verdict = Verified
	}
	return gv
}

// side is one side's checks of a group seen in units of the larger block
// size L = r*S.
type side struct {
	g      *GroupChecks
	S      int // this side's block size
	tokens int // the request's num_tokens on this side
	r      int // this side's blocks per unit
}

// firstUnit and endUnit bound the units the side's positions touch.
func (s side) firstUnit() int { return s.g.Start / s.r }
func (s side) endUnit() int   { return (s.g.Start + s.g.Positions() + s.r - 1) / s.r }

// chunk sums, into out[k], check k over the side's positions of unit u and
// returns the tokens the unit holds. ok is false unless the side covers
// the unit whole: every position of it that holds a token is checksummed
// (positions past the last token count as zero).
func (s side) chunk(u int, out []uint64) (tokens int, ok bool) {
	clear(out)
	end := s.g.Start + s.g.Positions()
	for q := u * s.r; q < (u+1)*s.r; q++ {
		n := layout.ValidTokens(s.tokens, q, s.S)
		if n == 0 {
			continue
		}
		if q < s.g.Start || q >= end {
			return 0, false
		}
		tokens += n
		for k := range out {
			out[k] += s.g.Checks[k][q-s.g.Start]
		}
	}
	return tokens, true
}

// positions returns the side's checksummed positions of unit u.
func (s side) positions(u int) []int {
	var ps []int
	end := s.g.Start + s.g.Positions()
	for q := max(u*s.r, s.g.Start); q < min((u+1)*s.r, end); q++ {
		ps = append(ps, q)
	}
	return ps
}
