package verify

import (
	"fmt"
	"github.com/kvaudit/kvaudit/side"
	"slices"

	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/layout"
)

// diffGroup compares one group of a load; pg or cg is nil where a side
// does not checksum it.
func diffGroup(pr, cr *side.RequestChecks, pg, cg *side.GroupChecks, id int, consumer *side.Checks) *GroupVerdict {
	gv := newGroupVerdict(pg, cg, id, consumer)
	_, consumerSkipped := consumer.Skipped[id]
	switch {
	case pg == nil && cg == nil:
		gv.Verdict, gv.Reason = LeftOut, leftOutSkipped
		return gv
	case cg == nil && !consumerSkipped:
		// The consumer does not hold the group for this load: vLLM's
		// consumer compares only the groups it loaded (docs/spec.md §9).
		gv.Verdict, gv.Reason = LeftOut, leftOutProducerOnly
		return gv
	case pg == nil:
		gv.Hint = fmt.Sprintf("the consumer checksummed group %d, the producer's checksums do not have it", id)
		return gv.unverified(ReasonOneSide)
	case cg == nil:
		gv.Hint = fmt.Sprintf("the consumer skips group %d (%s), the producer checksummed it", id, consumer.Skipped[id])
		return gv.unverified(ReasonOneSide)
	}
	cchecks, verdict, reason, hint := comparable(pr, cr, pg, cg)
	if verdict != "" {
		gv.Verdict, gv.Reason, gv.Hint = verdict, reason, hint
		return gv
	}
	if cg.Kind == layout.KindMamba {
		// A state group: its running state at position 0, no token count.
		if pg.Start != 0 || pg.Positions() == 0 || cg.Start != 0 || cg.Positions() == 0 {
			return gv.unverified(ReasonNoBlockInCommon)
		}
		got := make([]uint64, len(cchecks))
		for k := range got {
			got[k] = cchecks[k][0]
		}
		var mix *unitMix
		if gv.mixComparable(pg, cg, cchecks) {
			mix = &unitMix{want: pg.ChecksMix[0][0], got: make([]uint64, len(cchecks))}
			for k := range mix.got {
				mix.got[k] = cg.ChecksMix[k][0]
			}
		}
		gv.record([]int{0}, pg.Checks[0][0], got, mix)
		return gv.finish("")
	}
	return gv.compareUnits(pr, cr, pg, cg, cchecks)
}

// mixComparable says whether both sides carry kvaudit's mix check
// (docs/spec.md §14) in the shape of the compared checks, so that it is
// compared beside vLLM's, and records which strength the comparison has
// (GroupVerdict.Strength, set by finish when anything was compared).
func (gv *GroupVerdict) mixComparable(pg, cg *side.GroupChecks, cchecks [][]uint64) bool {
	ok := len(pg.ChecksMix) > 0 && len(cg.ChecksMix) == len(cchecks) && len(pg.ChecksMix[0]) == pg.Positions()
	gv.mixCompared = ok
	if !ok {
		switch {
		case pg.ChecksMix == nil && pg.NoMix != "":
			gv.VLLMOnly = "the producer's checks: " + pg.NoMix
		case cg.ChecksMix == nil && cg.NoMix != "":
			gv.VLLMOnly = "the consumer's checks: " + cg.NoMix
		case pg.ChecksMix == nil && pg.FromPayload:
			gv.VLLMOnly = "the producer's payload carries vLLM's values only"
		case pg.ChecksMix == nil:
			gv.VLLMOnly = "the producer's checks have no mix check: the cuda engine's, or records from before it"
		default:
			gv.VLLMOnly = "the consumer's checks have no mix check: the cuda engine's, or records from before it"
		}
	}
	return ok
}

// unitMix is the mix check of one compared unit: the producer's check 0
// and each consumer check.
type unitMix struct {
	want uint64
	got  []uint64
}

// newGroupVerdict starts the verdict of group id: its kind (the
// consumer's, else the producer's or the consumer side's), block sizes and
// a block map of the consumer's checksummed run, not compared yet.
func newGroupVerdict(pg, cg *side.GroupChecks, id int, consumer *side.Checks) *GroupVerdict {
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
	return gv
}

// unverified makes the group unverified for reason.
func (gv *GroupVerdict) unverified(reason string) *GroupVerdict {
	gv.Verdict, gv.Reason = Unverified, reason
	return gv
}

// comparable says whether a group both sides checksum can be compared,
// in the order docs/spec.md §9 applies the rules: when it cannot, the
// verdict (left out or unverified), its fixed reason and a hint; when it
// can, the consumer checks to compare with the producer's (block-numbered
// against a flat payload).
func comparable(pr, cr *side.RequestChecks, pg, cg *side.GroupChecks) (cchecks [][]uint64, v Verdict, reason, hint string) {
	// A record's claims must agree with the consumer's before they pick
	// the comparison: kind mamba (compare position 0 alone) or split-less
	// (left out across TP sizes) on one side only is not comparable.
	if !pg.FromPayload {
		if pstate, cstate := pg.Kind == layout.KindMamba, cg.Kind == layout.KindMamba; pstate != cstate {
			return nil, Unverified, ReasonFingerprint, fmt.Sprintf("kind: producer %s, consumer %s", pg.Kind, cg.Kind)
		}
		if pg.SplitLess != cg.SplitLess {
			return nil, Unverified, ReasonFingerprint, fmt.Sprintf("state split: producer split-less %v, consumer %v", pg.SplitLess, cg.SplitLess)
		}
	}
	if (pg.SplitLess || cg.SplitLess) && pr.TPSize != 0 && cr.TPSize != 0 && pr.TPSize != cr.TPSize {
		return nil, LeftOut, leftOutSplitLess, ""
	}
	if pg.BadFingerprint {
		return nil, Unverified, ReasonFingerprint, "the producer sent a negative fingerprint"
	}
	if pg.FlatOnly {
		if !cg.HasFlat || cg.FingerprintFlat != pg.FingerprintFlat {
			return nil, Unverified, ReasonFingerprint, flatFingerprintHint(cg.BlockSize)
		}
	} else if cg.Fingerprint != pg.Fingerprint {
		return nil, Unverified, ReasonFingerprint, "the two sides' groups differ in layer names, spec types or dtypes"
	}
	cchecks = cg.Checks
	if pg.FlatOnly {
		// vLLM's published code sends block-numbered values (docs/spec.md §1, §8).
		if cg.ChecksBlock == nil {
			return nil, Unverified, ReasonNoBlockInCommon, "a flat payload carries block-numbered values and the consumer's records have no values_block: recompute them with this kvaudit"
		}
		cchecks = cg.ChecksBlock
	}
	if pg.MissingReplica || cg.MissingReplica || len(pg.Checks) == 0 || len(cg.Checks) == 0 {
		return nil, Unverified, ReasonMissingReplica, ""
	}
	// The nested form must carry exactly the values its start, num_tokens
	// and block size imply (records are checked when parsed); the flat
	// form is judged on the overlap, as vLLM's consumer does (docs/spec.md §9).
	if pg.FromPayload && !pg.FlatOnly && cg.Kind != layout.KindMamba {
		if want := (max(pr.NumTokens, 0)+pg.BlockSize-1)/pg.BlockSize - pg.Start; pg.Start < 0 || pr.NumTokens < 0 || pg.Positions() != want {
			return nil, Unverified, ReasonInvalidChecksums, fmt.Sprintf("the nested payload's group %d has %d values from position %d, its num_tokens %d and block size %d imply %d", pg.ID, pg.Positions(), pg.Start, pr.NumTokens, pg.BlockSize, max(want, 0))
		}
	}
	return cchecks, "", "", ""
}

// compareUnits compares an attention group position by position, in
// units of the larger block size when the sides' block sizes differ (one
// must be a multiple of the other), and sets the verdict.
func (gv *GroupVerdict) compareUnits(pr, cr *side.RequestChecks, pg, cg *side.GroupChecks, cchecks [][]uint64) *GroupVerdict {
	ps, cs := pg.BlockSize, cg.BlockSize
	if pg.FlatOnly || ps == 0 {
		ps = cs // a flat payload: the fingerprint vouches for the block size
	}
	if ps <= 0 || cs <= 0 || (ps%cs != 0 && cs%ps != 0) {
		return gv.unverified(ReasonBlockSizes)
	}
	L := max(ps, cs)
	punits := groupUnits{g: pg, checks: pg.Checks, S: ps, tokens: pr.NumTokens, r: L / ps}
	cunits := groupUnits{g: cg, checks: cchecks, S: cs, tokens: cr.NumTokens, r: L / cs}
	// The consumer's loaded run starts inside a producer block: its first
	// chunk cannot be compared, so the group cannot be verified.
	inside := cs < L && cg.Start == cr.NumLocalComputedTokens/cs && (cg.Start*cs)%L != 0
	lo := max(punits.firstUnit(), cunits.firstUnit())
	hi := min(punits.endUnit(), cunits.endUnit())
	pv := make([]uint64, 1)
	cv := make([]uint64, len(cchecks))
	// kvaudit's mix check adds up over consecutive blocks as vLLM's
	// request-numbered checksum does (docs/spec.md §14): the same units.
	var mix *unitMix
	var pmix, cmix groupUnits
	if gv.mixComparable(pg, cg, cchecks) {
		mix = &unitMix{got: make([]uint64, len(cchecks))}
		pmix, cmix = punits, cunits
		pmix.checks, cmix.checks = pg.ChecksMix, cg.ChecksMix
	}
	for u := lo; u < hi; u++ {
		pt, ok := punits.chunk(u, pv)
		if !ok || pt == 0 {
			continue
		}
		ct, ok := cunits.chunk(u, cv)
		if !ok || ct != pt {
			continue
		}
		if mix != nil {
			w := []uint64{0}
			pmix.chunk(u, w)
			cmix.chunk(u, mix.got)
			mix.want = w[0]
		}
		gv.record(cunits.positions(u), pv[0], cv, mix)
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

// record marks the consumer positions of one compared unit: vLLM's
// checksum, the producer's check 0 (want) against each consumer check
// (got[k]), and, when both sides carry it (mix not nil), kvaudit's mix
// check alike. A unit where vLLM's values agree and the mix check differs
// is a mismatch too, listed in MixOnly.
func (gv *GroupVerdict) record(positions []int, want uint64, got []uint64, mix *unitMix) {
	state := PosVerified
	vllm := false
	for k := range got {
		differs := got[k] != want
		vllm = vllm || differs
		if mix != nil && mix.got[k] != mix.want {
			differs = true
		}
		if differs {
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
			if !vllm {
				gv.MixOnly = append(gv.MixOnly, p)
			}
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
	slices.Sort(gv.MixOnly)
	gv.MixOnly = slices.Compact(gv.MixOnly)
	compared := slices.ContainsFunc(gv.Map, func(s PositionState) bool { return s == PosVerified || s == PosMismatch })
	if compared {
		gv.Strength = StrengthVLLM
		if gv.mixCompared {
			gv.Strength = StrengthMix
		}
	}
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

// groupUnits is one side's checks of a group seen in units of the larger
// block size L = r*S.
type groupUnits struct {
	g      *side.GroupChecks
	checks [][]uint64 // g.Checks, or g.ChecksBlock against a flat payload
	S      int        // this side's block size
	tokens int        // the request's num_tokens on this side
	r      int        // this side's blocks per unit
}

// firstUnit and endUnit bound the units the side's positions touch.
func (s groupUnits) firstUnit() int { return s.g.Start / s.r }

func (s groupUnits) endUnit() int { return (s.g.Start + s.g.Positions() + s.r - 1) / s.r }

// chunk sums, into out[k], check k over the side's positions of unit u and
// returns the tokens the unit holds. ok is false unless the side covers
// the unit whole: every position of it that holds a token is checksummed
// (positions past the last token count as zero).
func (s groupUnits) chunk(u int, out []uint64) (tokens int, ok bool) {
	clear(out)
	end := s.g.Start + s.g.Positions()
	for q := u * s.r; q < (u+1)*s.r; q++ {
		n := blockspan.ValidTokens(s.tokens, q, s.S)
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
func (s groupUnits) positions(u int) []int {
	var ps []int
	end := s.g.Start + s.g.Positions()
	for q := max(u*s.r, s.g.Start); q < min((u+1)*s.r, end); q++ {
		ps = append(ps, q)
	}
	return ps
}
