package report

import (
	"fmt"
	"html/template"
	"io"
	"path/filepath"
	"sync"

	"github.com/kvaudit/kvaudit/scrub"
)

// scrubMaxCells bounds the cells of one directory in the store map (the
// rest are counted), and scrubMaxDirs the directories drawn.
const (
	scrubMaxCells = 4096
	scrubMaxDirs  = 256
)

type scrubCell struct {
	Class, Tip string
}

type scrubMapDir struct {
	Path, Format, How              string
	Verified, Mismatch, Unverified int
	Cells                          []scrubCell
	Left                           int
}

type scrubPage struct {
	Title, Verdict, VerdictClass, Summary string
	Command, Version, Time                string
	Exit                                  int
	Dirs                                  []scrubMapDir
	DirsLeft                              int
	Tables                                []htmlTable
}

var scrubHTMLTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("scrub").Parse(scrubHTML))
})

// RenderScrubHTML writes a scrub as one self-contained HTML page (no
// script, no network): the verdict, a map of the store — directory by
// directory, a cell per file or record, colored by its status, its path,
// offset and values in its tooltip — and the tables of scrubTables.
func RenderScrubHTML(w io.Writer, res *scrub.Result, info HTMLInfo) error {
	v := res.Verdict()
	p := &scrubPage{Title: "kvaudit scrub: " + string(v), Verdict: string(v), VerdictClass: map[scrub.Status]string{scrub.Verified: "good", scrub.Mismatch: "bad", scrub.Unverified: "warn"}[v],
		Summary: clipTo(res.Summary(), htmlMaxNote), Command: clip(info.Command), Version: clip(info.Version), Exit: info.Exit}
	if !info.Time.IsZero() {
		p.Time = info.Time.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	byDir := map[string][]scrub.Entry{}
	for _, e := range res.Entries {
		byDir[e.Dir] = append(byDir[e.Dir], e)
	}
	for _, d := range res.Dirs {
		if len(p.Dirs) == scrubMaxDirs {
			p.DirsLeft++
			continue
		}
		md := scrubMapDir{Path: clip(d.Path), Format: string(d.Format), How: clip(d.How), Verified: d.Verified, Mismatch: d.Mismatch, Unverified: d.Unverified}
		for _, e := range byDir[d.Path] {
			if len(md.Cells) == scrubMaxCells {
				md.Left++
				continue
			}
			tip := fmt.Sprintf("%s\n%s, offset %d, %d bytes\n%s expected %s actual %s", filepath.Base(e.Path), e.Status, e.Offset, e.Length, e.Algorithm, e.Expected, e.Actual)
			if n := entryName(e.Name); n != "" {
				tip += "\n" + n
			}
			if e.Reason != "" {
				tip += "\n" + e.Reason
			}
			md.Cells = append(md.Cells, scrubCell{Class: map[scrub.Status]string{scrub.Verified: "good", scrub.Mismatch: "bad", scrub.Unverified: "warn"}[e.Status], Tip: clipTo(tip, htmlMaxNote)})
		}
		p.Dirs = append(p.Dirs, md)
	}
	for _, t := range scrubTables(res) {
		p.Tables = append(p.Tables, newHTMLTable(t))
	}
	return scrubHTMLTemplate().Execute(w, p)
}

const scrubHTML = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{{.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
.badge{display:inline-block;padding:.2em .6em;border-radius:.3em;color:#fff;font-weight:bold}
.badge.good,.cell.good{background:#2e7d32}.badge.bad,.cell.bad{background:#c62828}.badge.warn,.cell.warn{background:#ef8f00}
.meta{color:#555;font-size:.9em}
.dir{margin:1em 0}.dir h3{margin:.2em 0;font-size:1em;font-family:monospace}
.cells{display:flex;flex-wrap:wrap;gap:2px;max-width:60em}
.cell{width:12px;height:12px;border-radius:2px}
table{border-collapse:collapse;margin:1em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
td.good{color:#2e7d32}td.bad{color:#c62828;font-weight:bold}td.warn{color:#b26a00}
code{font-family:monospace}
</style></head><body>
<h1>kvaudit scrub <span class="badge {{.VerdictClass}}">{{.Verdict}}</span></h1>
<p>{{.Summary}}</p>
<p class="meta">{{if .Command}}<code>{{.Command}}</code><br>{{end}}exit {{.Exit}}{{if .Version}} &middot; {{.Version}}{{end}}{{if .Time}} &middot; {{.Time}}{{end}}</p>
<h2>Store map</h2>
<p class="meta">A cell per file (a record, for mooncake-ssd): green verified, red mismatch, amber unverified; hover for its path, offset and values.</p>
{{range .Dirs}}<div class="dir"><h3>{{.Path}} &middot; {{.Format}}</h3>
<p class="meta">{{.How}} &middot; {{.Verified}} verified, {{.Mismatch}} mismatch, {{.Unverified}} unverified</p>
<div class="cells">{{range .Cells}}<div class="cell {{.Class}}" title="{{.Tip}}"></div>{{end}}</div>
{{if .Left}}<p class="meta">and {{.Left}} more not drawn</p>{{end}}</div>
{{end}}{{if .DirsLeft}}<p class="meta">and {{.DirsLeft}} more directories not drawn</p>{{end}}
{{range .Tables}}<h2>{{.Title}}</h2><table><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td{{if .Tone}} class="{{.Tone}}"{{end}}>{{.Text}}</td>{{end}}</tr>
{{end}}</table>{{if .RowsLeft}}<p class="meta">and {{.RowsLeft}} more rows</p>{{end}}{{range .Notes}}<p class="meta">{{.}}</p>{{end}}
{{end}}</body></html>
`
