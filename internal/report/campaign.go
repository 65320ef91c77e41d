package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/layout"
)

// This file renders the results of package inject's campaigns (kvaudit
// campaign).

// CampaignFormat is the format tag of `kvaudit campaign -o json`.
const CampaignFormat = "kvaudit-campaign/1"

// CampaignJSON is the stable schema of `kvaudit campaign -o json`.
type CampaignJSON struct {
	Format string `json:"format"`
	// Verdict is "pass", or "fail" when a detectable fault was missed or
	// mislocalised, or a control was flagged (the command then exits 1),
	// as every schema's verdict says what the exit code reports.
	Verdict string `json:"verdict"`
	// Pass is Verdict == "pass" (kept in this version of the format).
	Pass bool `json:"pass"`
	// Seed reproduces the campaign (--seed takes it as written).
	Seed           layout.Hex64       `json:"seed"`
	TrialsPerKind  int                `json:"trials_per_kind"`
	ElapsedSeconds float64            `json:"elapsed_seconds"`
	Kinds          []CampaignKindJSON `json:"kinds"`
	// Controls are the clean pairs: compared and audited untouched.
	Controls []CampaignControlJSON `json:"controls"`
	// Stopped says why no trial ran (a pair that does not verify
	// untouched); absent when the trials ran.
	Stopped string `json:"stopped,omitempty"`
}

// CampaignKindJSON is one fault kind's row.
type CampaignKindJSON struct {
	Kind     string `json:"kind"`
	Detector string `json:"detector"`
	// Control kinds (past-num-tokens) must never be flagged.
	Control        bool `json:"control"`
	Trials         int  `json:"trials"`
	NotApplicable  int  `json:"not_applicable"`
	Detected       int  `json:"detected"`
	Localised      int  `json:"localised"`
	Missed         int  `json:"missed"`
	FalsePositives int  `json:"false_positives"`
	// CaughtByVLLMChecksum counts the trials vLLM's checksum alone (no mix
	// check, no audit) would have caught.
	CaughtByVLLMChecksum int  `json:"caught_by_vllm_checksum"`
	Failed               bool `json:"failed"`
	// Pairs counts the trials run on each pair.
	Pairs map[string]int `json:"pairs"`
	// Example is the block map of the first trial's faulted group.
	Example  string                `json:"example"`
	Failures []CampaignFailureJSON `json:"failures"`
}

// CampaignFailureJSON is a trial that went otherwise than its fault.json
// says.
type CampaignFailureJSON struct {
	Trial    int          `json:"trial"`
	Pair     string       `json:"pair"`
	Seed     layout.Hex64 `json:"seed"`
	Fault    string       `json:"fault"`
	Problems []string     `json:"problems"`
}

// CampaignControlJSON is one pair's clean control.
type CampaignControlJSON struct {
	Pair     string   `json:"pair"`
	Verified bool     `json:"verified"`
	Problems []string `json:"problems"`
	Notes    []string `json:"notes"`
}

// NewCampaignJSON converts a campaign's result to the JSON schema.
func NewCampaignJSON(r *inject.CampaignResult) *CampaignJSON {
	verdict := "pass"
	if !r.Pass {
		verdict = "fail"
	}
	out := &CampaignJSON{Format: CampaignFormat, Verdict: verdict, Pass: r.Pass, Seed: layout.Hex64(r.Seed), TrialsPerKind: r.Trials,
		ElapsedSeconds: r.Elapsed.Seconds(), Kinds: []CampaignKindJSON{}, Controls: []CampaignControlJSON{}, Stopped: r.Stopped}
	for _, k := range r.Kinds {
		kj := CampaignKindJSON{Kind: string(k.Kind), Detector: k.Detector, Control: k.Control, Trials: k.Trials,
			NotApplicable: k.NotApplicable, Detected: k.Detected, Localised: k.Localised, Missed: k.Missed,
			FalsePositives: k.FalsePositives, CaughtByVLLMChecksum: k.CaughtByVLLM, Failed: k.Failed(), Pairs: k.Pairs, Example: k.Example,
			Failures: []CampaignFailureJSON{}}
		if kj.Pairs == nil {
			kj.Pairs = map[string]int{}
		}
		for _, f := range k.Failures {
			kj.Failures = append(kj.Failures, CampaignFailureJSON{Trial: f.Trial, Pair: f.Pair, Seed: layout.Hex64(f.Seed),
				Fault: f.Fault, Problems: append([]string{}, f.Problems...)})
		}
		out.Kinds = append(out.Kinds, kj)
	}
	for _, p := range r.Pairs {
		out.Controls = append(out.Controls, CampaignControlJSON{Pair: p.Name, Verified: p.Verified,
			Problems: append([]string{}, p.Problems...), Notes: append([]string{}, p.Notes...)})
	}
	return out
}

// campaignTables lays out a campaign: one row per kind (trials, detected,
// localised exactly, missed, false positives, the pairs it ran on, the
// block map of an example) and a row of clean controls; then the failing
// trials, if any.
func campaignTables(r *inject.CampaignResult) []*Table {
	if r.Stopped != "" {
		t := &Table{Title: "kvaudit campaign: not run", Header: []string{"pair", "problem untouched"}}
		for _, p := range r.Pairs {
			for _, x := range p.Problems {
				t.Add(C("%s", p.Name), Cell{Text: x, Tone: Bad})
			}
		}
		t.Notes = append(t.Notes, r.Stopped+"; no fault was injected")
		return []*Table{t}
	}
	verdict := "pass"
	if !r.Pass {
		verdict = "FAIL"
	}
	t := &Table{
		Title:  fmt.Sprintf("kvaudit campaign: %s (%d trials per kind, seed %d)", verdict, r.Trials, r.Seed),
		Header: []string{"kind", "detector", "trials", "detected", "localised exactly", "missed", "false positives", "caught by vLLM's checksum", "pairs", "example"},
		// caught by vLLM's checksum is what a connector's production check
		// lets through: it stays, as missed and false positives do
		Drop:  []string{"pairs", "example", "detector", "detected", "localised exactly"},
		Whole: []string{"kind"},
	}
	dash := Cell{Text: "-", Tone: Dim}
	count := func(n int, bad bool) Cell {
		if bad && n > 0 {
			return Cell{Text: fmt.Sprint(n), Tone: Bad}
		}
		return C("%d", n)
	}
	allPairs := len(r.Pairs)
	total := 0
	for _, k := range r.Kinds {
		total += k.Trials
		kind := Cell{Text: string(k.Kind), Tone: Good}
		if k.Failed() {
			kind.Tone = Bad
		}
		trials := C("%d", k.Trials)
		if k.NotApplicable > 0 {
			trials.Text += fmt.Sprintf(" (+%d n/a)", k.NotApplicable)
		}
		pairs := C("%d/%d", len(k.Pairs), allPairs)
		vllm := C("%d", k.CaughtByVLLM)
		if k.Control {
			t.Add(kind, C("%s (control)", k.Detector), trials, dash, dash, dash, count(k.FalsePositives, true), vllm, pairs, C("%s", k.Example))
			continue
		}
		if k.CaughtByVLLM < k.Trials {
			vllm.Tone = Warn
		}
		loc := C("%d", k.Localised)
		if k.Localised < k.Trials {
			loc.Tone = Bad
		}
		t.Add(kind, C("%s", k.Detector), trials, count(k.Detected, false), loc, count(k.Missed, true),
			count(k.FalsePositives, true), vllm, pairs, C("%s", k.Example))
	}
	flagged := 0
	for _, p := range r.Pairs {
		if !p.Verified {
			flagged++
		}
	}
	clean := Cell{Text: "clean", Tone: Good}
	if flagged > 0 {
		clean.Tone = Bad
	}
	t.Add(clean, C("none (control)"), C("%d", len(r.Pairs)), dash, dash, dash, count(flagged, true), dash, C("%d/%d", len(r.Pairs), allPairs), C(""))
	t.Notes = append(t.Notes,
		fmt.Sprintf("%d trials and %d clean pairs in %.1fs", total, len(r.Pairs), r.Elapsed.Seconds()),
		"detected: the kind's detector reported it; localised exactly: every judged detector reported exactly what fault.json expects (group, consumer positions, replica checks, drill-down layer/head/hint, audit findings)",
		"controls (clean pairs, past-num-tokens) must never be flagged; stale-tail is judged by the tail audit alone, with every checksum verified",
		"caught by vLLM's checksum: the trials vLLM's checksum alone would have caught (kvaudit's mix check left out, no audit): the rest pass a connector's production check",
		"example: the first trial's faulted group, one cell per consumer block position: . verified, X mismatch, - not compared, _ not loaded",
		fmt.Sprintf("pairs: on how many of the campaign's %d producer/consumer pairs the kind's trials ran (each trial picks one the kind applies to; the store-* kinds run on one small side per store format; clean compares every pair untouched)", allPairs))
	t.Notes = append(t.Notes, noteTexts(campaignNotes(r))...)
	tables := []*Table{t}
	f := &Table{Title: "failing trials", Header: []string{"kind", "trial", "pair", "trial seed", "fault", "problem"}, Prose: []string{"fault", "problem"}}
	f.Notes = append(f.Notes, fmt.Sprintf("a trial depends only on the campaign's seed, its kind and its number: kvaudit campaign --fault KIND --seed %d --trials N (N past the trial's number) runs it again", r.Seed))
	for _, k := range r.Kinds {
		for _, x := range k.Failures {
			problem := "missed: nothing reported it"
			if len(x.Problems) > 0 {
				problem = strings.Join(x.Problems, "; ")
			}
			f.Add(C("%s", k.Kind), C("%d", x.Trial), C("%s", x.Pair), C("%d", x.Seed), C("%s", x.Fault), Cell{Text: problem, Tone: Bad})
		}
	}
	for _, p := range r.Pairs {
		for _, x := range p.Problems {
			f.Add(C("clean"), C("-"), C("%s", p.Name), C("-"), C("no fault"), Cell{Text: x, Tone: Bad})
		}
	}
	if len(f.Rows) > 0 {
		tables = append(tables, f)
	}
	return tables
}

// RenderCampaign writes a campaign's result as a table (styled when
// style.Color), markdown, JSON (kvaudit-campaign/1) or JUnit XML.
func RenderCampaign(w io.Writer, r *inject.CampaignResult, f Format, style Style) error {
	switch f {
	case FormatJSON:
		return WriteJSON(w, NewCampaignJSON(r))
	case FormatJUnit:
		return WriteCampaignJUnit(w, r)
	}
	return renderTables(w, campaignTables(r), f, style)
}

// WriteCampaignJUnit writes a campaign as JUnit XML: a test suite "fault
// kinds" with one test case per kind (a <failure> when a detectable fault
// was missed or mislocalised or a control kind was flagged, its text the
// failing trials; <skipped> when no pair could take the kind), and a test
// suite "clean controls" with one test case per pair (a <failure> when
// the untouched pair does not verify). A CI fails exactly when kvaudit
// campaign exits 1.
func WriteCampaignJUnit(w io.Writer, r *inject.CampaignResult) error {
	out := junitSuites{Name: "kvaudit campaign", junitCounts: junitCounts{Time: seconds(r.Elapsed)}}
	kinds := junitSuite{Name: "fault kinds"}
	if r.Stopped != "" {
		kinds.Cases = append(kinds.Cases, junitCase{Name: "fault kinds", Classname: "kvaudit.campaign", Skipped: &junitOutcome{Message: "not run: " + r.Stopped}})
	}
	for _, k := range r.Kinds {
		c := junitCase{Name: string(k.Kind), Classname: "kvaudit.campaign." + k.Detector}
		switch {
		case k.Trials == 0:
			c.Skipped = &junitOutcome{Message: fmt.Sprintf("no pair takes %s (%d trials not applicable)", k.Kind, k.NotApplicable)}
		case k.Failed():
			var text strings.Builder
			for _, x := range k.Failures {
				fmt.Fprintf(&text, "trial %d, pair %s, seed %d: %s\n", x.Trial, x.Pair, x.Seed, x.Fault)
				problems := x.Problems
				if len(problems) == 0 {
					problems = []string{"missed: nothing reported it"}
				}
				for _, p := range problems {
					fmt.Fprintf(&text, "  %s\n", p)
				}
			}
			msg := fmt.Sprintf("%d of %d trials: %d missed, %d not localised exactly, %d false positives",
				k.Trials-k.Localised, k.Trials, k.Missed, k.Detected-k.Localised, k.FalsePositives)
			if k.Control {
				msg = fmt.Sprintf("%d of %d trials of a control flagged", k.FalsePositives, k.Trials)
			}
			c.Failure = &junitOutcome{Message: msg, Type: "campaign", Text: text.String()}
		}
		kinds.Cases = append(kinds.Cases, c)
	}
	controls := junitSuite{Name: "clean controls"}
	for _, p := range r.Pairs {
		c := junitCase{Name: "clean " + p.Name, Classname: "kvaudit.campaign.control"}
		if !p.Verified {
			c.Failure = &junitOutcome{Message: "an untouched pair was flagged", Type: "control", Text: strings.Join(p.Problems, "\n")}
		}
		controls.Cases = append(controls.Cases, c)
	}
	out.add(kinds)
	out.add(controls)
	return writeJUnit(w, out)
}
