package verify

import (
	"fmt"
	"github.com/kvaudit/kvaudit/side"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ranges"
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
	// Notes say, for a person, what about the whole comparison looks like
	// a mistake rather than a transfer fault: one side given twice, the
	// sides swapped, every compared block differing (Compare; docs/spec.md
	// §9). They never change a verdict.
	Notes []string
	// MixKey is the run key both sides' dumps computed their mix checks
	// under (docs/spec.md §14), and MixKeySource where it came from:
	// MixKeyRun, MixKeyGiven or MixKeyPublished. Compare sets them; they
	// are zero (MixKeySource "") for a Diff of checks computed elsewhere
	// and when the engine computes no mix check.
	MixKey       uint64
	MixKeySource string
	// EngineCheck is what the cpu engine recomputed of an untrusted
	// engine's results (the cuda runner's: checksum.CheckedEngine), nil
	// for the cpu engines. Rows in device memory that only the runner
	// read make a verified comparison unverified unless EngineCheck.Trusted
	// (Result.Verdict).
	EngineCheck *checksum.EngineCheck
}

// DeviceUnchecked says whether the comparison holds values of rows in
// device memory that only the runner read, not accepted by --trust-runner.
func (r *DiffResult) DeviceUnchecked() bool {
	return r.EngineCheck != nil && r.EngineCheck.DeviceSlots > 0 && !r.EngineCheck.Trusted
}

// Where a comparison's mix key came from (DiffResult.MixKeySource).
const (
	// MixKeyRun: drawn at random for the comparison (both sides dumps).
	MixKeyRun = "run"
	// MixKeyGiven: CompareOptions.MixKey (--mix-key), the published key
	// (0) too.
	MixKeyGiven = "given"
	// MixKeyPublished: the published key, because a side is stored or
	// sent (records, a nested payload). A pattern precomputed against it
	// can cancel in both checks.
	MixKeyPublished = "published"
)

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
	// the drill-down (package drill) when both sides are dumps. Heat
	// holds, per drilled (group, position), the differing bytes of every
	// (layer, head, replica) slice, past the details' cap too (a heatmap's
	// data); a mismatching position without one was not drilled.
	Details []drill.Detail
	Heat    []drill.Heat
	// Notes say what the drill-down left out (caps, unreadable data) and
	// what decoding the producer's payload let pass (docs/spec.md §8).
	Notes []string
	// Hints say, for a user, what likely caused an unverified reason
	// (fixed reasons stay vLLM's; hints name the cause), and how the load
	// was paired where that may be a mistake (another number of tokens, a
	// remote_request_id): docs/spec.md §9.
	Hints []string
	// Numbering is the numbering the compared values use: "block" against
	// a flat payload (vLLM's published form), else "request" (docs/spec.md §1).
	Numbering string
	// NumTokens is the consumer request's num_tokens (the tokens of
	// block position p are p*BlockSize up to it).
	NumTokens int
	// Causes are the transfer audit's findings at the mismatching
	// positions (CompareOptions.Transfers), in position order.
	Causes []Cause
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
	// Strength says which checks the compared positions were judged by:
	// StrengthMix when both sides carried kvaudit's mix check (docs/spec.md
	// §14) beside vLLM's checksum, StrengthVLLM when vLLM's checksum alone
	// (a flat payload, vLLM's kv_transfer_params, records without the mix
	// check), "" when nothing was compared.
	Strength Strength
	// MixOnly are the mismatching positions (of Positions) where vLLM's
	// checksums agree and only the mix check differs: vLLM's checksum
	// alone would have verified them.
	MixOnly []int

	// VLLMOnly says why a group of Strength StrengthVLLM was not compared
	// by the mix check too (the side that lacks it), "" otherwise.
	VLLMOnly string

	// mixCompared: both sides' mix checks are compared.
	mixCompared bool
}

// Strength is what a comparison judged by (GroupVerdict.Strength).
type Strength string

// Strengths.
const (
	// StrengthMix: vLLM's checksum and kvaudit's mix check, both.
	StrengthMix Strength = "vllm+mix"
	// StrengthVLLM: vLLM's checksum alone, blind to what it cancels
	// (MissedByVLLM).
	StrengthVLLM Strength = "vllm"
)

// Strength returns the weakest strength the comparison's compared groups
// were judged by: StrengthVLLM when any group was compared by vLLM's
// checksum alone, StrengthMix when every compared group had the mix check
// too, "" when nothing was compared.
func (r *DiffResult) Strength() Strength {
	var s Strength
	for _, rv := range r.Requests {
		for _, g := range rv.Groups {
			switch g.Strength {
			case StrengthVLLM:
				return StrengthVLLM
			case StrengthMix:
				s = StrengthMix
			}
		}
	}
	return s
}

// MissedByVLLM says what a comparison by vLLM's checksum alone lets
// pass: the changes whose weighted sum cancels modulo 2^64.
const MissedByVLLM = "an even number of top-bit flips in one block position (every fourth bf16 sign, every eighth fp8 sign), or any other change whose weighted sum cancels, passes unseen"

// VLLMOnlyNotes are the notes on a request some of whose groups were
// compared by vLLM's checksum alone (RequestVerdict.Notes holds them):
// one per cause (the mix check missing on a side), naming the groups.
func VLLMOnlyNotes(groups []*GroupVerdict) []string {
	var whys []string
	ids := map[string][]int{}
	for _, g := range groups {
		if g.Strength != StrengthVLLM {
			continue
		}
		if ids[g.VLLMOnly] == nil {
			whys = append(whys, g.VLLMOnly)
		}
		ids[g.VLLMOnly] = append(ids[g.VLLMOnly], g.ID)
	}
	var notes []string
	for _, why := range whys {
		word := "group"
		if len(ids[why]) > 1 {
			word = "groups"
		}
		notes = append(notes, fmt.Sprintf("%s %s: compared by vLLM's checksum only (%s): %s", word, ranges.Format(ids[why]), why, MissedByVLLM))
	}
	return notes
}

// VLLMVerdict is the verdict the comparison would have reached by vLLM's
// checksum alone, kvaudit's mix check left out: a mismatch only where
// vLLM's values differ (positions not all in MixOnly); a load whose only
// mismatches are the mix check's is otherwise judged by its other groups
// and reasons, as Diff judges.
func (rv *RequestVerdict) VLLMVerdict() Verdict {
	if rv.Verdict != Mismatch {
		return rv.Verdict
	}
	return combine(false, func(yield func(Verdict) bool) {
		if len(rv.Reasons) > 0 && !yield(Unverified) {
			return
		}
		for _, g := range rv.Groups {
			v := g.Verdict
			if v == Mismatch && len(g.MixOnly) == len(g.Positions) {
				v = Verified // every differing position is the mix check's
			}
			if !yield(v) {
				return
			}
		}
	})
}

// mixOnlyNote is the note on a request of which group g mismatched at
// positions by kvaudit's mix check alone.
func mixOnlyNote(g int, positions []int) string {
	return fmt.Sprintf("group %d: block position(s) %s differ in kvaudit's mix check only: vLLM's checksum alone would have verified them", g, ranges.Format(positions))
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
func Diff(producer, consumer *side.Checks) *DiffResult {
	return diffWith(producer, consumer, diffOptions{})
}

// diffOptions change how Diff judges.
type diffOptions struct {
	// Strict makes a group unverified (ReasonNotCovered) when any loaded
	// consumer position was not compared, e.g. a flat payload that covers
	// only part of the load, which vLLM's consumer verifies on the
	// overlap (docs/spec.md §9).
	Strict bool
	// RequireMix makes a group compared by vLLM's checksum alone
	// (Strength StrengthVLLM) unverified (ReasonVLLMOnly) where it would
	// be verified: a side without kvaudit's mix check is not enough.
	RequireMix bool
}

// diffWith is Diff with options.
func diffWith(producer, consumer *side.Checks, opts diffOptions) *DiffResult {
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
		if opts.RequireMix {
			for _, gv := range rv.Groups {
				if gv.Strength == StrengthVLLM && gv.Verdict == Verified {
					gv.Verdict, gv.Reason = Unverified, ReasonVLLMOnly
					gv.Hint = "--require-mix: every group must be compared by kvaudit's mix check too (" + gv.VLLMOnly + ")"
				}
			}
		}
		if (opts.Strict || opts.RequireMix) && rv.Verdict == Verified && slices.ContainsFunc(rv.Groups, func(g *GroupVerdict) bool { return g.Verdict == Unverified }) {
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

func addReason(reasons []string, r string) []string {
	if slices.Contains(reasons, r) {
		return reasons
	}
	return append(reasons, r)
}

func diffRequest(producer, consumer *side.Checks, cr *side.RequestChecks) *RequestVerdict {
	rv := &RequestVerdict{ID: cr.ID, ProducerID: cr.PairID(), Reasons: []string{}, NumTokens: cr.NumTokens}
	pr := producer.Request(rv.ProducerID)
	rv.Numbering = checksum.NumberRequest.String()
	if pr == nil {
		rv.Reasons = addReason(rv.Reasons, ReasonNoChecksums)
		rv.Hints = append(rv.Hints, noProducerHint(producer, cr))
	} else {
		rv.Notes = append(rv.Notes, pr.Notes...)
		if slices.ContainsFunc(pr.Groups, func(g *side.GroupChecks) bool { return g.FlatOnly }) {
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
			c    *side.Checks
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
		if gv.Verdict == LeftOut && gv.Reason == leftOutProducerOnly {
			rv.Notes = append(rv.Notes, fmt.Sprintf("group %d: %s", id, leftOutProducerOnly))
		}
		if len(gv.MixOnly) > 0 {
			rv.Notes = append(rv.Notes, mixOnlyNote(id, gv.MixOnly))
		}
		rv.Groups = append(rv.Groups, gv)
	}
	rv.Notes = append(rv.Notes, VLLMOnlyNotes(rv.Groups)...)
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
