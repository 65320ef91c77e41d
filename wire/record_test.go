package wire_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/internal/testfiles"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/wire"
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
		recs, err := wire.ParseRecords(file, data)
		if want == "ok" {
			if err != nil || len(recs) == 0 {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		re := parse.As(err, parse.Record)
		if err == nil || recs != nil || re == nil {
			t.Errorf("%s: got %v, %v; want a *parse.Error (parse.Record)", name, recs, err)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: error %q does not name the file and say %q", name, err, want)
		}
	}
}

// FuzzRecords: ParseRecords never panics; it returns records that survive a
// round trip, or nil and a *parse.Error (parse.Record).
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
		recs, err := wire.ParseRecords("fuzz.json", data)
		if err != nil {
			re := parse.As(err, parse.Record)
			if recs != nil || re == nil {
				t.Fatalf("got %v, %T %v", recs, err, err)
			}
			return
		}
		for _, r := range recs {
			b, err := wire.MarshalRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			back, err := wire.ParseRecords("again.json", b)
			if err != nil || len(back) != 1 || !reflect.DeepEqual(back[0], r) {
				t.Fatalf("round trip: %v\n%+v\n%+v", err, r, back)
			}
		}
		// Merging valid records never panics.
		side.Merge(recs)
	})
}

// TestRecordExactValues: a record must carry exactly the values its
// start, num_tokens and block size imply (docs/spec.md §9): one missing or one too
// many is refused, naming the field.
func TestRecordExactValues(t *testing.T) {
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layers: 2, Requests: 1})
	if err != nil {
		t.Fatal(err)
	}
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	for _, edit := range []func(g *wire.RecordRequestGroup){
		func(g *wire.RecordRequestGroup) { g.Values = wire.ValuesOf(g.Values.Rows()[:g.Values.Len()-1]...) },
		func(g *wire.RecordRequestGroup) { g.Values = wire.ValuesOf(append(g.Values.Rows(), g.Values.At(0))...) },
		func(g *wire.RecordRequestGroup) { g.Start++ },
	} {
		rec, err := checksum.RankRecord(context.Background(), dumps[0], checksum.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g := &rec.Requests[0].Groups[0]
		edit(g)
		g.ValuesBlock = wire.Values{}
		b, err := wire.MarshalRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wire.ParseRecords("rank.json", b); err == nil || !strings.Contains(err.Error(), "requests[0].groups[0].values") {
			t.Errorf("edited record: %v, want an error naming requests[0].groups[0].values", err)
		}
	}
}

// TestRecordValidAsComputed: a record as an engine computes it (its
// values, block-numbered values and mix check made by wire.NewValues)
// validates in place, as it does once written and read back.
func TestRecordValidAsComputed(t *testing.T) {
	paths, err := synth.Write(t.TempDir(), synth.Config{Preset: "llama", Layers: 2, Requests: 2, TP: 2})
	if err != nil {
		t.Fatal(err)
	}
	dumps, err := layout.OpenSide(paths)
	if err != nil {
		t.Fatal(err)
	}
	defer layout.CloseAll(dumps)
	rec, err := checksum.RankRecord(context.Background(), dumps[0], checksum.Options{BlockValues: true})
	if err != nil {
		t.Fatal(err)
	}
	if g := rec.Requests[0].Groups[0]; g.Values.Keys() == 0 || g.ValuesBlock.IsZero() || g.Mix.IsZero() {
		t.Fatalf("computed group: %d keys, values_block absent %v, mix absent %v", g.Values.Keys(), g.ValuesBlock.IsZero(), g.Mix.IsZero())
	}
	if err := rec.Validate(); err != nil {
		t.Errorf("the computed record: %v", err)
	}
	b, err := wire.MarshalRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ParseRecords("rank.json", b); err != nil {
		t.Errorf("the computed record, read back: %v", err)
	}
}
