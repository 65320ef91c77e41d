package report

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/kvaudit/kvaudit/scrub"
)

// scrubMaxCells bounds the cells of one directory in the store map (the
// rest are counted), and scrubMaxDirs the directories drawn.
const (
	scrubMaxCells = 4096
	scrubMaxDirs  = 256
)

// scrubView is a scrub's store map: a directory at a time, a cell per
// file or record.
type scrubView struct {
	Dirs     []scrubMapDir
	DirsLeft int
}

type scrubCell struct {
	Class, Tip string
}

type scrubMapDir struct {
	Path, Format, How              string
	Verified, Mismatch, Unverified int
	Cells                          []scrubCell
	Left                           int
}

// scrubTone is the tone of a status, on the page as in the tables.
var scrubTone = map[scrub.Status]string{scrub.Verified: "good", scrub.Mismatch: "bad", scrub.Unverified: "warn"}

// RenderScrubHTML writes a scrub as one self-contained HTML page, the
// page RenderDiffHTML writes (no script, no network): the verdict, a map
// of the store — directory by directory, a cell per file or record,
// colored by its status, its path, offset and values in its tooltip —
// and the tables of scrubTables.
func RenderScrubHTML(w io.Writer, res *scrub.Result, info HTMLInfo) error {
	v := res.Verdict()
	b := badge{Text: string(v), Sym: map[scrub.Status]string{scrub.Verified: "✓", scrub.Mismatch: "✗", scrub.Unverified: "?"}[v], Tone: scrubTone[v]}
	p := &htmlPage{Title: "kvaudit scrub: " + string(v), Verdict: b, Summary: clipTo(res.Summary(), htmlMaxNote), Scrub: &scrubView{}}
	lead := scrubNotes(res)
	info.fill(p, lead)
	byDir := map[string][]scrub.Entry{}
	for _, e := range res.Entries {
		byDir[e.Dir] = append(byDir[e.Dir], e)
	}
	for _, d := range res.Dirs {
		if len(p.Scrub.Dirs) == scrubMaxDirs {
			p.Scrub.DirsLeft++
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
			md.Cells = append(md.Cells, scrubCell{Class: scrubTone[e.Status], Tip: clipTo(tip, htmlMaxNote)})
		}
		p.Scrub.Dirs = append(p.Scrub.Dirs, md)
	}
	for _, t := range scrubTables(res) {
		p.Tables = append(p.Tables, newHTMLTable(t, lead))
	}
	return htmlTemplate().Execute(w, p)
}
