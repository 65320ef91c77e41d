package verify

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify/drill"
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
	Details []drill.Detail
	// Notes say what the drill-down left out (caps, unreadable data) and
	// what decoding the producer's payload let pass (docs/spec.md §8).
	Notes []string
	// Hints say, for a user, what likely caused an unverified reason
	// (fixed reasons stay vLLM's; hints name the cause).
	Hints []string
	// Numbering is the numbering the compared values use: "block" against
	// a flat payload (vLLM's published form), else "request" (docs/spec.md §1).
	Numbering string
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
	// Hint names the likely cause of Reason for a user, "" when none.
	Hint string
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
	return DiffWith(producer, consumer, DiffOptions{})
}

// DiffOptions change how Diff judges.
type DiffOptions struct {
	// Strict makes a group unverified (ReasonNotCovered) when any loaded
	// consumer position was not compared, e.g. a flat payload that covers
	// only part of the load, which vLLM's consumer verifies on the
	// overlap (docs/spec.md §9).
	Strict bool
}

// DiffWith is Diff with options.
func DiffWith(producer, consumer *Checks, opts DiffOptions) *DiffResult {
	res := &DiffResult{}
	for _, cr := range consumer.Requests {
		rv := diffRequest(producer, consumer, cr)
		for _, gv := range rv.Groups {
			if n := gv.notCompared(); len(n) > 0 && (gv.Verdict == Verified || gv.Verdict == Mismatch) {
				rv.Notes = append(rv.Notes, fmt.Sprintf("group %d: loaded block positions %s not compared (not covered by the producer's checksums, or another token count)", gv.ID, ranges.Format(n)))
				if opts.Strict && gv.Verdict == Verified {
					gv.Verdict, gv.Reason = Unverified, ReasonNotCovered
					gv.Hint = "--strict: every loaded block must be compared"
				}
			}
		}
		if opts.Strict && rv.Verdict == Verified && slices.ContainsFunc(rv.Groups, func(g *GroupVerdict) bool { return g.Verdict == Unverified }) {
			rv.Verdict = Unverified
		}
		res.Requests = append(res.Requests, rv)
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

// request returns c's first request with the id, or nil (also for a nil c).
func (c *Checks) request(id string) *RequestChecks {
	if c == nil {
		return nil
	}
	for _, r := range c.Requests {
		if r.ID == id {
			return r
		}
	}
	return nil
}

func addReason(reasons []string, r string) []string {
	if slices.Contains(reasons, r) {
		return reasons
	}
	return append(reasons, r)
}

func diffRequest(producer, consumer *Checks, cr *RequestChecks) *RequestVerdict {
	rv := &RequestVerdict{ID: cr.ID, ProducerID: cr.PairID(), Reasons: []string{}}
	pr := producer.request(rv.ProducerID)
	rv.Numbering = checksum.NumberRequest.String()
	if pr == nil {
		rv.Reasons = addReason(rv.Reasons, ReasonNoChecksums)
		rv.Hints = append(rv.Hints, noProducerHint(producer, cr))
	} else {
		rv.Notes = append(rv.Notes, pr.Notes...)
		if slices.ContainsFunc(pr.Groups, func(g *GroupChecks) bool { return g.FlatOnly }) {
			rv.Numbering = checksum.NumberBlock.String()
		}
		for _, r := range pr.Unverified {
			rv.Reasons = addReason(rv.Reasons, r)
		}
	}
	for _, r := range cr.Unverified {
		rv.Reasons = addReason(rv.Reasons, r)
	}
	if slices.Contains(rv.Reasons, ReasonNotEveryWorker) {
		for _, side := range []struct {
			name string
			c    *Checks
		}{{"producer", producer}, {"consumer", consumer}} {
			if side.c != nil && len(side.c.Missing) > 0 {
				rv.Hints = append(rv.Hints, fmt.Sprintf("%s: %s did not report", side.name, strings.Join(side.c.Missing, "; ")))
			}
		}
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
		gv := diffGroup(pr, cr, pr.Group(id), cr.Group(id), id, consumer)
		if gv.Verdict == LeftOut && gv.Reason == LeftOutProducerOnly {
			rv.Notes = append(rv.Notes, fmt.Sprintf("group %d: %s", id, LeftOutProducerOnly))
		}
		rv.Groups = append(rv.Groups, gv)
	}
	// Nothing to verify the load by: the consumer checksummed no group,
	// or every group is left out (a pure state model without a TP split
	// across TP sizes, or groups skipped on both sides).
	// As vLLM's consumer: not when a group is already unverified (a group
	// skipped on the consumer that the producer checksummed).
	unverifiedGroup := slices.ContainsFunc(rv.Groups, func(g *GroupVerdict) bool { return g.Verdict == Unverified })
	if (len(cr.Groups) == 0 && !unverifiedGroup) || !slices.ContainsFunc(rv.Groups, func(g *GroupVerdict) bool { return g.Verdict != LeftOut }) {
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
	_, consumerSkipped := consumer.Skipped[id]
	switch {
	case pg == nil && cg == nil:
		gv.Verdict, gv.Reason = LeftOut, LeftOutSkipped
		return gv
	case cg == nil && !consumerSkipped:
		// The consumer does not hold the group for this load: vLLM's
		// consumer compares only the groups it loaded (docs/spec.md §9).
		gv.Verdict, gv.Reason = LeftOut, LeftOutProducerOnly
		return gv
	case pg == nil:
		gv.Hint = fmt.Sprintf("the consumer checksummed group %d, the producer's checksums do not have it", id)
		return unverified(ReasonOneSide)
	case cg == nil:
		gv.Hint = fmt.Sprintf("the consumer skips group %d (%s), the producer checksummed it", id, consumer.Skipped[id])
		return unverified(ReasonOneSide)
	}
	// A record's claims must agree with the consumer's before they pick
	// the comparison: kind mamba (compare position 0 alone) or split-less
	// (left out across TP sizes) on one side only is not comparable.
	if !pg.FromPayload {
		if pstate, cstate := pg.Kind == layout.KindMamba, cg.Kind == layout.KindMamba; pstate != cstate {
			gv.Hint = fmt.Sprintf("kind: producer %s, consumer %s", pg.Kind, cg.Kind)
			return unverified(ReasonFingerprint)
		}
		if pg.SplitLess != cg.SplitLess {
			gv.Hint = fmt.Sprintf("state split: producer split-less %v, consumer %v", pg.SplitLess, cg.SplitLess)
			return unverified(ReasonFingerprint)
		}
	}
	if (pg.SplitLess || cg.SplitLess) && pr.TPSize != 0 && cr.TPSize != 0 && pr.TPSize != cr.TPSize {
		gv.Verdict, gv.Reason = LeftOut, LeftOutSplitLess
		return gv
	}
	if pg.BadFingerprint {
		gv.Hint = "the producer sent a negative fingerprint"
		return unverified(ReasonFingerprint)
	}
	if pg.FlatOnly {
		if !cg.HasFlat || cg.FingerprintFlat != pg.FingerprintFlat {
			gv.Hint = flatFingerprintHint(cg.BlockSize)
			return unverified(ReasonFingerprint)
		}
	} else if cg.Fingerprint != pg.Fingerprint {
		gv.Hint = "the two sides' groups differ in layer names, spec types or dtypes"
		return unverified(ReasonFingerprint)
	}
	cchecks := cg.Checks
	if pg.FlatOnly {
		// vLLM's published code sends block-numbered values (docs/spec.md §1, §8).
		if cg.ChecksBlock == nil {
			gv.Hint = "a flat payload carries block-numbered values and the consumer's records have no values_block: recompute them with this kvaudit"
			return unverified(ReasonNoBlockInCommon)
		}
		cchecks = cg.ChecksBlock
	}
	if pg.MissingReplica || cg.MissingReplica || len(pg.Checks) == 0 || len(cg.Checks) == 0 {
		return unverified(ReasonMissingReplica)
	}
	// The nested form must carry exactly the values its start, num_tokens
	// and block size imply (records are checked when parsed); the flat
	// form is judged on the overlap, as vLLM's consumer does (docs/spec.md §9).
	if pg.FromPayload && !pg.FlatOnly && cg.Kind != layout.KindMamba {
		if want := (max(pr.NumTokens, 0)+pg.BlockSize-1)/pg.BlockSize - pg.Start; pg.Start < 0 || pr.NumTokens < 0 || pg.Positions() != want {
			gv.Hint = fmt.Sprintf("the nested payload's group %d has %d values from position %d, its num_tokens %d and block size %d imply %d", id, pg.Positions(), pg.Start, pr.NumTokens, pg.BlockSize, max(want, 0))
			return unverified(ReasonInvalidChecksums)
		}
	}
	if cg.Kind == layout.KindMamba {
		// A state group: its running state at position 0, no token count.
		if pg.Start != 0 || pg.Positions() == 0 || cg.Start != 0 || cg.Positions() == 0 {
			return unverified(ReasonNoBlockInCommon)
		}
		gv.record([]int{0}, pg.Checks[0][0], func(k int) uint64 { return cchecks[k][0] }, len(cchecks))
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
	pside := side{g: pg, checks: pg.Checks, S: ps, tokens: pr.NumTokens, r: L / ps}
	cside := side{g: cg, checks: cchecks, S: cs, tokens: cr.NumTokens, r: L / cs}
	// The consumer's loaded run starts inside a producer block: its first
	// chunk cannot be compared, so the group cannot be verified.
	inside := cs < L && cg.Start == cr.NumLocalComputedTokens/cs && (cg.Start*cs)%L != 0
	lo := max(pside.firstUnit(), cside.firstUnit())
	hi := min(pside.endUnit(), cside.endUnit())
	pv := make([]uint64, 1)
	cv := make([]uint64, len(cchecks))
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

// notCompared returns the loaded consumer positions left not compared.
func (gv *GroupVerdict) notCompared() []int {
	var out []int
	for p, st := range gv.Map {
		if st == PosNotCompared {
			out = append(out, p)
		}
	}
	return out
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
	checks [][]uint64 // g.Checks, or g.ChecksBlock against a flat payload
	S      int        // this side's block size
	tokens int        // the request's num_tokens on this side
	r      int        // this side's blocks per unit
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
			out[k] += s.checks[k][q-s.g.Start]
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

// noProducerHint says why a consumer request found no producer request.
func noProducerHint(producer *Checks, cr *RequestChecks) string {
	if producer == nil || len(producer.Requests) == 0 {
		return "the producer side holds no request"
	}
	var ids []string
	for _, r := range producer.Requests {
		if r.ID != "" {
			ids = append(ids, r.ID)
		}
		if len(ids) == 3 {
			break
		}
	}
	return fmt.Sprintf("no producer request has id %q (the producer has %q%s); real P/D deployments rename requests: pair them with the consumer's producer_id, or name the request with --request", cr.PairID(), ids, map[bool]string{true: ", ...", false: ""}[len(producer.Requests) > 3])
}

// flatFingerprintHint says why a flat payload's fingerprint differs
// (RefineFlatHints names the producer's block size where it can).
func flatFingerprintHint(consumerBlockSize int) string {
	return fmt.Sprintf("the flat form's fingerprint includes the block size (consumer %d): a producer with another block size gives another one, and so do other layers, spec types or dtypes; %s", consumerBlockSize, flatTail)
}

const flatTail = "the flat form cannot compare different block sizes, the nested form and records can"

// RefineFlatHints names the producer's block size in the hint of every
// group whose flat payload fingerprint differs only by the block size:
// the consumer's layers (its dumps, every PP stage) give the producer's
// fingerprint at that block size.
func RefineFlatHints(res *DiffResult, producer *Checks, consumer []*layout.Dump) {
	for _, rv := range res.Requests {
		pr := producer.request(rv.ProducerID)
		if pr == nil {
			continue
		}
		for _, gv := range rv.Groups {
			pg := pr.Group(gv.ID)
			if gv.Reason != ReasonFingerprint || pg == nil || !pg.FlatOnly || pg.BadFingerprint {
				continue
			}
			if bs, ok := probeFlatBlockSize(consumer, gv.ID, gv.BlockSize, pg.FingerprintFlat); ok {
				gv.Hint = fmt.Sprintf("block size: producer %d, consumer %d (the same layers and dtypes otherwise); %s", bs, gv.BlockSize, flatTail)
			}
		}
	}
}

// probeFlatBlockSize returns the block size (1..1024, powers of two to
// 2^20) at which the group's flat fingerprint over the dumps (one TP rank
// per PP stage) equals fp.
func probeFlatBlockSize(dumps []*layout.Dump, id, have int, fp uint64) (int, bool) {
	var views []*layout.GroupView
	stages := map[int]bool{}
	for _, d := range dumps {
		pp := d.Manifest.Parallel.PPRank
		if stages[pp] {
			continue
		}
		for _, g := range d.Groups {
			if g.Group.ID == id {
				stages[pp] = true
				views = append(views, g)
			}
		}
	}
	if len(views) == 0 {
		return 0, false
	}
	try := func(bs int) bool {
		var sum uint64
		for _, g := range views {
			sum += checksum.FlatFingerprintAt(g, bs)
		}
		return sum == fp
	}
	for bs := 1; bs <= 1<<20; {
		if bs != have && try(bs) {
			return bs, true
		}
		if bs < 1024 {
			bs++
		} else {
			bs *= 2
		}
	}
	return 0, false
}
