package verify_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// Fingerprints of the hand-built groups.
const (
	hfp     = 0x1111
	hfpFlat = 0x2222
)

// hg builds a request's checks of one group: Checks[k] = checks[k].
func hg(id, blockSize, start int, checks ...[]uint64) *side.GroupChecks {
	return &side.GroupChecks{
		ID: id, Kind: layout.KindFullAttention, BlockSize: blockSize, Start: start,
		Fingerprint: hfp, FingerprintFlat: hfpFlat, HasFlat: true, Checks: checks,
	}
}

func hreq(id string, tokens int, groups ...*side.GroupChecks) *side.RequestChecks {
	return &side.RequestChecks{ID: id, NumTokens: tokens, TPSize: 1, Groups: groups}
}

func hside(reqs ...*side.RequestChecks) *side.Checks {
	return &side.Checks{TPSize: 1, PPSize: 1, Complete: true, Skipped: map[int]string{}, Requests: reqs}
}

// with applies edits to a value and returns it.
func with[T any](v T, edits ...func(T)) T {
	for _, e := range edits {
		e(v)
	}
	return v
}

// wantGroup is the expected verdict of one group.
type wantGroup struct {
	id        int
	verdict   verify.Verdict
	reason    string
	positions []int
	checks    []int
}

type verdictCase struct {
	name     string
	producer *side.Checks
	consumer *side.Checks
	verdict  verify.Verdict
	reasons  []string
	groups   []wantGroup
	// maps, when set, is the block map of each group, in order.
	maps []string
}

func verdictCases() []verdictCase {
	v3 := []uint64{10, 20, 30}
	skippedBoth := func(c *side.Checks) { c.Skipped[1] = "no single layer number" }
	return []verdictCase{
		{
			name:     "equal",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3, v3))),
			verdict:  verify.Verified,
			groups:   []wantGroup{{id: 0, verdict: verify.Verified}},
			maps:     []string{"..."},
		},
		{
			name:     "one position differs",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, []uint64{10, 21, 30}))),
			verdict:  verify.Mismatch,
			groups:   []wantGroup{{id: 0, verdict: verify.Mismatch, positions: []int{1}, checks: []int{0}}},
			maps:     []string{".X."},
		},
		{
			name:     "one replica diverged: a mismatch in its check only",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3, []uint64{10, 20, 31}, v3))),
			verdict:  verify.Mismatch,
			groups:   []wantGroup{{id: 0, verdict: verify.Mismatch, positions: []int{2}, checks: []int{1}}},
		},
		{
			name:     "producer_id pairs the load",
			producer: hside(hreq("p-7", 40, hg(0, 16, 0, v3))),
			consumer: hside(with(hreq("d-1", 40, hg(0, 16, 0, v3)), func(r *side.RequestChecks) { r.ProducerID = "p-7" })),
			verdict:  verify.Verified,
			groups:   []wantGroup{{id: 0, verdict: verify.Verified}},
		},
		{
			name:     "no checksums: no producer",
			producer: nil,
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			verdict:  verify.Unverified,
			reasons:  []string{verify.ReasonNoChecksums},
		},
		{
			name:     "no checksums: producer lacks the request",
			producer: hside(hreq("other", 40, hg(0, 16, 0, v3))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			verdict:  verify.Unverified,
			reasons:  []string{verify.ReasonNoChecksums},
		},
		{
			name:     "invalid checksums",
			producer: side.ProducerChecks(&side.RequestChecks{ID: "r", Unverified: []string{verify.ReasonInvalidChecksums}}),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			verdict:  verify.Unverified,
			reasons:  []string{verify.ReasonInvalidChecksums},
		},
		{
			name:     "not every worker on the consumer: partial sums are not compared",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			consumer: hside(with(hreq("r", 40, hg(0, 16, 0, []uint64{1, 2, 3})), func(r *side.RequestChecks) { r.Unverified = []string{verify.ReasonNotEveryWorker} })),
			verdict:  verify.Unverified,
			reasons:  []string{verify.ReasonNotEveryWorker},
		},
		{
			name:     "not every worker on the producer",
			producer: hside(with(hreq("r", 40, hg(0, 16, 0, v3)), func(r *side.RequestChecks) { r.Unverified = []string{verify.ReasonNotEveryWorker} })),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			verdict:  verify.Unverified,
			reasons:  []string{verify.ReasonNotEveryWorker},
		},
		{
			name:     "group on the producer only is ignored, as vLLM does; a mismatch elsewhere wins",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3), hg(1, 16, 0, v3))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, []uint64{9, 20, 30}))),
			verdict:  verify.Mismatch,
			groups: []wantGroup{
				{id: 0, verdict: verify.Mismatch, positions: []int{0}, checks: []int{0}},
				{id: 1, verdict: verify.LeftOut, reason: verify.LeftOutProducerOnly},
			},
		},
		{
			name:     "group on the producer only is ignored: the load verifies",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3), hg(1, 16, 0, v3))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			verdict:  verify.Verified,
			groups: []wantGroup{
				{id: 0, verdict: verify.Verified},
				{id: 1, verdict: verify.LeftOut, reason: verify.LeftOutProducerOnly},
			},
		},
		{
			name:     "group on the consumer only is unverified",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3), hg(1, 16, 0, v3))),
			verdict:  verify.Unverified,
			groups: []wantGroup{
				{id: 0, verdict: verify.Verified},
				{id: 1, verdict: verify.Unverified, reason: verify.ReasonOneSide},
			},
		},
		{
			name:     "group skipped on the consumer only",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3), hg(1, 16, 0, v3))),
			consumer: with(hside(hreq("r", 40, hg(0, 16, 0, v3))), skippedBoth),
			verdict:  verify.Unverified,
			groups: []wantGroup{
				{id: 0, verdict: verify.Verified},
				{id: 1, verdict: verify.Unverified, reason: verify.ReasonOneSide},
			},
		},
		{
			name:     "group skipped on both sides is left out",
			producer: with(hside(hreq("r", 40, hg(0, 16, 0, v3))), skippedBoth),
			consumer: with(hside(hreq("r", 40, hg(0, 16, 0, v3))), skippedBoth),
			verdict:  verify.Verified,
			groups: []wantGroup{
				{id: 0, verdict: verify.Verified},
				{id: 1, verdict: verify.LeftOut, reason: verify.LeftOutSkipped},
			},
		},
		{
			name:     "nested fingerprint differs",
			producer: hside(hreq("r", 40, with(hg(0, 16, 0, v3), func(g *side.GroupChecks) { g.Fingerprint++ }))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonFingerprint}},
			maps:     []string{"---"},
		},
		{
			name: "flat payload: compared in the flat form, other nested fingerprint ignored",
			producer: hside(hreq("r", 40, with(hg(0, 0, 0, v3), func(g *side.GroupChecks) {
				g.FlatOnly, g.Fingerprint = true, 0
			}))),
			consumer: hside(hreq("r", 40, with(hg(0, 16, 0, []uint64{7, 7, 7}), func(g *side.GroupChecks) { g.ChecksBlock = [][]uint64{v3} }))),
			verdict:  verify.Verified,
			groups:   []wantGroup{{id: 0, verdict: verify.Verified}},
		},
		{
			name: "flat payload: compared with the consumer's block-numbered values only",
			producer: hside(hreq("r", 40, with(hg(0, 0, 0, v3), func(g *side.GroupChecks) {
				g.FlatOnly, g.Fingerprint = true, 0
			}))),
			consumer: hside(hreq("r", 40, with(hg(0, 16, 0, v3), func(g *side.GroupChecks) { g.ChecksBlock = [][]uint64{{10, 21, 30}} }))),
			verdict:  verify.Mismatch,
			groups:   []wantGroup{{id: 0, verdict: verify.Mismatch, positions: []int{1}, checks: []int{0}}},
		},
		{
			name: "flat payload: a negative fingerprint equals none",
			producer: hside(hreq("r", 40, with(hg(0, 0, 0, v3), func(g *side.GroupChecks) {
				g.FlatOnly, g.BadFingerprint = true, true
			}))),
			consumer: hside(hreq("r", 40, with(hg(0, 16, 0, v3), func(g *side.GroupChecks) { g.ChecksBlock = [][]uint64{v3} }))),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonFingerprint}},
		},
		{
			name: "flat payload: flat fingerprint differs (other block size)",
			producer: hside(hreq("r", 40, with(hg(0, 0, 0, v3), func(g *side.GroupChecks) {
				g.FlatOnly, g.FingerprintFlat = true, hfpFlat+1
			}))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonFingerprint}},
		},
		{
			name:     "a replica was not checksummed",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			consumer: hside(hreq("r", 40, with(hg(0, 16, 0, v3, []uint64{0, 0, 0}), func(g *side.GroupChecks) { g.MissingReplica = true }))),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonMissingReplica}},
		},
		{
			name:     "no block in common",
			producer: hside(hreq("r", 40, hg(0, 16, 0, []uint64{10, 20}))),
			consumer: hside(hreq("r", 80, hg(0, 16, 3, []uint64{40, 50}))),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonNoBlockInCommon}},
			maps:     []string{"___--"},
		},
		{
			name:     "last block compared only with equal token counts",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			consumer: hside(hreq("r", 41, hg(0, 16, 0, []uint64{10, 20, 99}))),
			verdict:  verify.Verified,
			groups:   []wantGroup{{id: 0, verdict: verify.Verified}},
			maps:     []string{"..-"},
		},
		{
			name:     "consumer prefix hit: only loaded blocks compared",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			consumer: hside(with(hreq("r", 40, hg(0, 16, 1, []uint64{20, 30})), func(r *side.RequestChecks) { r.NumLocalComputedTokens = 20 })),
			verdict:  verify.Verified,
			groups:   []wantGroup{{id: 0, verdict: verify.Verified}},
			maps:     []string{"_.."},
		},
		{
			name:     "block sizes not multiples",
			producer: hside(hreq("r", 40, hg(0, 32, 0, []uint64{30, 30}))),
			consumer: hside(hreq("r", 40, hg(0, 48, 0, []uint64{60}))),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonBlockSizes}},
		},
		{
			name:     "smaller consumer blocks summed into producer chunks",
			producer: hside(hreq("r", 40, hg(0, 32, 0, []uint64{30, 30}))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, []uint64{10, 20, 30}))),
			verdict:  verify.Verified,
			groups:   []wantGroup{{id: 0, verdict: verify.Verified}},
			maps:     []string{"..."},
		},
		{
			name:     "a chunk mismatch names the consumer positions of the chunk",
			producer: hside(hreq("r", 40, hg(0, 32, 0, []uint64{30, 30}))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, []uint64{10, 21, 30}))),
			verdict:  verify.Mismatch,
			groups:   []wantGroup{{id: 0, verdict: verify.Mismatch, positions: []int{0, 1}, checks: []int{0}}},
			maps:     []string{"XX."},
		},
		{
			name:     "larger consumer blocks: producer sums into chunks",
			producer: hside(hreq("r", 40, hg(0, 16, 0, []uint64{10, 20, 30}))),
			consumer: hside(hreq("r", 40, hg(0, 32, 0, []uint64{30, 31}))),
			verdict:  verify.Mismatch,
			groups:   []wantGroup{{id: 0, verdict: verify.Mismatch, positions: []int{1}, checks: []int{0}}},
			maps:     []string{".X"},
		},
		{
			name:     "a chunk the producer does not cover whole is not compared",
			producer: hside(hreq("r", 64, hg(0, 16, 1, []uint64{20, 30, 40}))),
			consumer: hside(hreq("r", 64, hg(0, 32, 0, []uint64{99, 70}))),
			verdict:  verify.Verified,
			groups:   []wantGroup{{id: 0, verdict: verify.Verified}},
			maps:     []string{"-."},
		},
		{
			name:     "first loaded block inside a producer block",
			producer: hside(hreq("r", 64, hg(0, 32, 0, []uint64{30, 70}))),
			consumer: hside(with(hreq("r", 64, hg(0, 16, 1, []uint64{20, 30, 40})), func(r *side.RequestChecks) { r.NumLocalComputedTokens = 16 })),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonInsideProducerBlock}},
			maps:     []string{"_-.."},
		},
		{
			name:     "first loaded block inside a producer block, and a later chunk differs",
			producer: hside(hreq("r", 64, hg(0, 32, 0, []uint64{30, 71}))),
			consumer: hside(with(hreq("r", 64, hg(0, 16, 1, []uint64{20, 30, 40})), func(r *side.RequestChecks) { r.NumLocalComputedTokens = 16 })),
			verdict:  verify.Mismatch,
			groups:   []wantGroup{{id: 0, verdict: verify.Mismatch, positions: []int{2, 3}, checks: []int{0}}},
		},
		{
			// vLLM's consumer: the group is unverified, so "no loaded
			// group" is not added.
			name:     "the consumer skips the only group the producer sent",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			consumer: with(hside(hreq("r", 40)), func(c *side.Checks) { c.Skipped[0] = "host-resident KV" }),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonOneSide}},
		},
		{
			name:     "no loaded group",
			producer: hside(hreq("r", 40)),
			consumer: with(hside(hreq("r", 40)), func(c *side.Checks) { c.Skipped[0] = "host-resident KV" }),
			verdict:  verify.Unverified,
			reasons:  []string{verify.ReasonNoLoadedGroup},
			groups:   []wantGroup{{id: 0, verdict: verify.LeftOut, reason: verify.LeftOutSkipped}},
		},
		{
			name:     "state group: position 0 only, no token-count check",
			producer: hside(hreq("r", 40, with(hg(0, 64, 0, []uint64{5}), stateGroup))),
			consumer: hside(hreq("r", 41, with(hg(0, 64, 0, []uint64{5}, []uint64{5}), stateGroup))),
			verdict:  verify.Verified,
			groups:   []wantGroup{{id: 0, verdict: verify.Verified}},
			maps:     []string{"."},
		},
		{
			name:     "state group differs in one replica",
			producer: hside(hreq("r", 40, with(hg(0, 64, 0, []uint64{5}), stateGroup))),
			consumer: hside(hreq("r", 41, with(hg(0, 64, 0, []uint64{5}, []uint64{6}), stateGroup))),
			verdict:  verify.Mismatch,
			groups:   []wantGroup{{id: 0, verdict: verify.Mismatch, positions: []int{0}, checks: []int{1}}},
		},
		{
			name:     "split-less state group across TP sizes is left out",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3), with(hg(1, 64, 0, []uint64{5}), stateGroup, splitLess))),
			consumer: hside(with(hreq("r", 40, hg(0, 16, 0, v3), with(hg(1, 64, 0, []uint64{6}), stateGroup, splitLess)), func(r *side.RequestChecks) { r.TPSize = 2 })),
			verdict:  verify.Verified,
			groups: []wantGroup{
				{id: 0, verdict: verify.Verified},
				{id: 1, verdict: verify.LeftOut, reason: verify.LeftOutSplitLess},
			},
		},
		{
			// A record claiming kind mamba for an attention group would
			// switch the comparison to position 0 alone.
			name:     "producer claims a state group the consumer holds as attention",
			producer: hside(hreq("r", 40, with(hg(0, 16, 0, []uint64{10, 99, 99}), stateGroup))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonFingerprint}},
		},
		{
			// ... and split_less would leave it out across TP sizes.
			name:     "producer claims split-less for a group the consumer splits",
			producer: hside(hreq("r", 40, hg(0, 16, 0, v3), with(hg(1, 64, 0, []uint64{5}), stateGroup, splitLess))),
			consumer: with(hside(hreq("r", 40, hg(0, 16, 0, v3), with(hg(1, 64, 0, []uint64{6}), stateGroup))), func(c *side.Checks) {
				c.TPSize, c.Requests[0].TPSize = 2, 2
			}),
			verdict: verify.Unverified,
			groups: []wantGroup{
				{id: 0, verdict: verify.Verified},
				{id: 1, verdict: verify.Unverified, reason: verify.ReasonFingerprint},
			},
		},
		{
			name: "nested payload with fewer values than its num_tokens imply is invalid",
			producer: hside(hreq("r", 40, with(hg(0, 16, 0, []uint64{10, 20}), func(g *side.GroupChecks) {
				g.FromPayload = true
			}))),
			consumer: hside(hreq("r", 40, hg(0, 16, 0, v3))),
			verdict:  verify.Unverified,
			groups:   []wantGroup{{id: 0, verdict: verify.Unverified, reason: verify.ReasonInvalidChecksums}},
		},
		{
			name: "flat payload covering part of the load verifies on the overlap, as vLLM",
			producer: hside(hreq("r", 40, with(hg(0, 0, 0, []uint64{10, 20}), func(g *side.GroupChecks) {
				g.FromPayload, g.FlatOnly, g.Fingerprint = true, true, 0
			}))),
			consumer: hside(hreq("r", 40, with(hg(0, 16, 0, v3), func(g *side.GroupChecks) { g.ChecksBlock = [][]uint64{v3} }))),
			verdict:  verify.Verified,
			groups:   []wantGroup{{id: 0, verdict: verify.Verified}},
			maps:     []string{"..-"},
		},
		{
			name:     "split-less state group with equal TP sizes is compared",
			producer: hside(hreq("r", 40, with(hg(1, 64, 0, []uint64{5}), stateGroup, splitLess))),
			consumer: hside(hreq("r", 40, with(hg(1, 64, 0, []uint64{6}), stateGroup, splitLess))),
			verdict:  verify.Mismatch,
			groups:   []wantGroup{{id: 1, verdict: verify.Mismatch, positions: []int{0}, checks: []int{0}}},
		},
	}
}

func stateGroup(g *side.GroupChecks) { g.Kind = layout.KindMamba }
func splitLess(g *side.GroupChecks)  { g.SplitLess = true }

// blockMap writes a group's map as the table does: _ not loaded, - not
// compared, . verified, X mismatch.
func blockMap(m []verify.PositionState) string {
	b := make([]byte, len(m))
	for i, s := range m {
		b[i] = "_-.X"[s]
	}
	return string(b)
}

// TestDiffRules runs every rule of docs/spec.md §9 on hand-built checks
// and checks that every fixed reason is produced by some case.
func TestDiffRules(t *testing.T) {
	produced := map[string]bool{}
	for _, tc := range verdictCases() {
		t.Run(tc.name, func(t *testing.T) {
			res := verify.Diff(tc.producer, tc.consumer)
			if len(res.Requests) != 1 {
				t.Fatalf("%d requests, want 1", len(res.Requests))
			}
			rv := res.Requests[0]
			if rv.Verdict != tc.verdict || res.Verdict != tc.verdict {
				t.Errorf("verdict %q (overall %q), want %q", rv.Verdict, res.Verdict, tc.verdict)
			}
			if fmt.Sprint(rv.Reasons) != fmt.Sprint(append([]string{}, tc.reasons...)) {
				t.Errorf("reasons %q, want %q", rv.Reasons, tc.reasons)
			}
			for _, r := range rv.Reasons {
				produced[r] = true
			}
			if len(rv.Groups) != len(tc.groups) {
				t.Fatalf("%d groups %+v, want %d", len(rv.Groups), rv.Groups, len(tc.groups))
			}
			for i, w := range tc.groups {
				g := rv.Groups[i]
				produced[g.Reason] = true
				got := wantGroup{g.ID, g.Verdict, g.Reason, g.Positions, g.Checks}
				if fmt.Sprint(got) != fmt.Sprint(wantGroup{w.id, w.verdict, w.reason, orEmpty(w.positions), orEmpty(w.checks)}) {
					t.Errorf("group %d: got %+v, want %+v", w.id, got, w)
				}
				if i < len(tc.maps) && blockMap(g.Map) != tc.maps[i] {
					t.Errorf("group %d: map %q, want %q", w.id, blockMap(g.Map), tc.maps[i])
				}
			}
		})
	}
	for _, r := range []string{
		verify.ReasonNoChecksums, verify.ReasonInvalidChecksums, verify.ReasonNotEveryWorker,
		verify.ReasonOneSide, verify.ReasonFingerprint, verify.ReasonMissingReplica,
		verify.ReasonNoBlockInCommon, verify.ReasonBlockSizes, verify.ReasonInsideProducerBlock,
		verify.ReasonNoLoadedGroup, verify.LeftOutSkipped, verify.LeftOutSplitLess,
	} {
		if !produced[r] {
			t.Errorf("no case produces %q", r)
		}
	}
}

func orEmpty(v []int) []int {
	if v == nil {
		return []int{}
	}
	return v
}

// TestDiffOverall: mismatch beats unverified across requests; no request
// at all is unverified.
func TestDiffOverall(t *testing.T) {
	v := []uint64{1}
	p := hside(hreq("a", 16, hg(0, 16, 0, v)), hreq("b", 16, hg(0, 16, 0, v)))
	c := hside(hreq("a", 16, hg(0, 16, 0, []uint64{2})), hreq("b", 16, hg(0, 16, 0, v)), hreq("c", 16, hg(0, 16, 0, v)))
	res := verify.Diff(p, c)
	got := []verify.Verdict{res.Verdict}
	for _, r := range res.Requests {
		got = append(got, r.Verdict)
	}
	want := []verify.Verdict{verify.Mismatch, verify.Mismatch, verify.Verified, verify.Unverified}
	if !slices.Equal(got, want) {
		t.Errorf("verdicts %v, want %v", got, want)
	}
	if v := verify.Diff(p, hside()).Verdict; v != verify.Unverified {
		t.Errorf("no requests: %q, want unverified", v)
	}
	if v := verify.Diff(p, hside(hreq("b", 16, hg(0, 16, 0, v)))).Verdict; v != verify.Verified {
		t.Errorf("one verified request: %q", v)
	}
}

// TestDiffStrict: a loaded block the producer's checksums do not cover is
// noted, and --strict makes its group unverified; a mismatch still wins.
func TestDiffStrict(t *testing.T) {
	flat := func(vals ...uint64) *side.Checks {
		return hside(hreq("r", 40, with(hg(0, 0, 0, vals), func(g *side.GroupChecks) {
			g.FromPayload, g.FlatOnly, g.Fingerprint = true, true, 0
		})))
	}
	cons := hside(hreq("r", 40, with(hg(0, 16, 0, []uint64{10, 20, 30}), func(g *side.GroupChecks) { g.ChecksBlock = [][]uint64{{10, 20, 30}} })))
	res := verify.DiffWith(flat(10, 20), cons, verify.DiffOptions{})
	if res.Verdict != verify.Verified || !slices.ContainsFunc(res.Requests[0].Notes, func(n string) bool {
		return n == "group 0: loaded block positions 2 not compared (not covered by the producer's checksums, or another token count)"
	}) {
		t.Errorf("lenient: %q notes %q", res.Verdict, res.Requests[0].Notes)
	}
	res = verify.DiffWith(flat(10, 20), cons, verify.DiffOptions{Strict: true})
	if res.Verdict != verify.Unverified || res.Requests[0].Groups[0].Reason != verify.ReasonNotCovered {
		t.Errorf("strict: %q %+v", res.Verdict, res.Requests[0].Groups[0])
	}
	res = verify.DiffWith(flat(10, 21), cons, verify.DiffOptions{Strict: true})
	if res.Verdict != verify.Mismatch {
		t.Errorf("strict with a mismatch: %q", res.Verdict)
	}
	res = verify.DiffWith(flat(10, 20, 30), cons, verify.DiffOptions{Strict: true})
	// A flat payload is vLLM's values only: the one note says so.
	if res.Verdict != verify.Verified || len(res.Requests[0].Notes) != 1 || res.Requests[0].Groups[0].Strength != verify.StrengthVLLM {
		t.Errorf("strict, all covered: %q %q", res.Verdict, res.Requests[0].Notes)
	}
}
