package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/scrub"
	"github.com/kvaudit/kvaudit/transfer"
	"github.com/kvaudit/kvaudit/verify"
)

// The notes that qualify a verdict: that the inputs look like a mistake
// rather than a fault (the same files twice, the sides swapped, every
// compared block differing, logs matching neither dump), what the
// verdicts were judged by (vLLM's checksum alone, the mix key, the
// runner check) and what was not audited. Each is written once, here;
// the table says them under its verdicts, the HTML page beside the
// verdict (and not again under its tables).

// verdictNote is a note that qualifies a verdict, as the table says it;
// Warn when it says the inputs look like a mistake, which the page
// shows as a warning even beside a good verdict.
type verdictNote struct {
	Text string
	Warn bool
}

// noteTexts are the notes' texts, in order.
func noteTexts(v []verdictNote) []string {
	out := make([]string, len(v))
	for i, n := range v {
		out[i] = n.Text
	}
	return out
}

// pairingNotes are a comparison's notes on its inputs (verify's pairing
// checks: one side given twice, the sides swapped, every compared block
// differing).
func pairingNotes(res *verify.DiffResult) []verdictNote {
	var out []verdictNote
	for _, n := range res.Notes {
		out = append(out, verdictNote{Text: "note: " + n, Warn: true})
	}
	return out
}

// judgedNotes say what a comparison's verdicts were judged by: the
// requests vLLM's checksum alone judged, the mix check's key where a user
// should know it, and what the cpu engine recomputed of the runner's
// results.
func judgedNotes(res *verify.DiffResult) []verdictNote {
	var out []verdictNote
	for _, n := range strengthNotes(res) {
		out = append(out, verdictNote{Text: n})
	}
	if n := mixKeyTableNote(res); n != "" {
		out = append(out, verdictNote{Text: "note: " + n})
	}
	if n := RunnerCheckNote(res.EngineCheck); n != "" {
		out = append(out, verdictNote{Text: "note: " + n})
	}
	return out
}

// diffNotes are the notes that qualify a comparison's verdict (its
// pairing notes, then what it was judged by) and, with audits, the
// audits' (auditNotes).
func diffNotes(res *verify.DiffResult, a *verify.Audits) []verdictNote {
	out := append(pairingNotes(res), judgedNotes(res)...)
	return append(out, auditNotes(a)...)
}

// auditNotes are the notes that qualify the audits' verdicts: what the
// tail audit did not audit (ranks and groups it could not read), the
// transfer audit's (transfersNotes) and what SGLang's check could not
// compare. nil for no audits.
func auditNotes(a *verify.Audits) []verdictNote {
	if a == nil {
		return nil
	}
	var out []verdictNote
	if a.Tail != nil {
		for _, n := range a.Tail.Notes {
			out = append(out, verdictNote{Text: n})
		}
	}
	if a.Transfers != nil {
		out = append(out, transfersNotes(a.Transfers)...)
	}
	if a.SGLang != nil {
		for _, n := range a.SGLang.Notes {
			out = append(out, verdictNote{Text: n})
		}
	}
	return out
}

// transfersNotes are the notes that qualify a transfer audit's verdict:
// logs that pair with no dump (a mistake, rather than a fault), what
// could not be resolved, and what was left out.
func transfersNotes(res *transfer.Result) []verdictNote {
	var out []verdictNote
	for _, p := range res.Pairing {
		out = append(out, verdictNote{Text: "pairing: " + p, Warn: true})
	}
	for _, u := range res.Unresolved {
		out = append(out, verdictNote{Text: "unresolved: " + u, Warn: true})
	}
	for _, n := range res.Notes {
		out = append(out, verdictNote{Text: n})
	}
	return out
}

// hintNotes are the hints of a comparison's requests and groups, as the
// table says them under its verdicts (the page says each in its row).
func hintNotes(res *verify.DiffResult) []string {
	var out []string
	for _, rv := range res.Requests {
		for _, h := range rv.Hints {
			out = append(out, fmt.Sprintf("request %s: hint: %s", rv.ID, h))
		}
		for _, g := range rv.Groups {
			if g.Hint != "" {
				out = append(out, fmt.Sprintf("request %s group %d: hint: %s", rv.ID, g.ID, g.Hint))
			}
		}
	}
	return out
}

// leadNotes draws notes beside the page's verdict, capped, escaped and
// clipped, without the table's "note: " prefix (on the page every one is
// a note).
func leadNotes(v []verdictNote) []verdictNote {
	var out []verdictNote
	for i, n := range v {
		if i == htmlMaxNotes {
			out = append(out, verdictNote{Text: fmt.Sprintf("and %d more note(s)", len(v)-i)})
			break
		}
		out = append(out, verdictNote{Text: clipTo(escapeText(strings.TrimPrefix(n.Text, "note: ")), htmlMaxNote), Warn: n.Warn})
	}
	return out
}

// warned says whether a note among v says the inputs look like a
// mistake.
func warned(v []verdictNote) bool {
	return slices.ContainsFunc(v, func(n verdictNote) bool { return n.Warn })
}

// withoutNotes returns notes without those said beside the verdict (the
// page says each note once).
func withoutNotes(notes []string, said []verdictNote) []string {
	var out []string
	for _, n := range notes {
		if !slices.ContainsFunc(said, func(s verdictNote) bool { return escapeText(s.Text) == n || s.Text == n }) {
			out = append(out, n)
		}
	}
	return out
}

// campaignNotes are the notes that qualify a campaign's verdict: what
// each clean pair's comparison said of its inputs.
func campaignNotes(r *inject.CampaignResult) []verdictNote {
	var out []verdictNote
	for _, p := range r.Pairs {
		for _, n := range p.Notes {
			out = append(out, verdictNote{Text: fmt.Sprintf("pair %s: %s", p.Name, n)})
		}
	}
	return out
}

// scrubNotes are the notes that qualify a scrub's verdict: the files it
// did not read.
func scrubNotes(res *scrub.Result) []verdictNote {
	if n := len(res.Skipped); n > 0 {
		return []verdictNote{{Text: fmt.Sprintf("%d files not read (symlinks, temporary files, files of no store): -o json lists them", n)}}
	}
	return nil
}
