package report

import (
	"cmp"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kvaudit/kvaudit/internal/picture"
	"github.com/kvaudit/kvaudit/transfer"
)

// transferBadge is a transfer audit's verdict drawn as a badge: clean
// good, violated bad, unresolved a warning.
func transferBadge(verdict string) badge {
	switch verdict {
	case transfer.Clean:
		return badge{verdict, "✓", "good"}
	case transfer.Violated:
		return badge{verdict, "✗", "bad"}
	case transfer.Unresolved:
		return badge{verdict, "?", "warn"}
	}
	return badge{verdict, "–", "dim"}
}

// RenderTransfersHTML writes a transfer audit (kvaudit transfers --html)
// as one self-contained HTML page, the page RenderDiffHTML writes: the
// verdict as the exit code reports it, the inputs (the two sides and the
// logs as given in info, and the log files read), and the tables every
// other format draws (the requests, then the findings). Like it, it reads
// and fetches nothing and its size is bounded.
func RenderTransfersHTML(w io.Writer, res *transfer.Result, info HTMLInfo) error {
	p := &htmlPage{Title: "kvaudit transfers: " + res.Verdict, Verdict: transferBadge(res.Verdict)}
	if res.Verdict != transfer.Clean {
		p.Summary = clipTo(res.Summary(), htmlMaxNote)
	}
	lead := transfersNotes(res)
	info.fill(p, lead)
	logs := inputRow{Side: "logs", Given: clip(info.Logs), Form: "kvaudit-nixl-log/1"}
	for _, l := range res.Logs {
		if len(logs.Files) == htmlMaxFiles {
			logs.FilesLeft++
			continue
		}
		logs.Files = append(logs.Files, clip(l.File))
	}
	p.Inputs = []inputRow{
		{Side: "producer", Given: clip(info.Producer), Form: "dumps"},
		{Side: "consumer", Given: clip(info.Consumer), Form: "dumps"},
		logs,
	}
	p.Picture, p.PictureStyle = transfersPicture(res)
	for _, t := range transfersTables(res, true) {
		p.Tables = append(p.Tables, newHTMLTable(t, lead))
	}
	return htmlTemplate().Execute(w, p)
}

// The transfers picture: per consumer request and rank, a row per layer
// and a cell per token (or run of tokens), each cell one state of
// picture.CellState with its own symbol and colour, and a hover naming
// the transfer, the descriptor and the consumer bytes behind it.

// pictureMaxCells bounds the cells the picture draws on one page (rows of
// layers alike count once): the requests past it are not drawn, and the
// page says how many.
const pictureMaxCells = 12288

// pictureLabelEvery is the columns between two token labels.
const pictureLabelEvery = 8

// cellLook is how a picture draws a state: a class (its colour), a
// symbol, and what it means (the legend).
type cellLook struct {
	Class, Sym, Name, Means string
}

// cellLooks are the states' looks, by picture.CellState.
var cellLooks = map[picture.CellState]cellLook{
	picture.CellDelivered:  {"x-d", "✓", "delivered", "delivered by a transfer that reached DONE"},
	picture.CellLocal:      {"x-l", "○", "not required: prefix hit", "the consumer's own tokens (num_local_computed_tokens): not pulled"},
	picture.CellRecomputed: {"x-r", "↻", "not required: recomputed", "the consumer recomputes them (a lookahead, a hybrid's last token): not required, even where a pull of whole blocks delivered them"},
	picture.CellZeroed:     {"x-z", "·", "zeroed", "a slot past the request's last token: nothing delivered, zero as vLLM leaves it"},
	picture.CellHole:       {"x-h", "✗", "hole", "to be pulled, but delivered by no transfer that reached DONE (covered)"},
	picture.CellFailed:     {"x-e", "E", "failed", "to be delivered by a transfer that ended in ERR or never ended (failed)"},
	picture.CellNotZeroed:  {"x-s", "!", "not zeroed", "nothing delivered, and not zero: stale bytes (zeroed)"},
	picture.CellTwice:      {"x-w", "2", "written twice", "written by transfers from different sources (written-twice)"},
	picture.CellForeign:    {"x-f", "⇄", "another request's block", "read from another request's block, or a block no producer request holds (confined, aligned)"},
	picture.CellMisaligned: {"x-m", "≠", "other KV", "read from producer bytes that hold other KV of the request: other tokens, layer or heads (aligned)"},
	picture.CellIntruded:   {"x-i", "↯", "written by another", "written by a descriptor outside its own request's blocks: another request's transfer, or one into a prefix hit (confined)"},
	picture.CellLate:       {"x-t", "◷", "read after the lease", "delivered by a READ posted after the producer's lease on the request lapsed (lease)"},
	picture.CellNone:       {"x-n", "", "no block", "the layer holds no block of these tokens (a sliding window's dropped blocks, past its blocks), or a slot not checked"},
}

// pictureLegendOrder is the legend's order: what is right, then faults.
var pictureLegendOrder = []picture.CellState{picture.CellDelivered, picture.CellLocal, picture.CellRecomputed, picture.CellZeroed,
	picture.CellHole, picture.CellFailed, picture.CellNotZeroed, picture.CellTwice, picture.CellForeign, picture.CellMisaligned,
	picture.CellIntruded, picture.CellLate, picture.CellNone}

type pictureView struct {
	Legend  []cellLook
	Notes   []string
	Figures []pictureFigure
	Left    []string
}

type pictureFigure struct {
	ID, Rank, What, Findings string
	Heads                    []pictureHead
	Rows                     []pictureRow
}

type pictureHead struct {
	Span  int
	Label string
}

type pictureRow struct {
	Label, Title string
	State        bool
	Cells        []pictureCell
}

type pictureCell struct {
	Class, Sym, Tip, State string
}

// transfersPicture draws a transfer audit's picture (empty when the audit
// drew none) and its style.
func transfersPicture(res *transfer.Result) (template.HTML, template.CSS) {
	if len(res.Coverage) == 0 {
		return "", ""
	}
	v := &pictureView{}
	for _, s := range pictureLegendOrder {
		v.Legend = append(v.Legend, cellLooks[s])
	}
	findings := map[string]map[string]int{}
	for _, r := range res.Requests {
		findings[r.Rank.String()+"\x00"+r.ID] = r.Findings
	}
	covs := slices.Clone(res.Coverage)
	// Requests with findings first.
	slices.SortStableFunc(covs, func(p, q picture.Coverage) int { return cmp.Compare(boolInt(q.Findings > 0), boolInt(p.Findings > 0)) })
	cells, per := 0, 1
	for i := range covs {
		c := &covs[i]
		f := newPictureFigure(c, findings[c.Rank.String()+"\x00"+c.Request])
		n := 0
		for _, r := range f.Rows {
			n += len(r.Cells)
		}
		if cells+n > pictureMaxCells {
			v.Left = append(v.Left, clip(c.Request)+" ("+c.Rank.String()+")")
			continue
		}
		cells += n
		per = max(per, c.Per)
		v.Figures = append(v.Figures, f)
	}
	v.Notes = append(v.Notes, fmt.Sprintf("Each row is a layer of the consumer rank (rows of consecutive layers whose cells are all alike are drawn as one; their hover names the first layer's descriptor), each cell a token, or a run of tokens: a request longer than %d tokens is drawn in %d columns at most, each cell showing the gravest state among its tokens (the caption says how many a cell holds). Hover or focus a cell for the transfer, descriptor and consumer bytes behind it.", transfer.MaxColumns, transfer.MaxColumns))
	if res.CoverageLeft > 0 {
		v.Notes = append(v.Notes, fmt.Sprintf("The audit draws at most %d request(s), those with findings first: %d more not drawn.", transfer.MaxCoverage, res.CoverageLeft))
	}
	if len(v.Left) > 0 {
		v.Notes = append(v.Notes, fmt.Sprintf("The page draws at most %d cells: %d more request(s) not drawn.", pictureMaxCells, len(v.Left)))
		v.Left = capList(v.Left, htmlMaxNotes)
	}
	var b strings.Builder
	if err := pictureTemplate().Execute(&b, v); err != nil {
		return template.HTML(template.HTMLEscapeString("the picture could not be drawn: " + err.Error())), ""
	}
	return template.HTML(b.String()), pictureCSS
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// newPictureFigure draws one request's picture.
func newPictureFigure(c *picture.Coverage, findings map[string]int) pictureFigure {
	f := pictureFigure{ID: clip(c.Request), Rank: c.Rank.String()}
	var what []string
	what = append(what, fmt.Sprintf("%d token(s)", c.NumTokens))
	if c.Local > 0 {
		what = append(what, "prefix hit "+tokenRange(0, c.Local))
	}
	if c.Pulled > c.Local {
		what = append(what, "pulled "+tokenRange(c.Local, c.Pulled))
	}
	if c.NumTokens > c.Pulled {
		what = append(what, "recomputed "+tokenRange(max(c.Pulled, c.Local), c.NumTokens))
	}
	if !c.Served {
		what = append(what, "served by no transfer")
	}
	if c.Per > 1 {
		what = append(what, fmt.Sprintf("each cell %d tokens", c.Per))
	}
	f.What = strings.Join(what, " · ")
	var fs []string
	for _, inv := range transfer.Invariants {
		if n := findings[inv]; n > 0 {
			fs = append(fs, fmt.Sprintf("%s %d", inv, n))
		}
	}
	if len(fs) == 0 {
		f.Findings = "no finding"
	} else {
		f.Findings = "findings: " + strings.Join(fs, ", ")
	}
	for col := 0; col < c.Columns; col += pictureLabelEvery {
		f.Heads = append(f.Heads, pictureHead{Span: min(pictureLabelEvery, c.Columns-col), Label: strconv.Itoa(col * c.Per)})
	}
	for i := 0; i < len(c.Rows); {
		r := &c.Rows[i]
		j := i + 1
		for j < len(c.Rows) && sameStates(r, &c.Rows[j]) {
			j++
		}
		f.Rows = append(f.Rows, newPictureRow(c, c.Rows[i:j]))
		i = j
	}
	return f
}

// sameStates says whether two rows draw alike.
func sameStates(p, q *picture.CoverageRow) bool {
	if p.State != q.State || p.Group != q.Group || len(p.Cells) != len(q.Cells) {
		return false
	}
	for k := range p.Cells {
		if p.Cells[k].State != q.Cells[k].State {
			return false
		}
	}
	return true
}

// newPictureRow draws rows of layers alike as one.
func newPictureRow(c *picture.Coverage, rows []picture.CoverageRow) pictureRow {
	first := &rows[0]
	pr := pictureRow{State: first.State}
	name := fmt.Sprintf("layer %d (%s)", first.Layer, clip(first.LayerName))
	if len(rows) == 1 {
		pr.Label = fmt.Sprintf("L%d", first.Layer)
		pr.Title = name
	} else {
		layers := layerList(rows)
		pr.Label = "L" + layers
		pr.Title = fmt.Sprintf("layers %s, %d layers alike; hover names %s", layers, len(rows), name)
		name = fmt.Sprintf("layers %s alike; %s", layers, name)
	}
	if first.State {
		pr.Label += " state"
	}
	for k, cell := range first.Cells {
		look := cellLooks[cell.State]
		where := name
		if first.State {
			where += ", the request's state"
		} else {
			where += ", " + tokenRange(k*c.Per, min((k+1)*c.Per, max(c.Columns*c.Per, 1)))
		}
		tip := where + ": " + look.Name
		if cell.Transfer != transfer.NoTransfer {
			tip += fmt.Sprintf(" · transfer %d descriptor %d · consumer bytes 0x%x-0x%x", cell.Transfer, cell.Descriptor, cell.Bytes[0], cell.Bytes[1]-1)
			if cell.More > 0 {
				tip += fmt.Sprintf(" · and %d more descriptor(s)", cell.More)
			}
			tip += " · log " + clip(cell.Log)
		} else if cell.State == picture.CellHole {
			tip += " · delivered by no transfer that reached DONE"
		}
		pr.Cells = append(pr.Cells, pictureCell{Class: look.Class, Sym: look.Sym, Tip: tip, State: look.Name})
	}
	return pr
}

// layerList names the layers of rows drawn as one: "0-31" when they
// are consecutive, else "1,3,5" (up to 4, then "1,3,5,7,… (n)": a
// group's layers interleave with another's).
func layerList(rows []picture.CoverageRow) string {
	consecutive := true
	for i := 1; i < len(rows); i++ {
		consecutive = consecutive && rows[i].Layer == rows[i-1].Layer+1
	}
	if consecutive {
		return fmt.Sprintf("%d-%d", rows[0].Layer, rows[len(rows)-1].Layer)
	}
	var parts []string
	for i, r := range rows {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("… (%d)", len(rows)))
			break
		}
		parts = append(parts, strconv.Itoa(r.Layer))
	}
	return strings.Join(parts, ",")
}

// tokenRange names tokens [lo, hi).
func tokenRange(lo, hi int) string {
	if hi-lo == 1 {
		return fmt.Sprintf("token %d", lo)
	}
	return fmt.Sprintf("tokens %d-%d", lo, hi-1)
}

var pictureTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("picture").Parse(pictureHTML))
})

const pictureHTML = `
<section id="picture">
<h2>What each consumer token holds</h2>
<div class="legend xlegend">{{range .Legend}}<span><span class="xc {{.Class}}" aria-hidden="true">{{.Sym}}</span> <b>{{.Name}}</b>: {{.Means}}</span>{{end}}</div>
{{- range .Notes}}
<p class="note">{{.}}</p>
{{- end}}
{{- range .Figures}}
<figure class="xpic">
<figcaption>request <code>{{.ID}}</code> · consumer rank {{.Rank}} · {{.Findings}}<div class="where">{{.What}}</div></figcaption>
<div class="xwrap">
<table class="xg">
<thead><tr><th>layer</th>{{range .Heads}}<th colspan="{{.Span}}">{{.Label}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Rows}}
<tr><th scope="row" title="{{.Title}}">{{.Label}}</th>{{range .Cells}}<td class="xc {{.Class}}" tabindex="0" title="{{.Tip}}" data-state="{{.State}}">{{.Sym}}</td>{{end}}</tr>
{{- end}}
</tbody>
</table>
</div>
</figure>
{{- end}}
{{- with .Left}}<p class="left">not drawn: {{range $i, $r := .}}{{if $i}}, {{end}}<code>{{$r}}</code>{{end}}</p>{{end}}
</section>`

// pictureCSS colours the states, light and dark; every state has its
// symbol too, never colour alone.
const pictureCSS = `
:root {
  --x-d: #dafbe1; --x-d-fg: #1a7f37; --x-l: #ddf4ff; --x-l-fg: #0969da; --x-r: #fbefff; --x-r-fg: #8250df;
  --x-z: #f6f8fa; --x-z-fg: #59636e; --x-h: #cf222e; --x-e: #82071e; --x-s: #fff8c5; --x-s-fg: #9a6700;
  --x-w: #8250df; --x-f: #0550ae; --x-m: #bf3989; --x-i: #bc4c00; --x-t: #fff1e5; --x-t-fg: #bc4c00; --x-on: #ffffff;
}
@media (prefers-color-scheme: dark) {
  :root {
    --x-d: #12261e; --x-d-fg: #3fb950; --x-l: #0c2d6b; --x-l-fg: #79c0ff; --x-r: #271c3d; --x-r-fg: #d2a8ff;
    --x-z: #151b23; --x-z-fg: #9198a1; --x-h: #ff7b72; --x-e: #ffa198; --x-s: #2e2611; --x-s-fg: #d29922;
    --x-w: #a371f7; --x-f: #58a6ff; --x-m: #db61a2; --x-i: #f0883e; --x-t: #3d2410; --x-t-fg: #ffa657; --x-on: #0d1117;
  }
}
.xlegend { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 300px), 1fr)); gap: 2px 16px; align-items: start; }
.xlegend > span { display: block; }
figure.xpic { margin: 12px 0 18px; max-width: 100%; }
figure.xpic figcaption { font-weight: 600; margin-bottom: 4px; overflow-wrap: anywhere; }
figure.xpic figcaption .where { font-weight: 400; font-size: 13px; color: var(--muted); }
.xwrap { max-width: 100%; overflow-x: auto; }
table.xg { border-collapse: separate; border-spacing: 1px; font: 11px/16px ui-monospace, "DejaVu Sans Mono", monospace; }
table.xg thead th { font-weight: 400; color: var(--muted); text-align: left; padding: 0 2px; white-space: nowrap; }
table.xg tbody th { font-weight: 400; color: var(--muted); text-align: right; padding: 0 4px 0 0; white-space: nowrap; position: sticky; left: 0; background: var(--bg); z-index: 1; }
.xc { position: relative; display: inline-block; width: 15px; min-width: 15px; height: 17px; line-height: 17px; padding: 0; text-align: center; border-radius: 2px; font-weight: 700; }
table.xg td.xc { display: table-cell; }
.x-d { background: var(--x-d); color: var(--x-d-fg); }
.x-l { background: var(--x-l); color: var(--x-l-fg); }
.x-r { background: var(--x-r); color: var(--x-r-fg); }
.x-z { background: var(--x-z); color: var(--x-z-fg); }
.x-s { background: var(--x-s); color: var(--x-s-fg); outline: 1px solid var(--x-s-fg); outline-offset: -1px; }
.x-t { background: var(--x-t); color: var(--x-t-fg); outline: 1px solid var(--x-t-fg); outline-offset: -1px; }
.x-h { background: var(--x-h); color: var(--x-on); }
.x-e { background: var(--x-e); color: var(--x-on); }
.x-w { background: var(--x-w); color: var(--x-on); }
.x-f { background: var(--x-f); color: var(--x-on); }
.x-m { background: var(--x-m); color: var(--x-on); }
.x-i { background: var(--x-i); color: var(--x-on); }
.x-n { background: repeating-linear-gradient(135deg, var(--panel) 0 3px, var(--line) 3px 5px); color: var(--muted); }
`
