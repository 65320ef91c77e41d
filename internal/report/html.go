package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvaudit/kvaudit/internal/ranges"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
	"github.com/kvaudit/kvaudit/verify/drill"
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
	return template.Must(template.New("report").Parse(htmlTemplateText))
})

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
}

// htmlPage is what the template draws.
type htmlPage struct {
	Title    string
	Verdict  badge
	Exit     int
	Summary  string
	Command  string
	Version  string
	Time     string
	Inputs   []inputRow
	Rows     []mapRow
	RowsLeft int
	// MapNotes are said under the block maps: which requests were
	// compared by vLLM's checksum alone and what that misses, as the
	// table's notes say.
	MapNotes []string
	Heat     *heatSection
	Tables   []htmlTable
	Campaign *campaignView
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

// mapRow is one row of block maps: a group of one request, or of several
// requests whose rows look alike (folded), or a load that has no group.
type mapRow struct {
	IDs       []string
	IDsLeft   int
	Group     string
	Kind      string
	BlockSize string
	Numbering string
	Verdict   badge
	Positions string
	Checks    string
	Reason    string
	Hint      string
	// MixOnly are the positions that differ in kvaudit's mix check only
	// (vLLM's checksum agrees), "" when none.
	MixOnly string
	Cells   []stripCell
	Per     int
}

// stripCell is one cell of a block map strip.
type stripCell struct {
	Class, Sym, Tip string
}

// positionStates are the block map's states as the page draws them.
var positionStates = [...]struct{ class, sym, text string }{
	verify.PosNotLoaded:   {"s-nl", "_", "not loaded"},
	verify.PosNotCompared: {"s-nc", "-", "not compared"},
	verify.PosVerified:    {"s-ok", ".", "verified"},
	verify.PosMismatch:    {"s-x", "X", "mismatch"},
}

// tokensOf says which tokens block position p holds ("" when unknown).
func tokensOf(p, blockSize, numTokens int) string {
	if blockSize <= 0 {
		return ""
	}
	lo, hi := p*blockSize, (p+1)*blockSize-1
	if numTokens > 0 {
		hi = min(hi, numTokens-1)
	}
	if hi < lo {
		return "tokens past num_tokens"
	}
	if lo == hi {
		return fmt.Sprintf("token %d", lo)
	}
	return fmt.Sprintf("tokens %d-%d", lo, hi)
}

// stripCells draws a group's block map in at most htmlMapCells cells,
// each with its positions, tokens and state on hover and focus.
func stripCells(g *verify.GroupVerdict, numTokens int) ([]stripCell, int) {
	m := g.Map
	per := 1
	if len(m) > htmlMapCells {
		per = (len(m) + htmlMapCells - 1) / htmlMapCells
	}
	state := g.Kind == "mamba"
	var cells []stripCell
	for i := 0; i < len(m); i += per {
		part := m[i:min(i+per, len(m))]
		worst := slices.Max(part)
		s := positionStates[worst]
		var tip strings.Builder
		if len(part) == 1 {
			fmt.Fprintf(&tip, "position %d", i)
		} else {
			fmt.Fprintf(&tip, "positions %d-%d", i, i+len(part)-1)
		}
		switch {
		case state:
			tip.WriteString(" · the state block")
		case len(part) == 1:
			if t := tokensOf(i, g.BlockSize, numTokens); t != "" {
				tip.WriteString(" · " + t)
			}
		default:
			if g.BlockSize > 0 {
				fmt.Fprintf(&tip, " · tokens %d-%d", i*g.BlockSize, min((i+len(part))*g.BlockSize, max(numTokens, 1))-1)
			}
		}
		if len(part) == 1 {
			tip.WriteString(" · " + s.text)
		} else {
			var counts []string
			for st := verify.PosMismatch; ; st-- {
				if n := countState(part, st); n > 0 {
					counts = append(counts, fmt.Sprintf("%d %s", n, positionStates[st].text))
				}
				if st == verify.PosNotLoaded {
					break
				}
			}
			tip.WriteString(" · " + strings.Join(counts, ", "))
		}
		if worst == verify.PosMismatch && len(g.Checks) > 0 {
			tip.WriteString(" in check(s) " + ranges.Format(g.Checks))
		}
		cells = append(cells, stripCell{Class: s.class, Sym: s.sym, Tip: tip.String()})
	}
	return cells, per
}

func countState(m []verify.PositionState, s verify.PositionState) int {
	n := 0
	for _, x := range m {
		if x == s {
			n++
		}
	}
	return n
}

// mapRows lays out the comparison's block maps, one row per request and
// group, folding requests whose rows are the same but for the id.
func mapRows(res *verify.DiffResult) (rows []mapRow, left int) {
	index := map[string]int{}
	add := func(id string, r mapRow) {
		key := fmt.Sprintf("%#v", r) // all but the id, not yet set
		if i, ok := index[key]; ok {
			if len(rows[i].IDs) < htmlMaxIDs {
				rows[i].IDs = append(rows[i].IDs, id)
			} else {
				rows[i].IDsLeft++
			}
			return
		}
		if len(rows) >= htmlMaxRows {
			left++
			return
		}
		r.IDs = []string{id}
		index[key] = len(rows)
		rows = append(rows, r)
	}
	for _, rv := range res.Requests {
		id := clip(rv.ID)
		if rv.ProducerID != rv.ID {
			id += " ← " + clip(rv.ProducerID)
		}
		if len(rv.Reasons) > 0 || len(rv.Groups) == 0 {
			add(id, mapRow{Group: "–", Numbering: rv.Numbering, Verdict: verdictBadge(rv.Verdict),
				Reason: clip(strings.Join(rv.Reasons, "; ")), Hint: clip(strings.Join(rv.Hints, "; "))})
		}
		for _, g := range rv.Groups {
			r := mapRow{Group: strconv.Itoa(g.ID), Kind: clip(g.Kind), Numbering: rv.Numbering, Verdict: verdictBadge(g.Verdict),
				Positions: clip(ranges.Format(g.Positions)), Checks: clip(ranges.Format(g.Checks)), Reason: clip(g.Reason), Hint: clip(g.Hint),
				MixOnly: clip(ranges.Format(g.MixOnly))}
			switch {
			case g.BlockSize == 0:
			case g.ProducerBlockSize != 0 && g.ProducerBlockSize != g.BlockSize:
				r.BlockSize = fmt.Sprintf("%d (producer %d)", g.BlockSize, g.ProducerBlockSize)
			default:
				r.BlockSize = strconv.Itoa(g.BlockSize)
			}
			r.Cells, r.Per = stripCells(g, rv.NumTokens)
			add(id, r)
		}
	}
	return rows, left
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
// (so a column added to a table shows here too), capped.
func newHTMLTable(t *Table) htmlTable {
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
	h.Notes = clipNotes(slices.Clone(t.Notes[:min(len(t.Notes), htmlMaxNotes)]))
	h.NotesLeft = len(t.Notes) - len(h.Notes)
	return h
}

// heatSection is the heatmaps of a comparison, one per distinct pattern,
// and the mismatching positions that have none.
type heatSection struct {
	Maps []heatmap
	// Left counts the patterns not drawn (past the caps), LeftWhere
	// names some of their places.
	Left      int
	LeftWhere []string
	// Quiet are the places where a drilled mismatching position has no
	// differing slice; NotDrilled those the drill-down did not look at.
	Quiet      []string
	NotDrilled []string
}

// heatmap is one pattern: a grid of layers (and replicas) by global heads
// (or states), and the places it was found.
type heatmap struct {
	Caption string
	// Hints say what the drill-down's details of the first place found.
	Hints     []string
	Where     []string
	WhereLeft int
	Max       int
	ColName   string
	Cols      []string
	Rows      []heatRow
}

type heatRow struct {
	Label, Tip string
	Cells      []heatCell
}

type heatCell struct {
	Class, Sym, Tip string
	Focus           bool
}

// heatLevel is the shade of b differing bytes in a map whose most is
// most: 1 to 4 on a log scale, so that one byte next to a whole block
// still shows.
func heatLevel(b, most int) int {
	if most <= 1 {
		return 4
	}
	return max(1, int(math.Ceil(4*math.Log1p(float64(b))/math.Log1p(float64(most)))))
}

// hintMark is the symbol of a drill-down hint in a heatmap cell.
func hintMark(hint string) (class, sym string) {
	switch {
	case strings.Contains(hint, "flipped"):
		return "k-flip", "b"
	case hint == "zeroed":
		return "k-zero", "0"
	case strings.Contains(hint, "swapped"):
		return "k-swap", "⇄"
	case strings.HasPrefix(hint, "holds"):
		return "k-held", "→"
	case hint == "random bytes":
		return "k-rand", "≈"
	}
	return "k-x", "×"
}

// heatPlace is where a heat was found.
type heatPlace struct {
	rv   *verify.RequestVerdict
	heat *drill.Heat
}

func (p heatPlace) String() string {
	s := fmt.Sprintf("request %s group %d", clip(p.rv.ID), p.heat.Group)
	if p.heat.State {
		return s + " (state)"
	}
	return fmt.Sprintf("%s position %d", s, p.heat.Position)
}

// heatKey is a heat's pattern: its axes and each cell's level (0 equal,
// 1-4 differing, ? not drilled, space none).
func heatKey(h *drill.Heat) (key string, most int, quiet bool) {
	for _, b := range h.Bytes {
		most = max(most, b)
	}
	var k strings.Builder
	fmt.Fprintf(&k, "%d/%v/%v/%d/%d/", h.Group, h.State, h.Layers, h.Heads, h.Replicas)
	for _, b := range h.Bytes {
		switch {
		case b == drill.HeatNotDrilled:
			k.WriteByte('?')
		case b == drill.HeatNone:
			k.WriteByte(' ')
		case b == 0:
			k.WriteByte('0')
		default:
			k.WriteByte(byte('0' + heatLevel(b, most)))
		}
	}
	return k.String(), most, most == 0
}

// newHeatSection folds every drilled position's heat by pattern and draws
// each pattern once, within the caps; positions of mismatching groups
// without a heat were not drilled.
func newHeatSection(res *verify.DiffResult) *heatSection {
	s := &heatSection{}
	type pattern struct {
		places []heatPlace
		most   int
	}
	var order []string
	patterns := map[string]*pattern{}
	var quiet, notDrilled []string
	for _, rv := range res.Requests {
		drilled := map[[2]int]bool{}
		for i := range rv.Heat {
			h := &rv.Heat[i]
			drilled[[2]int{h.Group, h.Position}] = true
			key, most, isQuiet := heatKey(h)
			if isQuiet {
				quiet = append(quiet, heatPlace{rv, h}.String())
				continue
			}
			p := patterns[key]
			if p == nil {
				p = &pattern{}
				patterns[key] = p
				order = append(order, key)
			}
			p.places = append(p.places, heatPlace{rv, h})
			p.most = max(p.most, most)
		}
		for _, g := range rv.Groups {
			if g.Verdict != verify.Mismatch {
				continue
			}
			var missing []int
			for _, pos := range g.Positions {
				if g.Kind == "mamba" {
					pos = 0
				}
				if !drilled[[2]int{g.ID, pos}] && !slices.Contains(missing, pos) {
					missing = append(missing, pos)
				}
			}
			if len(missing) > 0 {
				notDrilled = append(notDrilled, clip(fmt.Sprintf("request %s group %d position(s) %s", clip(rv.ID), g.ID, ranges.Format(missing))))
			}
		}
	}
	if len(order) == 0 && len(quiet) == 0 && len(notDrilled) == 0 {
		return nil
	}
	budget := htmlHeatCells
	for _, key := range order {
		p := patterns[key]
		first := p.places[0]
		cells := len(first.heat.Bytes)
		if len(s.Maps) >= htmlMaxHeatmaps || cells > budget {
			s.Left++
			if len(s.LeftWhere) < htmlMaxWhere {
				s.LeftWhere = append(s.LeftWhere, first.String())
			}
			continue
		}
		budget -= cells
		s.Maps = append(s.Maps, drawHeat(p.places, p.most))
	}
	s.Quiet = capList(quiet, htmlMaxWhere)
	s.NotDrilled = capList(notDrilled, htmlMaxWhere)
	return s
}

// capList keeps the first n strings of v and says how many it left out.
func capList(v []string, n int) []string {
	if len(v) <= n {
		return v
	}
	return append(v[:n:n], fmt.Sprintf("and %d more", len(v)-n))
}

// drawHeat draws one pattern from its first place (the drill-down's
// details of that place name each differing cell's hint and tokens).
func drawHeat(places []heatPlace, most int) heatmap {
	first := places[0]
	h, rv := first.heat, first.rv
	m := heatmap{Max: most, ColName: "global head"}
	what := "global heads"
	if h.State {
		m.ColName, what = "state", "states"
	}
	m.Caption = fmt.Sprintf("group %d: %d layer(s) × %d %s", h.Group, len(h.Layers), h.Heads, what)
	if h.Replicas > 1 {
		m.Caption += fmt.Sprintf(" × %d replicas", h.Replicas)
	}
	for i, p := range places {
		if i >= htmlMaxWhere {
			m.WhereLeft = len(places) - i
			break
		}
		w := p.String()
		if g := groupOf(p.rv, p.heat.Group); g != nil && !p.heat.State {
			if t := tokensOf(p.heat.Position, g.BlockSize, p.rv.NumTokens); t != "" {
				w += " (" + t + ")"
			}
		}
		m.Where = append(m.Where, w)
	}
	for c := range h.Heads {
		m.Cols = append(m.Cols, strconv.Itoa(c))
	}
	type slice struct{ layer, col, repl int }
	details := map[slice]*drill.Detail{}
	for i := range rv.Details {
		d := &rv.Details[i]
		if d.Group != h.Group || (!h.State && d.Position != h.Position) {
			continue
		}
		// A detail folds the slices of Layers x Heads (drill.Detail):
		// each of its cells is shaded with it.
		layers, cols := detailSlices(d)
		for _, layer := range layers {
			for _, col := range cols {
				if k := (slice{layer, col, d.Replica}); details[k] == nil {
					details[k] = d
				}
			}
		}
	}
	m.Hints = heatHints(rv, h)
	for l, layer := range h.Layers {
		for r := range h.Replicas {
			row := heatRow{Label: "layer " + strconv.Itoa(layer), Tip: clip(h.LayerNames[l])}
			if h.Replicas > 1 {
				row.Label += " r" + strconv.Itoa(r)
				row.Tip += ", replica " + strconv.Itoa(r)
			}
			for c := range h.Heads {
				row.Cells = append(row.Cells, heatCellOf(h, l, c, r, most, details[slice{layer, c, r}]))
			}
			m.Rows = append(m.Rows, row)
		}
	}
	return m
}

// heatHints sums up the drill-down's details of a heat's place: each
// hint with where it is (one slice) or how many slices have it, at most
// four.
func heatHints(rv *verify.RequestVerdict, h *drill.Heat) []string {
	var order []string
	by := map[string][]*drill.Detail{}
	for i := range rv.Details {
		d := &rv.Details[i]
		if d.Group != h.Group || (!h.State && d.Position != h.Position) {
			continue
		}
		if by[d.Hint] == nil {
			order = append(order, d.Hint)
		}
		by[d.Hint] = append(by[d.Hint], d)
	}
	var out []string
	for _, hint := range order {
		ds := by[hint]
		n := 0
		for _, d := range ds {
			layers, cols := detailSlices(d)
			n += len(layers) * len(cols)
		}
		if n > 1 {
			out = append(out, fmt.Sprintf("%s in %d slices", clip(hint), n))
			continue
		}
		d := ds[0]
		at := fmt.Sprintf("layer %d, head %d", d.Layer, d.Head)
		if d.State {
			at = fmt.Sprintf("layer %d, state %d", d.Layer, d.StateIndex)
		}
		out = append(out, fmt.Sprintf("%s at %s (%s)", clip(hint), at, detailWhere(d)))
	}
	return capList(out, 4)
}

func groupOf(rv *verify.RequestVerdict, id int) *verify.GroupVerdict {
	for _, g := range rv.Groups {
		if g.ID == id {
			return g
		}
	}
	return nil
}

// heatCellOf draws one slice: its shade and symbol, and on hover and
// focus its layer, head, bytes and, where a detail names it, the hint
// and tokens (detailTip).
func heatCellOf(h *drill.Heat, l, c, r, most int, d *drill.Detail) heatCell {
	b := h.At(l, c, r)
	col := "head"
	if h.State {
		col = "state"
	}
	where := fmt.Sprintf("layer %d · %s %d", h.Layers[l], col, c)
	if h.Replicas > 1 {
		where += fmt.Sprintf(" · replica %d", r)
	}
	switch {
	case b == drill.HeatNone:
		return heatCell{Class: "none"}
	case b == drill.HeatNotDrilled:
		return heatCell{Class: "nd", Sym: "?", Tip: where + " · not drilled", Focus: true}
	case b == 0:
		return heatCell{}
	}
	kind, sym, tip := "k-x", "×", fmt.Sprintf("%s · %d byte(s) differ", where, b)
	if d != nil {
		kind, sym = hintMark(d.Hint)
		tip += " · " + detailTip(d)
	}
	return heatCell{Class: "l" + strconv.Itoa(heatLevel(b, most)) + " " + kind, Sym: sym, Tip: tip, Focus: true}
}

// detailSlices returns the layers and heatmap columns (global heads, or
// for a state group its state) of the slices a detail folds: every one of
// Layers x Heads, or its first layer and head where it names no others.
func detailSlices(d *drill.Detail) (layers, cols []int) {
	layers = d.Layers
	if len(layers) == 0 {
		layers = []int{d.Layer}
	}
	switch {
	case d.State:
		cols = []int{d.StateIndex}
	case len(d.Heads) > 0:
		cols = d.Heads
	default:
		cols = []int{d.Head}
	}
	return layers, cols
}

// detailTip is what a heatmap cell says of the drill-down's detail of its
// slice: the hint, tokens and bits, how many slices the detail folds,
// and where its first differing byte is on the consumer (rank, block id,
// file and offset).
func detailTip(d *drill.Detail) string {
	tip := clip(d.Hint) + " · " + detailWhere(d)
	if layers, cols := detailSlices(d); len(layers)*len(cols) > 1 {
		what := "heads"
		if d.State {
			what = "state"
		}
		tip += fmt.Sprintf(" · one of %d slices (layers %s, %s %s)", len(layers)*len(cols), ranges.Format(layers), what, ranges.Format(cols))
	}
	tip += fmt.Sprintf(" · rank %d:%d (pp:tp) · block %d", d.PPRank, d.TPRank, d.Block)
	if d.File != "" {
		tip += fmt.Sprintf(" · %s at offset %d", clip(d.File), d.Offset)
	}
	return tip
}

// detailWhere is a detail's tokens (or state rows) and bits.
func detailWhere(d *drill.Detail) string {
	var parts []string
	if d.State {
		parts = append(parts, fmt.Sprintf("rows %d-%d", d.Head, d.LastHead))
	} else if d.FirstToken == d.LastToken {
		parts = append(parts, fmt.Sprintf("token %d", d.FirstToken))
	} else {
		parts = append(parts, fmt.Sprintf("tokens %d-%d", d.FirstToken, d.LastToken))
	}
	parts = append(parts, fmt.Sprintf("%d bit(s)", d.Bits))
	return strings.Join(parts, " · ")
}

func htmlLimits() string {
	return fmt.Sprintf("This report is bounded: at most %d block-map rows (requests whose rows look alike are folded into one), %d cells per block map (longer maps are scaled, a cell showing the worst of its positions), %d heatmaps (one per distinct pattern) and %d heatmap cells in all, %d rows and %d notes per table and %d files per side; each section says what it left out.",
		htmlMaxRows, htmlMapCells, htmlMaxHeatmaps, htmlHeatCells, htmlMaxTableRows, htmlMaxNotes, htmlMaxFiles)
}

func (info HTMLInfo) fill(p *htmlPage) {
	p.Exit, p.Command, p.Version = info.Exit, clipTo(info.Command, htmlMaxNote), info.Version
	if !info.Time.IsZero() {
		p.Time = info.Time.UTC().Format(time.RFC3339)
	}
	p.Limits = htmlLimits()
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
	info.fill(p)
	p.Inputs = []inputRow{
		newInputRow("producer", info.Producer, res.Producer),
		newInputRow("consumer", info.Consumer, res.Consumer),
	}
	if res.Diff != nil {
		p.Rows, p.RowsLeft = mapRows(res.Diff)
		for _, n := range strengthNotes(res.Diff) {
			p.MapNotes = append(p.MapNotes, escapeText(n))
		}
		if n := mixKeyNote(res.Diff); n != "" && mixCompared(res.Diff) {
			p.MapNotes = append(p.MapNotes, escapeText(n))
		}
		// The first table is the block maps above; then the drill-down
		// and, with the transfer audit, the causes it names. Without a
		// drill-down the requests' notes are said under the maps, as the
		// table says them under the verdicts.
		tables := diffTables(res.Diff, v)
		if !slices.ContainsFunc(tables, func(t *Table) bool { return t.Title == drillTitle }) {
			for _, n := range requestNotes(res.Diff) {
				p.MapNotes = append(p.MapNotes, escapeText(n))
			}
		}
		p.MapNotes = capList(clipNotes(p.MapNotes), htmlMaxNotes)
		p.Heat = newHeatSection(res.Diff)
		for _, t := range tables[1:] {
			p.Tables = append(p.Tables, newHTMLTable(t))
		}
	}
	if res.Audits != nil {
		if res.Audits.Transfers != nil {
			p.Picture, p.PictureStyle = transfersPicture(res.Audits.Transfers)
		}
		for _, t := range auditTables(res.Audits) {
			p.Tables = append(p.Tables, newHTMLTable(t))
		}
	}
	return htmlTemplate().Execute(w, p)
}
