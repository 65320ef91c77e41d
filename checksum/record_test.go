package checksum_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/layout/synth"
)

// TestRecordCorpus parses every record of testdata/record and checks the
// outcome cases.txt gives.
func TestRecordCorpus(t *testing.T) {
	cases := testfiles.ReadCases(t, filepath.Join("testdata", "record", "cases.txt"))
	files, _ := filepath.Glob(filepath.Join("testdata", "record", "*.json"))
	if len(files) < 25 || len(files) != len(cases) {
		t.Fatalf("%d record files, %d cases: the corpus must hold at least 25, each with an outcome", len(files), len(cases))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		want := cases[name]
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := checksum.ParseRecords(file, data)
		if want == "ok" {
			if err != nil || len(recs) == 0 {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		var re *checksum.RecordError
		if err == nil || recs != nil || !errors.As(err, &re) {
			t.Errorf("%s: got %v, %v; want a *RecordError", name, recs, err)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: error %q does not name the file and say %q", name, err, want)
		}
	}
}

// TestRecordsMergeLikeDumps: records written by each rank and read back
// merge into the same checks as the dumps themselves.
func TestRecordsMergeLikeDumps(t *testing.T) {
	cfg := synth.Config{Preset: "mla", TP: 2, PP: 2, Seed: 3}
	paths, err := synth.Write(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	recs, err := checksum.Records(context.Background(), dumps, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var read []*checksum.Record
	for _, r := range recs {
		b, err := checksum.MarshalRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := checksum.ParseRecords("rank.json", b)
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, back...)
	}
	a, err := checksum.Merge(recs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := checksum.Merge(read)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) || !a.Complete {
		t.Fatalf("merged records differ or are incomplete:\n%+v\n%+v", a, b)
	}
	checkExpected(t, cfg, b)
	// Three of four ranks leave every request unverified.
	part, err := checksum.Merge(read[:3])
	if err != nil {
		t.Fatal(err)
	}
	if part.Complete || len(part.Requests[0].Unverified) != 1 || part.Requests[0].Unverified[0] != checksum.ReasonNotEveryWorker {
		t.Errorf("partial merge: complete %v, unverified %v", part.Complete, part.Requests[0].Unverified)
	}
	// A rank twice, or ranks of two deployments, do not merge.
	if _, err := checksum.Merge(append(read[:1:1], read[0])); err == nil {
		t.Error("a rank given twice merged")
	}
	other := *read[1]
	other.TPSize = 4
	if _, err := checksum.Merge([]*checksum.Record{read[0], &other}); err == nil {
		t.Error("ranks of tp 2 and tp 4 merged")
	}
}

// FuzzRecords: ParseRecords never panics; it returns records that survive a
// round trip, or nil and a *RecordError.
func FuzzRecords(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "record", "*.json"))
	if len(files) < 25 {
		f.Fatalf("seed corpus holds %d files, want at least 25", len(files))
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := checksum.ParseRecords("fuzz.json", data)
		if err != nil {
			var re *checksum.RecordError
			if recs != nil || !errors.As(err, &re) {
				t.Fatalf("got %v, %T %v", recs, err, err)
			}
			return
		}
		for _, r := range recs {
			b, err := checksum.MarshalRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			back, err := checksum.ParseRecords("again.json", b)
			if err != nil || len(back) != 1 || !reflect.DeepEqual(back[0], r) {
				t.Fatalf("round trip: %v\n%+v\n%+v", err, r, back)
			}
		}
		// Merging valid records never panics.
		checksum.Merge(recs)
	})
}

// TestRecordExactValues: a record must carry exactly the values its
// start, num_tokens and block size imply (docs/spec.md §9): one missing or one too
// many is refused, naming the field.
func TestRecordExactValues(t *testing.T) {
	paths, remove := synthSide(t, synth.Config{Preset: "llama", Layers: 2, Requests: 1})
	defer remove()
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	for _, edit := range []func(g *checksum.RecordRequestGroup){
		func(g *checksum.RecordRequestGroup) { g.Values = g.Values[:len(g.Values)-1] },
		func(g *checksum.RecordRequestGroup) { g.Values = append(g.Values, g.Values[0]) },
		func(g *checksum.RecordRequestGroup) { g.Start++ },
	} {
		rec, err := checksum.RankRecord(context.Background(), dumps[0], checksum.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g := &rec.Requests[0].Groups[0]
		edit(g)
		g.ValuesBlock = nil
		b, err := checksum.MarshalRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := checksum.ParseRecords("rank.json", b); err == nil || !strings.Contains(err.Error(), "requests[0].groups[0].values") {
			t.Errorf("edited record: %v, want an error naming requests[0].groups[0].values", err)
		}
	}
}

// TestMergeValuesBlock: Merge sums values_block as it sums values (the
// same records with values_block moved into values give the same checks),
// and a group has no block-numbered checks once any rank's record lacks
// values_block, whichever rank that is.
func TestMergeValuesBlock(t *testing.T) {
	paths, remove := synthSide(t, synth.Config{Preset: "llama", Layers: 2, Requests: 2, TP: 2})
	defer remove()
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	records := func() []*checksum.Record {
		recs, err := checksum.Records(context.Background(), dumps, checksum.Options{BlockValues: true})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	merge := func(recs []*checksum.Record) *checksum.Checks {
		c, err := checksum.Merge(recs)
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
				g.Values, g.ValuesBlock = g.ValuesBlock, nil
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
		recs[rank].Requests[0].Groups[0].ValuesBlock = nil
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
	paths, remove := synthSide(t, synth.Config{Preset: "tiny", Layers: 6, TP: 2, PP: 6})
	defer remove()
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	recs, err := checksum.Records(context.Background(), dumps, checksum.Options{})
	if err != nil {
		t.Fatal(err)
	}
	missing := func(keep func(r *checksum.Record) bool) []string {
		var kept []*checksum.Record
		for _, r := range recs {
			if keep(r) {
				kept = append(kept, r)
			}
		}
		c, err := checksum.Merge(kept)
		if err != nil {
			t.Fatal(err)
		}
		if c.Complete {
			t.Errorf("%d of 12 ranks: complete", len(kept))
		}
		return c.Missing
	}
	got := missing(func(r *checksum.Record) bool {
		return r.PPRank != 1 && r.PPRank != 5 || r.PPRank == 1 && r.TPRank == 1 || r.PPRank == 5 && r.TPRank == 0
	})
	if want := []string{"tp 0 of 2, pp 1 of 6", "tp 1 of 2, pp 5 of 6"}; !slices.Equal(got, want) {
		t.Errorf("two ranks missing: %q, want %q", got, want)
	}
	got = missing(func(r *checksum.Record) bool { return r.PPRank == 0 && r.TPRank == 0 })
	want := []string{"tp 1 of 2, pp 0 of 6", "tp 0 of 2, pp 1 of 6", "tp 1 of 2, pp 1 of 6", "tp 0 of 2, pp 2 of 6",
		"tp 1 of 2, pp 2 of 6", "tp 0 of 2, pp 3 of 6", "tp 1 of 2, pp 3 of 6", "tp 0 of 2, pp 4 of 6", "..."}
	if !slices.Equal(got, want) {
		t.Errorf("one rank of 12: missing %q, want %q", got, want)
	}
}
