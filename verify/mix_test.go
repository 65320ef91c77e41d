package verify_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// withMix gives a group kvaudit's mix check, one list per check.
func withMix(mix ...[]uint64) func(*side.GroupChecks) {
	return func(g *side.GroupChecks) { g.ChecksMix = mix }
}

// TestDiffMixOnly: where vLLM's checksums agree and kvaudit's mix check
// differs, the position is a mismatch, listed in MixOnly with a note that
// vLLM's checksum alone would have verified it; every consumer check is
// compared, and block sizes that differ add the mix check up in chunks as
// they add vLLM's.
func TestDiffMixOnly(t *testing.T) {
	prod := hside(hreq("r", 48, with(hg(0, 16, 0, []uint64{1, 2, 3}), withMix([]uint64{7, 8, 9}))))
	same := hside(hreq("r", 48, with(hg(0, 16, 0, []uint64{1, 2, 3}), withMix([]uint64{7, 8, 9}))))
	res := verify.Diff(prod, same)
	if g := res.Requests[0].Groups[0]; res.Verdict != verify.Verified || g.Strength != verify.StrengthMix || len(g.MixOnly) != 0 || len(res.Requests[0].Notes) != 0 {
		t.Fatalf("equal: %q %+v %q", res.Verdict, g, res.Requests[0].Notes)
	}
	// Check 1 (a replica copy) differs in the mix check at position 1.
	cons := hside(hreq("r", 48, with(hg(0, 16, 0, []uint64{1, 2, 3}, []uint64{1, 2, 3}), withMix([]uint64{7, 8, 9}, []uint64{7, 8 ^ 1<<63, 9}))))
	res = verify.Diff(prod, cons)
	g := res.Requests[0].Groups[0]
	if res.Verdict != verify.Mismatch || !slices.Equal(g.Positions, []int{1}) || !slices.Equal(g.MixOnly, []int{1}) || !slices.Equal(g.Checks, []int{1}) || g.Strength != verify.StrengthMix {
		t.Fatalf("mix only: %q %+v", res.Verdict, g)
	}
	want := "group 0: block position(s) 1 differ in kvaudit's mix check only: vLLM's checksum alone would have verified them"
	if !slices.Contains(res.Requests[0].Notes, want) {
		t.Errorf("notes %q, want %q", res.Requests[0].Notes, want)
	}
	// vLLM's checksum differs too: a mismatch, not mix-only.
	both := hside(hreq("r", 48, with(hg(0, 16, 0, []uint64{1, 5, 3}), withMix([]uint64{7, 0, 9}))))
	if g := verify.Diff(prod, both).Requests[0].Groups[0]; !slices.Equal(g.Positions, []int{1}) || len(g.MixOnly) != 0 {
		t.Errorf("both differ: %+v", g)
	}
	// A consumer of block size 8: its pairs of blocks add up to the
	// producer's blocks, in both checks.
	split := func(mixDelta uint64) *side.Checks {
		return hside(hreq("r", 48, with(hg(0, 8, 0, []uint64{1, 0, 2, 0, 1, 2}), withMix([]uint64{3, 4, 4 + mixDelta, 4, 5, 4}))))
	}
	if res := verify.Diff(prod, split(0)); res.Verdict != verify.Verified {
		t.Errorf("block size 8, equal: %q %+v", res.Verdict, res.Requests[0].Groups[0])
	}
	if g := verify.Diff(prod, split(1)).Requests[0].Groups[0]; !slices.Equal(g.Positions, []int{2, 3}) || !slices.Equal(g.MixOnly, []int{2, 3}) {
		t.Errorf("block size 8, mix differs in the second chunk: %+v", g)
	}
	// A state group: position 0, no token count.
	state := func(mix uint64) *side.Checks {
		return hside(hreq("r", 48, with(hg(1, 16, 0, []uint64{4}), withMix([]uint64{mix}), func(g *side.GroupChecks) { g.Kind = layout.KindMamba })))
	}
	if g := verify.Diff(state(6), state(7)).Requests[0].Groups[0]; g.Verdict != verify.Mismatch || !slices.Equal(g.MixOnly, []int{0}) {
		t.Errorf("state group: %+v", g)
	}
}

// TestDiffVLLMStrength: when a side lacks the mix check (a flat or
// five-element nested payload, records without it) the comparison is by
// vLLM's checksum alone, and a note says why and what that misses; the mix
// check of one side changes nothing.
func TestDiffVLLMStrength(t *testing.T) {
	withMixSide := hside(hreq("r", 32, with(hg(0, 16, 0, []uint64{1, 2}), withMix([]uint64{7, 8})), with(hg(1, 16, 0, []uint64{3, 4}), withMix([]uint64{5, 6}))))
	plain := hside(hreq("r", 32, hg(0, 16, 0, []uint64{1, 2}), hg(1, 16, 0, []uint64{3, 4})))
	payload := side.ProducerChecks(hreq("r", 32, with(hg(0, 16, 0, []uint64{1, 2}), func(g *side.GroupChecks) { g.FromPayload = true })))
	oneGroup := hside(hreq("r", 32, with(hg(0, 16, 0, []uint64{1, 2}), withMix([]uint64{7, 8}))))
	for _, c := range []struct {
		name               string
		producer, consumer *side.Checks
		groups             string
		why                string
	}{
		{"producer records", plain, withMixSide, "groups 0-1", "the producer's checks have no mix check: the cuda engine's, or records from before it"},
		{"consumer records", withMixSide, plain, "groups 0-1", "the consumer's checks have no mix check: the cuda engine's, or records from before it"},
		{"payload", payload, oneGroup, "group 0", "the producer's payload carries vLLM's values only"},
	} {
		res := verify.Diff(c.producer, c.consumer)
		if res.Verdict != verify.Verified {
			t.Errorf("%s: %q", c.name, res.Verdict)
		}
		for _, g := range res.Requests[0].Groups {
			if g.Strength != verify.StrengthVLLM {
				t.Errorf("%s: group %d strength %q", c.name, g.ID, g.Strength)
			}
		}
		want := c.groups + ": compared by vLLM's checksum only (" + c.why + "): " + verify.MissedByVLLM
		if notes := res.Requests[0].Notes; !slices.Contains(notes, want) {
			t.Errorf("%s: notes %q, want %q", c.name, notes, want)
		}
	}
	// Nothing compared: no strength, no note.
	res := verify.Diff(hside(), plain)
	if g := res.Requests[0]; len(g.Groups) != 0 || slices.ContainsFunc(g.Notes, func(n string) bool { return strings.Contains(n, "vLLM's checksum only") }) {
		t.Errorf("no producer: %+v", g)
	}
}
