package inject

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// judgement compares what the detectors reported for a faulted side with
// what its fault expects.
type judgement struct {
	// Detected: the fault's expected detector reported it.
	Detected bool
	// Localised: every judged detector reported exactly what the fault
	// expects (and the fault was detected).
	Localised bool
	// FalsePositive: a detector reported something the fault did not
	// touch (for a control, anything).
	FalsePositive bool
	// Problems say what differs from the expectation.
	Problems []string
}

// observed is what the detectors reported for a faulted side, with the
// comparison before the fault to judge it against.
type observed struct {
	// Diff compares the producer with the faulted side, drilled down where
	// both sides are dumps.
	Diff *verify.DiffResult
	// Clean is the same comparison before the fault: requests the fault
	// does not name must keep their verdicts, and positions it did not
	// cover are not expected to be reported.
	Clean *verify.DiffResult
	// CleanConsumer is the consumer's checks before the fault: a fault that
	// names no checks is expected in every check of its group.
	CleanConsumer *side.Checks
	// Tail is the tail audit's findings on the faulted consumer.
	Tail []verify.TailFinding
	// Stored is the faulted consumer's stored-checksum results.
	Stored []*verify.StoredRank
	// Transfers are the transfer audit's findings on the faulted logs.
	Transfers []transfer.Finding
}

// judge compares what was observed of a faulted side with the fault's
// expectations: the comparison's verdicts, the drill-down's details and
// the audits' findings. Tail and Stored are ignored where the fault does
// not judge them.
func judge(f *Fault, o observed) judgement {
	var j judgement
	info, _ := InfoOf(f.Kind)
	reported := j.comparison(f, info, o)
	if f.Expect.Details != nil {
		judgeDetails(f, o.Diff, reported, j.problem)
	}
	if f.Expect.Tail != nil {
		var got []AuditPlace
		for _, t := range o.Tail {
			got = append(got, AuditPlace{Request: t.Request, Group: t.Group, Position: t.Position, Rank: t.Rank, Layer: t.Layer})
		}
		found := judgePlaces("tail audit", f.Expect.Tail, got, j.problem)
		if info.Detector == DetectTail && found {
			j.Detected = true
		}
	}
	if f.Expect.Stored != nil {
		var got []AuditPlace
		for _, s := range o.Stored {
			for _, b := range s.Mismatches() {
				got = append(got, AuditPlace{Request: b.Request, Group: b.Group, Position: b.Position, Rank: Rank{PP: s.PPRank, TP: s.TPRank}})
			}
		}
		found := judgePlaces("stored checksums", f.Expect.Stored, got, j.problem)
		if info.Detector == DetectStored && found {
			j.Detected = true
		}
	}
	if f.Expect.Transfers != nil {
		found := judgeTransfers(f, o.Transfers, j.problem)
		if info.Detector == DetectTransfers && found {
			j.Detected = true
		}
	}
	if info.Control {
		j.Detected = false
		if len(j.Problems) > 0 {
			j.FalsePositive = true
		}
	}
	j.Localised = j.Detected && len(j.Problems) == 0
	return j
}

// problem records what differs from the expectation; fp says it is a
// false positive.
func (j *judgement) problem(fp bool, format string, args ...any) {
	j.Problems = append(j.Problems, fmt.Sprintf(format, args...))
	if fp {
		j.FalsePositive = true
	}
}

// comparison judges the comparison's verdicts: a request the fault names
// must not verify, as it expects; every other one keeps its clean
// verdict. It returns, by request and group, the consumer positions a
// mismatch must name (where the drill-down's details are judged).
func (j *judgement) comparison(f *Fault, info Info, o observed) map[string]map[int][]int {
	expected := map[string]RequestExpect{}
	for _, r := range f.Expect.Requests {
		expected[r.ID] = r
	}
	// Only the comparison's detectors detect through it.
	byVerdict := info.Detector == DetectChecksum || info.Detector == DetectCoResident || info.Detector == DetectPayload
	cleanOf := map[string]*verify.RequestVerdict{}
	for _, rv := range o.Clean.Requests {
		cleanOf[rv.ID] = rv
	}
	reported := map[string]map[int][]int{}
	for _, rv := range o.Diff.Requests {
		e, ok := expected[rv.ID]
		cv := cleanOf[rv.ID]
		if !ok {
			if cv == nil || rv.Verdict != cv.Verdict {
				j.problem(true, "request %s: %s (%s), but the fault did not touch it", rv.ID, rv.Verdict, describeVerdict(rv))
			}
			continue
		}
		switch verify.Verdict(e.Verdict) {
		case verify.Unverified:
			if byVerdict && rv.Verdict != verify.Verified {
				j.Detected = true
			}
			if rv.Verdict != verify.Unverified || !slices.Contains(rv.Reasons, e.Reason) {
				j.problem(false, "request %s: %s (%s), want unverified: %s", rv.ID, rv.Verdict, describeVerdict(rv), e.Reason)
			}
		case verify.Mismatch:
			if byVerdict && (rv.Verdict == verify.Mismatch || (info.Detector == DetectPayload && rv.Verdict != verify.Verified)) {
				j.Detected = true
			}
			if rv.Verdict != verify.Mismatch {
				j.problem(false, "request %s: %s (%s), want a mismatch", rv.ID, rv.Verdict, describeVerdict(rv))
				continue
			}
			reported[rv.ID] = j.mismatchGroups(f, rv, e, o)
		}
	}
	for id := range expected {
		if !slices.ContainsFunc(o.Diff.Requests, func(rv *verify.RequestVerdict) bool { return rv.ID == id }) {
			j.problem(false, "request %s: not compared", id)
		}
	}
	return reported
}

// mismatchGroups judges the groups of a mismatching request the fault
// expects to mismatch: the positions (the faulted side's, as the clean
// comparison maps them to the consumer's) and the replica checks. It
// returns the positions by group.
func (j *judgement) mismatchGroups(f *Fault, rv *verify.RequestVerdict, e RequestExpect, o observed) map[int][]int {
	var reported map[int][]int
	want := map[int]GroupExpect{}
	for _, g := range e.Groups {
		want[g.ID] = g
	}
	for _, gv := range rv.Groups {
		g, ok := want[gv.ID]
		if !ok {
			if gv.Verdict == verify.Mismatch {
				j.problem(true, "request %s group %d: mismatch at %v, but the fault did not touch the group", rv.ID, gv.ID, gv.Positions)
			}
			continue
		}
		cg := groupVerdict(o.Clean, rv.ID, gv.ID)
		if cg == nil {
			j.problem(false, "request %s group %d: not in the clean comparison", rv.ID, gv.ID)
			continue
		}
		positions := expandPositions(cg, g.Positions, f.Input)
		if reported == nil {
			reported = map[int][]int{}
		}
		reported[gv.ID] = positions
		if !slices.Equal(gv.Positions, positions) {
			fp := slices.ContainsFunc(gv.Positions, func(p int) bool { return !slices.Contains(positions, p) })
			j.problem(fp, "request %s group %d: mismatch at positions %v, want %v", rv.ID, gv.ID, gv.Positions, positions)
		}
		checks := g.Checks
		if checks == nil {
			checks = allChecks(o.CleanConsumer, rv.ID, gv.ID)
		}
		if !slices.Equal(gv.Checks, checks) {
			j.problem(false, "request %s group %d: checks %v differ, want %v", rv.ID, gv.ID, gv.Checks, checks)
		}
		delete(want, gv.ID)
	}
	for id := range want {
		j.problem(false, "request %s group %d: no mismatch reported", rv.ID, id)
	}
	return reported
}

// allChecks lists every check of a consumer request's group.
func allChecks(c *side.Checks, id string, group int) []int {
	out := []int{}
	for _, r := range c.Requests {
		if r.ID != id {
			continue
		}
		if g := r.Group(group); g != nil {
			for k := range g.Checks {
				out = append(out, k)
			}
		}
	}
	return out
}

// judgePlaces compares an audit's findings with the expected ones; found
// says whether any expected one was reported.
func judgePlaces(what string, want, got []AuditPlace, problem func(bool, string, ...any)) (found bool) {
	for _, w := range want {
		if slices.Contains(got, w) {
			found = true
		} else {
			problem(false, "%s: %+v not reported", what, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			problem(true, "%s: %+v reported, but the fault did not touch it", what, g)
		}
	}
	return found
}

// judgeTransfers compares the transfer audit's findings with the
// expected ones: each must be reported at its request, transfer,
// descriptor, layer and tokens; any other finding must lie at a place the
// fault changed (a consequence, such as the gap a misplaced write
// leaves). found says whether any expected one was reported.
func judgeTransfers(f *Fault, got []transfer.Finding, problem func(bool, string, ...any)) (found bool) {
	matches := func(w TransferExpect, g transfer.Finding) bool {
		return w.Invariant == g.Invariant && w.Request == g.Request && w.Transfer == g.Transfer && w.Descriptor == g.Descriptor &&
			w.Layer == g.Layer && w.Tokens == g.Tokens && w.Log == filepath.Base(g.Log)
	}
	for _, w := range f.Expect.Transfers {
		if slices.ContainsFunc(got, func(g transfer.Finding) bool { return matches(w, g) }) {
			found = true
		} else {
			problem(false, "transfer audit: %s at request %s transfer %d descriptor %d layer %d tokens %d-%d not reported", w.Invariant, w.Request, w.Transfer, w.Descriptor, w.Layer, w.Tokens[0], w.Tokens[1])
		}
	}
	for _, g := range got {
		if slices.ContainsFunc(f.Expect.Transfers, func(w TransferExpect) bool { return matches(w, g) }) {
			continue
		}
		if !slices.Contains(f.Affected, Place{Request: g.Request, Group: g.Group, Position: g.Position}) {
			problem(true, "transfer audit: %s, where the fault changed nothing: %s", g.Invariant, g.Message)
		}
	}
	return found
}

// judgeDetails compares the drill-down's details with the expected ones at
// the positions the comparison covers. A detail folds slices (drill.Detail):
// each (layer, head) it covers must be expected, its hint must be the
// fold of theirs (drill.FoldHint) and its tokens must span theirs.
func judgeDetails(f *Fault, res *verify.DiffResult, reported map[string]map[int][]int, problem func(bool, string, ...any)) {
	type key struct {
		req                                   string
		group, position, layer, head, replica int
	}
	want := map[key]DetailExpect{}
	for _, d := range f.Expect.Details {
		if slices.Contains(reported[d.Request][d.Group], d.Position) {
			want[key{d.Request, d.Group, d.Position, d.Layer, d.Head, d.Replica}] = d
		}
	}
	for _, rv := range res.Requests {
		for _, d := range rv.Details {
			layers, heads := d.Layers, d.Heads
			if len(layers) == 0 {
				layers = []int{d.Layer}
			}
			if len(heads) == 0 || d.State {
				heads = []int{d.Head}
			}
			var hints []string
			first, last, tokens := 0, 0, false
			for _, L := range layers {
				for _, h := range heads {
					k := key{rv.ID, d.Group, d.Position, L, h, d.Replica}
					w, ok := want[k]
					if !ok {
						problem(false, "drill-down: request %s group %d position %d layer %d head %d replica %d: %q, not expected", rv.ID, d.Group, d.Position, L, h, d.Replica, d.Hint)
						continue
					}
					delete(want, k)
					hints = append(hints, w.Hint)
					if w.Tokens != nil {
						if !tokens || w.Tokens[0] < first {
							first = w.Tokens[0]
						}
						if !tokens || w.Tokens[1] > last {
							last = w.Tokens[1]
						}
						tokens = true
					}
				}
			}
			if len(hints) == 0 {
				continue
			}
			if h := drill.FoldHint(hints...); d.Hint != h {
				problem(false, "drill-down: request %s group %d position %d layers %s heads %s replica %d: hint %q, want %q", rv.ID, d.Group, d.Position, ranges.Format(layers), ranges.Format(heads), d.Replica, d.Hint, h)
			}
			if tokens && (d.FirstToken != first || d.LastToken != last) {
				problem(false, "drill-down: request %s group %d position %d layers %s heads %s: tokens %d-%d, want %d-%d", rv.ID, d.Group, d.Position, ranges.Format(layers), ranges.Format(heads), d.FirstToken, d.LastToken, first, last)
			}
		}
	}
	var missing []string
	for k, w := range want {
		missing = append(missing, fmt.Sprintf("request %s group %d position %d layer %d head %d replica %d (%s)", k.req, k.group, k.position, k.layer, k.head, k.replica, w.Hint))
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		problem(false, "drill-down: %d expected detail(s) missing: %s", len(missing), strings.Join(missing, "; "))
	}
}

// judge records a trial's judgement in o.
func (s *pairState) judge(f *Fault, res, clean *verify.DiffResult, tail []verify.TailFinding, stored []*verify.StoredRank, transfers []transfer.Finding, o *trialOutcome) {
	j := judge(f, observed{Diff: res, Clean: clean, CleanConsumer: s.consChecks, Tail: tail, Stored: stored, Transfers: transfers})
	o.detected, o.localised, o.falsePositive, o.problems = j.Detected, j.Localised, j.FalsePositive, j.Problems
	o.caughtByVLLM = caughtByVLLM(res, clean)
	if f.Request != "" {
		for _, rv := range res.Requests {
			for _, gv := range rv.Groups {
				if gv.Verdict == verify.Mismatch && o.example == "" {
					o.example = fmt.Sprintf("%s g%d %s", rv.ID, gv.ID, blockMap(gv.Map))
				}
			}
		}
	}
}

// caughtByVLLM says whether vLLM's checksum alone (kvaudit's mix check
// left out: RequestVerdict.VLLMVerdict) fails to verify some load of res
// that the clean comparison verifies: what a connector's production check
// would have seen of the fault.
func caughtByVLLM(res, clean *verify.DiffResult) bool {
	for _, rv := range res.Requests {
		if rv.VLLMVerdict() == verify.Verified {
			continue
		}
		if c := requestVerdict(clean, rv.ID); c == nil || c.VLLMVerdict() == verify.Verified {
			return true
		}
	}
	return false
}

// requestVerdict returns res's verdict of request id, or nil (also when
// res is nil).
func requestVerdict(res *verify.DiffResult, id string) *verify.RequestVerdict {
	if res == nil {
		return nil
	}
	for _, rv := range res.Requests {
		if rv.ID == id {
			return rv
		}
	}
	return nil
}

// blockMap draws a block map as report does: . verified, X mismatch, -
// not compared, _ not loaded.
func blockMap(m []verify.PositionState) string {
	const symbols = "_-.X"
	b := make([]byte, len(m))
	for i, s := range m {
		b[i] = symbols[s]
	}
	return string(b)
}
