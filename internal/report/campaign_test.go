package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/verify"
)

// campaignResult is a campaign with one failing kind, one passing kind, a
// control kind and a flagged clean pair (names with XML's special
// characters).
func campaignResult(pass bool) *inject.CampaignResult {
	r := &inject.CampaignResult{Seed: 7, Trials: 4, Pass: pass, Elapsed: 1500 * time.Millisecond,
		Kinds: []inject.KindResult{
			{Kind: inject.BitFlip, Detector: inject.DetectChecksum, Trials: 4, Detected: 4, Localised: 4, CaughtByVLLM: 4, Pairs: map[string]int{"a<b": 4}, Example: "req-0 g0 .X"},
			{Kind: inject.CancellingFlips, Detector: inject.DetectChecksum, Trials: 4, Detected: 4, Localised: 4, Pairs: map[string]int{"a<b": 4}, Example: "req-0 g0 X."},
			{Kind: inject.StaleTail, Detector: inject.DetectTail, Trials: 3, NotApplicable: 1, Detected: 3, Localised: 3, Pairs: map[string]int{"a<b": 3}},
			{Kind: inject.PastNumTokens, Detector: inject.DetectNone, Control: true, Trials: 4, Pairs: map[string]int{"a<b": 4}},
			{Kind: inject.WrongPrefix, Detector: inject.DetectStored, NotApplicable: 4, Pairs: map[string]int{}},
		},
		Pairs: []inject.PairResult{{Name: "a<b", Verified: true}},
	}
	if !pass {
		r.Kinds[0].Localised, r.Kinds[0].Missed, r.Kinds[0].Detected = 2, 1, 3
		r.Kinds[0].Failures = []inject.TrialFailure{{Trial: 1, Pair: "a<b", Seed: 9, Fault: `flipped "x" & y`}, {Trial: 2, Pair: "a<b", Seed: 10, Fault: "f", Problems: []string{"positions [1], want [2] <&>"}}}
		r.Kinds[0].CaughtByVLLM = 3
		r.Kinds[3].FalsePositives = 1
		r.Pairs = append(r.Pairs, inject.PairResult{Name: "c&d", Problems: []string{"request req-0: mismatch"}})
	}
	return r
}

// TestCampaignJUnitValid: the JUnit output parses as XML, counts its cases,
// and fails exactly the failing kinds and pairs.
func TestCampaignJUnitValid(t *testing.T) {
	for _, pass := range []bool{true, false} {
		var b bytes.Buffer
		if err := RenderCampaign(&b, campaignResult(pass), FormatJUnit, Style{}); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(b.String(), xml.Header) {
			t.Errorf("no XML header")
		}
		var doc junitSuites
		if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
			t.Fatalf("pass %v: not XML: %v\n%s", pass, err, b.String())
		}
		// A strict token walk too: every element closed.
		dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
		for {
			if _, err := dec.Token(); err != nil {
				if err.Error() != "EOF" {
					t.Fatalf("pass %v: %v", pass, err)
				}
				break
			}
		}
		tests, failures, skipped := 0, 0, 0
		var failed []string
		for _, s := range doc.Suites {
			if s.Tests != len(s.Cases) {
				t.Errorf("suite %s: tests=%d, %d cases", s.Name, s.Tests, len(s.Cases))
			}
			for _, c := range s.Cases {
				tests++
				if c.Failure != nil {
					failures++
					failed = append(failed, c.Name)
				}
				if c.Skipped != nil {
					skipped++
				}
			}
		}
		if doc.Tests != tests || doc.Failures != failures || doc.Skipped != skipped {
			t.Errorf("pass %v: totals %d/%d/%d, cases %d/%d/%d", pass, doc.Tests, doc.Failures, doc.Skipped, tests, failures, skipped)
		}
		want := "[]"
		if !pass {
			want = "[bit-flip past-num-tokens clean c&d]"
		}
		if got := fmt.Sprint(failed); got != want {
			t.Errorf("pass %v: failed cases %q, want %s", pass, failed, want)
		}
		if skipped != 1 {
			t.Errorf("pass %v: %d skipped, want 1 (wrong-prefix ran nowhere)", pass, skipped)
		}
	}
}

// TestCampaignJSONAndTable: the JSON has the schema's fields, seeds as hex
// strings; the table has a row per kind plus the clean controls, and the
// failing trials.
func TestCampaignJSONAndTable(t *testing.T) {
	var b bytes.Buffer
	if err := RenderCampaign(&b, campaignResult(false), FormatJSON, Style{}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["format"] != CampaignFormat || got["pass"] != false || got["seed"] != "0x0000000000000007" {
		t.Errorf("JSON head: %v %v %v", got["format"], got["pass"], got["seed"])
	}
	kinds := got["kinds"].([]any)
	first := kinds[0].(map[string]any)
	if first["failed"] != true || first["missed"] != 1.0 || len(first["failures"].([]any)) != 2 || first["caught_by_vllm_checksum"] != 3.0 {
		t.Errorf("bit-flip row: %v", first)
	}
	if second := kinds[1].(map[string]any); second["kind"] != "cancelling-flips" || second["caught_by_vllm_checksum"] != 0.0 || second["failed"] != false {
		t.Errorf("cancelling-flips row: %v", second)
	}
	b.Reset()
	if err := RenderCampaign(&b, campaignResult(false), FormatTable, Style{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"kvaudit campaign: FAIL", "bit-flip\tchecksum\t4\t3\t2\t1\t0\t3\t1/2", "cancelling-flips\tchecksum\t4\t4\t4\t0\t0\t0\t1/2", "stale-tail\ttail-audit\t3 (+1 n/a)",
		"past-num-tokens\tnone (control)\t4\t-\t-\t-\t1", "clean\tnone (control)\t2\t-\t-\t-\t1", "failing trials", "positions [1], want [2]"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := RenderCampaign(&b, campaignResult(true), FormatMarkdown, Style{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(squeeze(b.String()), "| bit-flip | checksum | 4 | 4 | 4 | 0 | 0 | 4 | 1/1 | req-0 g0 .X |") || strings.Contains(b.String(), "failing trials") {
		t.Errorf("markdown:\n%s", b.String())
	}
}

// TestDiffAudits: the comparison's output with the audits: JSON keeps
// kvaudit-diff/1's fields and adds the audits'; its verdict, and the
// table's title, are the run's (an audit finding is a mismatch though the
// checksums verified), the comparison's own kept as comparison_verdict;
// JUnit stays one valid document with a suite per audit.
func TestDiffAudits(t *testing.T) {
	res := &verify.DiffResult{Verdict: verify.Verified, Requests: []*verify.RequestVerdict{{ID: "req-0", ProducerID: "req-0", Verdict: verify.Verified, Reasons: []string{},
		Groups: []*verify.GroupVerdict{{ID: 0, Verdict: verify.Verified, Positions: []int{}, Checks: []int{}, Map: []verify.PositionState{verify.PosVerified}}}}}}
	a := auditsFixture()
	var b bytes.Buffer
	if err := RenderDiffAudits(&b, res, a, FormatJSON, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Format            string        `json:"format"`
		Verdict           string        `json:"verdict"`
		ComparisonVerdict string        `json:"comparison_verdict"`
		Requests          []any         `json:"requests"`
		TailAudit         TailAuditJSON `json:"tail_audit"`
		Stored            StoredJSON    `json:"stored"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Format != DiffFormat || got.Verdict != "mismatch" || got.ComparisonVerdict != "verified" || len(got.Requests) != 1 || got.TailAudit.Verdict != "not zeroed" || got.Stored.Verdict != "mismatch" {
		t.Errorf("JSON: %+v", got)
	}
	if sc := got.Stored.Ranks[0].Requests[0].StoredChecksums["0"]; len(sc) != 3 || sc[1] != 2 || sc[2] != 7 {
		t.Errorf("stored_checksums for the manifest: %v", sc)
	}
	b.Reset()
	if err := RenderDiffAudits(&b, res, a, FormatJUnit, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	var doc junitSuites
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Suites) != 3 || doc.Failures != 2 || doc.Tests != 4 {
		t.Errorf("JUnit: %d suites, %d failures, %d tests\n%s", len(doc.Suites), doc.Failures, doc.Tests, b.String())
	}
	b.Reset()
	if err := RenderDiffAudits(&b, res, a, FormatTable, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# kvaudit diff: mismatch (the comparison: verified; an audit below found a fault)\n", "transferred-or-zeroed audit: 1 block over 1 layer not zeroed", "x.safetensors:123", "stored checksums: mismatch", "DIFFERS"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
