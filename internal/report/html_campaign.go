package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/verify"
)

// campaignView is a campaign as the HTML page draws it: the matrix of
// fault kinds by outcomes, each kind's example block map, and the clean
// controls.
type campaignView struct {
	Seed, Trials, Elapsed string
	Stopped               string
	// Columns name the outcomes, the matrix's columns after the kind and
	// its detector.
	Columns []string
	Kinds   []kindRow
	Notes   []string
}

// kindRow is one fault kind (or the clean controls): its outcomes and an
// example map.
type kindRow struct {
	Kind     badge
	Detector string
	Outcomes []htmlCell
	// ExampleAt names the example's request and group; Example is its
	// block map (ExampleText when it is not one).
	ExampleAt   string
	Example     []stripCell
	ExampleText string
}

// outcome is a count drawn as good or bad (with a symbol), or a dash.
func outcome(n int, of int, wantAll bool) htmlCell {
	text := fmt.Sprint(n)
	if of >= 0 {
		text = fmt.Sprintf("%d/%d", n, of)
	}
	good := n == 0
	if wantAll {
		good = n == of
	}
	if good {
		return htmlCell{Text: text, Tone: "good", Sym: "✓"}
	}
	return htmlCell{Text: text, Tone: "bad", Sym: "✗"}
}

var dashCell = htmlCell{Text: "–", Tone: "dim"}

// caughtByVLLM is the cell of the trials of a kind vLLM's checksum alone
// would have caught, of trials: a warning where it lets some through
// (what only kvaudit's mix check or an audit finds), as the table's
// column is.
func caughtByVLLM(n, trials int) htmlCell {
	c := htmlCell{Text: fmt.Sprintf("%d/%d", n, trials)}
	if n < trials {
		c.Tone, c.Sym = "warn", "!"
	}
	return c
}

// exampleMap splits a kind's example ("req-1 g0 X.") into where it was
// and its block map.
func exampleMap(ex string) (at string, cells []stripCell, text string) {
	i := strings.LastIndexByte(ex, ' ')
	m := ex[i+1:]
	if m == "" || strings.Trim(m, mapSymbols) != "" {
		return "", nil, ex
	}
	for p := range len(m) {
		s := positionStates[strings.IndexByte(mapSymbols, m[p])]
		cells = append(cells, stripCell{Class: s.class, Sym: s.sym, Tip: fmt.Sprintf("position %d · %s", p, s.text)})
	}
	if i > 0 {
		at = ex[:i]
	}
	return at, cells, ""
}

// newCampaignView draws r; tables are its campaignTables, whose first
// table's notes it says.
func newCampaignView(r *inject.CampaignResult, tables []*Table) *campaignView {
	v := &campaignView{Seed: fmt.Sprint(r.Seed), Trials: fmt.Sprint(r.Trials), Elapsed: fmt.Sprintf("%.1fs", r.Elapsed.Seconds()), Stopped: r.Stopped,
		Columns: []string{"trials", "detected", "localised exactly", "missed", "false positives", "caught by vLLM's checksum alone"}}
	for _, k := range r.Kinds {
		row := kindRow{Kind: badge{Text: string(k.Kind), Sym: "✓", Tone: "good"}, Detector: k.Detector}
		if k.Failed() {
			row.Kind.Sym, row.Kind.Tone = "✗", "bad"
		}
		trials := htmlCell{Text: fmt.Sprint(k.Trials)}
		if k.NotApplicable > 0 {
			trials.Text += fmt.Sprintf(" (+%d n/a)", k.NotApplicable)
		}
		if k.Control {
			row.Detector += " (control)"
		}
		switch {
		case k.Trials == 0:
			row.Kind.Sym, row.Kind.Tone = "–", "dim"
			row.Outcomes = []htmlCell{trials, dashCell, dashCell, dashCell, dashCell, dashCell}
		case k.Control:
			row.Outcomes = []htmlCell{trials, dashCell, dashCell, dashCell, outcome(k.FalsePositives, -1, false), {Text: fmt.Sprint(k.CaughtByVLLM)}}
		default:
			row.Outcomes = []htmlCell{trials, outcome(k.Detected, k.Trials, true), outcome(k.Localised, k.Trials, true),
				outcome(k.Missed, -1, false), outcome(k.FalsePositives, -1, false), caughtByVLLM(k.CaughtByVLLM, k.Trials)}
		}
		row.ExampleAt, row.Example, row.ExampleText = exampleMap(clip(k.Example))
		v.Kinds = append(v.Kinds, row)
	}
	flagged := 0
	for _, p := range r.Pairs {
		if !p.Verified {
			flagged++
		}
	}
	clean := kindRow{Kind: badge{Text: "clean", Sym: "✓", Tone: "good"}, Detector: "none (control)",
		Outcomes: []htmlCell{{Text: fmt.Sprint(len(r.Pairs))}, dashCell, dashCell, dashCell, outcome(flagged, -1, false), dashCell}}
	if flagged > 0 {
		clean.Kind.Sym, clean.Kind.Tone = "✗", "bad"
	}
	v.Kinds = append(v.Kinds, clean)
	if r.Stopped == "" && len(tables) > 0 {
		v.Notes = clipNotes(withoutNotes(tables[0].escaped().Notes, campaignNotes(r)))
	}
	v.Notes = capList(v.Notes, htmlMaxNotes)
	return v
}

// RenderCampaignHTML writes a campaign as one self-contained HTML page:
// the verdict as the exit code reports it, the matrix of fault kinds by
// outcomes (detected, localised exactly, missed, false positives, caught
// by vLLM's checksum alone) with
// each kind's example block map, the clean controls and the failing
// trials.
func RenderCampaignHTML(w io.Writer, r *inject.CampaignResult, info HTMLInfo) error {
	b := verdictBadge(verify.Verified)
	b.Text = "pass"
	switch {
	case r.Stopped != "":
		b = badge{"not run", "?", "warn"}
	case !r.Pass:
		b = badge{"FAIL", "✗", "bad"}
	}
	tables := campaignTables(r)
	p := &htmlPage{Title: "kvaudit campaign: " + b.Text, Verdict: b, Campaign: newCampaignView(r, tables)}
	lead := campaignNotes(r)
	info.fill(p, lead)
	switch {
	case r.Stopped != "":
		p.Summary = clipTo(r.Stopped, htmlMaxNote) + "; no fault was injected"
		p.Tables = append(p.Tables, newHTMLTable(tables[0], lead))
	case len(tables) > 1:
		p.Tables = append(p.Tables, newHTMLTable(tables[1], lead))
	}
	return htmlTemplate().Execute(w, p)
}
