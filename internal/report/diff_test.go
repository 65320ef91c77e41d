package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
)

// diffFixture is a comparison with one verified, one mismatching and one
// unverified load, a group left out and a drill-down detail.
func diffFixture() *verify.DiffResult {
	g := func(id, start int, vals ...uint64) *side.GroupChecks {
		return &side.GroupChecks{ID: id, Kind: "full_attention", BlockSize: 16, Start: start, Fingerprint: 1, FingerprintFlat: 2, HasFlat: true, Checks: [][]uint64{vals}}
	}
	req := func(id string, groups ...*side.GroupChecks) *side.RequestChecks {
		return &side.RequestChecks{ID: id, NumTokens: 40, TPSize: 1, Groups: groups}
	}
	// mixed gives a group kvaudit's mix check (docs/spec.md §14).
	mixed := func(g *side.GroupChecks, mix ...uint64) *side.GroupChecks {
		g.ChecksMix = [][]uint64{mix}
		return g
	}
	prod := &side.Checks{TPSize: 1, Complete: true, Skipped: map[int]string{2: "host-resident KV"}, Requests: []*side.RequestChecks{
		req("req-0", g(0, 0, 1, 2, 3)),
		req("req-1", g(0, 0, 1, 2, 3)),
		req("req-3", mixed(g(0, 0, 1, 2, 3), 7, 8, 9)),
	}}
	cons := &side.Checks{TPSize: 1, Complete: true, Skipped: map[int]string{2: "host-resident KV"}, Requests: []*side.RequestChecks{
		req("req-0", g(0, 1, 2, 9), g(1, 0, 4, 5, 6)),
		req("req-1", g(0, 0, 1, 2, 3)),
		req("req-2", g(0, 0, 1, 2, 3)),
		req("req-3", mixed(g(0, 0, 1, 2, 3), 7, 0, 9)), // vLLM's checksum agrees
	}}
	cons.Requests[0].NumLocalComputedTokens = 16
	res := verify.Diff(prod, cons)
	res.Requests[0].Details = []drill.Detail{
		{Group: 0, Position: 2, Layer: 1, LayerName: "model.layers.1.self_attn.attn", LastLayer: 1, Layers: []int{1}, Head: 0, LastHead: 0, Heads: []int{0}, Slices: 1,
			Replica: 0, FirstToken: 33, LastToken: 33, Bytes: 1, Bits: 1, Hint: "1 bit flipped",
			TPRank: 1, PPRank: 0, File: "bad/rank-0-1.safetensors", Block: 7, Offset: 123456},
		{Group: 0, Position: 2, Layer: 2, LayerName: "model.layers.2.self_attn.attn", LastLayer: 3, Layers: []int{2, 3}, Head: 4, LastHead: 7, Heads: []int{4, 5, 7}, Slices: 6,
			Replica: 0, FirstToken: 32, LastToken: 39, Bytes: 6144, Bits: 24576, Hint: "holds the block of position 0",
			TPRank: 1, PPRank: 0, File: "bad/rank-0-1.safetensors", Block: 7, Offset: 654321},
	}
	res.Requests[0].Notes = []string{"a note"}
	return res
}

func TestDiffJSON(t *testing.T) {
	var b bytes.Buffer
	if err := RenderDiff(&b, diffFixture(), FormatJSON, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	// The keys and values of docs/spec.md §12, read back untyped.
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	r0 := doc["requests"].([]any)[0].(map[string]any)
	groups := r0["groups"].([]any)
	check := func(what string, got, want any) {
		t.Helper()
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Errorf("%s = %s, want %s", what, gj, wj)
		}
	}
	check("format", doc["format"], "kvaudit-diff/1")
	check("verdict", doc["verdict"], "mismatch")
	check("requests[0].id", r0["id"], "req-0")
	check("requests[0].verdict", r0["verdict"], "mismatch")
	check("requests[0].reasons", r0["reasons"], []string{})
	check("groups[0]", []any{groups[0].(map[string]any)["id"], groups[0].(map[string]any)["verdict"], groups[0].(map[string]any)["positions"], groups[0].(map[string]any)["reason"], groups[0].(map[string]any)["map"]},
		[]any{0, "mismatch", []int{2}, "", "_.X"})
	check("groups[1]", []any{groups[1].(map[string]any)["verdict"], groups[1].(map[string]any)["positions"], groups[1].(map[string]any)["reason"]},
		[]any{"unverified", []int{}, "a group is checksummed by one side only"})
	check("groups[2]", []any{groups[2].(map[string]any)["verdict"], groups[2].(map[string]any)["reason"]}, []any{"left out", "skipped on both sides"})
	d := r0["details"].([]any)[0].(map[string]any)
	for k, v := range map[string]any{"group": 0, "position": 2, "layer": 1, "head": 0, "replica": 0, "first_token": 33, "last_token": 33, "bytes": 1, "hint": "1 bit flipped",
		"last_layer": 1, "layers": []int{1}, "heads": []int{0}, "slices": 1, "tp_rank": 1, "pp_rank": 0, "file": "bad/rank-0-1.safetensors", "block": 7, "offset": 123456} {
		check("details[0]."+k, d[k], v)
	}
	d1 := r0["details"].([]any)[1].(map[string]any)
	for k, v := range map[string]any{"layer": 2, "last_layer": 3, "layers": []int{2, 3}, "head": 4, "last_head": 7, "heads": []int{4, 5, 7}, "slices": 6} {
		check("details[1]."+k, d1[k], v)
	}
	r2 := doc["requests"].([]any)[2].(map[string]any)
	check("requests[2]", []any{r2["verdict"], r2["reasons"], r2["details"]}, []any{"unverified", []string{"the producer sent no checksums"}, []any{}})
	r1g := doc["requests"].([]any)[1].(map[string]any)["groups"].([]any)[0].(map[string]any)
	check("requests[1].groups[0]", []any{r1g["strength"], r1g["mix_only"]}, []any{"vllm", nil})
	r3 := doc["requests"].([]any)[3].(map[string]any)
	r3g := r3["groups"].([]any)[0].(map[string]any)
	check("requests[3].groups[0]", []any{r3g["verdict"], r3g["positions"], r3g["strength"], r3g["mix_only"]}, []any{"mismatch", []int{1}, "vllm+mix", []int{1}})
}

func TestDiffJUnit(t *testing.T) {
	for _, allow := range []bool{false, true} {
		var b bytes.Buffer
		if err := RenderDiff(&b, diffFixture(), FormatJUnit, DiffOptions{AllowUnverified: allow}); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			XMLName  xml.Name `xml:"testsuites"`
			Tests    int      `xml:"tests,attr"`
			Failures int      `xml:"failures,attr"`
			Errors   int      `xml:"errors,attr"`
			Skipped  int      `xml:"skipped,attr"`
			Suites   []struct {
				Name  string `xml:"name,attr"`
				Cases []struct {
					Name    string `xml:"name,attr"`
					Failure *struct {
						Message string `xml:"message,attr"`
						Text    string `xml:",chardata"`
					} `xml:"failure"`
					Error   *struct{} `xml:"error"`
					Skipped *struct {
						Message string `xml:"message,attr"`
					} `xml:"skipped"`
				} `xml:"testcase"`
			} `xml:"testsuite"`
		}
		if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
			t.Fatalf("not valid XML: %v\n%s", err, b.String())
		}
		// req-0: load, group 0 (failure), 1 (unverified), 2 (left out);
		// req-1: load, groups 0 and 2; req-2: load (no checksums); req-3:
		// load, group 0 (failure: the mix check), group 2.
		wantErrors, wantSkipped := 2, 3
		if allow {
			wantErrors, wantSkipped = 0, 5
		}
		if len(doc.Suites) != 4 || doc.Tests != 11 || doc.Failures != 2 || doc.Errors != wantErrors || doc.Skipped != wantSkipped {
			t.Errorf("allow %v: %d suites, tests %d failures %d errors %d skipped %d", allow, len(doc.Suites), doc.Tests, doc.Failures, doc.Errors, doc.Skipped)
		}
		f := doc.Suites[0].Cases[1].Failure
		if f == nil || f.Message != "mismatch at consumer block positions 2 (checks 0)" || !strings.Contains(f.Text, "1 bit flipped") {
			t.Errorf("group 0 failure %+v", f)
		}
	}
}

func TestDiffTable(t *testing.T) {
	var b bytes.Buffer
	if err := RenderDiff(&b, diffFixture(), FormatTable, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# kvaudit diff: mismatch\n",
		"req-0\t0\tfull_attention\tmismatch\t2\t0\t\t_.X\n",
		"req-0\t1\tfull_attention\tunverified\t\t\ta group is checksummed by one side only\t---\n",
		"req-0\t2\t\tleft out\t\t\tskipped on both sides\t\n",
		"req-2\t-\t\tunverified\t\t\tthe producer sent no checksums\t\n",
		"4 request(s): 1 verified, 2 mismatch, 1 unverified\n",
		"req-3\t0\tfull_attention\tmismatch\t1\t0\t\t.X.\n",
		"request req-3: group 0: block position(s) 1 differ in kvaudit's mix check only: vLLM's checksum alone would have verified them\n",
		"req-0\t0\t2\t1\tmodel.layers.1.self_attn.attn\t0\t0\t0:1\t33\t1\t7\tbad/rank-0-1.safetensors\t123456\t1 bit flipped\n",
		"req-0\t0\t2\t2-3\tmodel.layers.2-3.self_attn.attn\t4-5,7\t0\t0:1\t32-39\t6144\t7\tbad/rank-0-1.safetensors\t654321\tholds the block of position 0\n",
		"request req-0: a note\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plain table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := RenderDiff(&b, diffFixture(), FormatTable, DiffOptions{Style: Style{Color: true}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "╭") || !strings.Contains(b.String(), "1 bit flipped") {
		t.Errorf("styled table:\n%s", b.String())
	}
	b.Reset()
	if err := RenderDiff(&b, diffFixture(), FormatMarkdown, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(squeeze(b.String()), "| req-0 | 0 | full_attention | mismatch | 2 | 0 | | _.X |") {
		t.Errorf("markdown:\n%s", b.String())
	}
}

// TestDiffTableNothingDiffers: with no detail, a request's notes go under
// the verdicts and there is no drill-down table (no empty header).
func TestDiffTableNothingDiffers(t *testing.T) {
	res := diffFixture()
	res.Requests[0].Details = nil
	for _, st := range []Style{{}, {Color: true}, {Aligned: true, Width: 80}} {
		var b bytes.Buffer
		if err := RenderDiff(&b, res, FormatTable, DiffOptions{Style: st}); err != nil {
			t.Fatal(err)
		}
		if out := b.String(); strings.Contains(out, "drill-down") || !strings.Contains(out, "request req-0: a note") {
			t.Errorf("style %+v: a drill-down header, or the note is lost:\n%s", st, out)
		}
	}
}

// squeeze collapses runs of spaces (markdown tables are padded to align).
func squeeze(s string) string { return regexp.MustCompile(" {2,}").ReplaceAllString(s, " ") }

func TestBlockMap(t *testing.T) {
	m := make([]verify.PositionState, 10)
	for i := range m {
		m[i] = verify.PosVerified
	}
	m[0], m[7] = verify.PosNotLoaded, verify.PosMismatch
	if s, per := blockMap(m, 0, nil); s != "_......X.." || per != 1 {
		t.Errorf("full map %q per %d", s, per)
	}
	if s, per := blockMap(m, 4, nil); s != "..X." || per != 3 {
		t.Errorf("scaled map %q per %d", s, per)
	}
}

// TestDiffFitsWidth: on an 80-column terminal the diff table of a long
// load keeps its verdict and block map (scaled, the mismatch still shown)
// and leaves out low-value columns, styled or aligned; without a width
// nothing is left out and the aligned map is cut at mapWidth cells.
func TestDiffFitsWidth(t *testing.T) {
	m := make([]verify.PositionState, 300)
	for i := range m {
		m[i] = verify.PosVerified
	}
	m[250] = verify.PosMismatch
	res := &verify.DiffResult{Verdict: verify.Mismatch, Requests: []*verify.RequestVerdict{{
		ID: "cmpl-7f3a9c2e-long-request-id", ProducerID: "cmpl-7f3a9c2e-long-request-id", Verdict: verify.Mismatch,
		Groups: []*verify.GroupVerdict{{ID: 0, Kind: "full_attention", Verdict: verify.Mismatch, Positions: []int{250}, Checks: []int{0}, Map: m}},
	}}}
	for _, style := range []Style{{Color: true, Width: 80}, {Aligned: true, Width: 80}} {
		var b bytes.Buffer
		if err := RenderDiff(&b, res, FormatTable, DiffOptions{Style: style}); err != nil {
			t.Fatal(err)
		}
		out := string(sgr.ReplaceAll(b.Bytes(), nil))
		fits(t, []byte(out), 80)
		for _, want := range []string{"verdict", "blocks", "mismatch", "X", strings.Repeat(".", 20), "blocks scaled to fit: one cell per", "empty, not shown: reason\n", "left out to fit 80 columns: kind, checks, positions"} {
			if !strings.Contains(out, want) {
				t.Errorf("%+v: lacks %q:\n%s", style, want, out)
			}
		}
		if strings.Contains(out, "full_attention") || strings.Contains(out, strings.Repeat(".", 63)) {
			t.Errorf("%+v: kind not left out or map not scaled to the room left:\n%s", style, out)
		}
	}
	var b bytes.Buffer
	if err := RenderDiff(&b, res, FormatTable, DiffOptions{Style: Style{Aligned: true}}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "full_attention") || !strings.Contains(out, strings.Repeat(".", 62)+"X") || !strings.Contains(out, "one cell per 4 positions") || strings.Contains(out, "left out") {
		t.Errorf("no width: %s", out)
	}
}

// TestStrengthNotes: one note per cause of a vLLM-only comparison, in the
// order first met, each naming its requests once (a request with two
// such groups too), and none for the groups the mix check judged.
func TestStrengthNotes(t *testing.T) {
	const a, b = "cause a", "cause b"
	vllm := func(id int, why string) *verify.GroupVerdict {
		return &verify.GroupVerdict{ID: id, Strength: verify.StrengthVLLM, VLLMOnly: why}
	}
	res := &verify.DiffResult{Requests: []*verify.RequestVerdict{
		{ID: "r0", Groups: []*verify.GroupVerdict{vllm(0, a), vllm(1, a)}},
		{ID: "r1", Groups: []*verify.GroupVerdict{{ID: 0, Strength: verify.StrengthMix}}},
		{ID: "r2", Groups: []*verify.GroupVerdict{vllm(0, b), vllm(1, a)}},
	}}
	got := strengthNotes(res)
	tail := "; kvaudit's nested payload, records and dumps add its mix check"
	want := []string{
		"compared by vLLM's checksum only (cause a) for r0, r2: " + verify.MissedByVLLM + tail,
		"compared by vLLM's checksum only (cause b) for r2: " + verify.MissedByVLLM + tail,
	}
	if !slices.Equal(got, want) {
		t.Errorf("strengthNotes:\n%q\nwant\n%q", got, want)
	}
}
