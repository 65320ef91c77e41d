package side_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/wire"
)

// openSynth writes the synthetic side cfg describes and opens its dumps,
// closed when the test ends.
func openSynth(t *testing.T, cfg synth.Config) []*layout.Dump {
	t.Helper()
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { layout.CloseAll(dumps) })
	return dumps
}

// TestRecordsMergeLikeDumps: records written by each rank and read back
// merge into the same checks as the dumps themselves.
func TestRecordsMergeLikeDumps(t *testing.T) {
	cfg := synth.Config{Preset: "mla", TP: 2, PP: 2, Seed: 3}
	dumps := openSynth(t, cfg)
	recs, err := checksum.Records(context.Background(), dumps, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var read []*wire.Record
	for _, r := range recs {
		b, err := wire.MarshalRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := wire.ParseRecords("rank.json", b)
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, back...)
	}
	a, err := side.Merge(recs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := side.Merge(read)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) || !a.Complete {
		t.Fatalf("merged records differ or are incomplete:\n%+v\n%+v", a, b)
	}
	checkExpected(t, cfg, b)
	// Three of four ranks leave every request unverified.
	part, err := side.Merge(read[:3])
	if err != nil {
		t.Fatal(err)
	}
	if part.Complete || len(part.Requests[0].Unverified) != 1 || part.Requests[0].Unverified[0] != side.ReasonNotEveryWorker {
		t.Errorf("partial merge: complete %v, unverified %v", part.Complete, part.Requests[0].Unverified)
	}
	// A rank twice, or ranks of two deployments, do not merge.
	if _, err := side.Merge(append(read[:1:1], read[0])); err == nil {
		t.Error("a rank given twice merged")
	}
	other := *read[1]
	other.TPSize = 4
	if _, err := side.Merge([]*wire.Record{read[0], &other}); err == nil {
		t.Error("ranks of tp 2 and tp 4 merged")
	}
}

// TestMergeValuesBlock: Merge sums values_block as it sums values (the
// same records with values_block moved into values give the same checks),
// and a group has no block-numbered checks once any rank's record lacks
// values_block, whichever rank that is.
func TestMergeValuesBlock(t *testing.T) {
	dumps := openSynth(t, synth.Config{Preset: "llama", Layers: 2, Requests: 2, TP: 2})
	records := func() []*wire.Record {
		recs, err := checksum.Records(context.Background(), dumps, checksum.Options{BlockValues: true})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	merge := func(recs []*wire.Record) *side.Checks {
		c, err := side.Merge(recs)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	got := merge(records())
	moved := records()
	for _, rec := range moved {
		for ri := range rec.Requests {
			for gi := range rec.Requests[ri].Groups {
				g := &rec.Requests[ri].Groups[gi]
				g.Values, g.ValuesBlock = g.ValuesBlock, wire.Values{}
			}
		}
	}
	want := merge(moved)
	n := 0
	for ri, r := range got.Requests {
		for gi, g := range r.Groups {
			w := want.Requests[ri].Groups[gi]
			if g.ChecksBlock == nil || !slices.EqualFunc(g.ChecksBlock, w.Checks, slices.Equal) {
				t.Errorf("%s group %d: ChecksBlock %v, want %v", r.ID, g.ID, g.ChecksBlock, w.Checks)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no request groups (the test checks nothing)")
	}
	for rank := range dumps {
		recs := records()
		recs[rank].Requests[0].Groups[0].ValuesBlock = wire.Values{}
		c := merge(recs)
		g := c.Requests[0].Group(recs[rank].Requests[0].Groups[0].ID)
		if g == nil || g.ChecksBlock != nil || g.Checks == nil {
			t.Errorf("rank %d without values_block: merged group %+v, want Checks and no ChecksBlock", rank, g)
		}
	}
}

// TestMergeMissingRanks: an incomplete side names the ranks that did not
// report, in (pp, tp) order, at most 8 of them and then "...".
func TestMergeMissingRanks(t *testing.T) {
	dumps := openSynth(t, synth.Config{Preset: "tiny", Layers: 6, TP: 2, PP: 6})
	recs, err := checksum.Records(context.Background(), dumps, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	missing := func(keep func(r *wire.Record) bool) []string {
		var kept []*wire.Record
		for _, r := range recs {
			if keep(r) {
				kept = append(kept, r)
			}
		}
		c, err := side.Merge(kept)
		if err != nil {
			t.Fatal(err)
		}
		if c.Complete {
			t.Errorf("%d of 12 ranks: complete", len(kept))
		}
		return c.Missing
	}
	got := missing(func(r *wire.Record) bool {
		return r.PPRank != 1 && r.PPRank != 5 || r.PPRank == 1 && r.TPRank == 1 || r.PPRank == 5 && r.TPRank == 0
	})
	if want := []string{"tp 0 of 2, pp 1 of 6", "tp 1 of 2, pp 5 of 6"}; !slices.Equal(got, want) {
		t.Errorf("two ranks missing: %q, want %q", got, want)
	}
	got = missing(func(r *wire.Record) bool { return r.PPRank == 0 && r.TPRank == 0 })
	want := []string{"tp 1 of 2, pp 0 of 6", "tp 0 of 2, pp 1 of 6", "tp 1 of 2, pp 1 of 6", "tp 0 of 2, pp 2 of 6",
		"tp 1 of 2, pp 2 of 6", "tp 0 of 2, pp 3 of 6", "tp 1 of 2, pp 3 of 6", "tp 0 of 2, pp 4 of 6", "..."}
	if !slices.Equal(got, want) {
		t.Errorf("one rank of 12: missing %q, want %q", got, want)
	}
}

// checkExpected compares every check of every request and group with the
// values synth computes straight from the logical KV (synth.Expected).
func checkExpected(t *testing.T, cfg synth.Config, got *side.Checks) {
	t.Helper()
	want, err := synth.Expected(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Requests) != len(want) {
		t.Fatalf("%d requests, want %d", len(got.Requests), len(want))
	}
	for _, r := range got.Requests {
		wg := want[r.ID]
		if len(r.Unverified) != 0 || len(r.Groups) != len(wg) {
			t.Fatalf("request %s: unverified %v, %d groups, want %d", r.ID, r.Unverified, len(r.Groups), len(wg))
		}
		for _, g := range r.Groups {
			e := wg[g.ID]
			for k, check := range g.Checks {
				if g.Start != e.Start || !slices.Equal(check, e.Values) {
					t.Errorf("request %s group %d check %d: %x from %d, want %x from %d", r.ID, g.ID, k, check, g.Start, e.Values, e.Start)
				}
			}
		}
	}
}

// TestMergeLeavesRecords: the checks may share memory with the records
// (one rank's one replica key is not copied), but merging ranks never
// changes a record's values: sums over several ranks are copies, and
// merging the same records again gives the same checks.
func TestMergeLeavesRecords(t *testing.T) {
	for _, cfg := range []synth.Config{{Preset: "llama", TP: 2, Seed: 5}, {Preset: "llama", PP: 2, Seed: 5}, {Preset: "tiny", TP: 1, Seed: 5}, {Preset: "llama", TP: 16, Seed: 5}} {
		dumps := openSynth(t, cfg)
		recs, err := checksum.Records(context.Background(), dumps, checksum.Options{BlockValues: true})
		layout.CloseAll(dumps)
		if err != nil {
			t.Fatal(err)
		}
		var before []string
		for _, r := range recs {
			b, _ := wire.MarshalRecord(r)
			before = append(before, string(b))
		}
		first, err := side.Merge(recs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if b, _ := wire.MarshalRecord(r); string(b) != before[i] {
				t.Fatalf("%+v: merging changed record %d", cfg, i)
			}
		}
		again, err := side.Merge(recs)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("%+v: merging twice differs", cfg)
		}
		checkExpected(t, cfg, first)
	}
}

// TestMergeMixWithoutCopies: a one-rank record's mix check becomes the
// checks' ChecksMix as it is, sharing its memory as Checks shares Values'
// (docs/spec.md §8: a record is held once), and a second rank's is added
// to a copy, the first record left as it was.
func TestMergeMixWithoutCopies(t *testing.T) {
	rec := func(tp, tps int, mix uint64) *wire.Record {
		return &wire.Record{Format: wire.RecordFormat, TPRank: tp, TPSize: tps, PPSize: 1, SkippedGroups: map[string]string{},
			Groups: []wire.RecordGroup{{ID: 0, Kind: layout.KindFullAttention, BlockSize: 16, Layers: 1}},
			Requests: []wire.RecordRequest{{ID: "r", NumTokens: 32, Groups: []wire.RecordRequestGroup{{
				ID: 0, ReplicaKeys: [][2]int{{1, 0}}, Values: wire.ValuesOf([]uint64{1}, []uint64{2}), Mix: wire.ValuesOf([]uint64{mix}, []uint64{mix + 1}),
			}}}}}
	}
	one := rec(0, 1, 10)
	c, err := side.Merge([]*wire.Record{one})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Requests[0].Groups[0].ChecksMix
	if len(got) != 1 || !slices.Equal(got[0], []uint64{10, 11}) {
		t.Fatalf("ChecksMix %v, want [[10 11]]", got)
	}
	if &got[0][0] != &one.Requests[0].Groups[0].Mix.Flat()[0] {
		t.Error("a one-rank record's mix check was copied")
	}
	a, b := rec(0, 2, 10), rec(1, 2, 100)
	c, err = side.Merge([]*wire.Record{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Requests[0].Groups[0].ChecksMix; len(got) != 1 || !slices.Equal(got[0], []uint64{110, 112}) {
		t.Fatalf("two ranks' ChecksMix %v, want [[110 112]]", got)
	}
	if !slices.Equal(a.Requests[0].Groups[0].Mix.Flat(), []uint64{10, 11}) {
		t.Errorf("merging changed the first record's mix check: %v", a.Requests[0].Groups[0].Mix)
	}
}
