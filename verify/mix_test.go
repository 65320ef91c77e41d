package verify_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/wire"
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

// vllmOnlyEngine is the cpu engine without the mix check, as the cuda
// engine is until its kernel has one.
type vllmOnlyEngine struct{}

func (vllmOnlyEngine) Name() string { return "nomix" }
func (vllmOnlyEngine) Run(ctx context.Context, p *ckplan.Plan, out []uint64) error {
	q := *p
	q.Mix, q.Slopes = false, false
	return checksum.Reference{}.Run(ctx, &q, out)
}

// TestCompareMixKey: dumps against dumps draw a run key per comparison
// (a new one each time) unless CompareOptions.MixKey gives one; a side of
// records keeps the published key, and refuses another; an engine without
// the mix check computes none, and its groups say why; RequireMix makes a
// group of vLLM's strength alone unverified, and leaves one with the mix
// check verified.
func TestCompareMixKey(t *testing.T) {
	dir := t.TempDir()
	cfg := synth.Config{Preset: "llama", Layers: 2, Seed: 4}
	if _, err := synth.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Role = "consumer"
	if _, err := synth.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	P := side.Input{Paths: []string{filepath.Join(dir, "producer")}}
	C := side.Input{Paths: []string{filepath.Join(dir, "consumer")}}
	ctx := context.Background()
	compare := func(p side.Input, opts verify.CompareOptions) *verify.DiffResult {
		t.Helper()
		res, err := verify.Compare(ctx, p, C, opts)
		if err != nil {
			t.Fatal(err)
		}
		return res.Diff
	}
	a, b := compare(P, verify.CompareOptions{}), compare(P, verify.CompareOptions{})
	if a.MixKeySource != verify.MixKeyRun || b.MixKeySource != verify.MixKeyRun || a.MixKey == b.MixKey || a.MixKey == 0 || a.Verdict != verify.Verified || a.Strength() != verify.StrengthMix {
		t.Errorf("run keys: %#x (%s), %#x (%s), %s, strength %s", a.MixKey, a.MixKeySource, b.MixKey, b.MixKeySource, a.Verdict, a.Strength())
	}
	key := uint64(0xfeedface)
	if g := compare(P, verify.CompareOptions{MixKey: &key}); g.MixKey != key || g.MixKeySource != verify.MixKeyGiven || g.Verdict != verify.Verified {
		t.Errorf("given key: %#x (%s), %s", g.MixKey, g.MixKeySource, g.Verdict)
	}
	recs, err := side.Records(ctx, P, side.RecordsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(t.TempDir(), "p.record.json")
	data, err := wire.MarshalRecord(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec, data, 0o644); err != nil {
		t.Fatal(err)
	}
	R := side.Input{Paths: []string{rec}}
	if g := compare(R, verify.CompareOptions{}); g.MixKey != 0 || g.MixKeySource != verify.MixKeyPublished || g.Verdict != verify.Verified || g.Strength() != verify.StrengthMix {
		t.Errorf("records: %#x (%s), %s, strength %s", g.MixKey, g.MixKeySource, g.Verdict, g.Strength())
	}
	if _, err := verify.Compare(ctx, R, C, verify.CompareOptions{MixKey: &key}); !errors.Is(err, verify.ErrMixKeySides) {
		t.Errorf("a key with records: %v", err)
	}
	if g := compare(R, verify.CompareOptions{RequireMix: true}); g.Verdict != verify.Verified {
		t.Errorf("RequireMix with the mix check: %s", g.Verdict)
	}
	g := compare(P, verify.CompareOptions{Engine: vllmOnlyEngine{}})
	if g.MixKeySource != "" || g.Verdict != verify.Verified || g.Strength() != verify.StrengthVLLM ||
		g.Requests[0].Groups[0].VLLMOnly != "the producer's checks: the nomix engine computes no mix check yet (internal/kernels/README.md)" {
		t.Errorf("an engine without the mix check: %q, %s, %s, %q", g.MixKeySource, g.Verdict, g.Strength(), g.Requests[0].Groups[0].VLLMOnly)
	}
	g = compare(P, verify.CompareOptions{Engine: vllmOnlyEngine{}, RequireMix: true})
	if gv := g.Requests[0].Groups[0]; g.Verdict != verify.Unverified || gv.Reason != verify.ReasonVLLMOnly || !strings.Contains(gv.Hint, "--require-mix") {
		t.Errorf("RequireMix, vLLM's checksum alone: %s, %+v", g.Verdict, gv)
	}
}
