package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// This file renders a comparison (kvaudit diff --html) as one HTML file,
// complete in itself: inline CSS, no script, no font, image or link to
// fetch, and a Content-Security-Policy that forbids any (docs/spec.md §11).
// Every string from an input (request ids, layer names, file names) goes
// through html/template, which escapes it for where it lands. The page is
// bounded whatever the result's size: rows that look alike are folded,
// heatmaps are drawn once per distinct pattern, and the caps below bound
// the rest (each says on the page what it left out).

// The caps of an HTML report.
const (
	// htmlMaxRows is the most block-map rows (after folding requests
	// whose rows look alike) a report draws.
	htmlMaxRows = 100
	// htmlMaxIDs is the most request ids a folded row names.
	htmlMaxIDs = 8
	// htmlMapCells is the most cells of a block map strip: longer maps
	// are scaled, each cell standing for several positions (the worst).
	htmlMapCells = 128
	// htmlMaxHeatmaps is the most heatmaps (distinct patterns) drawn;
	// htmlHeatCells the most heatmap cells over the whole report.
	htmlMaxHeatmaps = 24
	htmlHeatCells   = 16384
	// htmlMaxWhere is the most places a folded heatmap lists.
	htmlMaxWhere = 12
	// htmlMaxTableRows is the most rows of a table (drill-down, audits,
	// failing trials) and htmlMaxNotes the most notes under it;
	// htmlMaxFiles the most files listed per side.
	htmlMaxTableRows = 200
	htmlMaxNotes     = 50
	htmlMaxFiles     = 16
	// htmlMaxText is the most characters of a name from an input (an id,
	// a layer or file name) the page shows, htmlMaxCell of a table cell,
	// htmlMaxNote of a note.
	htmlMaxText = 240
	htmlMaxCell = 400
	htmlMaxNote = 1000
)

// clip shortens a name to htmlMaxText characters, saying so.
func clip(s string) string { return clipTo(s, htmlMaxText) }

// clipTo shortens s to n characters, saying so.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + fmt.Sprintf("… (%d characters)", len(r))
}

// clipNotes clips every note of v to htmlMaxNote characters, in place,
// and returns v.
func clipNotes(v []string) []string {
	for i := range v {
		v[i] = clipTo(v[i], htmlMaxNote)
	}
	return v
}

//go:embed html.tmpl
var htmlTemplateText string

// htmlTemplate is the page's template, parsed when a report is first
// written, not at start-up (which every command pays).
var htmlTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{"splitWords": splitWords}).Parse(htmlTemplateText))
})

// word is a run of text on the page: a token holding a hyphen (Tok: a
// request id such as chatcmpl-<uuid>, a file name, a range, a flag),
// which the page keeps on one line where it fits (a browser would break
// it after a hyphen), or the text between such tokens.
type word struct {
	S   string
	Tok bool
}

// splitWords cuts s into words: the tokens (runs of non-space
// characters) that hold a hyphen, but a hyphen alone, and the text around
// them.
func splitWords(s string) []word {
	var out []word
	plain := 0
	for i := 0; i < len(s); {
		if s[i] == ' ' || s[i] == '\t' || s[i] == '\n' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '\n' {
			j++
		}
		if j-i > 1 && strings.ContainsRune(s[i:j], '-') {
			if plain < i {
				out = append(out, word{S: s[plain:i]})
			}
			out = append(out, word{S: s[i:j], Tok: true})
			plain = j
		}
		i = j
	}
	if plain < len(s) {
		out = append(out, word{S: s[plain:]})
	}
	return out
}

// HTMLInfo is what an HTML report says about its run beside the result.
type HTMLInfo struct {
	// Command is the command line that made the report.
	Command string
	// Producer and Consumer are the sides as given (diff, transfers);
	// Logs the NIXL logs as given (transfers).
	Producer, Consumer, Logs string
	// Exit is the exit code the command returns for the result.
	Exit int
	// Version is kvaudit's version; Time when the report was made (the
	// zero time leaves it out).
	Version string
	Time    time.Time
	// Notes are what the command says of the result on stderr beyond
	// the outputs (kvaudit: note: ...): the page says them beside the
	// verdict.
	Notes []string
}

// htmlPage is what the template draws.
type htmlPage struct {
	Title   string
	Verdict badge
	Exit    int
	Summary string
	// Lead are the notes beside the verdict: those that qualify it
	// (verdictNote), each said once on the page.
	Lead     []verdictNote
	Command  string
	Version  string
	Time     string
	Inputs   []inputRow
	Rows     []mapRow
	RowsLeft int
	// MapNotes are said under the block maps: the notes the table says
	// under its verdicts, but those beside the verdict (Lead), the
	// hints (in their rows) and the legend (the page's own).
	MapNotes []string
	Heat     *heatSection
	Tables   []htmlTable
	Campaign *campaignView
	Scrub    *scrubView
	// Picture is the transfer audit's picture (html_transfers.go), and
	// PictureStyle its style.
	Picture      template.HTML
	PictureStyle template.CSS
	Limits       string
}

// badge is a verdict drawn with a symbol and a tone, never color alone.
type badge struct {
	Text, Sym, Tone string
}

func verdictBadge(v verify.Verdict) badge {
	switch v {
	case verify.Verified:
		return badge{string(v), "✓", "good"}
	case verify.Mismatch:
		return badge{string(v), "✗", "bad"}
	case verify.Unverified:
		return badge{string(v), "?", "warn"}
	}
	return badge{string(v), "–", "dim"}
}

// inputRow describes one side.
type inputRow struct {
	Side, Given, Form, Parallel, Ranks, PayloadForm string
	Files                                           []string
	FilesLeft                                       int
}

func newInputRow(side, given string, in side.SideInfo) inputRow {
	r := inputRow{Side: side, Given: clip(given), Form: in.Form, PayloadForm: in.PayloadForm}
	if in.TPSize > 0 {
		r.Parallel = fmt.Sprintf("TP %d × PP %d", in.TPSize, in.PPSize)
		r.Ranks = strings.Join(in.Ranks, ", ")
	}
	for _, f := range in.Files[:min(len(in.Files), htmlMaxFiles)] {
		r.Files = append(r.Files, clip(f))
	}
	r.FilesLeft = len(in.Files) - len(r.Files)
	return r
}

// htmlTable is a report Table drawn in HTML, its rows capped.
type htmlTable struct {
	Title     string
	Header    []string
	Rows      [][]htmlCell
	RowsLeft  int
	Notes     []string
	NotesLeft int
}

type htmlCell struct {
	Text  string
	Tone  string
	Sym   string
	Cells []stripCell // a block map
}

var toneNames = map[Tone]string{Plain: "", Good: "good", Bad: "bad", Warn: "warn", Dim: "dim"}

// newHTMLTable draws t: the same rows and notes as every other format
// (so a column added to a table shows here too), capped; but the notes
// said beside the verdict (said), which the page says once.
func newHTMLTable(t *Table, said []verdictNote) htmlTable {
	t = t.escaped()
	h := htmlTable{Title: clip(t.Title), Header: t.Header}
	for _, r := range t.Rows {
		if len(h.Rows) >= htmlMaxTableRows {
			h.RowsLeft++
			continue
		}
		var row []htmlCell
		for _, c := range r {
			hc := htmlCell{Text: clipTo(c.Text, htmlMaxCell), Tone: toneNames[c.Tone]}
			if c.Tone == Bad {
				hc.Sym = "✗"
			}
			if c.Map != nil {
				for _, s := range c.Map[:min(len(c.Map), htmlMapCells)] {
					p := positionStates[s]
					hc.Cells = append(hc.Cells, stripCell{Class: p.class, Sym: p.sym, Tip: p.text})
				}
				hc.Text = ""
			}
			row = append(row, hc)
		}
		h.Rows = append(h.Rows, row)
	}
	notes := withoutNotes(t.Notes, said)
	h.Notes = clipNotes(slices.Clone(notes[:min(len(notes), htmlMaxNotes)]))
	h.NotesLeft = len(notes) - len(h.Notes)
	return h
}

func htmlLimits() string {
	return fmt.Sprintf("This report is bounded: at most %d block-map rows (requests whose rows look alike are folded into one), %d cells per block map (longer maps are scaled, a cell showing the worst of its positions), %d heatmaps (one per distinct pattern) and %d heatmap cells in all, %d rows and %d notes per table and %d files per side; each section says what it left out.",
		htmlMaxRows, htmlMapCells, htmlMaxHeatmaps, htmlHeatCells, htmlMaxTableRows, htmlMaxNotes, htmlMaxFiles)
}

// fill draws the run's info on p, and beside the verdict the notes
// that qualify it (lead) and the command's own: a verdict that is good
// is drawn as a warning when a note says the inputs look like a mistake.
func (info HTMLInfo) fill(p *htmlPage, lead []verdictNote) {
	p.Exit, p.Command, p.Version = info.Exit, clipTo(info.Command, htmlMaxNote), info.Version
	if !info.Time.IsZero() {
		p.Time = info.Time.UTC().Format(time.RFC3339)
	}
	p.Limits = htmlLimits()
	for _, n := range info.Notes {
		lead = append(lead, verdictNote{Text: n})
	}
	p.Lead = leadNotes(lead)
	if warned(lead) && p.Verdict.Tone == "good" {
		p.Verdict.Sym, p.Verdict.Tone = "!", "warn"
	}
}

// RenderDiffHTML writes a comparison and its audits as one self-contained
// HTML page: the verdict as the exit code reports it, the inputs, each
// request's and group's block map, a heatmap of layers by global heads
// (and replicas) for each distinct pattern of differing bytes, the
// drill-down's details, the causes the transfer audit names and the
// audits' findings. It reads nothing and fetches nothing; its size is
// bounded (see the page's last paragraph).
func RenderDiffHTML(w io.Writer, res *verify.Result, info HTMLInfo) error {
	v := res.Verdict()
	p := &htmlPage{Title: "kvaudit diff: " + string(v), Verdict: verdictBadge(v), Summary: clipTo(res.Summary(), htmlMaxNote)}
	if v == verify.Verified && res.Diff != nil && res.Diff.Strength() == verify.StrengthVLLM {
		// The strength beside the verdict, as -q says it.
		p.Title += VLLMOnlySuffix
		if p.Summary == "" {
			p.Summary = clipTo(StrengthLine(res.Diff), htmlMaxNote)
		}
	}
	lead := auditNotes(res.Audits)
	if res.Diff != nil {
		lead = diffNotes(res.Diff, res.Audits)
	}
	info.fill(p, lead)
	p.Inputs = []inputRow{
		newInputRow("producer", info.Producer, res.Producer),
		newInputRow("consumer", info.Consumer, res.Consumer),
	}
	if res.Diff != nil {
		p.Rows, p.RowsLeft = mapRows(res.Diff)
		// The first table is the block maps above, its notes under them
		// (but those beside the verdict, the hints, which the maps' rows
		// say, and the legend); then the drill-down and, with the
		// transfer audit, the causes it names.
		tables := diffTables(res.Diff, v)
		p.MapNotes = withoutNotes(tables[0].escaped().Notes, lead)
		hints := map[string]bool{escapeText(diffLegend): true}
		for _, h := range hintNotes(res.Diff) {
			hints[escapeText(h)] = true
		}
		p.MapNotes = slices.DeleteFunc(p.MapNotes, func(n string) bool { return hints[n] })
		if n := mixKeyNote(res.Diff); n != "" && mixKeyTableNote(res.Diff) == "" && mixCompared(res.Diff) {
			// The run's random key, which the table leaves to -o json.
			p.MapNotes = append(p.MapNotes, escapeText(n))
		}
		p.MapNotes = capList(clipNotes(p.MapNotes), htmlMaxNotes)
		p.Heat = newHeatSection(res.Diff)
		for _, t := range tables[1:] {
			p.Tables = append(p.Tables, newHTMLTable(t, lead))
		}
	}
	if res.Audits != nil {
		if res.Audits.Transfers != nil {
			p.Picture, p.PictureStyle = transfersPicture(res.Audits.Transfers)
		}
		for _, t := range auditTables(res.Audits) {
			p.Tables = append(p.Tables, newHTMLTable(t, lead))
		}
	}
	return htmlTemplate().Execute(w, p)
}
